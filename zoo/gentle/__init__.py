"""GENTLE (Nguyen, Nguyen, Nguyen, Nguyen; ICML 2024): generative conditional distributions by neural entropic OT.

Read top-down: `nets` (MLPM, both players), `kde` (the KDE CDFs F̂_i of the fit term), `neighbours` (MST partner
j(i) and the official assignment), `entropic` (the semi-dual OT term R_i), `gda` (smoothed gradient
descent-ascent), `metrics` (WD/KS), `simulators` (toy1, toy2, ECM), `baselines` (CWGAN networks), `module`
(Lightning: GENTLE and baselines), `mgan` (the monotone-GAN baseline).
"""

from zoo.gentle.entropic import c_transform, debiased_semi_dual, ground_cost, self_transport, semi_dual
from zoo.gentle.gda import make_anchors, proximal_penalty, smoothed_gda_step, update_anchors
from zoo.gentle.kde import interpolate_cdf, kde_cdf_table
from zoo.gentle.metrics import conditional_scores
from zoo.gentle.mgan import MGANModule
from zoo.gentle.module import (
    ConditionalGeneratorModule,
    CWGANModule,
    GENTLEModule,
    NearestNeighboursModule,
    PooledMarginalModule,
)
from zoo.gentle.neighbours import mst_edges, mst_neighbours, official_relation, released_relation
from zoo.gentle.nets import MLPM

__all__ = [
    "MLPM",
    "CWGANModule",
    "ConditionalGeneratorModule",
    "GENTLEModule",
    "MGANModule",
    "NearestNeighboursModule",
    "PooledMarginalModule",
    "c_transform",
    "conditional_scores",
    "debiased_semi_dual",
    "ground_cost",
    "interpolate_cdf",
    "kde_cdf_table",
    "make_anchors",
    "mst_edges",
    "mst_neighbours",
    "official_relation",
    "proximal_penalty",
    "released_relation",
    "self_transport",
    "semi_dual",
    "smoothed_gda_step",
    "update_anchors",
]
