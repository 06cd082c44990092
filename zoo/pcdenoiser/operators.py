"""Forward models and data terms of the restoration tasks, in [0, 1] image units.

* `CircularBlur`: K x = ifft2(otf * fft2(x)) with the kernel centred by a circular shift (KAIR's `p2o`, used by the
  official PnP scripts), so K^T is the conjugate OTF.
* `BlurDownsample`: S K x (blur, then keep every sf-th pixel from the top-left, KAIR's `classical_degradation`);
  the adjoint zero-fills (S^T) and blurs with K^T.
* `least_squares_grad`: grad of F(u) = 1/2 ||A u - f||^2, i.e. A^T (A u - f).
* `poisson_prox`: prox of lam * F with F(u) = sum(u - f log u) (Poisson negative log-likelihood at observations
  f = counts / peak): argmin_u 1/2 (u - z)^2 + lam (u - f log u) = (z - lam + sqrt((z - lam)^2 + 4 lam f)) / 2.
* `PoissonBlurProx`: prox of lam * F with F(u) = sum(K u - f log K u) (Poisson deblurring), which has no closed
  form; the official `PnP_main_PnPIHQS_poisson_deblur.py` solves it by a 10-step inner ADMM on x = K v.
"""

from __future__ import annotations

import torch

from zoo.errors import ZooError

KERNEL_SUM_TOL = 1e-3


def check_kernel(kernel: torch.Tensor, image_shape: tuple[int, int]) -> None:
    """A blur kernel is a 2-D non-negative array summing to 1 that fits in the image."""
    if kernel.dim() != 2:
        raise ZooError(f"blur kernel must be 2-D (kh, kw), got shape {tuple(kernel.shape)}")
    if not bool(torch.isfinite(kernel).all()) or float(kernel.min()) < 0:
        raise ZooError("blur kernel must be finite and non-negative")
    s = float(kernel.sum())
    if abs(s - 1.0) > KERNEL_SUM_TOL:
        raise ZooError(f"blur kernel must sum to 1 (it preserves brightness), got sum {s:.6g}; divide it by its sum")
    kh, kw = kernel.shape
    if kh > image_shape[0] or kw > image_shape[1]:
        raise ZooError(f"blur kernel {kh}x{kw} is larger than the image {image_shape[0]}x{image_shape[1]}")


def psf_to_otf(kernel: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The kernel zero-padded to `shape`, rolled so its centre sits at (0, 0), in Fourier space (H, W) complex."""
    kh, kw = kernel.shape[-2:]
    pad = kernel.new_zeros(*kernel.shape[:-2], *shape)
    pad[..., :kh, :kw] = kernel
    pad = torch.roll(pad, shifts=(-(kh // 2), -(kw // 2)), dims=(-2, -1))
    return torch.fft.fft2(pad)


class CircularBlur:
    """K (circular convolution with `kernel`) on images of spatial size `shape`."""

    def __init__(self, kernel: torch.Tensor, shape: tuple[int, int]):
        check_kernel(kernel, shape)
        self.shape = tuple(shape)
        self.otf = psf_to_otf(kernel, self.shape)

    def _check(self, x: torch.Tensor) -> None:
        if tuple(x.shape[-2:]) != self.shape:
            raise ZooError(f"blur operator built for {self.shape} images got {tuple(x.shape[-2:])}")

    def A(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x)
        return torch.fft.ifft2(self.otf.to(x.device) * torch.fft.fft2(x)).real.to(x.dtype)

    def A_adjoint(self, y: torch.Tensor) -> torch.Tensor:
        self._check(y)
        return torch.fft.ifft2(self.otf.to(y.device).conj() * torch.fft.fft2(y)).real.to(y.dtype)

    def solve_normal(self, y: torch.Tensor, rho: float) -> torch.Tensor:
        """(I + rho K^T K)^-1 y: K^T K is diagonal in Fourier space (|otf|^2), so the inverse is a division."""
        self._check(y)
        otf = self.otf.to(y.device)
        return torch.fft.ifft2(torch.fft.fft2(y) / (1.0 + rho * (otf.conj() * otf))).real.to(y.dtype)


class BlurDownsample:
    """S K: blur by `kernel` on (H, W) images, then keep pixels (sf*i, sf*j) (SISR's classical degradation)."""

    def __init__(self, kernel: torch.Tensor, shape: tuple[int, int], sf: int):
        if sf < 1 or shape[0] % sf or shape[1] % sf:
            raise ZooError(f"scale factor {sf} must be >= 1 and divide the image size {shape}")
        self.blur, self.sf, self.shape = CircularBlur(kernel, shape), sf, tuple(shape)

    def A(self, x: torch.Tensor) -> torch.Tensor:
        return self.blur.A(x)[..., :: self.sf, :: self.sf]

    def A_adjoint(self, y: torch.Tensor) -> torch.Tensor:
        up = y.new_zeros(*y.shape[:-2], *self.shape)
        up[..., :: self.sf, :: self.sf] = y
        return self.blur.A_adjoint(up)


def least_squares_grad(op, u: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """grad of 1/2 ||A u - f||^2."""
    return op.A_adjoint(op.A(u) - f)


def check_poisson_observation(f: torch.Tensor) -> None:
    if not bool(torch.isfinite(f).all()) or float(f.min()) < 0:
        raise ZooError(f"Poisson observations must be finite and non-negative (counts / peak), "
                       f"min is {float(f.min()):.4g}")


def poisson_prox(z: torch.Tensor, f: torch.Tensor, lam: float) -> torch.Tensor:
    """prox_{lam F}(z) for F(u) = sum(u - f log u), pixelwise closed form (official PnP_main_SPC+HQS.py)."""
    if lam <= 0:
        raise ZooError(f"Poisson prox needs lam > 0, got {lam}")
    d = z - lam
    return 0.5 * (d + torch.sqrt(d * d + 4.0 * lam * f))


class PoissonBlurProx:
    """prox_{lam F}(z) = argmin_v 1/2 ||v - z||^2 + lam sum(K v - f log K v), the PnPI-HQS data step of Poisson
    deblurring, by the official script's inner ADMM (`PnP_main_PnPIHQS_poisson_deblur.py`, the two
    `for iii in range(10)` loops) on the split x = K v with penalty rho (official rho = 2):

        t     = K v
        x     = prox_{(lam / rho) P}(t - b)        P(x) = sum(x - f log x): the pixelwise closed form above
        v     = (I + rho K^T K)^-1 (z + rho K^T (x + b))    by FFT
        b     = b + x - t

    (the script's order: the multiplier b is updated with the K v from before the v-step). A fixed point has x = K v,
    -b = (lam / rho) grad P(K v) and v - z + lam K^T grad P(K v) = 0: the optimality condition of the prox.
    b restarts at 0 in every call, but v is warm-started from the previous call's result (the script keeps v from
    one prox to the next; the first call starts from `v0`, the observation f), which matters with 10 inner steps.
    Units: the script works on the 0..255 scale with lam_255; the iterates scale exactly, so in [0, 1] units the
    same rho applies with lam = lam_255 / 255."""

    def __init__(self, op: CircularBlur, f: torch.Tensor, rho: float = 2.0, inner_iters: int = 10,
                 v0: torch.Tensor | None = None):
        check_poisson_observation(f)
        if rho <= 0:
            raise ZooError(f"the ADMM penalty rho must be > 0, got {rho}")
        if inner_iters < 1:
            raise ZooError(f"the inner ADMM needs at least 1 iteration, got {inner_iters}")
        self.op, self.f, self.rho, self.inner_iters = op, f, rho, inner_iters
        self.v = f if v0 is None else v0

    def __call__(self, z: torch.Tensor, lam: float) -> torch.Tensor:
        if lam <= 0:
            raise ZooError(f"Poisson prox needs lam > 0, got {lam}")
        op, rho, v = self.op, self.rho, self.v
        b = torch.zeros_like(z)
        for _ in range(self.inner_iters):
            t = op.A(v)
            x = poisson_prox(t - b, self.f, lam / rho)
            v = op.solve_normal(z + rho * op.A_adjoint(x + b), rho)
            b = b + x - t
        self.v = v
        return v
