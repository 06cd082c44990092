"""Oracles added by mutation testing: the RoSA layer's inverted dropout with a sparse part (PyTorch's
`nn.Dropout` definition), and the Fisher of a layer called twice per micro-batch (autograd on a merged copy)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from zoo.rosa.layer import RoSALinear
from zoo.rosa.mask import FisherCollector, apply_rosa, rosa_layers


def test_dropout_with_a_sparse_part_is_inverted_dropout():
    """With A = B = I the LoRA branch is (α/r)·drop(x); nn.Dropout's definition: each entry is either 0 or
    x/(1-p), and both occur. (The d > 0 path builds its own keep mask instead of calling nn.Dropout.)"""
    torch.manual_seed(0)
    n, p, alpha = 8, 0.4, 4.0
    base = nn.Linear(n, n).double()
    layer = RoSALinear(base, r=n, lora_alpha=alpha, lora_dropout=p, density=0.1, adapter_dtype=torch.float64)
    layer.set_mask(torch.randperm(n * n)[: layer.nnz])
    with torch.no_grad():
        layer.sparse_values.normal_()
        layer.lora_A.weight.copy_(torch.eye(n, dtype=torch.float64))
        layer.lora_B.weight.copy_(torch.eye(n, dtype=torch.float64))
    x = torch.rand(64, n, dtype=torch.float64) + 0.5  # no zeros
    layer.eval()
    y_eval = layer(x)
    without_lora = y_eval - layer.scaling * x  # (W + S) x + b
    torch.testing.assert_close(y_eval, without_lora + (alpha / n) * x)
    layer.train()
    ratio = (layer(x) - without_lora).detach() / (layer.scaling * x)
    dropped = ratio.abs() < 1e-9
    kept = (ratio - 1 / (1 - p)).abs() < 1e-9
    assert bool((dropped | kept).all()), "entries must be 0 or x/(1-p)"
    assert dropped.any() and kept.any()


class _Twice(nn.Module):
    """One linear applied twice per forward (weight sharing): its gradient is the sum of both calls' dOᵀX."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        return self.lin(torch.tanh(self.lin(x)))


def test_fisher_of_a_layer_called_twice_squares_the_summed_gradient():
    torch.manual_seed(0)
    model = _Twice().double()
    layers = apply_rosa(model, ["lin"], r=2, lora_alpha=4, density=0.2, adapter_dtype=torch.float64)
    with torch.no_grad():
        layers["lin"].lora_B.weight.normal_()
    batches = [torch.randn(5, 6, dtype=torch.float64) for _ in range(3)]
    with FisherCollector(model, layers) as fisher:
        for x in batches:
            model(x).square().sum().backward()
            fisher.end_microbatch()
    scores = fisher.scores()

    merged = copy.deepcopy(model)
    layer = rosa_layers(merged)["lin"]
    layer.merge()
    merged.lin = layer.base_layer
    w = merged.lin.weight.requires_grad_(True)
    expected = torch.zeros_like(w)
    for x in batches:
        (g,) = torch.autograd.grad(merged(x).square().sum(), [w])  # the whole micro-batch gradient, both calls
        expected += g * g
    torch.testing.assert_close(scores["lin"].double(), expected / len(batches), rtol=1e-9, atol=1e-15)
