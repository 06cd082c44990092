"""`MLPM`: the network of both players, T_θ(u, x) and v_φ(y, x) (official `models/torch_mlp.py` layout).

Seven linear layers 256-256-128-128-64-64-1 with ReLU; the raw input is concatenated again before the 2nd, 4th
and 6th layers (a skip from the input that lets the deep layers see u and x directly). Xavier-uniform weights
and zero biases, as the official initialisation.
"""

from __future__ import annotations

import torch
from torch import nn

WIDTHS = (256, 256, 128, 128, 64, 64)
SKIP_BEFORE = (1, 3, 5)  # 0-based layer indices that take [hidden, input]


class MLPM(nn.Module):
    """(N, in_dim) -> (N,): the scalar output of either player."""

    def __init__(self, in_dim: int):
        super().__init__()
        dims_in, prev = [], in_dim
        for k, width in enumerate(WIDTHS):
            dims_in.append(prev + (in_dim if k in SKIP_BEFORE else 0))
            prev = width
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in zip(dims_in, WIDTHS))
        self.out = nn.Linear(WIDTHS[-1], 1)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        h = inp
        for k, layer in enumerate(self.layers):
            h = torch.relu(layer(torch.cat((h, inp), dim=-1) if k in SKIP_BEFORE else h))
        return self.out(h).squeeze(-1)
