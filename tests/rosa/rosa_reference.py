"""Test oracle (not product code): RoSA's sparse adapter as a dense masked weight with autograd gradients."""

from __future__ import annotations

import copy

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


def assert_matches_dense_reference(layer: nn.Module, n_in: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a RoSA layer and its dense masked twin (same base, same LoRA factors) in float64 on one input and one
    output gradient: outputs, input gradients, the sparse values' gradient (the reference's dense gradient on the
    support) and the LoRA gradients agree to 1e-12. Returns (input, output gradient) for further checks."""
    mask = torch.zeros(layer.base_layer.weight.numel(), dtype=torch.float64)
    mask[layer.sparse_index.long()] = 1
    ref = DenseMaskedLinear(copy.deepcopy(layer.base_layer), mask.view(layer.base_layer.weight.shape))
    ref_A, ref_B = copy.deepcopy(layer.lora_A), copy.deepcopy(layer.lora_B)
    with torch.no_grad():
        ref.delta.copy_(layer.dense_sparse())
    x1 = torch.randn(2, 5, n_in, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    y1 = layer(x1)
    y2 = ref(x2) + layer.scaling * ref_B(ref_A(x2))
    torch.testing.assert_close(y1, y2, rtol=0, atol=1e-12)
    g = torch.randn_like(y1)
    y1.backward(g)
    y2.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=0, atol=1e-12)
    support = layer.sparse_index.long()
    torch.testing.assert_close(layer.sparse_values.grad, ref.delta.grad.flatten()[support], rtol=0, atol=1e-12)
    # the reference's dense gradient is zero off the support: the SDDMM covers everything that is trained
    assert torch.count_nonzero(ref.delta.grad) <= layer.nnz
    torch.testing.assert_close(layer.lora_A.weight.grad, ref_A.weight.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.lora_B.weight.grad, ref_B.weight.grad, rtol=0, atol=1e-12)
    return x1.detach(), g
