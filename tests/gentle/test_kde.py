"""F̂_i: scipy's KDE integrated exactly vs the tabulated cumulative sum; the one-sample Normal CDF; interpolation."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import gaussian_kde

from zoo.gentle.kde import N_GRID, interpolate_cdf, kde_cdf_table


def test_kde_cdf_matches_integrated_scipy_kde_within_grid_error():
    rng = np.random.default_rng(0)
    groups = [rng.normal(0.5, 1.3, 7), rng.normal(-2, 0.4, 40), np.array([-1.0, 2.0])]
    grid, cdf = kde_cdf_table(groups, bandwidth=0.3)
    for g, row_grid, row_cdf in zip(groups, grid, cdf):
        kde = gaussian_kde(g, bw_method=0.3)
        exact = np.array([kde.integrate_box_1d(-np.inf, t) for t in row_grid])
        step = row_grid[1] - row_grid[0]
        # a right Riemann sum of the density, normalised: off by at most about one cell of mass
        assert np.abs(row_cdf - exact).max() < kde(row_grid).max() * step
        assert row_cdf[-1] == pytest.approx(1.0)


def test_bandwidth_is_a_factor_on_the_sample_spread():
    g = np.array([0.0, 1.0, 3.0])
    grid, cdf = kde_cdf_table([g], bandwidth=0.3)
    h = 0.3 * g.std(ddof=1)  # scipy's bw_method factor times the sample std
    pdf = np.exp(-0.5 * ((grid[0][:, None] - g) / h) ** 2).sum(1)
    np.testing.assert_allclose(cdf[0], np.cumsum(pdf) / pdf.sum(), rtol=1e-10, atol=1e-14)


def test_one_sample_and_no_spread_are_the_normal_cdf():
    grid, cdf = kde_cdf_table([np.array([1.5]), np.array([-0.5, -0.5, -0.5])], bandwidth=0.3)
    for row_grid, row_cdf, centre in zip(grid, cdf, (1.5, -0.5)):
        closed = np.array([0.5 * (1 + math.erf((t - centre) / (0.3 * math.sqrt(2)))) for t in row_grid])
        np.testing.assert_allclose(row_cdf, closed, atol=1e-15)


def test_grid_spans_the_data_and_minus_ten_to_ten():
    grid, _ = kde_cdf_table([np.array([-3.0, 12.0]), np.array([0.0])], bandwidth=0.3)
    assert grid.shape == (2, N_GRID)
    assert (grid[0, 0], grid[0, -1]) == (-10.0, 12.0) and (grid[1, 0], grid[1, -1]) == (-10.0, 10.0)


def test_interpolation_is_np_interp_inside_and_clipped_outside():
    rng = np.random.default_rng(1)
    grid, cdf = kde_cdf_table([rng.normal(size=9), rng.normal(size=3)], bandwidth=0.5)
    t = rng.uniform(-9.9, 9.9, (2, 50))
    ours = interpolate_cdf(torch.tensor(grid), torch.tensor(cdf), torch.tensor(t)).numpy()
    ref = np.stack([np.interp(t[i], grid[i], cdf[i]) for i in range(2)])
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-15)
    knots = interpolate_cdf(torch.tensor(grid), torch.tensor(cdf), torch.tensor(grid[:, 3:7].copy())).numpy()
    np.testing.assert_allclose(knots, cdf[:, 3:7], atol=1e-15)  # exact at the knots
    far = interpolate_cdf(torch.tensor(grid), torch.tensor(cdf), torch.tensor([[-1e3, 1e3], [-50.0, 50.0]])).numpy()
    assert far.min() >= 0 and far.max() <= 1 and far[:, 1].tolist() == [1.0, 1.0]


def test_interpolation_gradient_is_the_segment_slope():
    grid, cdf = kde_cdf_table([np.array([0.0, 0.7, 1.1])], bandwidth=0.3)
    g, c = torch.tensor(grid), torch.tensor(cdf)
    t = torch.tensor([[0.3123]], dtype=torch.float64, requires_grad=True)
    interpolate_cdf(g, c, t).sum().backward()
    k = np.searchsorted(grid[0], 0.3123) - 1
    slope = (cdf[0, k + 1] - cdf[0, k]) / (grid[0, k + 1] - grid[0, k])
    assert t.grad.item() == pytest.approx(slope, rel=1e-12)


def test_bad_bandwidth():
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        kde_cdf_table([np.array([1.0])], bandwidth=0.0)
