"""Coarse-to-fine matching (GeoTransformer's, as PMTR uses it): node partition, ground-truth node correspondences,
dual-normalised superpoint matching, learnable log-Sinkhorn with a dustbin, local-to-global registration (LGR)."""

from __future__ import annotations

import torch
import torch.nn as nn

from zoo.pmtr.geometry import apply_transform, weighted_kabsch


def point_to_node_partition(points: torch.Tensor, nodes: torch.Tensor, k: int):
    """Each point joins its nearest node; each node keeps its k nearest member points (padded with len(points)).
    Returns node_masks (M,) (nodes with >= 1 member), knn_indices (M, k), knn_masks (M, k)."""
    sq = torch.cdist(nodes, points).pow(2)  # (M, N)
    owner = sq.argmin(dim=0)  # (N,)
    member = torch.zeros_like(sq, dtype=torch.bool)
    member[owner, torch.arange(len(points), device=points.device)] = True
    node_masks = member.any(dim=1)
    k = min(k, len(points))
    knn_indices = torch.topk(sq.masked_fill(~member, 1e12), k, dim=1, largest=False).indices
    knn_masks = torch.gather(member, 1, knn_indices)
    knn_indices = knn_indices.masked_fill(~knn_masks, len(points))
    return node_masks, knn_indices, knn_masks


def node_correspondences(src_nodes, trg_nodes, src_knn_points, trg_knn_points, rotation, translation,
                         pos_radius: float, src_node_masks, trg_node_masks, src_knn_masks, trg_knn_masks):
    """GeoTransformer's `get_node_correspondences` with the source moved into the target frame by the ground-truth
    (R, t): node pairs whose patches can touch, overlap = mean of the two patches' fractions of points with a partner
    closer than `pos_radius`. Returns indices (P, 2) and overlaps (P,) of pairs with overlap > 0.

    The enclosing-sphere pre-filter keeps pairs with centre distance < r_src + r_trg + pos_radius (as the official
    `get_node_correspondences`): two points on the spheres' surfaces can be within `pos_radius` of each other while
    the spheres themselves do not intersect. Without the `+ pos_radius` such pairs got overlap 0, i.e. they became
    *negatives* of the circle loss although they overlap (13-17% of the positives on the 500-point synthetic pairs)."""
    src_nodes = apply_transform(src_nodes, rotation, translation)
    src_knn_points = apply_transform(src_knn_points.reshape(-1, 3), rotation, translation).reshape(src_knn_points.shape)
    src_r = ((src_knn_points - src_nodes.unsqueeze(1)).norm(dim=-1) * src_knn_masks).max(dim=1).values
    trg_r = ((trg_knn_points - trg_nodes.unsqueeze(1)).norm(dim=-1) * trg_knn_masks).max(dim=1).values
    cand = torch.cdist(src_nodes, trg_nodes) < (src_r.unsqueeze(1) + trg_r.unsqueeze(0) + pos_radius)
    cand &= src_node_masks.unsqueeze(1) & trg_node_masks.unsqueeze(0)
    si, ti = cand.nonzero(as_tuple=True)
    if len(si) == 0:
        return torch.zeros(0, 2, dtype=torch.long, device=src_nodes.device), src_nodes.new_zeros(0)
    d = torch.cdist(src_knn_points[si], trg_knn_points[ti])  # (P, k, k)
    valid = src_knn_masks[si].unsqueeze(2) & trg_knn_masks[ti].unsqueeze(1)
    close = (d < pos_radius) & valid
    dt = src_knn_points.dtype  # counts / counts would be float32 whatever the points' dtype
    src_ov = close.any(2).sum(1).to(dt) / src_knn_masks[si].sum(1).clamp_min(1).to(dt)
    trg_ov = close.any(1).sum(1).to(dt) / trg_knn_masks[ti].sum(1).clamp_min(1).to(dt)
    overlap = (src_ov + trg_ov) / 2
    keep = overlap > 0
    return torch.stack([si[keep], ti[keep]], dim=1), overlap[keep]


def superpoint_matching(src_feats, trg_feats, src_masks, trg_masks, num_correspondences: int = 128):
    """Scores exp(-(2 - 2 cos)) of normalised node features, dual-normalised (row- times column-normalised), the
    top `num_correspondences` pairs (GeoTransformer's `SuperPointMatching`, dual_normalization=True)."""
    si_all, ti_all = src_masks.nonzero(as_tuple=True)[0], trg_masks.nonzero(as_tuple=True)[0]
    s = torch.exp(-(2.0 - 2.0 * src_feats[si_all] @ trg_feats[ti_all].t()))
    s = (s / s.sum(dim=1, keepdim=True)) * (s / s.sum(dim=0, keepdim=True))
    k = min(num_correspondences, s.numel())
    scores, flat = torch.topk(s.flatten(), k)
    return si_all[flat // s.shape[1]], ti_all[flat % s.shape[1]], scores


def superpoint_targets(gt_indices, gt_overlaps, num_targets: int = 128, overlap_threshold: float = 0.1,
                       generator: torch.Generator | None = None):
    """Training-time node pairs: ground-truth pairs with overlap > threshold, a random `num_targets` of them if
    there are more (GeoTransformer's `SuperPointTargetGenerator`). If no pair passes the threshold, every
    ground-truth pair is kept (the official `SuperPointTargetGenerator` inverts the empty mask), not none."""
    keep = gt_overlaps > overlap_threshold
    if not keep.any():
        keep = ~keep
    idx, ov = gt_indices[keep], gt_overlaps[keep]
    if len(ov) > num_targets:
        sel = torch.randperm(len(ov), generator=generator)[:num_targets].to(ov.device)
        idx, ov = idx[sel], ov[sel]
    return idx[:, 0], idx[:, 1], ov


def log_sinkhorn_dustbin(scores: torch.Tensor, alpha: torch.Tensor, row_masks: torch.Tensor, col_masks: torch.Tensor,
                         num_iterations: int = 100) -> torch.Tensor:
    """Log-domain Sinkhorn on the scores (B, m, n) augmented by a dustbin row and column of value `alpha`
    (GeoTransformer's `LearnableLogOptimalTransport`). The augmented marginals are 1 per valid row/column and the
    number of valid columns/rows at the dustbins, all divided by (#rows + #cols); the returned log-plan is scaled
    back by that total (so a matched row sums to 1). Masked entries get -inf."""
    b, m, n = scores.shape
    z = torch.cat([torch.cat([scores, alpha.expand(b, m, 1)], 2), alpha.expand(b, 1, n + 1)], 1)
    pr = torch.cat([~row_masks, torch.zeros_like(row_masks[:, :1])], 1)
    pc = torch.cat([~col_masks, torch.zeros_like(col_masks[:, :1])], 1)
    z = z.masked_fill(pr.unsqueeze(2) | pc.unsqueeze(1), -1e12)
    nr, nc = row_masks.sum(1).to(z.dtype), col_masks.sum(1).to(z.dtype)
    norm = -torch.log(nr + nc)  # (B,)
    log_mu = torch.cat([norm[:, None].expand(b, m), (torch.log(nc) + norm)[:, None]], 1)
    log_nu = torch.cat([norm[:, None].expand(b, n), (torch.log(nr) + norm)[:, None]], 1)
    log_mu = log_mu.masked_fill(pr, float("-inf"))
    log_nu = log_nu.masked_fill(pc, float("-inf"))
    u, v = torch.zeros_like(log_mu), torch.zeros_like(log_nu)
    for _ in range(num_iterations):
        u = log_mu - torch.logsumexp(z + v.unsqueeze(1), dim=2)
        v = log_nu - torch.logsumexp(z + u.unsqueeze(2), dim=1)
    return z + u.unsqueeze(2) + v.unsqueeze(1) - norm[:, None, None]


class LearnableLogOptimalTransport(nn.Module):
    def __init__(self, num_iterations: int = 100):
        super().__init__()
        self.num_iterations = num_iterations
        self.alpha = nn.Parameter(torch.tensor(1.0))

    def forward(self, scores, row_masks, col_masks):
        return log_sinkhorn_dustbin(scores, self.alpha, row_masks, col_masks, self.num_iterations)


@torch.no_grad()
def local_global_registration(src_knn_points, trg_knn_points, src_knn_masks, trg_knn_masks, score_mat,
                              k: int = 3, acceptance_radius: float = 0.1, confidence_threshold: float = 0.05,
                              correspondence_threshold: int = 3, num_refinement_steps: int = 5,
                              return_correspondences: bool = False):
    """GeoTransformer's LGR (mutual top-k, no dustbin, no global score): point correspondences inside every matched
    patch pair, one weighted-Kabsch hypothesis per patch with >= `correspondence_threshold` of them, the hypothesis
    with most inliers (residual < `acceptance_radius`) over all correspondences, then `num_refinement_steps`
    re-fits on its inliers. Returns (R, t) mapping source to target, and the correspondence count (with
    `return_correspondences`, the corresponding (C, 3) source and target points instead of the count).
    score_mat: (B, k_s, k_t) plan probabilities (dustbins removed)."""
    b, ks, kt = score_mat.shape
    mask = src_knn_masks.unsqueeze(2) & trg_knn_masks.unsqueeze(1)
    s = score_mat.masked_fill(~mask, 0)
    kr, kc = min(k, kt), min(k, ks)
    row_top = torch.zeros_like(mask).scatter_(2, s.topk(kr, dim=2).indices, True)
    col_top = torch.zeros_like(mask).scatter_(1, s.topk(kc, dim=1).indices, True)
    corr = row_top & col_top & (s > confidence_threshold) & mask
    bi, si, ti = corr.nonzero(as_tuple=True)
    eye, zero = torch.eye(3, dtype=s.dtype, device=s.device), torch.zeros(3, dtype=s.dtype, device=s.device)
    src_c, trg_c, w_c = src_knn_points[bi, si], trg_knn_points[bi, ti], s[bi, si, ti]
    found = (src_c, trg_c) if return_correspondences else len(bi)
    if len(bi) < 3:
        return eye, zero, found
    counts = corr.flatten(1).sum(1)
    patch_ok = counts >= correspondence_threshold
    if patch_ok.any():
        w_local = (s * corr)[patch_ok].flatten(1)  # (P, ks*kt)
        src_rep = src_knn_points[patch_ok].unsqueeze(2).expand(-1, ks, kt, 3).reshape(-1, ks * kt, 3)
        trg_rep = trg_knn_points[patch_ok].unsqueeze(1).expand(-1, ks, kt, 3).reshape(-1, ks * kt, 3)
        rot, tr = weighted_kabsch(src_rep, trg_rep, w_local)
        res = (apply_transform(src_c.unsqueeze(0), rot, tr) - trg_c.unsqueeze(0)).norm(dim=-1)
        best = (res < acceptance_radius).sum(1).argmax()
        rot, tr = rot[best], tr[best]
    else:
        rot, tr = weighted_kabsch(src_c, trg_c, w_c)
    for _ in range(num_refinement_steps):
        inl = (apply_transform(src_c, rot, tr) - trg_c).norm(dim=-1) < acceptance_radius
        if inl.sum() < 3:
            break
        rot, tr = weighted_kabsch(src_c, trg_c, w_c * inl)
    return rot, tr, found
