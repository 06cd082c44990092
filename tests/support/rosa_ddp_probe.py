"""A RoSAMaskWarmup that records, per rank, its own Fisher scores, the cross-rank average and the mask it applies
(tests/rosa/test_mask_ddp.py runs it under DDP in `zoo fit` subprocesses)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from callbacks.rosa_mask import RoSAMaskWarmup


class RoSAMaskProbe(RoSAMaskWarmup):
    def __init__(self, out_dir: str, **kw):
        super().__init__(**kw)
        self.out_dir = Path(out_dir)
        self.record: dict[str, torch.Tensor] = {}

    def reduce_scores(self, trainer, scores, device):
        # copy first: the DDP all-reduce works in place on CPU tensors
        local = {n: s.detach().float().cpu().clone() for n, s in scores.items()}
        reduced = super().reduce_scores(trainer, scores, device)
        for n in scores:
            self.record[f"local/{n}"] = local[n]
            self.record[f"mean/{n}"] = reduced[n].detach().float().cpu().clone()
        return reduced

    def compute_mask(self, trainer, module):
        masks = super().compute_mask(trainer, module)
        for n, m in masks.items():
            self.record[f"mask/{n}"] = m.detach().cpu().clone()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        save_file(self.record, str(self.out_dir / f"rank{trainer.global_rank}.safetensors"))
        return masks
