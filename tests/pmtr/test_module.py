"""PMTRModule: pose output, Hub round trip, multi-part pose composition, config refusals."""

import itertools

import pytest
import torch
from scipy.spatial.transform import Rotation

from zoo.errors import ZooError
from zoo.pmtr import PMTRModule
from zoo.pmtr.averaging import shonan_poses
from zoo.pmtr.geometry import apply_transform

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
    # each was a torch traceback (GroupNorm's divisibility, an empty max() reduction) or trained on nothing
    with pytest.raises(ZooError, match="groups=3 must be positive and divide every backbone width"):
        PMTRModule(**{**TINY, "groups": 3})
    with pytest.raises(ZooError, match="points_per_node and num_node_correspondences must be >= 1, got 0, 8"):
        PMTRModule(**{**TINY, "points_per_node": 0})
    with pytest.raises(ZooError, match="points_per_node and num_node_correspondences must be >= 1, got 16, 0"):
        PMTRModule(**{**TINY, "num_node_correspondences": 0})
    with pytest.raises(ZooError, match=r"one positive cap per KPConv level \(3\), got \[8, 0, 8\]"):
        PMTRModule(**{**TINY, "neighbor_limits": [8, 0, 8]})
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


def test_match_quality_counts_inliers_and_overlapping_node_pairs_as_brute_force():
    from zoo.pmtr.model import PMTR

    torch.manual_seed(1)
    m = PMTRModule(**TINY).model
    r = torch.tensor(Rotation.random(random_state=3).as_matrix(), dtype=torch.float32)
    t = torch.tensor([0.2, -0.1, 0.3])
    src = torch.rand(10, 3)
    trg = apply_transform(src, r, t)
    trg[7:] += torch.tensor([0.0, 0.0, 0.15])  # 3 of 10 beyond the 0.1 acceptance radius
    trg[5] += torch.tensor([0.05, 0.0, 0.0])  # within it
    q = m._point_inliers(src, trg, r, t)
    assert float(q["num_corr"]) == 10 and float(q["inlier_ratio"]) == pytest.approx(0.7)
    gt = torch.tensor([[0, 1], [2, 0], [2, 3], [4, 4]])
    si, ti = torch.tensor([0, 2, 1, 4, 3]), torch.tensor([1, 3, 1, 0, 3])  # (0,1), (2,3) overlap; 3 others do not
    assert float(PMTR._node_precision(si, ti, gt, n_trg=5)) == pytest.approx(0.4)


def test_test_step_logs_the_identity_and_ground_truth_node_diagnostics():
    torch.manual_seed(0)
    m = PMTRModule(**TINY)
    logged = {}
    m.log_dict = lambda d, **kw: logged.update(d)
    m.test_step(_sample(), 0)
    for k in ("test/crd", "test/identity_crd", "test/gtnodes_crd", "test/inlier_ratio", "test/gtnodes_inlier_ratio",
              "test/node_precision", "test/num_corr"):
        assert k in logged, k
    assert 0 <= logged["test/inlier_ratio"] <= 1 and 0 <= logged["test/node_precision"] <= 1


def test_warmup_ramps_the_learning_rate_linearly_and_defaults_to_the_official_constant():
    opt = PMTRModule(**TINY).configure_optimizers()
    assert isinstance(opt, torch.optim.Adam) and opt.param_groups[0]["lr"] == 1e-3
    cfg = PMTRModule(**TINY, warmup_steps=4).configure_optimizers()
    opt, sched = cfg["optimizer"], cfg["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])  # HF's ramp: step 0 at lr 0
    with pytest.raises(ZooError, match="warmup_steps"):
        PMTRModule(**TINY, warmup_steps=-1)


def test_gt_node_diagnostic_reuses_the_features_and_equals_a_separate_ground_truth_node_pass():
    torch.manual_seed(0)
    model = PMTRModule(**TINY).model.eval()
    src = _sample()["parts"][0]
    r, t = torch.tensor(Rotation.random(random_state=3).as_matrix(), dtype=torch.float32), torch.tensor([0.1, 0, 0])
    trg = apply_transform(src, r, t)[:80]  # overlapping parts, so the ground-truth node pairs differ from the learnt
    calls = []
    model.backbone.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        torch.manual_seed(5)
        both = model(src, trg, r, t, gt_nodes_diagnostic=True)
        torch.manual_seed(5)
        learnt, oracle = model(src, trg, r, t), model(src, trg, r, t, use_gt_nodes=True)
    assert len(calls) == 3  # one backbone pass for both poses, then one per separate call
    for a, b in ((both, learnt), (both.gt_nodes, oracle)):
        torch.testing.assert_close(a.rotation, b.rotation, rtol=0, atol=0)
        torch.testing.assert_close(a.translation, b.translation, rtol=0, atol=0)
        assert a.num_correspondences == b.num_correspondences
    assert float(both.gt_nodes.match_quality["inlier_ratio"]) == float(oracle.match_quality["inlier_ratio"])
    assert not torch.equal(learnt.rotation, oracle.rotation)
    assert model(src, trg).gt_nodes is None
