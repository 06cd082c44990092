"""F̂_i: the Gaussian-KDE CDF of the observed y's at each distinct covariate, and its differentiable evaluation.

The fit term L_fit = mean_i E_u (u - F̂_i(T(u, x_i)))² needs F̂_i(t) for generated t with a gradient in t. As the
official `train_gentle.py`: F̂_i is tabulated on a 1000-point grid over [min(y, -10), max(y, 10)] (y standardised) as
the cumulative sum of the KDE density, normalised to end at 1, and read by linear interpolation. `bandwidth` is
scipy's `bw_method` factor (kernel std = factor x sample std), not an absolute bandwidth. A covariate with a single
observation (or no spread) has no sample std: its F̂ is the Normal CDF N(y, bandwidth²), as officially.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.stats import gaussian_kde, norm

N_GRID = 1000
GRID_REACH = 10.0  # the grid always covers [-10, 10] standardised units
MIN_VARIANCE = 1e-8  # official threshold below which a group is treated as a single point


def _grid(lo: np.ndarray, hi: np.ndarray, n_grid: int) -> np.ndarray:
    return np.linspace(np.minimum(lo, -GRID_REACH), np.maximum(hi, GRID_REACH), n_grid, axis=-1)


def kde_cdf_table(groups: Sequence[np.ndarray], bandwidth: float, n_grid: int = N_GRID) -> tuple[np.ndarray, np.ndarray]:
    """(grid, cdf), each (len(groups), n_grid) float64: F̂_i tabulated for every group of y's."""
    if bandwidth <= 0:
        raise ValueError(f"KDE bandwidth must be > 0, got {bandwidth}")
    groups = [np.asarray(g, dtype=np.float64).ravel() for g in groups]
    lo = np.array([g.min() for g in groups])
    hi = np.array([g.max() for g in groups])
    grid = np.ascontiguousarray(_grid(lo, hi, n_grid))
    spread = np.array([g.size > 1 and np.var(g) > MIN_VARIANCE for g in groups])
    # single points (most CPS covariates): the Normal CDF, all at once
    first = np.array([g[0] for g in groups])
    cdf = norm.cdf(grid, loc=first[:, None], scale=bandwidth)
    for i in np.flatnonzero(spread):
        try:
            pdf = gaussian_kde(groups[i], bw_method=bandwidth)(grid[i])
        except np.linalg.LinAlgError:  # degenerate sample: keep the Normal CDF, as the official fallback
            continue
        total = pdf.sum()
        cdf[i] = np.cumsum(pdf) / (total if total > 0 else 1e-8)
    return grid, cdf


def interpolate_cdf(grid: torch.Tensor, cdf: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """F̂_i(t) for t of shape (N, B) against tables (N, G): piecewise linear inside the grid, extended linearly by
    the end segments outside it, clipped to [0, 1] (as the official `LinearInterpolationModel`).

    Deviation: the official code takes the segment *right* of t (`searchsorted(right=True)` used as the left knot),
    an off-by-one that reads F̂ one grid step late; here t's own segment is used, so F̂ is exact at the knots.
    """
    n_grid = grid.shape[-1]
    k = (torch.searchsorted(grid.contiguous(), t.contiguous(), right=True) - 1).clamp(0, n_grid - 2)
    g0, g1 = grid.gather(-1, k), grid.gather(-1, k + 1)
    c0, c1 = cdf.gather(-1, k), cdf.gather(-1, k + 1)
    return (c0 + (t - g0) * (c1 - c0) / (g1 - g0)).clamp(0.0, 1.0)
