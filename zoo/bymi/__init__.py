"""ByMI (Qian, Wang, Ren, Zou, ICML 2024): Byzantine machine identification with false discovery rate control.

Read top-down: `threshold` (knockoff+, BH), `robust` (MAD, spectral filter, geometric median, 1-D trimmed mean),
`identify` (the ByMI procedure), `baselines` (Krum, FABA, Zeno, RMDP-BH), `attacks` (OOD, random gradient, IPM,
mean shift), `models` (logistic and location gradients, stratified halves), `module` (Lightning).
"""

from zoo.bymi.baselines import faba, krum, removal_count, rmdp_bh, zeno
from zoo.bymi.identify import ESTIMATORS, Identification, bymi, split_scores
from zoo.bymi.module import METHODS, ByMIExperiment, FeatureClassifier
from zoo.bymi.robust import filtering_mean, geometric_median, mad, trimmed_mean_1d
from zoo.bymi.threshold import bh_reject, knockoff_select, knockoff_threshold, min_rejection_size

__all__ = [
    "ESTIMATORS",
    "METHODS",
    "ByMIExperiment",
    "FeatureClassifier",
    "Identification",
    "bh_reject",
    "bymi",
    "faba",
    "filtering_mean",
    "geometric_median",
    "knockoff_select",
    "knockoff_threshold",
    "krum",
    "mad",
    "min_rejection_size",
    "removal_count",
    "rmdp_bh",
    "split_scores",
    "trimmed_mean_1d",
    "zeno",
]
