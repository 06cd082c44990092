"""Log-Sinkhorn with a dustbin (vs marginals, plain Sinkhorn, POT), superpoint matching, node partition, LGR."""

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from zoo.pmtr.geometry import apply_transform
from zoo.pmtr.matching import (local_global_registration, log_sinkhorn_dustbin, node_correspondences,
                               point_to_node_partition, superpoint_matching,
                               superpoint_targets)


def _augmented_marginals(row_mask, col_mask):
    nr, nc = row_mask.sum(), col_mask.sum()
    a = np.concatenate([row_mask.astype(float), [nc]])
    b = np.concatenate([col_mask.astype(float), [nr]])
    return a, b


def test_log_sinkhorn_meets_the_augmented_marginals_and_equals_plain_sinkhorn():
    torch.manual_seed(0)
    scores = torch.randn(2, 5, 4, dtype=torch.float64)
    rows = torch.tensor([[1, 1, 1, 0, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    cols = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]], dtype=torch.bool)
    alpha = torch.tensor(0.7, dtype=torch.float64)
    plan = log_sinkhorn_dustbin(scores, alpha, rows, cols, num_iterations=500).exp().numpy()
    for k in range(2):
        a, b = _augmented_marginals(rows[k].numpy(), cols[k].numpy())
        np.testing.assert_allclose(plan[k].sum(1), a, atol=1e-6)
        np.testing.assert_allclose(plan[k].sum(0), b, atol=1e-6)
        # plain Sinkhorn scaling on the augmented kernel, invalid rows/columns removed
        z = np.full((6, 5), 0.7)
        z[:5, :4] = scores[k].numpy()
        keep_r, keep_c = a > 0, b > 0
        kmat = np.exp(z[keep_r][:, keep_c])
        u, v = np.ones(keep_r.sum()), np.ones(keep_c.sum())
        for _ in range(500):
            u = a[keep_r] / (kmat @ v)
            v = b[keep_c] / (kmat.T @ u)
        ref = u[:, None] * kmat * v[None]
        np.testing.assert_allclose(plan[k][keep_r][:, keep_c], ref, atol=1e-8)
        assert np.all(plan[k][~keep_r] == 0) and np.all(plan[k][:, ~keep_c] == 0)
        ot = pytest.importorskip("ot", reason="POT is the optimal-transport peer")
        total = a.sum()
        ref_pot = ot.sinkhorn(a[keep_r] / total, b[keep_c] / total, -z[keep_r][:, keep_c], reg=1.0,
                              numItermax=2000, stopThr=1e-13) * total
        np.testing.assert_allclose(plan[k][keep_r][:, keep_c], ref_pot, atol=1e-8)


def test_superpoint_matching_is_dual_normalised_top_k():
    rng = np.random.default_rng(0)
    f1 = rng.normal(size=(6, 4)); f1 /= np.linalg.norm(f1, axis=1, keepdims=True)
    f2 = rng.normal(size=(5, 4)); f2 /= np.linalg.norm(f2, axis=1, keepdims=True)
    m1, m2 = np.array([1, 1, 0, 1, 1, 1], bool), np.ones(5, bool)
    si, ti, sc = superpoint_matching(torch.tensor(f1), torch.tensor(f2), torch.tensor(m1), torch.tensor(m2), 4)
    s = np.exp(-(2 - 2 * f1[m1] @ f2.T))
    s = s / s.sum(1, keepdims=True) * (s / s.sum(0, keepdims=True))
    order = np.argsort(-s.ravel())[:4]
    idx = np.flatnonzero(m1)
    assert list(si.numpy()) == list(idx[order // 5]) and list(ti.numpy()) == list(order % 5)
    np.testing.assert_allclose(sc.numpy(), s.ravel()[order], rtol=1e-12)


def test_superpoint_targets_keep_every_ground_truth_pair_when_none_passes_the_threshold():
    # transcription of the official SuperPointTargetGenerator: mask = overlap > 0.1; if the mask is empty it is
    # inverted (every pair kept); more than num_targets pairs: a random subset without replacement
    idx = torch.tensor([[0, 1], [2, 3], [4, 5]])
    low = torch.tensor([0.05, 0.1, 0.02], dtype=torch.float64)
    si, ti, ov = superpoint_targets(idx, low, 128, 0.1)
    assert si.tolist() == [0, 2, 4] and ti.tolist() == [1, 3, 5] and torch.equal(ov, low)
    mixed = torch.tensor([0.05, 0.3, 0.5], dtype=torch.float64)
    si, ti, ov = superpoint_targets(idx, mixed, 128, 0.1)
    assert si.tolist() == [2, 4] and ti.tolist() == [3, 5] and ov.tolist() == [0.3, 0.5]
    si, ti, ov = superpoint_targets(idx, mixed, 1, 0.1, generator=torch.Generator().manual_seed(0))
    assert len(si) == 1 and (int(si[0]), int(ti[0])) in {(2, 3), (4, 5)}


def test_point_to_node_partition_matches_brute_force():
    rng = np.random.default_rng(1)
    pts, nodes = rng.uniform(size=(40, 3)), rng.uniform(size=(6, 3))
    nodes[5] = 100.0  # a node that owns no point
    nm, ki, km = point_to_node_partition(torch.tensor(pts), torch.tensor(nodes), 5)
    owner = np.argmin(((pts[:, None] - nodes[None]) ** 2).sum(-1), axis=1)
    for j in range(6):
        members = np.flatnonzero(owner == j)
        assert bool(nm[j]) == (len(members) > 0)
        ref = members[np.argsort(((pts[members] - nodes[j]) ** 2).sum(-1))][:5]
        assert list(ki[j][km[j]].numpy()) == list(ref)
        assert (ki[j][~km[j]] == 40).all()


def _brute_force_overlaps(src_kp, trg_kp, src_km, trg_km, r, t, radius):
    """Every node pair, no pre-filter: mean of the two patches' fractions of points with a partner within radius."""
    s = src_kp @ r.T + t
    ov = np.zeros((len(src_kp), len(trg_kp)))
    for i in range(len(src_kp)):
        for j in range(len(trg_kp)):
            a, b = s[i][src_km[i]], trg_kp[j][trg_km[j]]
            if len(a) == 0 or len(b) == 0:
                continue
            close = np.linalg.norm(a[:, None] - b[None], axis=-1) < radius
            ov[i, j] = (close.any(1).mean() + close.any(0).mean()) / 2
    return ov


def test_node_correspondences_equal_brute_force_including_pairs_whose_spheres_do_not_intersect():
    # Two patches whose enclosing spheres (radius 0.1, centres 0.25 apart) do not intersect, but whose facing points
    # are 0.05 < 0.06 apart: overlap (1/2 + 1/2) / 2 = 0.5. A pre-filter without `+ pos_radius` made it a negative.
    src_kp = torch.tensor([[[0.0, 0, 0], [0.1, 0, 0]]], dtype=torch.float64)
    trg_kp = torch.tensor([[[0.25, 0, 0], [0.15, 0, 0]]], dtype=torch.float64)
    m = torch.ones(1, 2, dtype=torch.bool)
    eye, zero = torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    idx, ov = node_correspondences(src_kp[:, 0], trg_kp[:, 0], src_kp, trg_kp, eye, zero, 0.06, m[:, 0], m[:, 0], m, m)
    assert idx.tolist() == [[0, 0]] and ov.tolist() == [0.5]
    # random posed clouds: the returned pairs and overlaps are exactly the brute-force ones with overlap > 0
    rng = np.random.default_rng(3)
    pts = rng.uniform(size=(120, 3))
    r = torch.tensor(Rotation.random(random_state=2).as_matrix())
    t = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)
    src = torch.tensor(pts[:80])
    trg = apply_transform(torch.tensor(pts[50:]) + torch.tensor(rng.normal(scale=0.01, size=(70, 3))), r, t)
    src_nodes, trg_nodes = src[::8], trg[::8]
    snm, ski, skm = point_to_node_partition(src, src_nodes, 6)
    tnm, tki, tkm = point_to_node_partition(trg, trg_nodes, 6)
    skp = torch.cat([src, torch.zeros_like(src[:1])])[ski]
    tkp = torch.cat([trg, torch.zeros_like(trg[:1])])[tki]
    idx, ov = node_correspondences(src_nodes, trg_nodes, skp, tkp, r, t, 0.08, snm, tnm, skm, tkm)
    ref = _brute_force_overlaps(skp.numpy(), tkp.numpy(), skm.numpy(), tkm.numpy(), r.numpy(), t.numpy(), 0.08)
    assert (ref > 0).sum() > 5
    got = np.zeros_like(ref)
    got[idx[:, 0].numpy(), idx[:, 1].numpy()] = ov.numpy()
    assert len(idx) == (ref > 0).sum()
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_lgr_recovers_the_pose_from_exact_patch_correspondences():
    torch.manual_seed(0)
    r = torch.tensor(Rotation.random(random_state=5).as_matrix())
    t = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    src = torch.rand(4, 8, 3, dtype=torch.float64)
    trg = apply_transform(src, r, t)
    perm = torch.randperm(8)
    trg = trg[:, perm]
    scores = torch.full((4, 8, 8), 0.01, dtype=torch.float64)
    scores[:, torch.arange(8), torch.argsort(perm)] = 0.9  # the true partner of source i sits at argsort(perm)[i]
    scores[0, 0] = 0.5  # one wrong but confident match in patch 0: outvoted by the inlier count
    masks = torch.ones(4, 8, dtype=torch.bool)
    rot, tr, n = local_global_registration(src, trg, masks, masks, scores)
    assert n >= 32
    torch.testing.assert_close(rot, r, rtol=0, atol=1e-9)
    # GeoTransformer's Procrustes divides the weights by (sum + 1e-5): the centroids, hence t, shift by ~1e-7
    torch.testing.assert_close(tr, t, rtol=0, atol=1e-6)
