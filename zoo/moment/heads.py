"""MOMENT's task heads (paper, Sec. 3.4). Only the reconstruction head is pre-trained; the others start random.

Layouts follow the official ``momentfm/models/moment.py`` so that heads trained with it load here unchanged.
"""

from __future__ import annotations

import torch
from torch import nn


class ReconstructionHead(nn.Module):
    """Linear(D -> P) per patch embedding, patches concatenated back into a series [B, C, N * P]. Orthogonal init
    (gain 1.41), zero bias, as the official ``PretrainHead``."""

    def __init__(self, d_model: int, patch_len: int = 8, dropout: float = 0.1, orth_gain: float | None = 1.41):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(d_model, patch_len)
        if orth_gain is not None:
            nn.init.orthogonal_(self.linear.weight, gain=orth_gain)
            nn.init.zeros_(self.linear.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [B, C, N, D] -> [B, C, N * P]
        return self.linear(self.dropout(h)).flatten(2)


class ForecastingHead(nn.Module):
    """Flatten the N patch embeddings of each channel (N * D features) and map them to the horizon H:
    ``N * D * H + H`` parameters. The official head applies its dropout *after* the linear map; kept."""

    def __init__(self, n_patches: int, d_model: int, horizon: int, dropout: float = 0.1):
        super().__init__()
        self.linear = nn.Linear(n_patches * d_model, horizon)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [B, C, N, D] -> [B, C, H]
        return self.dropout(self.linear(h.flatten(-2)))


class ClassificationHead(nn.Module):
    """Mean over patches of the channel-concatenated embeddings, dropout, Linear(C * D -> classes).

    The official head averages over *all* patches, padded ones included (its ``input_mask`` argument is unused);
    kept, so that its fine-tuned heads behave the same here."""

    def __init__(self, in_features: int, n_classes: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(in_features, n_classes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [B, N, F] -> [B, classes]
        return self.linear(self.dropout(h.mean(dim=1)))
