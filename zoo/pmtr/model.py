"""PMTR (official `model/pmtr.py` `forward_pass`) as an `nn.Module` for one (source, target) pair:
KPConv-FPN with fine PMT -> coarse PMT on the nodes -> superpoint matching -> log-Sinkhorn fine matching -> LGR pose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo.errors import ZooError
from zoo.pmtr.geometry import apply_transform, build_pyramid
from zoo.pmtr.kpconv import KPConvFPN
from zoo.pmtr.loss import coarse_matching_loss, fine_matching_loss
from zoo.pmtr.matching import (LearnableLogOptimalTransport, local_global_registration, node_correspondences,
                               point_to_node_partition, superpoint_matching, superpoint_targets)
from zoo.pmtr.pmt import CoarsePMTBlock, FinePMTBlock, orthogonality_loss


@dataclass
class PMTROutput:
    rotation: torch.Tensor  # (3, 3) estimated source -> target
    translation: torch.Tensor  # (3,)
    losses: dict[str, torch.Tensor]
    node_corr_scores: torch.Tensor
    num_correspondences: int
    # with a ground-truth pose: how good the matches the pose was solved from are (see `_match_quality`)
    match_quality: dict[str, torch.Tensor] = field(default_factory=dict)
    # with `gt_nodes_diagnostic`: the pose solved from the ground-truth node pairs on the same features
    gt_nodes: PMTROutput | None = None


class PMTR(nn.Module):
    def __init__(self, channels, output_dims, coarse_c, coarse_f, coarse_heads, fine_c, fine_f, fine_heads,
                 fine_pmt: bool, voxel_size: float, kpconv_radius: float, kpconv_sigma: float, neighbor_limits,
                 coarse_radius: float, points_per_node: int, num_node_correspondences: int, matching_radius: float,
                 positive_overlap: float, fine_positive_radius: float, sinkhorn_iterations: int, lgr_k: int,
                 acceptance_radius: float, confidence_threshold: float, refinement_steps: int, groups: int,
                 orth_scale: float):
        super().__init__()
        self.voxel_size, self.kpconv_radius, self.neighbor_limits = voxel_size, kpconv_radius, list(neighbor_limits)
        self.points_per_node, self.num_node_correspondences = points_per_node, num_node_correspondences
        self.matching_radius, self.positive_overlap = matching_radius, positive_overlap
        self.fine_positive_radius, self.orth_scale = fine_positive_radius, orth_scale
        self.lgr = dict(k=lgr_k, acceptance_radius=acceptance_radius, confidence_threshold=confidence_threshold,
                        num_refinement_steps=refinement_steps)
        if len(channels) != 3 or len(output_dims) != 2:
            raise ZooError(f"the KPConv-FPN has 3 levels: channels needs 3 lists and output_dims 2 (got "
                           f"{len(channels)}, {len(output_dims)})")
        self.backbone = KPConvFPN(channels, output_dims, fine_c, fine_f, fine_heads, init_radius=kpconv_radius,
                                  init_sigma=kpconv_sigma, groups=groups, fine_pmt=fine_pmt)
        self.coarse_matcher = CoarsePMTBlock(coarse_c, coarse_f, coarse_heads, coarse_radius)
        if self.coarse_matcher.in_dim != channels[-1][-1]:
            raise ZooError(f"coarse PMT input c0*f0 = {self.coarse_matcher.in_dim} must equal the node feature width "
                           f"channels[-1][-1] = {channels[-1][-1]}")
        for i, d in enumerate(output_dims):
            pmt = self.backbone.pmt[i]
            if isinstance(pmt, FinePMTBlock) and (pmt.in_dim != d or pmt.c[-1] * pmt.f[-1] != d):
                raise ZooError(f"fine PMT {i}: c*f must equal the decoder width {d} at input and output "
                               f"(c={pmt.c}, f={pmt.f})")
        self.optimal_transport = LearnableLogOptimalTransport(sinkhorn_iterations)

    def proxies(self) -> list[torch.Tensor]:
        layers = list(self.coarse_matcher.layers)
        for pmt in self.backbone.pmt:
            if isinstance(pmt, FinePMTBlock):
                layers += list(pmt.layers)
        return [layer.proxy for layer in layers]

    def forward(self, src: torch.Tensor, trg: torch.Tensor, gt_rotation: torch.Tensor | None = None,
                gt_translation: torch.Tensor | None = None, use_gt_nodes: bool = False,
                gt_nodes_diagnostic: bool = False) -> PMTROutput:
        """src (N, 3), trg (M, 3) posed parts; the ground-truth source->target pose, if given, yields the losses
        (and, with `use_gt_nodes`, the training-time node pairs). `gt_nodes_diagnostic` also solves the pose from the
        ground-truth node pairs on the same features (`PMTROutput.gt_nodes`), without a second backbone pass."""
        with torch.no_grad():
            pyr = build_pyramid(src, trg, 3, self.voxel_size, self.kpconv_radius, self.neighbor_limits)
        n_src, _ = pyr.lengths[0]
        m_src, _ = pyr.lengths[-1]
        src_pts, trg_pts = pyr.points[0][:n_src], pyr.points[0][n_src:]
        src_nds, trg_nds = pyr.points[-1][:m_src], pyr.points[-1][m_src:]
        with torch.no_grad():
            src_nm, src_ki, src_km = point_to_node_partition(src_pts, src_nds, self.points_per_node)
            trg_nm, trg_ki, trg_km = point_to_node_partition(trg_pts, trg_nds, self.points_per_node)
        src_kp = torch.cat([src_pts, torch.zeros_like(src_pts[:1])])[src_ki]
        trg_kp = torch.cat([trg_pts, torch.zeros_like(trg_pts[:1])])[trg_ki]

        feats = self.backbone(pyr)
        f_pts, f_nds = feats[0], feats[-1]
        src_fp, trg_fp = f_pts[:n_src], f_pts[n_src:]
        src_fn, trg_fn = self.coarse_matcher(src_nds, trg_nds, f_nds[:m_src], f_nds[m_src:])
        src_fn, trg_fn = F.normalize(src_fn, dim=1), F.normalize(trg_fn, dim=1)

        has_gt, gt_nodes = gt_rotation is not None, None
        if has_gt:
            with torch.no_grad():
                gt_idx, gt_ov = node_correspondences(src_nds, trg_nds, src_kp, trg_kp, gt_rotation, gt_translation,
                                                     self.matching_radius, src_nm, trg_nm, src_km, trg_km)
                # as the official SuperPointTargetGenerator: the pairs with overlap > 0.1, or all ground-truth pairs
                # if none passes. With no ground-truth pair at all the official get_node_correspondences invents a
                # random node pair of overlap 1.0 (a circle-loss positive and the only training target); we keep
                # the learnt pairs and a zero coarse loss instead (cards/pmtr.md, deviations)
                if (use_gt_nodes or gt_nodes_diagnostic) and len(gt_ov) > 0:
                    gt_nodes = superpoint_targets(gt_idx, gt_ov, self.num_node_correspondences, self.positive_overlap)
            # the losses that do not depend on the node pairs: once, shared with the diagnostic solve
            c_loss = coarse_matching_loss(src_fn, trg_fn, gt_idx, gt_ov, self.positive_overlap)
            orth, zero = orthogonality_loss(self.proxies(), self.orth_scale)
        with torch.no_grad():
            si, ti, node_scores = superpoint_matching(src_fn, trg_fn, src_nm, trg_nm, self.num_node_correspondences)
            quality = {}
            if has_gt:  # the learnt node matches, before training swaps in the ground-truth pairs
                quality["node_precision"] = self._node_precision(si, ti, gt_idx, len(trg_nds))
        learnt = (si, ti, node_scores)

        def solve(si, ti, node_scores, quality) -> PMTROutput:
            """Fine matching inside the matched node patches, LGR, and (with a ground truth) the losses."""
            src_f = torch.cat([src_fp, torch.zeros_like(src_fp[:1])])[src_ki[si]]
            trg_f = torch.cat([trg_fp, torch.zeros_like(trg_fp[:1])])[trg_ki[ti]]
            scores = torch.einsum("bnd,bmd->bnm", src_f, trg_f) / src_fp.shape[1] ** 0.5
            log_plan = self.optimal_transport(scores, src_km[si], trg_km[ti])
            # LGR fits target -> source in the official code (its "ref" is the source); we fit source -> target
            rot, tr, (src_c, trg_c) = local_global_registration(src_kp[si], trg_kp[ti], src_km[si], trg_km[ti],
                                                                log_plan[:, :-1, :-1].detach().exp(),
                                                                return_correspondences=True, **self.lgr)
            losses = {}
            if has_gt:
                with torch.no_grad():
                    quality.update(self._point_inliers(src_c, trg_c, gt_rotation, gt_translation))
                f_loss = fine_matching_loss(log_plan, src_kp[si], trg_kp[ti], src_km[si], trg_km[ti], gt_rotation,
                                            gt_translation, self.fine_positive_radius)
                losses = {"loss": c_loss + f_loss + orth + zero, "c_loss": c_loss, "f_loss": f_loss,
                          "orth_loss": orth, "zero_loss": zero}
            return PMTROutput(rot, tr, losses, node_scores, len(src_c), quality)

        diagnostic_quality = dict(quality)
        out = solve(*(gt_nodes if use_gt_nodes and gt_nodes is not None else learnt), quality)
        if gt_nodes_diagnostic and has_gt:  # as a call with use_gt_nodes=True: learnt pairs if no gt pair overlaps
            out.gt_nodes = out if use_gt_nodes else solve(*(gt_nodes or learnt), diagnostic_quality)
        return out

    @staticmethod
    def _node_precision(si, ti, gt_idx, n_trg: int) -> torch.Tensor:
        """Fraction of the matched node pairs that overlap at all under the ground truth (GeoTransformer's PIR)."""
        if len(si) == 0:
            return torch.zeros((), device=si.device)
        gt_keys = gt_idx[:, 0] * n_trg + gt_idx[:, 1]
        return torch.isin(si * n_trg + ti, gt_keys).float().mean()

    def _point_inliers(self, src_c, trg_c, rotation, translation) -> dict[str, torch.Tensor]:
        """The point correspondences LGR solved the pose from: their count and the fraction within LGR's acceptance
        radius under the ground-truth pose (GeoTransformer's inlier ratio, IR)."""
        n = torch.tensor(float(len(src_c)), device=src_c.device)
        if len(src_c) == 0:
            return {"num_corr": n, "inlier_ratio": torch.zeros((), device=src_c.device)}
        res = (apply_transform(src_c, rotation, translation) - trg_c).norm(dim=-1)
        return {"num_corr": n, "inlier_ratio": (res < self.lgr["acceptance_radius"]).float().mean()}

