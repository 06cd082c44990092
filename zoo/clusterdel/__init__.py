"""Cluster deletion (Balmaseda, Xu, Cao, Veldt, ICML 2024): combinatorial 3-approximations and the STC-LP by min cut.

Read top-down: `graph` (checked graphs, open wedges, triangles), `lp` (the STC-LP by one max-flow, the same LP and
the exact CD-ILP through HiGHS), `wedges` (maximal edge-disjoint open wedges, MFP's lower bound), `pivot` (random,
max-degree and 2-path-ratio pivots on the auxiliary graph), `algorithms` (the paper's methods on one graph),
`module` (the evaluation-only LightningModule).
"""

from zoo.clusterdel.algorithms import ALGORITHMS, GraphReport, check_algorithms, run_algorithms
from zoo.clusterdel.graph import Graph, WedgesTriangles, as_graph, wedges_and_triangles
from zoo.clusterdel.lp import LPSolution, cd_ilp, flow_network, stc_lp_highs, stc_lp_mincut
from zoo.clusterdel.pivot import (
    cd_cost,
    clusters_are_cliques,
    components_if_cliques,
    degree_pivot,
    random_pivot,
    ratio_pivot,
)
from zoo.clusterdel.wedges import maximal_disjoint_open_wedges, wedge_edge_mask


def __getattr__(name: str):
    # The LightningModule pulls in torch/lightning; the algorithms (and the benchmark) do not need them.
    if name == "ClusterDeletionEval":
        from zoo.clusterdel.module import ClusterDeletionEval

        return ClusterDeletionEval
    raise AttributeError(f"module 'zoo.clusterdel' has no attribute {name!r}")


__all__ = [
    "ALGORITHMS",
    "ClusterDeletionEval",
    "Graph",
    "GraphReport",
    "LPSolution",
    "WedgesTriangles",
    "as_graph",
    "cd_cost",
    "cd_ilp",
    "check_algorithms",
    "clusters_are_cliques",
    "components_if_cliques",
    "degree_pivot",
    "flow_network",
    "maximal_disjoint_open_wedges",
    "random_pivot",
    "ratio_pivot",
    "run_algorithms",
    "stc_lp_highs",
    "stc_lp_mincut",
    "wedge_edge_mask",
    "wedges_and_triangles",
]
