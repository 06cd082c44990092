"""Reversible instance normalisation (RevIN, Kim et al. 2022) as MOMENT uses it: per series and channel, over the
observed time steps only, no affine parameters (the released checkpoints have ``revin_affine: False``).

The official code (``momentfm/models/layers/revin.py``) takes the population standard deviation (no Bessel
correction) of the observed values and adds ``eps = 1e-5`` to the *standard deviation*, not the variance; both are
kept here so that outputs match the checkpoints' training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.errors import ZooError

EPS = 1e-5


@dataclass
class RevINStats:
    mean: torch.Tensor  # [B, C, 1]
    std: torch.Tensor  # [B, C, 1], eps included


def revin_statistics(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = EPS) -> RevINStats:
    """Masked mean and std of ``x`` [B, C, L] over time; ``mask`` [B, L] is 1 where a step is observed."""
    if x.ndim != 3:
        raise ZooError(f"RevIN expects a [batch, channels, time] tensor, got shape {tuple(x.shape)}")
    if mask is None:
        mask = torch.ones(x.shape[0], x.shape[-1], dtype=x.dtype, device=x.device)
    m = mask.to(x.dtype).unsqueeze(1)  # [B, 1, L], shared by every channel of a series
    n = m.sum(-1, keepdim=True)
    if bool((n == 0).any()):
        rows = torch.nonzero(n.flatten() == 0).flatten().tolist()
        raise ZooError(f"series {rows[:5]} of the batch are fully masked (no observed time step): "
                       "RevIN has no statistics for them")
    # masked positions may hold anything (padding, NaN): zero them before summing
    xm = torch.where(m.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    mean = xm.sum(-1, keepdim=True) / n
    var = (torch.where(m.bool(), x - mean, torch.zeros((), dtype=x.dtype, device=x.device)) ** 2).sum(-1, keepdim=True) / n
    return RevINStats(mean=mean.detach(), std=var.sqrt().detach() + eps)


def revin_normalize(x: torch.Tensor, stats: RevINStats) -> torch.Tensor:
    """(x - mean) / std; non-finite results (NaN padding) become 0 as in the official code's ``nan_to_num``."""
    return torch.nan_to_num((x - stats.mean) / stats.std, nan=0.0, posinf=0.0, neginf=0.0)


def revin_denormalize(z: torch.Tensor, stats: RevINStats) -> torch.Tensor:
    return z * stats.std + stats.mean
