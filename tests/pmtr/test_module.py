"""PMTRModule: pose output, Hub round trip, multi-part pose composition, config refusals."""

import itertools

import pytest
import torch
from scipy.spatial.transform import Rotation

from zoo.errors import ZooError
from zoo.pmtr import PMTRModule
from zoo.pmtr.averaging import shonan_poses

TINY = dict(channels=[[8, 16], [16, 32, 32], [32, 64, 64]], output_dims=[32, 16], coarse_c=[8, 4, 2],
            coarse_f=[8, 16, 32], fine_c=[[8, 4, 2], [8, 4, 2]], fine_f=[[4, 8, 16], [2, 4, 8]], groups=4,
            voxel_size=0.05, kpconv_radius=0.2, neighbor_limits=[8, 8, 8], points_per_node=16,
            num_node_correspondences=8, sinkhorn_iterations=5)


def _sample(n=(120, 90)):
    g = torch.Generator().manual_seed(0)
    parts = [torch.rand(k, 3, generator=g) - 0.5 for k in n]
    rots = [torch.tensor(Rotation.random(random_state=i).as_matrix(), dtype=torch.float32) for i in range(len(n))]
    return {"parts": parts, "gt_rotations": rots, "gt_translations": [torch.zeros(3) for _ in n], "anchor": 0,
            "name": "t"}


def test_forward_gives_a_rotation_and_training_loss_has_gradients(tmp_path):
    torch.manual_seed(0)
    m = PMTRModule(**TINY)
    s = _sample()
    r, t = m(s["parts"][0], s["parts"][1])
    torch.testing.assert_close(r @ r.T, torch.eye(3), atol=1e-4, rtol=0)
    loss = m.training_step(s, 0)
    loss.backward()
    assert torch.isfinite(loss) and m.model.coarse_matcher.layers[0].proxy.grad is not None
    m.save_pretrained(tmp_path)
    m2 = PMTRModule.from_pretrained(tmp_path)
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)


def _exact_edges(n=4, w=1e-3):
    rs = [torch.eye(3, dtype=torch.float64)] + [torch.tensor(Rotation.random(random_state=i).as_matrix())
                                                for i in range(n - 1)]
    g = torch.Generator().manual_seed(0)
    ts = [torch.zeros(3, dtype=torch.float64)] + [torch.randn(3, generator=g, dtype=torch.float64) for _ in range(n - 1)]
    edges = {}
    for i, j in itertools.permutations(range(n), 2):  # exact pose i -> j from the anchor-relative poses
        r = rs[j] @ rs[i].T
        edges[(i, j)] = (r, ts[j] - r @ ts[i], w)
    return rs, ts, edges


def test_shonan_averaging_recovers_consistent_poses_and_outweighs_an_uncertain_bad_pair():
    pytest.importorskip("gtsam", reason="gtsam (pmtr extra) runs the official Shonan rotation averaging")
    rs, ts, edges = _exact_edges()
    r_pred, t_pred = shonan_poses(4, 0, edges)
    for a, b, c, d in zip(r_pred, rs, t_pred, ts):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
        torch.testing.assert_close(c, d, rtol=0, atol=1e-6)
    eye, zero = torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    edges[(0, 3)] = edges[(3, 0)] = (eye, zero, 1e3)  # a wrong pair with a million times the uncertainty
    r_pred, t_pred = shonan_poses(4, 0, edges)
    for a, b, c, d in zip(r_pred, rs, t_pred, ts):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-3)
        torch.testing.assert_close(c, d, rtol=0, atol=1e-3)


def test_multi_part_test_step_logs_part_accuracy():
    torch.manual_seed(0)
    m = PMTRModule(**TINY, shonan_max_level=10)  # random-init pair poses are inconsistent: fail fast, fall back
    logged = {}
    m.log_dict = lambda d, **kw: logged.update(d)
    m.test_step(_sample((80, 70, 60)), 0)
    assert {"test/crd", "test/cd", "test/rrmse", "test/trmse", "test/pa_cd", "test/pa_crd"} <= set(logged)
    assert 0 <= logged["test/pa_cd"] <= 1


def test_bad_configs_are_refused():
    with pytest.raises(ZooError, match="node feature width"):
        PMTRModule(**{**TINY, "coarse_f": [4, 16, 32]})
    with pytest.raises(ZooError, match="fine PMT 0"):
        PMTRModule(**{**TINY, "fine_f": [[2, 8, 16], [2, 4, 8]]})
    with pytest.raises(ZooError, match="lr"):
        PMTRModule(**{**TINY, "lr": 0.0})
    with pytest.raises(ZooError, match="shonan_max_level"):
        PMTRModule(**{**TINY, "shonan_max_level": 2})
    m = PMTRModule(**TINY)
    with pytest.raises(ZooError, match="at least 2"):
        m.test_step({"parts": [torch.rand(10, 3)], "name": "x"}, 0)


def test_without_fine_pmt_only_the_coarse_proxies_are_regularised():
    torch.manual_seed(0)
    m = PMTRModule(**{**TINY, "fine_pmt": False})
    assert len(m.model.proxies()) == 2  # the two coarse PMT layers
    s = _sample()
    loss = m.training_step(s, 0)
    assert torch.isfinite(loss)
