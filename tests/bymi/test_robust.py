"""Robust centres: geometric median vs geom-median / hdmedians, MAD vs SciPy, the spectral filter and the 1-D trimmed
mean vs plain loop transcriptions of the official R functions (power iteration included)."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import median_abs_deviation

from zoo.bymi.robust import filtering_mean, geometric_median, mad, trimmed_mean_1d


def _points(seed, m=60, d=7, outliers=8):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d))
    X[:outliers] += 6.0
    return X


def test_geometric_median_equals_geom_median():
    from geom_median.numpy import compute_geometric_median

    for seed in range(3):
        X = _points(seed)
        ref = compute_geometric_median(X, eps=1e-14, maxiter=20000, ftol=1e-30).median
        ours = geometric_median(torch.tensor(X)).numpy()
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-8)
        # first-order optimality: the unit vectors towards the points cancel
        u = X - ours
        assert np.linalg.norm((u / np.linalg.norm(u, axis=1, keepdims=True)).sum(0)) < 1e-6


def test_geometric_median_equals_hdmedians():
    try:
        import hdmedians
    except ImportError as e:  # its PyPI wheel is built against NumPy 1; a source build works with NumPy 2
        pytest.skip(f"hdmedians does not import here ({e}); build it against this NumPy: pip install cython, then "
                    "pip install --no-binary hdmedians --no-build-isolation --no-deps hdmedians")
    X = _points(5)
    ref = np.asarray(hdmedians.geomedian(X, axis=0, eps=1e-12, maxiters=20000))
    np.testing.assert_allclose(geometric_median(torch.tensor(X)).numpy(), ref, rtol=0, atol=1e-8)


def test_geometric_median_on_a_data_point_and_batched():
    # 40 copies of one point among 60: the median is that point (Vardi-Zhang step), reached exactly
    rng = np.random.default_rng(1)
    X = np.vstack([np.tile([1.0, -2.0, 0.5], (40, 1)), rng.standard_normal((20, 3)) * 5])
    np.testing.assert_allclose(geometric_median(torch.tensor(X)).numpy(), [1.0, -2.0, 0.5], atol=1e-9)
    B = torch.tensor(np.stack([_points(s) for s in range(4)]))
    rows = torch.stack([geometric_median(b) for b in B])
    torch.testing.assert_close(geometric_median(B), rows, rtol=0, atol=1e-9)


def test_mad_is_r_mad():
    rng = np.random.default_rng(0)
    for m in (7, 8):  # odd and even counts: R's median averages the middle pair
        X = rng.standard_normal((m, 5))
        ref = median_abs_deviation(X, axis=0, scale=1 / 1.4826)
        np.testing.assert_allclose(mad(torch.tensor(X), dim=0).numpy(), ref, rtol=1e-14)


def _filtering_refine_loop(X, ep, S0, iter_pow=100000, tol_pow=1e-15):
    """A line-by-line transcription of the official filtering_refine (power iteration, numpy, float64)."""
    m, d = X.shape
    w = np.full(m, 1 / m)
    mu = w @ X
    for _ in range(max(1, math.floor(ep * m))):
        cov = (X * w[:, None]).T @ X - np.outer(mu, mu) - S0
        u, lam = np.full(d, 1 / math.sqrt(d)), 0.0
        for _ in range(iter_pow):
            u_old, lam_old = u, lam
            u = u @ cov
            lam = np.linalg.norm(u) / np.linalg.norm(u_old)
            u = u / np.linalg.norm(u)
            if abs((lam - lam_old) / lam) < tol_pow:
                break
        val = u @ cov @ u
        tau = ((X - mu) @ u) ** 2
        tau[w < 1e-18] = 0
        tau_max = tau[np.argmax(np.abs(tau))]
        w = w * (1 - tau / tau_max) if val >= 0 else w * (1 + tau / tau_max)
        w[w < 1e-18] = 0
        w = w / w.sum()
        mu = w @ X
        if (w / (w.max() * m)).sum() <= 1 - ep:
            break
    return mu, w


def test_filtering_equals_the_official_loop():
    rng = np.random.default_rng(2)
    for seed in range(3):
        X = _points(seed, m=50, d=5, outliers=6) * math.sqrt(3)
        S0 = np.cov(rng.standard_normal((200, 5)).T, bias=True) * 3
        mu_ref, w_ref = _filtering_refine_loop(X, 1.2 * 0.1, S0)
        mu, w = filtering_mean(torch.tensor(X), 1.2 * 0.1, torch.tensor(S0))
        np.testing.assert_allclose(w.numpy(), w_ref, rtol=0, atol=1e-9)
        np.testing.assert_allclose(mu.numpy(), mu_ref, rtol=0, atol=1e-9)
        assert w[:6].sum() < 0.05 and np.linalg.norm(mu.numpy()) < np.linalg.norm(X.mean(0)) / 3  # outliers go


def test_filtering_batched_rows_stop_independently():
    B = torch.tensor(np.stack([_points(s, m=40, d=4, outliers=s) for s in range(4)]))
    S0 = torch.eye(4, dtype=torch.float64)
    mu, w = filtering_mean(B, 0.15, S0)
    for b in range(4):
        mu_b, w_b = filtering_mean(B[b], 0.15, S0)
        torch.testing.assert_close(mu[b], mu_b, rtol=0, atol=1e-12)
        torch.testing.assert_close(w[b], w_b, rtol=0, atol=1e-12)


def _est_dim_one_loop(z, ep, loops=2000):
    """Transcription of the official est_dim_one: all 2000 rounds, no early stop."""
    m = len(z)
    w = np.full(m, 1 / m)
    for _ in range(loops):
        mu = w @ z
        Y = (z - mu) ** 2
        k = math.floor(ep * m)
        drop = np.argsort(Y, kind="stable")[m - k:]
        w = np.full(m, 1 / (m - k))
        w[drop] = 0
    return w @ z


def test_trimmed_mean_equals_the_official_loop_and_is_a_fixed_point():
    rng = np.random.default_rng(4)
    for _ in range(20):
        z = np.concatenate([rng.standard_normal(45), rng.normal(4, 0.5, 5)])
        mu = trimmed_mean_1d(torch.tensor(z), 0.12).item()
        assert mu == pytest.approx(_est_dim_one_loop(z, 0.12), abs=1e-12)
        keep = np.argsort((z - mu) ** 2, kind="stable")[: len(z) - 6]
        assert mu == pytest.approx(z[keep].mean(), abs=1e-12)


def test_single_small_problems_run_in_numpy_with_the_torch_paths_values():
    """One 2-D CPU problem takes the numpy kernels (`is_small`); a batch of one takes the torch loops. Both are the
    same iterations: equal values (to rounding in the BLAS products), the same stopping round."""
    from zoo.bymi.robust import is_small

    rng = np.random.default_rng(7)
    for seed in range(3):
        X = torch.tensor(_points(seed, m=150, d=20, outliers=15) * math.sqrt(200))
        S0 = torch.tensor(np.cov(rng.standard_normal((400, 20)).T, bias=True) * 200)
        assert is_small(X) and not is_small(X[None]) and not is_small(X.requires_grad_(False).float()[None])
        torch.testing.assert_close(geometric_median(X), geometric_median(X[None])[0], rtol=0, atol=1e-10)
        mu, w = filtering_mean(X, 0.12, S0)
        mu_t, w_t = filtering_mean(X[None], 0.12, S0)
        torch.testing.assert_close(w, w_t[0], rtol=0, atol=1e-13)
        torch.testing.assert_close(mu, mu_t[0], rtol=0, atol=1e-10)
        torch.testing.assert_close(mad(X, dim=0), mad(X[None], dim=1)[0], rtol=1e-15, atol=0)
    # the step at a data point (Vardi-Zhang) inside the numpy loop
    X = torch.tensor(np.vstack([np.tile([1.0, -2.0, 0.5], (40, 1)), rng.standard_normal((20, 3)) * 5]))
    torch.testing.assert_close(geometric_median(X), geometric_median(X[None])[0], rtol=0, atol=1e-12)


def test_the_mad_of_two_rows_is_the_sorted_pairs():
    """R's mad over 2 machines, by min/max in numpy (no strided sort): bit for bit the torch path's value, and the
    definition 1.4826 · |x1 − x2| / 2 to rounding."""
    from zoo.bymi.robust import mad_np

    X = np.random.default_rng(3).standard_normal((2, 15882))
    ours = mad_np(X, 0)
    assert np.array_equal(ours, mad(torch.tensor(X)[None], dim=1)[0].numpy())
    np.testing.assert_allclose(ours, 1.4826 * np.abs(X[0] - X[1]) / 2, rtol=1e-15)
