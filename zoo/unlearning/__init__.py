"""Memorized-data unlearning by degree of memorization (Barbulescu & Triantafillou, ICML 2024, arXiv 2405.03097):
GA (Jang et al.), SGA, TA, TAU; metrics MA, EL_n, c(D_f), membership-attack AUCs (incl. the paper's attack)."""

from zoo.unlearning.module import METHODS, UnlearningModule

__all__ = ["METHODS", "UnlearningModule"]
