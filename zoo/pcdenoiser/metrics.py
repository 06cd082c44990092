"""PSNR / SSIM as the official scripts report them: on 8-bit images (clip to [0, 1], round to 0..255), SSIM with
an 11x11 Gaussian window of std 1.5 over the valid region (KAIR's `calculate_ssim`, Wang et al. 2004), computed
by torchmetrics."""

from __future__ import annotations

import torch
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

SSIM_CROP = 5  # (11 - 1) / 2


def to_8bit(x: torch.Tensor) -> torch.Tensor:
    return (x.clamp(0.0, 1.0) * 255.0).round()


def psnr(x: torch.Tensor, ref: torch.Tensor, quantize: bool = True) -> torch.Tensor:
    """PSNR in dB per image of (B, C, H, W) tensors in [0, 1] units."""
    a, b = (to_8bit(x), to_8bit(ref)) if quantize else (x * 255.0, ref * 255.0)
    return peak_signal_noise_ratio(a.double(), b.double(), data_range=255.0, reduction="none", dim=(1, 2, 3))


def ssim(x: torch.Tensor, ref: torch.Tensor, quantize: bool = True) -> torch.Tensor:
    """SSIM per image (Gaussian window 11, std 1.5, K1 = 0.01, K2 = 0.03, population statistics)."""
    a, b = (to_8bit(x), to_8bit(ref)) if quantize else (x * 255.0, ref * 255.0)
    _, full = structural_similarity_index_measure(a.double(), b.double(), gaussian_kernel=True, sigma=1.5,
                                                  kernel_size=11, data_range=255.0, return_full_image=True)
    # the mean over the valid region (5 px from each border), as KAIR and scikit-image crop it; torchmetrics'
    # own scalar also averages the reflect-padded border
    return full[..., SSIM_CROP:-SSIM_CROP, SSIM_CROP:-SSIM_CROP].mean(dim=(1, 2, 3))
