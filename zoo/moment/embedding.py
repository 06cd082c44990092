"""Patching and patch embedding (paper, Sec. 3.2): a series of length T = 512 becomes N = 64 disjoint patches of
length P = 8, each mapped to a D-dimensional embedding by a linear projection; a patch that is masked is replaced by
a learned ``[MASK]`` embedding.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo.moment.masking import patch_view


def patchify(x: torch.Tensor, patch_len: int) -> torch.Tensor:
    """[B, C, L] -> [B, C, L // patch_len, patch_len] (disjoint patches: stride = patch length)."""
    return x.unflatten(-1, (-1, patch_len))


def sinusoidal_positions(n_positions: int, d_model: int) -> torch.Tensor:
    """The Transformer's sinusoidal table [n_positions, d_model] (sin on even, cos on odd features), computed in
    float32 the way the official ``PositionalEmbedding`` does, so that its stored buffer compares equal."""
    position = torch.arange(0, n_positions).float().unsqueeze(1)
    div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


class PatchEmbedding(nn.Module):
    """Linear(P -> D, no bias) with orthogonal init (gain 1.41), the ``[MASK]`` embedding (zeros at init), an
    optional sinusoidal positional embedding and dropout.

    The positional table is a non-persistent buffer: it is a function of the shapes, so it is recomputed rather
    than stored (the official checkpoints store 5000 rows of it; `zoo.moment.checkpoints` checks they agree).
    """

    def __init__(self, d_model: int, n_patches: int, patch_len: int = 8, add_positional_embedding: bool = True,
                 value_embedding_bias: bool = False, orth_gain: float | None = 1.41, dropout: float = 0.1):
        super().__init__()
        self.patch_len = patch_len
        self.projection = nn.Linear(patch_len, d_model, bias=value_embedding_bias)
        self.mask_embedding = nn.Parameter(torch.zeros(d_model))
        if orth_gain is not None:
            nn.init.orthogonal_(self.projection.weight, gain=orth_gain)
            if value_embedding_bias:
                nn.init.zeros_(self.projection.bias)
        self.add_positional_embedding = add_positional_embedding
        self.register_buffer("positions", sinusoidal_positions(n_patches, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, patches: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """patches [B, C, N, P], mask [B, L] (time-step view; a patch with any hidden step is masked) ->
        embeddings [B, C, N, D]."""
        keep = patch_view(mask, self.patch_len)[:, None, :, None].bool()  # [B, 1, N, 1]
        x = torch.where(keep, self.projection(patches), self.mask_embedding.to(patches.dtype))
        if self.add_positional_embedding:
            x = x + self.positions[: x.shape[2]].to(x.dtype)
        return self.dropout(x)
