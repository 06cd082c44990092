"""Breaking Bad metrics: zero at the ground truth, closed forms, brute-force and point-cloud-utils chamfer."""

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from zoo.pmtr.geometry import apply_transform
from zoo.pmtr.metrics import (chamfer_distance, correspondence_distance, multipart_metrics, pairwise_metrics,
                              rotation_rmse, translation_rmse)


def _parts(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(50, 3, generator=g, dtype=torch.float64), torch.rand(40, 3, generator=g, dtype=torch.float64) * 2


def test_ground_truth_pose_scores_zero_everywhere():
    src, trg = _parts()
    r, t = torch.tensor(Rotation.random(random_state=0).as_matrix()), torch.randn(3, dtype=torch.float64)
    m = pairwise_metrics(src, trg, r, t, r, t)
    assert all(float(v) == pytest.approx(0, abs=1e-12) for v in m.values()), m
    parts = [src, trg, src + 1]
    rs = [torch.eye(3, dtype=torch.float64), r, r.T]
    ts = [torch.zeros(3, dtype=torch.float64), t, -t]
    mm = multipart_metrics(parts, rs, ts, rs, ts)
    assert float(mm["pa_cd"]) == 1 and float(mm["pa_crd"]) == 1
    assert all(float(mm[k]) == pytest.approx(0, abs=1e-12) for k in ("crd", "cd", "rrmse", "trmse"))


def test_ninety_degrees_about_z_is_51_96_degrees_rmse():
    rz = torch.tensor(Rotation.from_euler("z", 90, degrees=True).as_matrix())
    assert float(rotation_rmse(rz, torch.eye(3, dtype=torch.float64))) == pytest.approx(90 / np.sqrt(3), rel=1e-12)
    assert 90 / np.sqrt(3) == pytest.approx(51.96, abs=0.005)
    # wrapping: 350 deg vs 10 deg about x is a 20 deg difference on one axis
    a = torch.tensor(Rotation.from_euler("x", 170, degrees=True).as_matrix())
    b = torch.tensor(Rotation.from_euler("x", -170, degrees=True).as_matrix())
    assert float(rotation_rmse(a, b)) == pytest.approx(20 / np.sqrt(3), rel=1e-9)


def test_chamfer_equals_brute_force_and_point_cloud_utils():
    a, b = _parts(1)
    brute = (np.mean([min(float(((x - y) ** 2).sum()) for y in b) for x in a])
             + np.mean([min(float(((x - y) ** 2).sum()) for x in a) for y in b])) * 1000
    assert float(chamfer_distance(a, b)) == pytest.approx(brute, rel=1e-12)
    pcu = pytest.importorskip("point_cloud_utils", reason="point-cloud-utils is the chamfer peer")
    d_ab, _ = pcu.k_nearest_neighbors(a.numpy(), b.numpy(), k=1)
    d_ba, _ = pcu.k_nearest_neighbors(b.numpy(), a.numpy(), k=1)
    assert float(chamfer_distance(a, b)) == pytest.approx((np.mean(d_ab ** 2) + np.mean(d_ba ** 2)) * 1000, rel=1e-9)
    # pcu's own chamfer is of plain (not squared) distances: the same nearest neighbours
    assert pcu.chamfer_distance(a.numpy(), b.numpy()) == pytest.approx(np.mean(d_ab) + np.mean(d_ba), rel=1e-9)


def test_crd_and_translation_rmse_closed_forms():
    src, trg = _parts(2)  # trg has the larger box: the source moves
    r, t = torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    shift = torch.tensor([0.03, 0.0, 0.04], dtype=torch.float64)
    m = pairwise_metrics(src, trg, r, t + shift, r, t)
    # only the 50 source points move, each by |shift| = 0.05: CRD = 0.05 * 50/90 * 100
    assert float(m["crd"]) == pytest.approx(0.05 * 50 / 90 * 100, rel=1e-12)
    assert float(m["trmse"]) == pytest.approx(np.sqrt((0.03 ** 2 + 0.04 ** 2) / 3) * 100, rel=1e-12)
    assert float(correspondence_distance(src, src + shift)) == pytest.approx(5.0, rel=1e-12)
    assert float(translation_rmse(shift, 0 * shift)) == pytest.approx(float(m["trmse"]), rel=1e-12)


def test_the_smaller_part_moves_in_the_assembly():
    from zoo.pmtr.metrics import pairwise_assembly

    big, small = torch.rand(30, 3, dtype=torch.float64) * 3, torch.rand(20, 3, dtype=torch.float64)
    r, t = torch.tensor(Rotation.random(random_state=3).as_matrix()), torch.randn(3, dtype=torch.float64)
    a = pairwise_assembly(small, big, r, t)  # source smaller: source -> target frame
    torch.testing.assert_close(a[:20], apply_transform(small, r, t))
    b = pairwise_assembly(big, small, r, t)  # target smaller: target -> source frame by the inverse
    torch.testing.assert_close(apply_transform(b[30:], r, t), small)
