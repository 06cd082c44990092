"""Memorized-data unlearning by degree of memorization (Barbulescu & Triantafillou, ICML 2024, arXiv 2405.03097):
GA (Jang et al.), SGA, TA, TAU; metrics MA, EL_n, c(D_f), membership-attack AUCs (incl. the paper's attack); the
memorize stage that makes theta_0 of the embedded CPU setting."""

from zoo.unlearning.module import METHODS, MemorizeModule, UnlearningModule

__all__ = ["METHODS", "MemorizeModule", "UnlearningModule"]
