"""PMTR's training losses against loop-by-loop constructions (float64): the overlap-weighted circle loss (official
GeoTransformer `WeightedCircleLoss`, Sun et al. 2020 in distance form), its positive/negative masks from the node
overlaps, and the fine matching loss's labels."""

import math

import pytest
import torch

from zoo.pmtr.geometry import apply_transform
from zoo.pmtr.loss import coarse_matching_loss, fine_matching_loss, weighted_circle_loss


def _circle_anchor(d, pos, neg, scale, pos_margin=0.1, neg_margin=1.4, pos_optimal=0.1, neg_optimal=1.4, gamma=24.0):
    """One anchor (a row or a column), term by term: (1/gamma) log(1 + sum_j e^{lp_j} * sum_k e^{ln_k}) with
    lp_j = gamma * max(d_j - O_p, 0) * s_j * (d_j - m_p) on positives and ln_k = gamma * max(O_n - d_k, 0) *
    (m_n - d_k) on negatives. As in the official code the sums run over every entry of the anchor: an entry outside
    the positive (negative) mask has weight 0, i.e. contributes e^0 = 1."""
    sp, sn = 0.0, 0.0
    for j in range(len(d)):
        lp = gamma * max(d[j] - pos_optimal, 0.0) * scale[j] * (d[j] - pos_margin) if pos[j] else 0.0
        ln = gamma * max(neg_optimal - d[j], 0.0) * (neg_margin - d[j]) if neg[j] else 0.0
        sp += math.exp(lp)
        sn += math.exp(ln)
    return math.log1p(sp * sn) / gamma


def _circle_loop(d, pos, neg, scale):
    rows = [_circle_anchor(d[i], pos[i], neg[i], scale[i]) for i in range(d.shape[0]) if pos[i].any() and neg[i].any()]
    cols = [_circle_anchor(d[:, j], pos[:, j], neg[:, j], scale[:, j]) for j in range(d.shape[1])
            if pos[:, j].any() and neg[:, j].any()]
    return (sum(rows) / len(rows) + sum(cols) / len(cols)) / 2


def test_weighted_circle_loss_equals_the_anchor_by_anchor_formula():
    g = torch.Generator().manual_seed(0)
    d = torch.rand(7, 5, generator=g, dtype=torch.float64) * 2
    ov = torch.rand(7, 5, generator=g, dtype=torch.float64)
    ov[ov < 0.6] = 0  # about 60 % negatives, the rest positives or (0, 0.1] "neither"
    pos, neg = ov > 0.1, ov == 0
    scale = torch.sqrt(ov * pos)
    got = weighted_circle_loss(pos, neg, d, pos_scales=scale)
    want = _circle_loop(d.numpy(), pos.numpy(), neg.numpy(), scale.numpy())
    assert float(got) == pytest.approx(want, rel=1e-12)


def test_circle_loss_falls_as_positives_close_and_negatives_part():
    """Moving every positive's distance down and every negative's up lowers the loss, and its gradient says so:
    d loss / d d > 0 on positives above their optimum, < 0 on negatives below theirs."""
    g = torch.Generator().manual_seed(1)
    d = (0.5 + torch.rand(6, 6, generator=g, dtype=torch.float64) * 0.8).requires_grad_(True)
    pos = torch.eye(6, dtype=torch.bool)
    neg = ~pos
    scale = pos.double()
    loss = weighted_circle_loss(pos, neg, d, pos_scales=scale)
    loss.backward()
    assert (d.grad[pos] > 0).all() and (d.grad[neg] < 0).all()
    better = (d.detach() - 0.3 * pos + 0.3 * neg).clamp(0.1, 1.4)
    assert float(weighted_circle_loss(pos, neg, better, pos_scales=scale)) < float(loss.detach())


def test_coarse_loss_masks_are_overlap_thresholds_on_the_node_pairs():
    """Positives: overlap > 0.1 (weighted by sqrt(overlap)); negatives: pairs absent from the overlap list (overlap
    0); pairs with overlap in (0, 0.1] are neither. Checked against the circle loop on the feature distances."""
    g = torch.Generator().manual_seed(2)
    src = torch.nn.functional.normalize(torch.randn(6, 8, generator=g, dtype=torch.float64), dim=1)
    trg = torch.nn.functional.normalize(torch.randn(5, 8, generator=g, dtype=torch.float64), dim=1)
    idx = torch.tensor([[0, 0], [1, 1], [2, 1], [3, 4], [4, 2], [5, 3], [0, 3]])
    ov = torch.tensor([0.5, 0.3, 0.05, 0.9, 0.1, 0.2, 0.08], dtype=torch.float64)
    got = coarse_matching_loss(src, trg, idx, ov)
    d = torch.cdist(src, trg).numpy()  # = sqrt(2 - 2 cos) on unit vectors
    o = torch.zeros(6, 5, dtype=torch.float64)
    o[idx[:, 0], idx[:, 1]] = ov
    pos, neg = (o > 0.1).numpy(), (o == 0).numpy()
    assert pos.sum() == 4 and (~pos & ~neg).sum() == 3  # 0.05, 0.1 and 0.08 are neither
    want = _circle_loop(d, pos, neg, (o * torch.from_numpy(pos)).sqrt().numpy())
    assert float(got) == pytest.approx(want, rel=1e-9)


def test_fine_loss_is_minus_mean_log_plan_over_brute_force_labels():
    g = torch.Generator().manual_seed(3)
    b, k = 2, 4
    trg = torch.rand(b, k, 3, generator=g, dtype=torch.float64)
    rot = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))[0]
    rot = rot * torch.linalg.det(rot)
    tr = torch.randn(3, generator=g, dtype=torch.float64)
    # source points: the first two of each patch are exact partners of target points, the rest are far away
    src_world = torch.cat([trg[:, :2] + 0.01, trg[:, 2:] + 5.0], 1)
    src = apply_transform(src_world - tr, rot.t(), torch.zeros(3, dtype=torch.float64))  # R^T (x - t)
    src_m = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    trg_m = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 1]], dtype=torch.bool)
    log_plan = torch.randn(b, k + 1, k + 1, generator=g, dtype=torch.float64)
    terms = []
    for q in range(b):
        for i in range(k):
            if not src_m[q, i]:
                continue
            hits = [j for j in range(k) if trg_m[q, j]
                    and ((apply_transform(src[q, i], rot, tr) - trg[q, j]).pow(2).sum() < 0.05 ** 2)]
            terms += [log_plan[q, i, j] for j in hits] or [log_plan[q, i, k]]
        for j in range(k):
            if trg_m[q, j] and not any(src_m[q, i] and ((apply_transform(src[q, i], rot, tr) - trg[q, j]).pow(2).sum()
                                                         < 0.05 ** 2) for i in range(k)):
                terms.append(log_plan[q, k, j])
    want = -torch.stack(terms).mean()
    got = fine_matching_loss(log_plan, src, trg, src_m, trg_m, rot, tr, positive_radius=0.05)
    assert float(got) == pytest.approx(float(want), rel=1e-12)
