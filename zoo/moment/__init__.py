"""MOMENT (Goswami et al., ICML 2024): a family of open time-series foundation models.

Read top-down: `revin` (reversible instance normalisation), `masking` (patch masks), `embedding` (patching and
patch embedding), `heads`, `model` (the network), `checkpoints` (official AutonLab/MOMENT-1-* weights),
`formats` (ETT CSV, UCR/UEA .ts, UCR anomaly files), `metrics` (pre-training loss, adjusted best F1), `svm` (the
official SVM protocol on embeddings), `module` (Lightning).
"""

from zoo.moment.checkpoints import MOMENTFM_KEY_TABLE, convert_momentfm_state_dict, load_moment
from zoo.moment.model import MOMENT, MomentConfig
from zoo.moment.module import (
    MOMENTClassificationModule,
    MOMENTEmbeddingSVMModule,
    MOMENTForecastingModule,
    MOMENTReconstructionModule,
    build_moment,
)

__all__ = [
    "MOMENT",
    "MOMENTFM_KEY_TABLE",
    "MOMENTClassificationModule",
    "MOMENTEmbeddingSVMModule",
    "MOMENTForecastingModule",
    "MOMENTReconstructionModule",
    "MomentConfig",
    "build_moment",
    "convert_momentfm_state_dict",
    "load_moment",
]
