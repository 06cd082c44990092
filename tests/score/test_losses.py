"""Oracle tests for the SCoRe objectives: peer library, closed forms, brute force, independent loops."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from zoo.errors import ZooError
from zoo.score import losses as L
import score_reference as R


def _batch(B=12, views=2, d=16, classes=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(B, views, d, generator=g, dtype=dtype)
    labels = torch.arange(B) % classes  # every class present
    labels = labels[torch.randperm(B, generator=g)]
    return feats, labels


def test_supcon_equals_pytorch_metric_learning_float64():
    from pytorch_metric_learning.losses import SupConLoss

    feats, labels = _batch(B=24, classes=5)
    z, y = L.flatten_views(feats, labels)
    peer = SupConLoss(temperature=0.07)(F.normalize(z, dim=1), y)
    ours = L.score_loss(feats, labels, "supcon", temperature=0.07)
    torch.testing.assert_close(ours, peer, rtol=1e-10, atol=1e-10)


def test_supcon_equals_loop_over_class_sets():
    feats, labels = _batch(B=10, classes=3, seed=1)
    z, y = L.flatten_views(feats, labels)
    zn = F.normalize(z, dim=1)
    ref = R.supcon_loop(zn.numpy(), y.tolist(), 0.07)
    ours = L.score_loss(z, y, "supcon", temperature=0.07)
    assert abs(ours.item() - ref) < 1e-8


def test_npairs_equals_pml_ntxent_float64():
    from pytorch_metric_learning.losses import NTXentLoss

    feats, labels = _batch(B=20, classes=4, seed=2)
    z, y = L.flatten_views(feats, labels)
    peer = NTXentLoss(temperature=0.1)(F.normalize(z, dim=1), y)
    ours = L.score_loss(z, y, "npairs", temperature=0.1)
    torch.testing.assert_close(ours, peer, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("lamda", [0.25, 0.5, 1.0, 2.0])
def test_graph_cut_total_correlation_is_lambda_times_cut(lamda):
    feats, labels = _batch(B=16, classes=4, seed=3)
    z, y = L.flatten_views(feats, labels)
    zn = F.normalize(z, dim=1)
    S = zn @ zn.T
    cut = S[y[:, None] != y[None, :]].sum()
    ours = L.score_loss(z, y, "gc_cf", lamda=lamda) * z.shape[0]
    torch.testing.assert_close(ours, lamda * cut, rtol=1e-10, atol=1e-10)


def test_facility_location_cf_and_sf_differ_by_constant():
    feats, labels = _batch(B=16, classes=4, seed=4)
    z, y = L.flatten_views(feats, labels)
    z = z.clone().requires_grad_()
    sf = L.score_loss(z, y, "fl_sf")
    cf = L.score_loss(z, y, "fl_cf")
    # S_ii = 1 is each row's maximum, so f(V) = |V| and L_Cf = L_Sf - |V| / |V| = L_Sf - 1
    torch.testing.assert_close(sf - cf, torch.tensor(1.0, dtype=sf.dtype), rtol=0, atol=1e-12)
    g_sf, = torch.autograd.grad(sf, z)
    g_cf, = torch.autograd.grad(cf, z)
    torch.testing.assert_close(g_sf, g_cf)


@pytest.mark.parametrize("objective,fn,kw", [
    ("fl", R.fl_value, {}),
    ("gc", R.gc_value, {"lamda": 0.7}),
    ("logdet", R.logdet_value, {"delta": 0.5}),
])
def test_losses_match_independent_set_function_loops(objective, fn, kw):
    feats, labels = _batch(B=9, classes=3, seed=5)
    z, y = L.flatten_views(feats, labels)
    zn = F.normalize(z, dim=1).numpy()
    S = zn @ zn.T
    n = S.shape[0]
    sf = R.total_information(fn, S, y.tolist(), **kw) / n
    cf = R.total_correlation(fn, S, y.tolist(), **kw) / n
    ours_sf = L.score_loss(z, y, f"{objective}_sf", **kw).item()
    ours_cf = L.score_loss(z, y, f"{objective}_cf", **kw).item()
    assert abs(ours_sf - sf) < 1e-9 and abs(ours_cf - cf) < 1e-9


def test_logdet_both_gram_spaces_agree():
    # class sets larger than d use the d x d Gram (Sylvester); smaller ones the n_k x n_k Gram
    g = torch.Generator().manual_seed(6)
    z = torch.randn(40, 4, generator=g, dtype=torch.float64)
    y = torch.arange(40) % 2
    S = F.normalize(z, dim=1) @ F.normalize(z, dim=1).T
    ref = R.total_correlation(R.logdet_value, S.numpy(), y.tolist(), delta=0.5) / 40
    assert abs(L.score_loss(z, y, "logdet_cf", delta=0.5).item() - ref) < 1e-9


def test_batched_set_functions_match_loops():
    g = torch.Generator().manual_seed(7)
    X = torch.rand(7, 3, generator=g, dtype=torch.float64)
    S = X @ X.T
    sets = torch.tensor(list(itertools.product([0, 1], repeat=7)), dtype=torch.float64)
    fl = L.facility_location(S, sets)
    gc = L.graph_cut(S, sets, 0.4)
    ld = L.log_determinant(S, sets, 0.3)
    for row, a, b, c in zip(sets, fl, gc, ld):
        A = [i for i in range(7) if row[i]]
        assert abs(a.item() - R.fl_value(S.numpy(), A)) < 1e-10
        assert abs(b.item() - R.gc_value(S.numpy(), A, 0.4)) < 1e-10
        assert abs(c.item() - R.logdet_value(S.numpy(), A, 0.3)) < 1e-10


def _diminishing_returns_violations(f_all, n):
    """max over A subset B, v not in B of f(B+v) - f(B) - (f(A+v) - f(A)); <= 0 for submodular f."""
    worst = -np.inf
    for b in range(1 << n):
        for a in range(1 << n):
            if a & b != a:
                continue
            for v in range(n):
                if b >> v & 1:
                    continue
                gain_b = f_all[b | 1 << v] - f_all[b]
                gain_a = f_all[a | 1 << v] - f_all[a]
                worst = max(worst, gain_b - gain_a)
    return worst


def _all_sets(n):
    return torch.tensor([[(m >> i) & 1 for i in range(n)] for m in range(1 << n)], dtype=torch.float64)


@pytest.mark.parametrize("name", ["fl", "gc_0.25", "gc_0.5", "logdet"])
def test_brute_force_diminishing_returns(name):
    n = 7
    g = torch.Generator().manual_seed(8)
    X = torch.randn(n, 3, generator=g, dtype=torch.float64)
    sets = _all_sets(n)
    if name == "logdet":
        f = L.log_determinant(X @ X.T, sets, 0.5)  # S PSD
    else:
        S = torch.rand(n, n, generator=g, dtype=torch.float64)
        S = (S + S.T) / 2  # S >= 0, symmetric
        f = L.facility_location(S, sets) if name == "fl" else L.graph_cut(S, sets, float(name[3:]))
    assert _diminishing_returns_violations(f.numpy(), n) <= 1e-10


def test_brute_force_detects_a_supermodular_function():
    # the checker itself must be able to fail: GC with lamda < 0 is supermodular
    n = 5
    g = torch.Generator().manual_seed(9)
    S = torch.rand(n, n, generator=g, dtype=torch.float64)
    S = (S + S.T) / 2
    assert _diminishing_returns_violations(L.graph_cut(S, _all_sets(n), -0.5).numpy(), n) > 1e-3


@pytest.mark.parametrize("objective", L.OBJECTIVES)
def test_no_nan_on_negative_cosines_and_singular_kernels(objective):
    # antipodal pairs (cosine -1) and duplicated rows (rank-1 kernel, singular Gram)
    v = torch.tensor([[1.0, 0.0, 0.0]])
    z = torch.cat([v, v, -v, -v, v, -v]).requires_grad_()
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    loss = L.score_loss(z, y, objective)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z.grad).all()


@pytest.mark.parametrize("objective", L.OBJECTIVES)
def test_every_objective_separates_classes_under_gradient_descent(objective):
    torch.manual_seed(0)
    z = torch.randn(24, 8, requires_grad=True)
    y = torch.arange(24) % 3
    opt = torch.optim.Adam([z], lr=0.05)  # scale-free, so one setting fits every objective
    for _ in range(150):
        opt.zero_grad()
        L.score_loss(z, y, objective).backward()
        opt.step()
    zn = F.normalize(z.detach(), dim=1)
    S = zn @ zn.T
    same = y[:, None] == y[None, :]
    assert S[same].mean() > S[~same].mean() + 0.2, objective


def test_single_view_class_is_an_error():
    z = torch.randn(5, 4)
    with pytest.raises(ZooError, match="single view"):
        L.score_loss(z, torch.tensor([0, 0, 1, 1, 2]), "fl_cf")
    with pytest.raises(ZooError, match="single view"):
        L.score_loss(torch.randn(3, 1, 4), torch.tensor([0, 1, 2]), "supcon")


def test_unknown_objective_is_an_error():
    with pytest.raises(ZooError, match="unknown SCoRe objective 'flx'"):
        L.score_loss(torch.randn(4, 3), torch.tensor([0, 0, 1, 1]), "flx")
    with pytest.raises(ZooError, match="unknown SCoRe objective"):
        L.SCoReLoss("graphcut")


def test_logdet_needs_positive_delta():
    with pytest.raises(ZooError, match="delta"):
        L.score_loss(torch.randn(4, 3), torch.tensor([0, 0, 1, 1]), "logdet_cf", delta=0.0)


@pytest.mark.parametrize("objective", ["fl_sf", "fl_cf", "gc_sf", "gc_cf", "logdet_sf", "logdet_cf"])
def test_fast_partition_gradients_match_the_generic_set_functions(objective):
    # the training losses use segment-max / class sums / padded Grams; the generic set functions use
    # explicit masks on S: values and gradients must agree
    feats, labels = _batch(B=10, classes=3, seed=10)
    z, y = L.flatten_views(feats, labels)
    z = z.clone().requires_grad_()
    fast = L.score_loss(z, y, objective, lamda=0.7, delta=0.5)
    g_fast, = torch.autograd.grad(fast, z)
    z2 = z.detach().clone().requires_grad_()
    zn = F.normalize(z2, dim=1)
    S = zn @ zn.T
    sets = torch.stack([(y == c).double() for c in y.unique()])
    ground = torch.ones(1, len(y), dtype=torch.float64)
    fn = {"fl": lambda s: L.facility_location(S, s), "gc": lambda s: L.graph_cut(S, s, 0.7),
          "logdet": lambda s: L.log_determinant(S, s, 0.5)}[objective.split("_")[0]]
    slow = fn(sets).sum() - (fn(ground).sum() if objective.endswith("cf") else 0)
    slow = slow / len(y)
    g_slow, = torch.autograd.grad(slow, z2)
    torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(g_fast, g_slow)


def test_half_precision_features_and_autocast_give_the_fp32_loss():
    feats, labels = _batch(B=12, classes=3, seed=11, dtype=torch.float32)
    ref = L.score_loss(feats, labels, "logdet_cf")
    half = L.score_loss(feats.bfloat16(), labels, "logdet_cf")
    assert half.dtype == torch.float32 and abs(half.item() - ref.item()) < 0.05
    ref_supcon = L.score_loss(feats, labels, "supcon")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(L.score_loss(feats, labels, "supcon"), ref_supcon)
        assert L.score_loss(feats, labels, "fl_cf").dtype == torch.float32
