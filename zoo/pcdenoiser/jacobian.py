"""Jacobian spectral quantities by autograd: the training penalty of the paper and a pseudo-contractiveness check.

* `jacobian_spectral_norm_sq`: ||J_f(x)||_2^2 by power iteration on J^T J, each step a JVP (double-backward trick:
  J u = d/dw <J^T w, u>) then a VJP, differentiable so that it can be a training loss (official
  `models/loss_jacobian.py`, `jacobian_SPC`; Pesquet et al. 2021's estimator, as in deepinv's JacobianSpectralNorm).
* `sym_jacobian_lambda_max`: the largest eigenvalue of sym J = (J + J^T)/2 by the same products. A differentiable
  T is pseudo-contractive (PC) iff sym J_T <= I everywhere (Def. of PC: I - T monotone), so this is the diagnostic
  "PC iff <= 1" logged beside the norm.
* `spc_operator` / `spc_penalty`: T is k-strictly PC iff k I + (1 - k) T is nonexpansive (I - T is (1-k)/2-
  cocoercive), so the paper penalises r * max(||J_{kI+(1-k)T}||^2, 1 - eps) with k = 0.9, eps = 0.2, r = 1e-4
  (official `train_SPC_drunet_gray.json`). T is the denoiser D, or its residual I - D (what the released models
  constrain: a k-SPC residual means a monotone-type D).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Literal, Optional

import torch

from zoo.errors import ZooError

Constrain = Literal["denoiser", "residual"]


def _per_sample_norm(t: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(t.flatten(1), dim=1).view(-1, *([1] * (t.dim() - 1)))


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.flatten(1) * b.flatten(1)).sum(dim=1)


def jvp(y: torch.Tensor, x: torch.Tensor, u: torch.Tensor, create_graph: bool) -> torch.Tensor:
    """J u by double backward: J^T w is linear in a dummy w, and its gradient in w against u is J u."""
    w = torch.ones_like(y, requires_grad=True)
    (jt_w,) = torch.autograd.grad(y, x, w, create_graph=True)
    (ju,) = torch.autograd.grad(jt_w, w, u, retain_graph=True, create_graph=create_graph)
    return ju


def vjp(y: torch.Tensor, x: torch.Tensor, v: torch.Tensor, create_graph: bool) -> torch.Tensor:
    """J^T v (the graph of y is kept for the next power step)."""
    (jt_v,) = torch.autograd.grad(y, x, v, retain_graph=True, create_graph=create_graph)
    return jt_v


def _start(x: torch.Tensor, u0: Optional[torch.Tensor]) -> torch.Tensor:
    u = torch.randn_like(x) if u0 is None else u0.to(x)
    return u / _per_sample_norm(u)


@contextlib.contextmanager
def _linearised(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, u0: torch.Tensor | None, iters: int):
    """``(leaf, f(leaf), u)`` for the Jacobian-vector products of a power iteration: ``leaf`` a copy of x that
    requires grad, u its unit start vector (`_start`). Evaluation loops run under inference mode (Lightning's
    test/validate): the block leaves it."""
    if iters < 1:
        raise ZooError(f"power iterations must be at least 1, got {iters}")
    with torch.inference_mode(False), torch.enable_grad():
        leaf = x.detach().clone().requires_grad_(True)
        yield leaf, f(leaf), _start(leaf, u0)


def jacobian_spectral_norm_sq(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, iters: int = 10,
                              create_graph: bool = True, u0: Optional[torch.Tensor] = None) -> torch.Tensor:
    """||J_f(x)||_2^2 per sample (shape (B,)) after `iters` power steps on J^T J from a random unit u (or `u0`).

    The Rayleigh quotient <u, J^T J u> / <u, u> of the last step is returned, as the official code does (it is a
    lower bound that reaches sigma_max^2 as the iteration converges). With `create_graph` the value is
    differentiable in f's parameters (training); without, it is a detached diagnostic."""
    with _linearised(f, x, u0, iters) as (leaf, y, start):
        z = _rayleigh_power(lambda u: vjp(y, leaf, jvp(y, leaf, u, create_graph), create_graph),  # J^T J u
                            start, iters)
    return z if create_graph else z.detach()


def _rayleigh_power(apply: Callable[[torch.Tensor], torch.Tensor], u: torch.Tensor, iters: int) -> torch.Tensor:
    """Dominant eigenvalue (largest in magnitude) of a symmetric operator by power iteration + Rayleigh quotient."""
    mu = u.new_zeros(u.shape[0])
    for _ in range(iters):
        su = apply(u)
        mu = _dot(u, su) / _dot(u, u)
        u = su / _per_sample_norm(su).clamp_min(torch.finfo(su.dtype).tiny)
    return mu


def sym_jacobian_lambda_max(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, iters: int = 50,
                            u0: Optional[torch.Tensor] = None) -> torch.Tensor:
    """lambda_max((J + J^T)/2) per sample (detached): PC at x iff <= 1.

    Plain power iteration finds the eigenvalue of largest magnitude, mu. If mu >= 0 it is lambda_max; otherwise
    S - mu I is positive semi-definite and its dominant eigenvalue is lambda_max - mu (a second run of `iters`)."""
    with _linearised(f, x, u0, iters) as (leaf, y, start):
        def sym(u: torch.Tensor, shift: torch.Tensor | float = 0.0) -> torch.Tensor:
            out = 0.5 * (jvp(y, leaf, u, False) + vjp(y, leaf, u, False))
            return out - (shift.view(-1, *([1] * (u.dim() - 1))) if torch.is_tensor(shift) else shift) * u

        mu = _rayleigh_power(sym, start, iters)
        neg = mu < 0
        if bool(neg.any()):
            second = mu + _rayleigh_power(lambda v: sym(v, mu), _start(leaf, None), iters)
            mu = torch.where(neg, second, mu)
    return mu.detach()


def spc_operator(denoise: Callable[[torch.Tensor], torch.Tensor], k: float = 0.9,
                 constrain: Constrain = "denoiser") -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> k x + (1 - k) T(x) with T = D (`denoiser`) or T = I - D (`residual`): nonexpansive iff T is k-SPC.

    The official `jacobian_SPC` runs its power iteration on a `y` it never defines (the lines that would define it
    are commented out); we take y = k x + (1 - k) T(x), the operator the paper's loss names (cards/pcdenoiser.md)."""
    if not 0.0 <= k < 1.0:
        raise ZooError(f"k-strict pseudo-contractiveness needs 0 <= k < 1, got k={k}")
    if constrain == "denoiser":
        return lambda x: k * x + (1.0 - k) * denoise(x)
    if constrain == "residual":
        return lambda x: k * x + (1.0 - k) * (x - denoise(x))
    raise ZooError(f"constrain must be 'denoiser' or 'residual', got {constrain!r}")


def spc_penalty(norm_sq: torch.Tensor, eps: float = 0.2, clip: float = 1e3) -> torch.Tensor:
    """max(||J||^2, 1 - eps), clipped to [0, clip] and averaged (official JacobianLoss, loss_type 'max')."""
    return torch.clamp(torch.maximum(norm_sq, torch.full_like(norm_sq, 1.0 - eps)), 0.0, clip).mean()
