"""GPO's update of the log-coefficients (official `PromptOptimizer.step`) and its t schedule.

Per iteration: clip every gradient element to ±0.025, take an RMSprop step (lr 0.1, momentum 0.5; torch's
RMSprop is the official one: α 0.99, ε 1e-8, momentum buffer of g/(√v+ε)), then clamp α to [0, 3].
"""

from __future__ import annotations

from typing import Sequence

import torch

from zoo.errors import ZooError


def t_schedule(num_iters: int = 20, start: int = 15, repeat: int = 2) -> list[int]:
    """t_i = start + ⌊i/repeat⌋ (official "step-15-2"): 15, 15, 16, 16, ..., 24, 24 over 20 iterations."""
    if num_iters < 0 or start < 0 or repeat < 1:
        raise ZooError(f"bad t schedule: num_iters={num_iters}, start={start}, repeat={repeat}")
    return [start + i // repeat for i in range(num_iters)]


def check_gpo_update(lr: float, grad_clip: float, coeff_min: float, coeff_max: float) -> None:
    if grad_clip <= 0 or coeff_min > coeff_max or lr <= 0:
        raise ZooError(f"bad GPO update: lr={lr}, grad_clip={grad_clip}, clamp=[{coeff_min}, {coeff_max}]")


class GPOUpdate:
    def __init__(self, log_coeffs: Sequence[torch.Tensor], lr: float = 0.1, momentum: float = 0.5,
                 grad_clip: float = 0.025, coeff_min: float = 0.0, coeff_max: float = 3.0):
        check_gpo_update(lr, grad_clip, coeff_min, coeff_max)
        self.params = list(log_coeffs)
        self.grad_clip, self.lo, self.hi = grad_clip, coeff_min, coeff_max
        self.opt = torch.optim.RMSprop(self.params, lr=lr, momentum=momentum, alpha=0.99, eps=1e-8)

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.clamp_(-self.grad_clip, self.grad_clip)
        self.opt.step()
        for p in self.params:
            p.clamp_(self.lo, self.hi)
        self.opt.zero_grad(set_to_none=True)
