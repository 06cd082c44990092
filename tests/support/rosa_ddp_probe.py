"""A RoSAModule that records, per rank, its own Fisher scores, the cross-rank average it takes the top-k of, the mask
it applies and its LoRA weights (tests/rosa/test_mask_ddp.py runs it under DDP in `zoo fit` subprocesses)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from zoo.rosa import RoSAModule


class RoSAMaskProbe(RoSAModule):
    def fisher_scores(self, fisher):
        # copy first: the DDP all-reduce works in place on CPU tensors
        local = {n: s.detach().float().cpu().clone() for n, s in fisher.scores().items()}
        reduced = super().fisher_scores(fisher)
        self.probe = {f"local/{n}": local[n] for n in local}
        self.probe |= {f"mean/{n}": s.detach().float().cpu().clone() for n, s in reduced.items()}
        return reduced

    def on_fit_end(self) -> None:
        record = dict(getattr(self, "probe", {}))
        record |= {f"mask/{n}": layer.sparse_index.detach().cpu().clone() for n, layer in self.layers.items()}
        record |= {f"lora/{n}": p.detach().cpu().clone() for n, p in self.named_parameters() if ".lora_" in n}
        path = Path(self.trainer.default_root_dir) / f"probe.rank{self.trainer.global_rank}.safetensors"
        save_file(record, str(path))
