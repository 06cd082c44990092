"""Networks of the CWGAN baseline (Athey et al.'s `ds-wgan`, which the official `train_wgan.py` trains).

Generator: [noise (1-D standard normal), x] -> 128-128-128 ReLU MLP with dropout 0.1 -> y, clipped to the
variable's lower bound (re78 >= 0 for CPS) in standardised units. Critic: [y, x] -> 128-128-128 ReLU MLP -> scalar.
The critic loss is -(E critic(y) - E critic(ŷ)) + 5 * one-sided gradient penalty on interpolates of y.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def _mlp(d_in: int, hidden: Sequence[int], d_out: int, dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(d_in, width), nn.ReLU(), nn.Dropout(dropout)]
        d_in = width
    layers.append(nn.Linear(d_in, d_out))
    return nn.Sequential(*layers)


class CWGANGenerator(nn.Module):
    def __init__(self, x_dim: int, hidden: Sequence[int] = (128, 128, 128), dropout: float = 0.1):
        super().__init__()
        self.net = _mlp(1 + x_dim, hidden, 1, dropout)

    def forward(self, x: torch.Tensor, lower: torch.Tensor | float = -1e8) -> torch.Tensor:
        """(N, x_dim) standardised covariates -> (N,) standardised y, at least `lower`."""
        noise = torch.randn(x.shape[0], 1, device=x.device, dtype=x.dtype)
        return self.net(torch.cat([noise, x], dim=-1)).squeeze(-1).clamp_min(lower)


class CWGANCritic(nn.Module):
    def __init__(self, x_dim: int, hidden: Sequence[int] = (128, 128, 128), dropout: float = 0.0):
        super().__init__()
        self.net = _mlp(1 + x_dim, hidden, 1, dropout)

    def forward(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([y[:, None], x], dim=-1)).squeeze(-1)


def gradient_penalty(critic: CWGANCritic, y: torch.Tensor, y_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One-sided penalty mean(relu(|∂critic/∂y| - 1)) at random interpolates of real and generated y (ds-wgan)."""
    alpha = torch.rand_like(y)
    mixed = (alpha * y + (1 - alpha) * y_hat).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(critic(mixed, x).sum(), mixed, create_graph=True)
    return torch.relu(grad.abs() - 1).mean()
