"""Breaking Bad assembly metrics as the official `evaluate_prediction` (pairwise) (pairwise); the multi-part
metrics are ours (the public PMTR repository has no multi-part test, see cards/pmtr.md).

Pose convention here: a relative pose (R, t) maps source points into the target frame, y = R x + t. The official
code stores (R, -t) (its `relative_trsfm` maps x -> R x - t); every metric below is the same under that sign flip.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from zoo.pmtr.geometry import apply_transform


def chamfer_distance(a: torch.Tensor, b: torch.Tensor, scale: float = 1000.0) -> torch.Tensor:
    """Squared-distance chamfer: mean_a min_b |a-b|^2 + mean_b min_a |a-b|^2, times `scale` (official CD x 1000)."""
    d = torch.cdist(a, b).pow(2)
    return (d.min(dim=1).values.mean() + d.min(dim=0).values.mean()) * scale


def correspondence_distance(a: torch.Tensor, b: torch.Tensor, scale: float = 100.0) -> torch.Tensor:
    """CRD: mean |a_i - b_i| of the same points under two assemblies, times `scale` (x 100)."""
    return (a - b).norm(dim=-1).mean() * scale


def rotation_rmse(r_pred: torch.Tensor, r_gt: torch.Tensor) -> torch.Tensor:
    """RMSE(R) in degrees: RMS over x, y, z of the wrapped difference of scipy 'xyz' Euler angles."""
    e1 = Rotation.from_matrix(np.asarray(r_pred.detach().cpu(), dtype=np.float64)).as_euler("xyz", degrees=True)
    e2 = Rotation.from_matrix(np.asarray(r_gt.detach().cpu(), dtype=np.float64)).as_euler("xyz", degrees=True)
    diff = np.abs(e1 - e2)
    diff = np.minimum(diff, 360.0 - diff)
    return torch.tensor(float(np.sqrt(np.mean(diff ** 2))), dtype=torch.float64)


def translation_rmse(t_pred: torch.Tensor, t_gt: torch.Tensor, scale: float = 100.0) -> torch.Tensor:
    return (t_pred - t_gt).pow(2).mean().sqrt() * scale


def _bbox_volume(p: torch.Tensor) -> torch.Tensor:
    return (p.max(dim=0).values - p.min(dim=0).values).prod()


def pairwise_assembly(src: torch.Tensor, trg: torch.Tensor, rotation: torch.Tensor, translation: torch.Tensor):
    """The official `_pairwise_mating`: the part with the smaller bounding box moves into the larger one's frame."""
    if _bbox_volume(src) < _bbox_volume(trg):
        return torch.cat([apply_transform(src, rotation, translation), trg])
    return torch.cat([src, (trg - translation) @ rotation])  # R^T (y - t)


def pairwise_metrics(src, trg, r_pred, t_pred, r_gt, t_gt) -> dict[str, torch.Tensor]:
    """CRD, CD, RMSE(R), RMSE(T) of a predicted source->target pose against the ground truth."""
    a_pred = pairwise_assembly(src, trg, r_pred, t_pred)
    a_gt = pairwise_assembly(src, trg, r_gt, t_gt)
    return {"crd": correspondence_distance(a_pred, a_gt), "cd": chamfer_distance(a_pred, a_gt),
            "rrmse": rotation_rmse(r_pred, r_gt), "trmse": translation_rmse(t_pred, t_gt)}


def multipart_metrics(parts: list[torch.Tensor], r_pred: list[torch.Tensor], t_pred: list[torch.Tensor],
                      r_gt: list[torch.Tensor], t_gt: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Multi-part (not in the public official code): every part i moved into the anchor frame by its pose
    (anchor -> part i, y = R x + t, so a part point p goes to R^T (p - t)); CRD, CD over the whole assembly,
    RMSE(R)/(T) averaged over parts, and part
    accuracies: a part counts when its own chamfer (x 1) < 0.01 (PA_CD) or its CRD (x 1) < 0.1 (PA_CRD)."""
    pred = [(p - t) @ r for p, r, t in zip(parts, r_pred, t_pred)]
    gt = [(p - t) @ r for p, r, t in zip(parts, r_gt, t_gt)]
    a_pred, a_gt = torch.cat(pred), torch.cat(gt)
    n = len(parts)
    return {
        "crd": correspondence_distance(a_pred, a_gt),
        "cd": chamfer_distance(a_pred, a_gt),
        "rrmse": sum(rotation_rmse(a, b) for a, b in zip(r_pred, r_gt)) / n,
        "trmse": sum(translation_rmse(a, b) for a, b in zip(t_pred, t_gt)) / n,
        "pa_cd": torch.tensor(sum(float(chamfer_distance(a, b, 1.0) < 0.01) for a, b in zip(pred, gt)) / n),
        "pa_crd": torch.tensor(sum(float(correspondence_distance(a, b, 1.0) < 0.1) for a, b in zip(pred, gt)) / n),
    }
