"""SCoRe: Submodular Combinatorial Representation Learning (Majee et al., ICML 2024)."""

from zoo.score.losses import OBJECTIVES, SCoReLoss, score_loss
from zoo.score.module import SCoReModule

__all__ = ["OBJECTIVES", "SCoReLoss", "SCoReModule", "score_loss"]
