"""Denoisers D(x, sigma) with a noise-level-map input (sigma in [0, 1] units, as the official code feeds it).

* DRUNet (Zhang et al. 2021): deepinv's implementation, random orthogonal init (gain 0.2, the official
  `init_type: orthogonal, init_gain: 0.2`), bias-free, 4 scales of 64-128-256-512 channels, 4 residual blocks
  (official `train_SPC_drunet_gray.json`). No weights are downloaded (`pretrained=None`).
* `NoiseMapDnCNN`: a small DnCNN (conv-ReLU stack, residual output x - n(x)) with the same noise-map input, for CPU
  smoke runs and the CPU reproduction.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import nn

from zoo.errors import ZooError

SIGMA_MAX = 1.0  # sigma is a fraction of the image range; 12.75 where 0.05 is meant is refused


def check_sigma(sigma, what: str = "denoiser sigma") -> None:
    """sigma must be in [0, 1] units (sigma/255 of 8-bit images)."""
    s = torch.as_tensor(sigma, dtype=torch.float64)
    if not bool(torch.isfinite(s).all()) or float(s.min()) < 0:
        raise ZooError(f"{what} must be finite and >= 0, got {sigma}")
    if float(s.max()) > SIGMA_MAX:
        raise ZooError(f"{what} {float(s.max()):g} is not in [0, 1] units: write sigma/255 "
                       f"(e.g. 0.05 for 12.75 on the 8-bit scale)")


def noise_map(x: torch.Tensor, sigma) -> torch.Tensor:
    """(B, 1, H, W) map of sigma (a float, or one value per sample)."""
    s = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
    if s.dim() == 0:
        s = s.expand(x.shape[0])
    return s.reshape(-1, 1, 1, 1).expand(x.shape[0], 1, *x.shape[2:])


class NoiseMapDnCNN(nn.Module):
    """DnCNN with the noise map as an extra input channel; predicts the noise and subtracts it."""

    def __init__(self, channels: int = 1, features: int = 32, depth: int = 5):
        super().__init__()
        if depth < 2:
            raise ZooError(f"DnCNN depth must be >= 2, got {depth}")
        layers: list[nn.Module] = [nn.Conv2d(channels + 1, features, 3, padding=1), nn.ReLU(inplace=False)]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(features, features, 3, padding=1), nn.ReLU(inplace=False)]
        layers.append(nn.Conv2d(features, channels, 3, padding=1))
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, sigma) -> torch.Tensor:
        return x - self.body(torch.cat([x, noise_map(x, sigma)], dim=1))


class DeepinvDRUNet(nn.Module):
    """deepinv's DRUNet behind the same (x, sigma) call; random init."""

    def __init__(self, channels: int = 1, nc: Sequence[int] = (64, 128, 256, 512), nb: int = 4):
        super().__init__()
        from deepinv.models import DRUNet

        if len(nc) != 4:
            raise ZooError(f"DRUNet has 4 scales: nc needs 4 channel counts, got {list(nc)}")
        self.net = DRUNet(in_channels=channels, out_channels=channels, nc=tuple(nc), nb=nb, act_mode="R",
                          downsample_mode="strideconv", upsample_mode="convtranspose", pretrained=None)

    def forward(self, x: torch.Tensor, sigma) -> torch.Tensor:
        return self.net(x, noise_map(x, sigma))


def build_denoiser(kind: Literal["drunet", "dncnn"], channels: int, nc: Sequence[int], nb: int,
                   dncnn_features: int, dncnn_depth: int) -> nn.Module:
    if channels not in (1, 3):
        raise ZooError(f"channels must be 1 (grey) or 3 (colour), got {channels}")
    if kind == "drunet":
        return DeepinvDRUNet(channels, nc, nb)
    if kind == "dncnn":
        return NoiseMapDnCNN(channels, dncnn_features, dncnn_depth)
    raise ZooError(f"unknown denoiser {kind!r}: choose drunet or dncnn")
