"""`PMTRModule`: trains PMTR on (source, target) part pairs and evaluates pairwise or multi-part assembly."""

from __future__ import annotations

import inspect
import itertools

import lightning as L
import torch

from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.lm import linear_warmup_decay
from zoo.pmtr.averaging import shonan_poses
from zoo.pmtr.geometry import relative_pose
from zoo.pmtr.metrics import multipart_metrics, pairwise_metrics
from zoo.pmtr.model import PMTR


class PMTRModule(HubMixin, L.LightningModule):
    """PMTR (Lee et al., ICML 2024) for geometric shape assembly.

    Args:
        channels: KPConv-FPN encoder widths per level (official `[[64, 128], [128, 256, 256], [256, 512, 512]]`).
        output_dims: decoder widths (official `[256, 128]`); the fine matching uses the last (level 0).
        coarse_c, coarse_f, coarse_heads: coarse PMT block (official c = [64, 16, 4], f = [8, 32, 128], 4 heads);
            c[0] * f[0] must equal channels[-1][-1].
        fine_c, fine_f, fine_heads: the decoder's fine PMT blocks (official f = [4, 16, 64] and [2, 8, 32]).
        fine_pmt: False drops the fine PMT blocks (the official `--fine_matcher none`).
        voxel_size: the official `subsampling_radius` 0.01 (the grid of level k is voxel_size * 2**k).
        kpconv_radius, kpconv_sigma: KPConv search/kernel radius and influence at level 0 (official 0.125, 0.1).
        neighbor_limits: radius-neighbour caps per level (official [35, 32, 34]).
        coarse_radius: the coarse PMT's aggregation radius (official `--cpconv_radius` 0.05).
        points_per_node, num_node_correspondences: 128 and 128 (official).
        matching_radius: ground-truth point match radius for node overlaps (official 0.02).
        positive_overlap: node pairs with overlap > 0.1 are positives / training targets.
        fine_positive_radius: fine-loss match radius (official 0.05).
        sinkhorn_iterations: 100. lgr_k, acceptance_radius, confidence_threshold, refinement_steps: LGR (3, 0.1,
            0.05, 5).
        groups: GroupNorm groups in the backbone (official 32).
        orth_scale: weight of the proxy orthogonality terms (official 10).
        lr: Adam learning rate (official 1e-3, no weight decay, no schedule).
        warmup_steps: linear learning-rate warm-up over this many optimiser steps (0, the official setting: none;
            a diagnostic option for the CPU reproduction, not in the paper).
        shonan_max_level: the highest SO(p) level of the multi-part test's Shonan averaging (40; the public
            official code has no multi-part test to check it against); on inconsistent pairwise
            poses climbing to 40 can take
            seconds before it fails (then the fallback applies).
    """

    monitor = "val/crd"
    monitor_mode = "min"

    def __init__(
        self,
        channels: list[list[int]] = [[64, 128], [128, 256, 256], [256, 512, 512]],
        output_dims: list[int] = [256, 128],
        coarse_c: list[int] = [64, 16, 4],
        coarse_f: list[int] = [8, 32, 128],
        coarse_heads: list[int] = [4, 4],
        fine_c: list[list[int]] = [[64, 16, 4], [64, 16, 4]],
        fine_f: list[list[int]] = [[4, 16, 64], [2, 8, 32]],
        fine_heads: list[int] = [4, 4],
        fine_pmt: bool = True,
        voxel_size: float = 0.01,
        kpconv_radius: float = 0.125,
        kpconv_sigma: float = 0.1,
        neighbor_limits: list[int] = [35, 32, 34],
        coarse_radius: float = 0.05,
        points_per_node: int = 128,
        num_node_correspondences: int = 128,
        matching_radius: float = 0.02,
        positive_overlap: float = 0.1,
        fine_positive_radius: float = 0.05,
        sinkhorn_iterations: int = 100,
        lgr_k: int = 3,
        acceptance_radius: float = 0.1,
        confidence_threshold: float = 0.05,
        refinement_steps: int = 5,
        groups: int = 32,
        orth_scale: float = 10.0,
        lr: float = 1e-3,
        warmup_steps: int = 0,
        shonan_max_level: int = 40,
    ):
        super().__init__()
        self.save_hyperparameters()
        if lr <= 0:
            raise ZooError(f"lr must be > 0, got {lr}")
        if warmup_steps < 0:
            raise ZooError(f"warmup_steps must be >= 0, got {warmup_steps}")
        if shonan_max_level < 3:
            raise ZooError(f"shonan_max_level must be >= 3 (Shonan starts at SO(3)), got {shonan_max_level}")
        if voxel_size <= 0 or kpconv_radius <= 0:
            raise ZooError(f"voxel_size and kpconv_radius must be > 0, got {voxel_size}, {kpconv_radius}")
        if len(neighbor_limits) != 3 or min(neighbor_limits) < 1:
            raise ZooError(f"neighbor_limits needs one positive cap per KPConv level (3), got {neighbor_limits}")
        if points_per_node < 1 or num_node_correspondences < 1:  # 0 failed in a torch reduction, or matched nothing
            raise ZooError(f"points_per_node and num_node_correspondences must be >= 1, got {points_per_node}, "
                           f"{num_node_correspondences}")
        args = dict(locals())
        self.model = PMTR(**{k: args[k] for k in inspect.signature(PMTR.__init__).parameters if k != "self"})

    def forward(self, src: torch.Tensor, trg: torch.Tensor):
        """Source -> target pose (R, t) of two posed parts."""
        out = self.model(src, trg)
        return out.rotation, out.translation

    @staticmethod
    def _check(batch) -> None:
        parts = batch["parts"]
        if len(parts) < 2:
            raise ZooError(f"sample {batch.get('name')!r} has {len(parts)} part(s); assembly needs at least 2")

    def _pair_step(self, batch, stage: str) -> torch.Tensor:
        self._check(batch)
        src, trg = batch["parts"][0], batch["parts"][1]
        r_gt, t_gt = relative_pose(batch["gt_rotations"][0], batch["gt_translations"][0],
                                   batch["gt_rotations"][1], batch["gt_translations"][1])
        out = self.model(src, trg, r_gt, t_gt, use_gt_nodes=stage == "train", gt_nodes_diagnostic=stage == "test")
        metrics = pairwise_metrics(src, trg, out.rotation, out.translation, r_gt, t_gt)
        logs = {**{k: v.detach() for k, v in out.losses.items()}, **metrics, **out.match_quality}
        if stage == "test":
            eye = torch.eye(3, dtype=src.dtype, device=src.device)
            ident = pairwise_metrics(src, trg, eye, torch.zeros_like(t_gt), r_gt, t_gt)
            logs.update({f"identity_{k}": v for k, v in ident.items()})
            # diagnostic, not a result: the same model given the ground-truth node pairs (as in training), which
            # separates a failure of the learnt coarse matching from one of the fine matching + LGR
            oracle = out.gt_nodes
            gt_nodes = pairwise_metrics(src, trg, oracle.rotation, oracle.translation, r_gt, t_gt)
            logs.update({f"gtnodes_{k}": v for k, v in {**gt_nodes, **oracle.match_quality}.items()
                         if k != "node_precision"})
        self.log_dict({f"{stage}/{k}": float(v) for k, v in logs.items()}, batch_size=1, prog_bar=False,
                      sync_dist=stage != "train")
        return out.losses["loss"]

    def _multipart_test(self, batch) -> None:
        parts, rs, cs = batch["parts"], batch["gt_rotations"], batch["gt_translations"]
        n, anchor = len(parts), int(batch["anchor"])
        edges = {}
        for i, j in itertools.permutations(range(n), 2):  # every ordered pair (no official multi-part code)
            out = self.model(parts[i], parts[j])
            # factor uncertainty (no official source): 1 / mean((node score * 1e5)^2)
            score = float((out.node_corr_scores.double() * 1e5).pow(2).mean()) if out.node_corr_scores.numel() else 0.0
            edges[(i, j)] = (out.rotation.cpu().double(), out.translation.cpu().double(), 1.0 / max(score, 1e-12))
        poses = shonan_poses(n, anchor, edges, p_max=self.hparams.shonan_max_level)
        self.log("test/shonan_failed", float(poses is None), batch_size=1)
        if poses is None:  # Shonan failed: the anchor's own pairwise estimates
            poses = ([edges[(anchor, i)][0] if i != anchor else torch.eye(3, dtype=torch.float64) for i in range(n)],
                     [edges[(anchor, i)][1] if i != anchor else torch.zeros(3, dtype=torch.float64) for i in range(n)])
        r_pred, t_pred = [r.to(parts[0].dtype) for r in poses[0]], [t.to(parts[0].dtype) for t in poses[1]]
        gt = [relative_pose(rs[anchor], cs[anchor], rs[i], cs[i]) for i in range(n)]
        m = multipart_metrics([p.cpu() for p in parts], r_pred, t_pred, [g[0].cpu() for g in gt],
                              [g[1].cpu() for g in gt])
        self.log_dict({f"test/{k}": float(v) for k, v in m.items()}, batch_size=1)

    def training_step(self, batch, batch_idx):
        return self._pair_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._pair_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._check(batch)
        if len(batch["parts"]) > 2:
            self._multipart_test(batch)
        else:
            self._pair_step(batch, "test")

    def predict_step(self, batch, batch_idx):
        self._check(batch)
        r, t = self(batch["parts"][0], batch["parts"][1])
        return {"name": batch.get("name"), "rotation": r, "translation": t}

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=0.0)
        w = self.hparams.warmup_steps
        if w == 0:
            return opt
        ramp = torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup_decay(w, total_steps=w, decay=False))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": ramp, "interval": "step"}}

    def card_metadata(self) -> dict:
        return {"tags": ["pmtr", "shape-assembly", "point-cloud-registration", "breaking-bad"], "base_model": None}
