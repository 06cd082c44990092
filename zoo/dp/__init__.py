"""Per-sample gradient norms and clipping for DP-SGD (Phantom Clipping, ghost norms, per-sample).

Plain torch; `callbacks.dp_clipping.DPClipping` wires it into Lightning training.
"""

from zoo.dp.capture import ActivationCapture, Record
from zoo.dp.clipper import PerSampleClipper, trainable_modules
from zoo.dp.norms import Contribution, clipped_sum, contributions, inner, per_sample_sq_norms

__all__ = [
    "ActivationCapture",
    "Contribution",
    "PerSampleClipper",
    "Record",
    "clipped_sum",
    "contributions",
    "inner",
    "per_sample_sq_norms",
    "trainable_modules",
]
