"""The ByMI procedure: against outputs of the official R code (tests/bymi/data/r_reference.json, written by
make_r_reference.py), against its own definition in loops, and its one-line errors."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.bymi import bymi, faba, krum, removal_count, split_scores
from zoo.bymi.identify import scaled_rows
from zoo.bymi.robust import filtering_mean, trimmed_mean_1d
from zoo.bymi.threshold import bh_reject, knockoff_threshold
from zoo.errors import ZooError

REFERENCE = json.loads((Path(__file__).parent / "data" / "r_reference.json").read_text())
CASES = REFERENCE["cases"]


def _inputs(case):
    t = {k: torch.tensor(case["inputs"][k], dtype=torch.float64) for k in ("g1", "g2", "sigma0")}
    return t["g1"], t["g2"], t["sigma0"], case["inputs"]["n_half"]


def _rows(mask, offset=2):
    """R's 1-based machine ids of flagged workers (worker j is row j of the machines, machine j + 1 in R)."""
    return [int(i) + offset for i in mask.nonzero().flatten()]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_the_official_r_code(case):
    c = CASES[case]
    g1, g2, S0, nh = _inputs(c)
    r = c["r"]
    f = bymi(g1, g2, alpha=0.1, estimator="filter", eps=0.1, n_half=nh, sigma0=S0)
    # exact eigenvectors vs R's power iteration: equal to the iteration's tolerance
    np.testing.assert_allclose(f.mu_hat.numpy(), r["mu_filter_tight"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(f.mu_hat.numpy(), r["mu_filter"], rtol=0, atol=1e-5)
    # the filter's final weights too (R's filtering_refine returns them second), on the rows bymi filters
    _, w = filtering_mean(scaled_rows(g1, nh)[0], 1.2 * 0.1, S0)
    np.testing.assert_allclose(w.numpy(), r["w_filter_tight"], rtol=0, atol=1e-8)
    assert _rows(f.flagged) == r["flag_filter"]
    geo = bymi(g1, g2, alpha=0.1, estimator="geom", eps=0.1, n_half=nh)
    np.testing.assert_allclose(geo.mu_hat.numpy(), r["mu_geom"], rtol=0, atol=1e-10)
    assert _rows(geo.flagged) == r["flag_geom"]
    plus = bymi(g1, g2, alpha=0.1, estimator="filter_plus", eps=0.1, n_half=nh)
    assert abs(plus.mu_hat.item()) == pytest.approx(r["mu_plus_abs"], abs=1e-12)
    assert _rows(plus.flagged) == r["flag_plus"]
    g = (g1 + g2) / 2
    f_remove = removal_count(0.1, g.shape[0])
    assert sorted(_rows(krum(g[1:], f_remove)[0])) == sorted(int(x) for x in r["krum"])
    assert sorted(_rows(faba(g[1:], f_remove)[0])) == sorted(int(x) for x in r["faba"])
    pv = torch.tensor(c["inputs"]["pvalues"], dtype=torch.float64)
    assert _rows(bh_reject(pv, 0.1), 1) == [int(x) for x in r["bh"]]


def test_scores_are_the_definition():
    rng = np.random.default_rng(0)
    g1, g2 = rng.standard_normal((2, 30, 6))
    res = bymi(torch.tensor(g1), torch.tensor(g2), alpha=0.2, estimator="master", master=3)
    g = (g1 + g2) / 2
    omega = 1 / (1.4826 * np.median(np.abs(g - np.median(g, 0)), 0))
    mu = g[3]
    W = [(g1[j] - mu) @ np.diag(omega) @ (g2[j] - mu) for j in range(30) if j != 3]
    np.testing.assert_allclose(res.W.numpy(), W, rtol=1e-12)
    assert res.workers.tolist() == [j for j in range(30) if j != 3]
    assert res.threshold.item() == knockoff_threshold(torch.tensor(W), 0.2).item()
    assert torch.equal(res.flagged, torch.tensor(W) >= res.threshold)


def test_filter_plus_is_a_projected_one_dimensional_bymi():
    rng = np.random.default_rng(1)
    g1, g2 = (torch.tensor(rng.standard_normal((40, 5)) / 10) for _ in range(2))
    g1[1:9] += 0.5
    g2[1:9] += 0.5
    res = bymi(g1, g2, alpha=0.2, estimator="filter_plus", eps=0.2, n_half=25)
    c = (g1 - g1.mean(0)) * 5
    v = torch.linalg.eigh(c.T @ c / 40).eigenvectors[:, -1]
    mu = trimmed_mean_1d(g1 @ v, 1.2 * 0.2)
    W = ((g1 @ v - mu) * (g2 @ v - mu))[1:]
    torch.testing.assert_close(res.W, W, rtol=1e-12, atol=0)
    assert res.flagged[:8].all()


def test_batched_calls_equal_one_call_per_batch():
    B1, B2 = torch.randn(3, 25, 4, dtype=torch.float64), torch.randn(3, 25, 4, dtype=torch.float64)
    B1[:, 1:8] += 2
    B2[:, 1:8] += 2
    zero = torch.zeros(4, dtype=torch.float64)
    for estimator in ("oracle", "geom", "filter_plus"):
        out = bymi(B1, B2, alpha=0.2, estimator=estimator, oracle_mean=zero, n_half=10)
        assert out.W.shape == (3, 24) and out.threshold.shape == (3,)
        for b in range(3):
            one = bymi(B1[b], B2[b], alpha=0.2, estimator=estimator, oracle_mean=zero, n_half=10)
            torch.testing.assert_close(out.W[b], one.W, rtol=1e-12, atol=1e-12)
            assert torch.equal(out.flagged[b], one.flagged)


@pytest.mark.parametrize("kwargs, message", [
    (dict(estimator="filter"), "needs sigma0"),
    (dict(estimator="oracle"), "needs oracle_mean"),
    (dict(estimator="median"), "unknown ByMI estimator"),
    (dict(master=9), "outside the 5 machines"),
    (dict(alpha=0.0, estimator="master"), "alpha must lie in"),
])
def test_bad_arguments(kwargs, message):
    g = torch.randn(5, 3, dtype=torch.float64)
    with pytest.raises(ZooError, match=message):
        bymi(g, g + 1, **kwargs)


def test_non_finite_and_constant_gradients_are_errors():
    g = torch.randn(6, 3, dtype=torch.float64)
    bad = g.clone()
    bad[2, 1] = math.nan
    with pytest.raises(ZooError, match="non-finite"):
        bymi(bad, g, estimator="master")
    flat = g.clone()
    flat[:, 2] = 1.0
    with pytest.raises(ZooError, match=r"coordinates \[2\] have zero MAD"):
        bymi(flat, flat.clone(), estimator="master")
    with pytest.raises(ZooError, match="at least one worker"):
        bymi(g[:1], g[:1], estimator="master")


def test_split_scores_broadcast_a_scalar_omega():
    g1, g2, mu = torch.randn(4, 3), torch.randn(4, 3), torch.randn(3)
    torch.testing.assert_close(split_scores(g1, g2, mu, torch.tensor(2.0)), 2 * ((g1 - mu) * (g2 - mu)).sum(-1))


@pytest.mark.parametrize("estimator", ["filter", "geom", "master", "oracle"])
def test_one_small_identification_in_numpy_equals_the_torch_path(estimator):
    """A single CPU problem runs `bymi` in numpy (`_bymi_np`); the same problem as a batch of one runs the torch
    path: the same scores, threshold and flags, at the paper's size (150 machines, p = 20) with Byzantine rows."""
    rng = np.random.default_rng(11)
    for trial in range(3):
        g1, g2 = rng.standard_normal((2, 150, 20)) / math.sqrt(200)
        g1[1:16] += 0.15 * (trial + 1)
        g2[1:16] += 0.15 * (trial + 1)
        g1, g2 = torch.tensor(g1), torch.tensor(g2)
        S0 = torch.tensor(np.cov(rng.standard_normal((400, 20)).T, bias=True))
        kw = dict(alpha=0.1, estimator=estimator, eps=0.1, n_half=200, sigma0=S0, master=trial,
                  oracle_mean=torch.zeros(20, dtype=torch.float64))
        one, batch = bymi(g1, g2, **kw), bymi(g1[None], g2[None], **kw)
        torch.testing.assert_close(one.W, batch.W[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(one.mu_hat, batch.mu_hat[0], rtol=0, atol=1e-12)
        assert torch.equal(one.flagged, batch.flagged[0]) and torch.equal(one.workers, batch.workers)
        assert float(one.threshold) == pytest.approx(float(batch.threshold[0]), rel=1e-12)  # L is one of the |W|
        assert one.W.dtype == batch.W.dtype
    assert one.flagged.sum() >= 10  # the shifted rows are found at the largest shift


def test_the_numpy_threshold_equals_the_batched_one():
    rng = np.random.default_rng(3)
    for W in [rng.standard_normal(60) + 1.5, np.round(rng.standard_normal(40) * 2) + 1, -np.abs(rng.random(30))]:
        for alpha, offset in [(0.1, 1), (0.2, 0), (0.3, 1)]:
            t = torch.tensor(W)
            assert float(knockoff_threshold(t, alpha, offset)) == float(knockoff_threshold(t[None], alpha, offset)[0])


@pytest.mark.parametrize("estimator", ["geom", "master"])
def test_a_few_wide_rows_run_in_numpy_with_the_torch_paths_values(estimator):
    """A few machines × a whole model's gradient (the DDP callback's 2 ranks × 15,882) also runs in numpy
    (`is_few_rows`, no BLAS): the same W, centre, threshold and flags as the torch path (a batch of one)."""
    from zoo.bymi.robust import is_few_rows, is_small

    rng = np.random.default_rng(5)
    for M, d in [(2, 15882), (3, 5000), (8, 700)]:
        g1, g2 = (torch.tensor(a) for a in rng.standard_normal((2, M, d)) / math.sqrt(100))
        g1[1] += 0.05
        g2[1] += 0.05
        assert is_few_rows(g1) and not is_small(g1) and not is_few_rows(g1[None])
        kw = dict(alpha=0.2, estimator=estimator, offset=0, n_half=100)
        one, batch = bymi(g1, g2, **kw), bymi(g1[None], g2[None], **kw)
        torch.testing.assert_close(one.W, batch.W[0], rtol=1e-12, atol=0)
        torch.testing.assert_close(one.mu_hat, batch.mu_hat[0], rtol=0, atol=1e-14)
        assert torch.equal(one.flagged, batch.flagged[0]) and float(one.threshold) == pytest.approx(
            float(batch.threshold[0]), rel=1e-12)
