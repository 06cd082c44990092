"""Grid subsampling, radius neighbours, the pyramid, weighted Kabsch and relative poses against brute force / roma."""

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

from zoo.pmtr.geometry import (apply_transform, build_pyramid, grid_subsample, radius_neighbors, relative_pose,
                               weighted_kabsch)


def test_grid_subsample_is_the_voxel_barycentres():
    rng = np.random.default_rng(0)
    pts = rng.uniform(-1, 1, size=(300, 3))
    voxels = {}
    for p in pts:
        voxels.setdefault(tuple(np.floor(p / 0.4).astype(int)), []).append(p)
    ref = sorted(tuple(np.mean(v, axis=0)) for v in voxels.values())
    got = sorted(tuple(p) for p in grid_subsample(torch.tensor(pts), 0.4).numpy())
    np.testing.assert_allclose(np.array(got), np.array(ref), rtol=0, atol=1e-12)


def test_radius_neighbors_equal_a_kd_tree_sorted_by_distance():
    rng = np.random.default_rng(1)
    q, s = rng.uniform(size=(40, 3)), rng.uniform(size=(60, 3))
    tree = cKDTree(s)
    # capped at 5; uncapped (width = the largest count) in chunks of 7 queries, as the coarse PMT block asks
    for limit, chunk in ((5, 1024), (0, 7)):
        got = radius_neighbors(torch.tensor(q), torch.tensor(s), 0.3, limit=limit, chunk=chunk).numpy()
        full = [sorted(tree.query_ball_point(q[i], 0.3), key=lambda j: np.linalg.norm(q[i] - s[j])) for i in range(40)]
        assert got.shape[1] == (5 if limit else max(len(f) for f in full))
        for i in range(40):
            ids = full[i][:5] if limit else full[i]
            assert list(got[i][got[i] < 60]) == ids
            assert (got[i][len(ids):] == 60).all()


def test_pyramid_levels_and_neighbours_stay_inside_each_cloud():
    rng = np.random.default_rng(2)
    a, b = torch.tensor(rng.uniform(size=(120, 3))), torch.tensor(rng.uniform(size=(90, 3)) + 5)
    pyr = build_pyramid(a, b, 3, 0.05, 0.2, [10, 10, 10])
    assert pyr.lengths[0] == (120, 90)
    torch.testing.assert_close(pyr.points[1][: pyr.lengths[1][0]], grid_subsample(a, 0.1))  # official: 2x first grid
    torch.testing.assert_close(pyr.points[2][pyr.lengths[2][0]:], grid_subsample(grid_subsample(b, 0.1), 0.2))
    for lvl, nb in enumerate(pyr.neighbors):
        n_src, total = pyr.lengths[lvl][0], sum(pyr.lengths[lvl])
        src_rows, trg_rows = nb[:n_src], nb[n_src:]
        assert ((src_rows < n_src) | (src_rows == total)).all()
        assert ((trg_rows >= n_src)).all()
        assert (nb[:, 0] == torch.arange(total)).all()  # nearest is itself


def _pose(seed):
    return torch.tensor(Rotation.random(random_state=seed).as_matrix()), torch.randn(3, dtype=torch.float64)


def test_weighted_kabsch_recovers_an_exact_pose_and_agrees_with_roma():
    roma = pytest.importorskip("roma", reason="roma is the peer for rigid registration")
    torch.manual_seed(0)
    r, t = _pose(0)
    x = torch.randn(4, 30, 3, dtype=torch.float64)
    w = torch.rand(4, 30, dtype=torch.float64)
    rot, tr = weighted_kabsch(x, apply_transform(x, r, t), w, eps=0)
    torch.testing.assert_close(rot, r.expand(4, 3, 3), rtol=0, atol=1e-10)
    torch.testing.assert_close(tr, t.expand(4, 3), rtol=0, atol=1e-10)
    y = apply_transform(x, r, t) + 0.1 * torch.randn_like(x)  # noisy: the weighted least-squares optimum
    rot, tr = weighted_kabsch(x, y, w, eps=0)
    r_ref, t_ref = roma.rigid_points_registration(x, y, weights=w)
    torch.testing.assert_close(rot, r_ref, rtol=0, atol=1e-9)
    torch.testing.assert_close(tr, t_ref, rtol=0, atol=1e-9)
    assert torch.allclose(torch.det(rot), torch.ones(4, dtype=torch.float64))


def test_relative_pose_maps_posed_source_onto_the_target_frame():
    p = torch.randn(10, 3, dtype=torch.float64)  # original (assembled) coordinates of some points
    (ri, _), (rj, _) = _pose(1), _pose(2)
    ci, cj = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    xi, xj = (p - ci) @ ri.T, (p - cj) @ rj.T  # the same points seen in the posed frames of parts i and j
    r, t = relative_pose(ri, ci, rj, cj)
    torch.testing.assert_close(apply_transform(xi, r, t), xj, rtol=0, atol=1e-12)
