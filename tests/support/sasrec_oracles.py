"""Test-only views of a SASRec for the dpformer oracles (tests/support is on sys.path in every test process)."""

from __future__ import annotations

import torch
from torch import nn

from zoo.dpformer.model import SASRec


class PerSampleLoss(nn.Module):
    """`forward(seq, target)` returns a SASRec's per-sequence losses: the module form that Opacus'
    GradSampleModule and `torch.func` per-sample gradients wrap (the oracles' view of the model)."""

    def __init__(self, model: SASRec):
        super().__init__()
        self.m = model

    def forward(self, seq: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.m.per_sample_loss(seq, target)
