"""Gaussian random fields as used by the paper (Appendix B.2: GRF(tau, alpha)).

The official scripts draw fields with the periodic spectral sampler of Li et al. (FNO): a complex white noise on the
FFT grid is scaled by the square root of the covariance eigenvalues

    sqrt_lambda(k) = s^2 * sqrt(2) * sigma * (4 pi^2 |k|^2 + tau^2)^(-alpha/2),  sigma = tau^(alpha - d/2),

with the mean mode removed, and the field is the real part of the inverse FFT. That is the covariance
``sigma^2 (-Laplacian + tau^2)^(-alpha)`` on the periodic unit square; ``expected_power`` gives the exact power
spectrum of the resulting real field, which the oracle test checks against sample averages.
"""

from __future__ import annotations

import numpy as np
import torch

from zoo.errors import ZooError


def wavenumbers(s: int) -> np.ndarray:
    """FFT-ordered integer wavenumbers: 0..s//2-1, -s//2..-1 for even s (the official sampler's), and numpy's
    FFT order for odd s."""
    return np.fft.ifftshift(np.arange(s) - s // 2)


def sqrt_eigenvalues(s: int, alpha: float, tau: float) -> np.ndarray:
    if s < 2:
        raise ZooError(f"GRF grid size s={s} is too small: need s >= 2")
    if alpha <= 1.0 or tau <= 0:
        raise ZooError(f"GRF needs alpha > 1 (d/2 for a 2-D field) and tau > 0, got alpha={alpha}, tau={tau}")
    sigma = tau ** (0.5 * (2 * alpha - 2))
    k = wavenumbers(s)
    kx, ky = np.meshgrid(k, k, indexing="ij")
    lam = (s**2) * np.sqrt(2.0) * sigma * (4 * np.pi**2 * (kx**2 + ky**2) + tau**2) ** (-alpha / 2.0)
    lam[0, 0] = 0.0
    return lam


def sample_grf(rng: np.random.Generator, n: int, s: int, alpha: float, tau: float, dtype="float32") -> np.ndarray:
    """``n`` samples of GRF(tau, alpha) on an s x s grid, shape (n, s, s), as float64 holding ``dtype`` values.

    One complex inverse FFT of ``sqrt_lambda * xi`` gives two fields: the official sampler keeps the real part; the
    imaginary part is an independent field with the same law, because ``sqrt_lambda`` is symmetric under k -> -k
    (so the covariance of the complex field is real). We keep both, which halves the FFT and RNG cost.

    ``dtype='float32'`` (default) draws in single precision, as the official sampler (``torch.randn(dtype=cfloat)``):
    the fields are random inputs, so single precision changes nothing about their law, and it halves the cost of the
    two draws per DiffOAS sample, which dominate its per-sample time. The values are returned upcast to float64, so
    everything computed from them (operators, right-hand sides, residuals) is exact in double precision.
    The normals come from a torch generator seeded from ``rng`` (torch's vectorised normal sampler is ~2x numpy's).
    """
    if dtype not in ("float32", "float64"):
        raise ZooError(f"unknown GRF dtype {dtype!r}: choose 'float32' or 'float64'")
    real = torch.float32 if dtype == "float32" else torch.float64
    lam = torch.from_numpy(sqrt_eigenvalues(s, alpha, tau) / np.sqrt(2.0)).to(real)
    gen = torch.Generator().manual_seed(int(rng.integers(2**63 - 1)))
    m = (n + 1) // 2
    # complex standard normal (E|xi|^2 = 1): independent N(0, 1/2) real and imaginary parts, folded into lam
    xi = torch.view_as_complex(torch.randn(m, s, s, 2, dtype=real, generator=gen))
    z = torch.fft.ifft2(xi.mul_(lam)).numpy()
    out = np.empty((2 * m, s, s))  # float64, filled straight from the complex result (no intermediate copy)
    out[:m], out[m:] = z.real, z.imag
    return out[:n]


def expected_power(s: int, alpha: float, tau: float) -> np.ndarray:
    """Exact E|FFT2(field)_k|^2 of the real field.

    FFT2(Re(ifft2(C)))_k = (C_k + conj(C_{-k})) / 2 with independent circular modes, so the power is
    (lambda_k^2 + lambda_{-k}^2) / 4 (for self-conjugate k = -k this is Var(Re C_k) = lambda_k^2 / 2, the same).
    """
    lam = sqrt_eigenvalues(s, alpha, tau)
    neg = (-np.arange(s)) % s
    return (lam**2 + lam[np.ix_(neg, neg)] ** 2) / 4.0
