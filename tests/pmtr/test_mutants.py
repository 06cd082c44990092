"""Oracles added by mutation testing: Procrustes returns a proper rotation when the best orthogonal fit is a
reflection (roma as the peer), the circle loss's weights are stop-gradient constants (Sun et al. 2020), fine
ground-truth matches are within 0.05 (not within sqrt(0.05)), and LGR keeps the hypothesis with the most inliers."""

import math

import pytest
import torch
from scipy.spatial.transform import Rotation

from zoo.pmtr.geometry import apply_transform, weighted_kabsch
from zoo.pmtr.loss import fine_matching_loss, weighted_circle_loss
from zoo.pmtr.matching import local_global_registration


def test_kabsch_of_a_mirrored_cloud_is_a_proper_rotation_equal_to_romas():
    roma = pytest.importorskip("roma", reason="roma is the peer for rigid registration")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64) * torch.tensor([3.0, 1.0, 0.2], dtype=torch.float64)
    y = x * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)  # a mirror image: the best orthogonal map has det -1
    w = torch.rand(40, generator=g, dtype=torch.float64)
    rot, tr = weighted_kabsch(x, y, w, eps=0)
    r_ref, t_ref = roma.rigid_points_registration(x, y, weights=w)
    torch.testing.assert_close(torch.det(rot), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(rot, r_ref, rtol=0, atol=1e-9)
    torch.testing.assert_close(tr, t_ref, rtol=0, atol=1e-9)


def test_circle_loss_gradient_treats_the_weights_as_constants():
    """Circle loss: (1/γ) log(1 + Σ_p e^{γ α_p (d_p - m_p)} Σ_n e^{γ α_n (m_n - d_n)}) with α_p = [d_p - O_p]_+ s_p and
    α_n = [O_n - d_n]_+ held constant in the gradient. The autograd gradient equals that of the anchor formula
    written with α computed from the detached distances."""
    g = torch.Generator().manual_seed(2)
    d = (torch.rand(6, 5, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    ov = torch.rand(6, 5, generator=g, dtype=torch.float64)
    ov[ov < 0.5] = 0
    pos, neg = ov > 0.1, ov == 0
    scale = torch.sqrt(ov * pos)
    (got,) = torch.autograd.grad(weighted_circle_loss(pos, neg, d, pos_scales=scale), d)

    gamma, m_p, m_n, o_p, o_n = 24.0, 0.1, 1.4, 0.1, 1.4
    dc = d.detach()
    a_p = (dc - o_p).clamp_min(0) * scale * pos
    a_n = (o_n - dc).clamp_min(0) * neg
    lp = gamma * a_p * (d - m_p)  # entries outside a mask have α = 0: e^0 = 1, as the official sums
    ln = gamma * a_n * (m_n - d)

    def anchors(dim):
        keep = pos.any(dim) & neg.any(dim)
        val = torch.log1p(lp.exp().sum(dim) * ln.exp().sum(dim)) / gamma
        return val[keep].mean()

    (want,) = torch.autograd.grad((anchors(1) + anchors(0)) / 2, d)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_fine_matches_are_points_within_the_positive_radius():
    """r = 0.05: a pair 0.03 apart is a ground-truth match, a pair 0.1 apart is not (0.1² = 0.01 < 0.05, so a
    squared distance compared with r instead of r² would call it one)."""
    src = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]], dtype=torch.float64)
    trg = torch.tensor([[[0.03, 0.0, 0.0], [1.1, 0.0, 0.0]]], dtype=torch.float64)
    masks = torch.ones(1, 2, dtype=torch.bool)
    log_plan = torch.log_softmax(torch.randn(1, 3, 3, generator=torch.Generator().manual_seed(0),
                                             dtype=torch.float64).flatten(1), 1).view(1, 3, 3)
    loss = fine_matching_loss(log_plan, src, trg, masks, masks, torch.eye(3, dtype=torch.float64),
                              torch.zeros(3, dtype=torch.float64))
    # labels: (0, 0) matched; source 1 and target 1 unmatched: their dustbin entries
    want = -(log_plan[0, 0, 0] + log_plan[0, 1, 2] + log_plan[0, 2, 1]) / 3
    torch.testing.assert_close(loss, want)


def test_lgr_keeps_the_hypothesis_with_the_most_inliers():
    """Three patches agree on the true pose, one patch's correspondences follow another pose: the per-patch
    hypothesis with the most inliers over all correspondences is the true one, and the refinements keep it."""
    torch.manual_seed(0)
    r = torch.tensor(Rotation.random(random_state=1).as_matrix())
    t = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    r_bad = torch.tensor(Rotation.random(random_state=2).as_matrix())
    t_bad = torch.tensor([-1.0, 2.0, 0.5], dtype=torch.float64)
    src = torch.rand(4, 8, 3, dtype=torch.float64)
    trg = torch.cat([apply_transform(src[:3], r, t), apply_transform(src[3:], r_bad, t_bad)])
    scores = torch.full((4, 8, 8), 0.01, dtype=torch.float64)
    scores[:, torch.arange(8), torch.arange(8)] = 0.9
    masks = torch.ones(4, 8, dtype=torch.bool)
    rot, tr, n = local_global_registration(src, trg, masks, masks, scores)
    assert n == 32
    torch.testing.assert_close(rot, r, rtol=0, atol=1e-9)
    torch.testing.assert_close(tr, t, rtol=0, atol=1e-6)
    assert math.isclose(float(torch.det(rot)), 1.0, abs_tol=1e-12)
