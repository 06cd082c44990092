"""PMTR's training objective (official `model/loss.py`): overlap-weighted circle loss on the node features, the
fine matching loss on the Sinkhorn log-plan, plus the proxy orthogonality loss (`pmt.orthogonality_loss`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.pmtr.geometry import apply_transform


def weighted_circle_loss(pos_masks, neg_masks, feat_dists, pos_margin=0.1, neg_margin=1.4, pos_optimal=0.1,
                         neg_optimal=1.4, log_scale=24.0, pos_scales=None):
    """Circle loss over rows and columns of the (S, T) feature-distance matrix; only anchors with both a positive and
    a negative count; positive weights scaled by `pos_scales` (sqrt overlap)."""
    row_masks = (pos_masks.sum(-1) > 0) & (neg_masks.sum(-1) > 0)
    col_masks = (pos_masks.sum(-2) > 0) & (neg_masks.sum(-2) > 0)
    pos_w = torch.clamp(feat_dists - 1e5 * (~pos_masks).float() - pos_optimal, min=0)
    if pos_scales is not None:
        pos_w = pos_w * pos_scales
    pos_w = pos_w.detach()
    neg_w = torch.clamp(neg_optimal - (feat_dists + 1e5 * (~neg_masks).float()), min=0).detach()
    lp = log_scale * (feat_dists - pos_margin) * pos_w
    ln = log_scale * (neg_margin - feat_dists) * neg_w
    loss_row = F.softplus(torch.logsumexp(lp, -1) + torch.logsumexp(ln, -1)) / log_scale
    loss_col = F.softplus(torch.logsumexp(lp, -2) + torch.logsumexp(ln, -2)) / log_scale
    if not row_masks.any() or not col_masks.any():
        return feat_dists.sum() * 0  # the official code replaces the NaN of an empty mean by 0
    return (loss_row[row_masks].mean() + loss_col[col_masks].mean()) / 2


def coarse_matching_loss(src_feats, trg_feats, gt_indices, gt_overlaps, positive_overlap: float = 0.1):
    """src/trg_feats: L2-normalised node features; positives: overlap > 0.1, negatives: overlap 0."""
    feat_dists = (2.0 - 2.0 * src_feats @ trg_feats.t()).clamp_min(1e-12).sqrt()
    overlaps = torch.zeros_like(feat_dists)
    overlaps[gt_indices[:, 0], gt_indices[:, 1]] = gt_overlaps.to(overlaps.dtype)
    pos = overlaps > positive_overlap
    neg = overlaps == 0
    return weighted_circle_loss(pos, neg, feat_dists, pos_scales=torch.sqrt(overlaps * pos.float()))


def fine_matching_loss(log_plan, src_knn_points, trg_knn_points, src_knn_masks, trg_knn_masks, rotation,
                       translation, positive_radius: float = 0.05):
    """-mean log P over ground-truth point matches (squared distance < r^2 after the ground-truth pose) and over the
    dustbin entries of valid points without any match."""
    src = apply_transform(src_knn_points, rotation, translation)
    d = torch.cdist(src, trg_knn_points).pow(2)
    valid = src_knn_masks.unsqueeze(2) & trg_knn_masks.unsqueeze(1)
    gt = (d < positive_radius ** 2) & valid
    labels = torch.zeros_like(log_plan, dtype=torch.bool)
    labels[:, :-1, :-1] = gt
    labels[:, :-1, -1] = (gt.sum(2) == 0) & src_knn_masks
    labels[:, -1, :-1] = (gt.sum(1) == 0) & trg_knn_masks
    if not labels.any():
        return log_plan.sum() * 0
    return -log_plan[labels].mean()
