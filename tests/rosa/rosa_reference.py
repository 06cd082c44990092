"""Test oracle (not product code): RoSA's sparse adapter as a dense masked weight with autograd gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D


class DenseMaskedLinear(nn.Module):
    """y = x (W + M ⊙ D)ᵀ + b (for Conv1D's stored (in, out) layout: x (W + M ⊙ D) + b) with a dense trainable D
    whose gradient autograd masks (M ⊙ dOᵀX, resp. M ⊙ XᵀdO): what RoSA computes without SDDMM."""

    def __init__(self, base_layer: nn.Module, mask: torch.Tensor):
        super().__init__()
        self.base_layer = base_layer
        self.fan_in_fan_out = isinstance(base_layer, Conv1D)
        self.register_buffer("mask", mask.to(base_layer.weight.dtype))
        self.delta = nn.Parameter(torch.zeros_like(base_layer.weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.base_layer.weight.detach() + self.mask * self.delta
        return F.linear(x, w.t() if self.fan_in_fan_out else w, self.base_layer.bias)
