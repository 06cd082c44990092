"""One restoration problem end to end: build the data term of a degraded image, run PnP-Ishikawa (or Picard) with a
denoiser, and track PSNR per iteration. Shared by the LightningModule's test step; usable without Lightning.

Tasks (all images in [0, 1] units):
    deblur   f = K x + n            F(u) = 1/2 ||K u - f||^2            (Levin kernels, Gaussian noise)
    sisr     f = S K x + n          F(u) = 1/2 ||S K u - f||^2          (x2, bicubic start, as the official script)
    poisson  f = Poisson(peak x) / peak, F(u) = sum(u - f log u)  (lam in [0, 1] units = official lam / 255)
    poisson_deblur  f = Poisson(peak K x) / peak, F(u) = sum(K u - f log K u)   (PnPI-HQS only: its prox is the
             official inner ADMM, `PoissonBlurProx`; lam = official lam / 255, rho unchanged)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional

import torch
import torch.nn.functional as F

from zoo.errors import ZooError
from zoo.pcdenoiser.metrics import psnr, ssim
from zoo.pcdenoiser.operators import (
    BlurDownsample,
    CircularBlur,
    PoissonBlurProx,
    check_poisson_observation,
    least_squares_grad,
    poisson_prox,
)
from zoo.pcdenoiser.solvers import FixedPointRun, make_operator, picard, pnp_ishikawa

Task = Literal["deblur", "sisr", "poisson", "poisson_deblur"]


@dataclass
class PnPConfig:
    solver: Literal["gd", "hqs", "fbs"] = "fbs"
    scheme: Literal["ishikawa", "picard"] = "ishikawa"
    sigma: float = 0.05
    lam: float = 2.6
    a: float = 0.3
    b: float = 0.15
    iters: int = 300
    clamp_iterates: bool = False  # official PnPI-GD deblurring clips u and v to [0, 1]
    inner_clamp: bool = True  # official PnPI-FBS clips the gradient step before D
    hqs_decay: Optional[float] = None  # official PnPI-HQS: lam / 1.02^k, sigma / 1.02^(k/2) (1.025 Poisson deblur)
    admm_rho: float = 2.0  # Poisson deblurring: the inner ADMM's penalty (official rho = 2)
    admm_iters: int = 10  # and its steps per prox (official `for iii in range(10)`)
    outer: Literal["alpha", "beta"] = "alpha"  # "beta": the official Poisson-deblurring script's u-update


def shift_pixel(x: torch.Tensor, shift: float) -> torch.Tensor:
    """x sampled at (i + shift, j + shift) by bilinear interpolation, coordinates clipped to the image (KAIR's
    `shift_pixel`, upper-left: it aligns a bicubic upsampling with the top-left decimation of S)."""
    out = x
    for dim in (-2, -1):
        n = out.shape[dim]
        pos = (torch.arange(n, dtype=torch.float64) + shift).clamp(0, n - 1)
        lo = pos.floor().long()
        hi = (lo + 1).clamp(max=n - 1)
        t = (pos - lo).to(out.dtype).to(out.device)
        shape = [1] * out.dim()
        shape[dim] = n
        t = t.view(shape)
        out = (1 - t) * out.index_select(dim, lo.to(out.device)) + t * out.index_select(dim, hi.to(out.device))
    return out


def sisr_start(f: torch.Tensor, sf: int) -> torch.Tensor:
    """Bicubic upsampling of the low-resolution image shifted by (sf - 1) / 2 pixels (official initialisation)."""
    up = F.interpolate(f, scale_factor=sf, mode="bicubic", align_corners=False)
    return shift_pixel(up, (sf - 1) / 2.0)


def restore(task: Task, observed: torch.Tensor, denoise: Callable[[torch.Tensor, float], torch.Tensor],
            cfg: PnPConfig, kernel: Optional[torch.Tensor] = None, sf: int = 1,
            clean: Optional[torch.Tensor] = None, ssim_curve: bool = False
            ) -> tuple[FixedPointRun, dict[str, list[torch.Tensor]]]:
    """Restore one degraded batch; returns the fixed-point run and, if `clean` is given, the per-image PSNR of every
    iterate (``curves["psnr"]``) and, with `ssim_curve`, its SSIM (``curves["ssim"]``: the official scripts record
    both at every iterate and report the best iterate of each mean curve)."""
    if task in ("deblur", "sisr", "poisson_deblur") and kernel is None:
        raise ZooError(f"task {task!r} needs a blur kernel")
    grad_F = prox_F = None
    if task == "deblur":
        op = CircularBlur(kernel.to(observed), tuple(observed.shape[-2:]))
        u0 = observed
        grad_F = lambda u: least_squares_grad(op, u, observed)  # noqa: E731
    elif task == "sisr":
        shape = (observed.shape[-2] * sf, observed.shape[-1] * sf)
        op = BlurDownsample(kernel.to(observed), shape, sf)
        u0 = sisr_start(observed, sf)
        grad_F = lambda u: least_squares_grad(op, u, observed)  # noqa: E731
    elif task == "poisson":
        check_poisson_observation(observed)
        u0 = observed
        prox_F = lambda z, lam: poisson_prox(z, observed, lam)  # noqa: E731
    elif task == "poisson_deblur":
        op = CircularBlur(kernel.to(observed), tuple(observed.shape[-2:]))
        u0 = observed  # official: u = v = f
        prox_F = PoissonBlurProx(op, observed, cfg.admm_rho, cfg.admm_iters, v0=observed)
    else:
        raise ZooError(f"unknown restoration task {task!r}: choose deblur, sisr, poisson or poisson_deblur")
    if prox_F is not None and cfg.solver != "hqs":
        raise ZooError(f"task {task!r} has a Poisson data term: use solver 'hqs' (its gradient is unbounded at 0), "
                       f"got {cfg.solver!r}")
    T = make_operator(cfg.solver, denoise, cfg.sigma, cfg.lam, grad_F=grad_F, prox_F=prox_F,
                      inner_clamp=(0.0, 1.0) if cfg.inner_clamp else None, decay=cfg.hqs_decay)
    curves: dict[str, list[torch.Tensor]] = {"psnr": []}
    if ssim_curve:
        curves["ssim"] = []

    def track(k: int, u: torch.Tensor) -> None:
        curves["psnr"].append(psnr(u, clean))
        if ssim_curve:
            curves["ssim"].append(ssim(u, clean))

    callback = track if clean is not None else None
    clamp = (0.0, 1.0) if cfg.clamp_iterates else None
    if cfg.scheme == "ishikawa":
        run = pnp_ishikawa(T, u0, cfg.iters, cfg.a, cfg.b, clamp=clamp, callback=callback, outer=cfg.outer)
    elif cfg.scheme == "picard":
        run = picard(T, u0, cfg.iters, clamp=clamp, callback=callback)
    else:
        raise ZooError(f"unknown scheme {cfg.scheme!r}: choose ishikawa or picard")
    return run, curves
