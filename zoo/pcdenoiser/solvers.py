"""PnP-Ishikawa (the paper's fixed-point scheme) and plain Picard PnP, with the three operators T of the paper.

Ishikawa iteration for a pseudo-contractive T (official PnP_main_* scripts):
    v_k     = (1 - beta_k) u_k + beta_k T(u_k)
    u_{k+1} = (1 - alpha_k) u_k + alpha_k T(v_k),     alpha_k = (k+1)^-a, beta_k = (k+1)^-b, a > b, a + b <= 1,
which converges for PC T where Picard u_{k+1} = T(u_k) may diverge (T may be expansive).
Operators (lam: balancing parameter, D: the denoiser at a fixed sigma):
    PnPI-GD   T(u) = D(u) - lam grad F(u)
    PnPI-HQS  T(u) = D(prox_{lam F}(u))
    PnPI-FBS  T(u) = D(u - lam grad F(u))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Optional

import torch

from zoo.errors import ZooError

Operator = Callable[[torch.Tensor, int], torch.Tensor]  # T(u, k): k = iteration (for HQS's decreasing schedule)


def check_exponents(a: float, b: float) -> None:
    """Step exponents of Ishikawa: 0 < b < a and a + b <= 1 (the convergence conditions of the paper's theorem)."""
    if not (0 < b < a):
        raise ZooError(f"Ishikawa exponents need 0 < b < a, got a={a}, b={b}")
    if a + b > 1 + 1e-12:
        raise ZooError(f"Ishikawa exponents need a + b <= 1, got a={a}, b={b} (sum {a + b:g})")


def ishikawa_steps(k: int, a: float, b: float) -> tuple[float, float]:
    """(alpha_k, beta_k) = ((k+1)^-a, (k+1)^-b) for iteration k = 0, 1, ..."""
    return (k + 1.0) ** (-a), (k + 1.0) ** (-b)


def _relative_change(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    num = torch.linalg.vector_norm((new - old).flatten(1), dim=1)
    den = torch.linalg.vector_norm(old.flatten(1), dim=1).clamp_min(torch.finfo(old.dtype).tiny)
    return num / den


@dataclass
class FixedPointRun:
    u: torch.Tensor
    residuals: list[torch.Tensor] = field(default_factory=list)  # ||u_{k+1} - u_k|| / ||u_k|| per sample


def _fixed_point(step: Callable[[torch.Tensor, int, Callable], torch.Tensor], u0: torch.Tensor, iters: int,
                 clamp: Optional[tuple[float, float]], callback: Optional[Callable[[int, torch.Tensor], None]]
                 ) -> FixedPointRun:
    """The loop both schemes share: u_{k+1} = step(u_k, k, project), the per-sample relative change recorded."""
    if iters < 1:
        raise ZooError(f"iterations must be at least 1, got {iters}")

    def project(x: torch.Tensor) -> torch.Tensor:
        return x if clamp is None else x.clamp(*clamp)

    run, u = FixedPointRun(u0), u0
    for k in range(iters):
        new = step(u, k, project)
        run.residuals.append(_relative_change(new, u))
        u = new
        if callback is not None:
            callback(k, u)
    run.u = u
    return run


Outer = Literal["alpha", "beta"]


def pnp_ishikawa(T: Operator, u0: torch.Tensor, iters: int, a: float, b: float,
                 clamp: Optional[tuple[float, float]] = None,
                 callback: Optional[Callable[[int, torch.Tensor], None]] = None,
                 outer: Outer = "alpha") -> FixedPointRun:
    """Ishikawa iteration from u0; `clamp` projects v_k and u_{k+1} onto a box (official PnPI-GD clamps both to
    the image range); `callback(k, u_{k+1})` sees every iterate.

    `outer="beta"` takes u_{k+1} = (1 - beta_k) u_k + beta_k T(v_k): the official Poisson-deblurring script
    (`PnP_main_PnPIHQS_poisson_deblur.py`) computes alpha_k but uses beta_k in both lines, which is Ishikawa with
    a = b, outside the paper's a > b. Offered only to reproduce that script; the default is the paper's."""
    check_exponents(a, b)
    if outer not in ("alpha", "beta"):
        raise ZooError(f"Ishikawa outer step must be 'alpha' (the paper) or 'beta' (the official Poisson-deblurring "
                       f"script), got {outer!r}")

    def step(u, k, project):
        alpha, beta = ishikawa_steps(k, a, b)
        v = project((1 - beta) * u + beta * T(u, k))
        step_u = alpha if outer == "alpha" else beta
        return project((1 - step_u) * u + step_u * T(v, k))

    return _fixed_point(step, u0, iters, clamp, callback)


def picard(T: Operator, u0: torch.Tensor, iters: int, clamp: Optional[tuple[float, float]] = None,
           callback: Optional[Callable[[int, torch.Tensor], None]] = None) -> FixedPointRun:
    """Plain PnP: u_{k+1} = T(u_k) (the comparison of the paper)."""
    return _fixed_point(lambda u, k, project: project(T(u, k)), u0, iters, clamp, callback)


Solver = Literal["gd", "hqs", "fbs"]


def make_operator(solver: Solver, denoise: Callable[[torch.Tensor, float], torch.Tensor], sigma: float, lam: float,
                  grad_F: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                  prox_F: Optional[Callable[[torch.Tensor, float], torch.Tensor]] = None,
                  inner_clamp: Optional[tuple[float, float]] = (0.0, 1.0), decay: Optional[float] = None) -> Operator:
    """T(u, k) of PnPI-GD / -HQS / -FBS. `denoise(x, sigma)` is the plugged denoiser at sigma in [0, 1] units.

    `inner_clamp` (FBS): the gradient step is clipped to the image range before denoising (official deblurring
    scripts). `decay` (HQS, official `ratio = 1.02`): iteration k uses lam / decay^k and sigma / decay^(k/2), a
    documented option of the official scripts; None keeps lam and sigma fixed as the paper's algorithm states."""
    if lam <= 0:
        raise ZooError(f"the balancing parameter lambda must be > 0, got {lam}")
    if decay is not None and decay < 1:
        raise ZooError(f"the HQS decay ratio must be >= 1, got {decay}")

    def schedule(k: int) -> tuple[float, float]:
        if decay is None:
            return lam, sigma
        return lam / decay**k, sigma / decay ** (k / 2)

    if solver == "gd":
        if grad_F is None:
            raise ZooError("PnPI-GD needs the gradient of the data term (grad_F)")
        return lambda u, k: denoise(u, sigma) - lam * grad_F(u)
    if solver == "fbs":
        if grad_F is None:
            raise ZooError("PnPI-FBS needs the gradient of the data term (grad_F)")

        def fbs(u: torch.Tensor, k: int) -> torch.Tensor:
            z = u - lam * grad_F(u)
            return denoise(z.clamp(*inner_clamp) if inner_clamp is not None else z, sigma)

        return fbs
    if solver == "hqs":
        if prox_F is None:
            raise ZooError("PnPI-HQS needs the proximal operator of the data term (prox_F)")

        def hqs(u: torch.Tensor, k: int) -> torch.Tensor:
            lam_k, sigma_k = schedule(k)
            return denoise(prox_F(u, lam_k), sigma_k)

        return hqs
    raise ZooError(f"unknown PnP solver {solver!r}: choose gd, hqs or fbs")
