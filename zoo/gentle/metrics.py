"""Evaluation of conditional generators: 1-D Wasserstein-1 distance (WD) and Kolmogorov-Smirnov statistic (KS)
between the generated and the empirical conditional at each test covariate, then averaged over covariates (lower is
better). scipy computes both; the official repository ships no evaluation script, so the averaging is ours.

`spread_ratio` (ours, a diagnostic): std of the generated over std of the observed conditional; below 1 means the
model's conditionals are too narrow."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import ks_2samp, wasserstein_distance


def conditional_scores(generated: Sequence[np.ndarray], observed: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Per-covariate {"wd", "ks", "spread_ratio"}, each (n_cov,), for paired lists of 1-D samples (raw y units)."""
    if len(generated) != len(observed):
        raise ValueError(f"{len(generated)} generated vs {len(observed)} observed conditionals")
    wd = np.array([wasserstein_distance(g, o) for g, o in zip(generated, observed)])
    ks = np.array([ks_2samp(g, o).statistic for g, o in zip(generated, observed)])
    spread = np.array([np.std(g) / max(np.std(o), 1e-12) for g, o in zip(generated, observed)])
    return {"wd": wd, "ks": ks, "spread_ratio": spread}
