"""dpformer — Delving into Differentially Private Transformer (Ding et al., ICML 2024).

Phantom Clipping lives in `zoo.dp` (reusable, plain torch) and `callbacks.dp_clipping.DPClipping`;
this package holds the SASRec model with Re-Attention and its LightningModule.
"""

from zoo.dpformer.model import SASRec, re_attention_logits
from zoo.dpformer.module import DPSASRecModule, rank_metrics

__all__ = ["DPSASRecModule", "SASRec", "rank_metrics", "re_attention_logits"]
