"""Minimum-norm interpolation (Kur, Abdalla, Bizeul & Yang, ICML 2024): ℓ_p interpolators and their bias/variance.

Read top-down: `interpolators` (dual Newton for p ∈ (1, 2], basis-pursuit LP for p = 1, Cholesky for p = 2),
`experiment` (Monte-Carlo bias / variance / risk per design), `module` (the evaluation-only LightningModule),
`plot` (``python -m zoo.minnorm.plot RUN_DIR...``: risk against p from run dirs).
"""

from zoo.minnorm.experiment import METRICS, bias_variance, run_instance, solve_path, summarize
from zoo.minnorm.interpolators import (
    NewtonResult,
    basis_pursuit,
    check_problem,
    dual_newton,
    min_l2_interpolator,
    min_norm_interpolator,
)
from zoo.minnorm.module import MinNormExperiment

__all__ = [
    "METRICS",
    "MinNormExperiment",
    "NewtonResult",
    "basis_pursuit",
    "bias_variance",
    "check_problem",
    "dual_newton",
    "min_l2_interpolator",
    "min_norm_interpolator",
    "run_instance",
    "solve_path",
    "summarize",
]
