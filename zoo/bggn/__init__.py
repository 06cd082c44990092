"""BGGN: Bias-Guided Generative Network for intersectional unfairness discovery (Xu et al., ICML 2024).

Read top-down: `bias` (L_f(a), held-out split) -> `networks` (predictor, encoder, decoder) -> `objective`
(VAE loss, REINFORCE fine-tuning) -> `metrics` (precision/recall/DCG/RR of generated sets) -> `module`
(the four Lightning phases: classifier f, predictor, VAE, BGGN; the search-tree baseline)."""

from zoo.bggn.bias import BiasTable, group_bias, one_hot, split_seen_unseen
from zoo.bggn.module import BGGNModule, BiasClassifierModule, BiasPredictorModule, SearchTreeModule, VAEModule
from zoo.bggn.networks import BiasPredictor, Decoder, Encoder
from zoo.bggn.objective import BGGNConfig, neg_log_q, reinforce_loss

__all__ = [
    "BGGNConfig",
    "BGGNModule",
    "BiasClassifierModule",
    "BiasPredictor",
    "BiasPredictorModule",
    "BiasTable",
    "Decoder",
    "Encoder",
    "SearchTreeModule",
    "VAEModule",
    "group_bias",
    "neg_log_q",
    "one_hot",
    "reinforce_loss",
    "split_seen_unseen",
]
