"""The paper's cluster-deletion algorithms on one graph, sharing the lower bounds they round.

======================  ===========================================  =====================================
name                    lower bound, H                               pivot (official routine)
======================  ===========================================  =====================================
``lp_pivot``            STC-LP; H = edges with x_e = 0               components of H if all cliques, else
                                                                     best of 1 + pivtimes random pivots
                                                                     (``CD_LP_round``)
``lp_degree``           STC-LP; same H                               max degree (``det_pivot_degree``)
``mfp``                 |W| (maximal disjoint open wedges);          best of 1 + pivtimes random pivots
                        H = G minus the 2|W| wedge edges             (``CD_LP_round_timed(force=true)``)
``degmfp``              |W|; same H                                  max degree (DegMFP)
``ratmfp``              |W|; same H                                  2-path ratio (RatMFP)
``ilp``                 exact CD-ILP (HiGHS)                         -
======================  ===========================================  =====================================

Every clustering is checked to be cliques of G; the a-posteriori ratio is cost / lower bound (and cost / OPT
when the ILP is solved).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from zoo.clusterdel.graph import Graph, WedgesTriangles, wedges_and_triangles
from zoo.clusterdel.lp import LPSolution, cd_ilp, stc_lp_highs, stc_lp_mincut
from zoo.clusterdel.pivot import (
    best_random_pivot,
    cd_cost,
    clusters_are_cliques,
    components_if_cliques,
    degree_pivot,
    ratio_pivot,
)
from zoo.clusterdel.wedges import maximal_disjoint_open_wedges, wedge_edge_mask
from zoo.errors import ZooError

ALGORITHMS = ("lp_pivot", "lp_degree", "mfp", "degmfp", "ratmfp", "ilp")
LP_TOL = 1e-8  # official: keep an edge in H when x_e < 1/2 - 1e-8


@dataclass
class GraphReport:
    """Everything measured on one graph: shared bounds, then one row per algorithm."""

    name: str
    n: int
    m: int
    n_wedges: int = 0
    n_triangles: int = 0
    lp: float | None = None
    lp_seconds: float | None = None
    lp_half: int | None = None  # edges with x_e = 1/2
    wedge_bound: int | None = None  # |W|
    wedge_seconds: float | None = None
    opt: int | None = None
    ilp_seconds: float | None = None
    ilp_note: str = ""
    enumerate_seconds: float = 0.0
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    labels: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def table(self) -> list[dict[str, Any]]:
        """One flat record per algorithm (what the module writes to the run dir)."""
        base = {"graph": self.name, "n": self.n, "m": self.m, "open_wedges": self.n_wedges,
                "triangles": self.n_triangles, "lp": self.lp, "wedge_bound": self.wedge_bound, "opt": self.opt}
        return [{**base, "algorithm": a, **r} for a, r in self.rows.items()]


def check_algorithms(algorithms: list[str]) -> None:
    bad = [a for a in algorithms if a not in ALGORITHMS]
    if bad or not algorithms:
        raise ZooError(f"unknown cluster-deletion algorithm(s) {bad or '(none given)'}; choose from {list(ALGORITHMS)}")


def _ratio(cost: float, bound: float) -> float:
    """cost / bound; a graph that is already a union of cliques has bound 0 and cost 0 (ratio 1). Deviation: the
    official tables divide ub / lb as they are, which gives 0/0 = NaN there (such a graph has no open wedge)."""
    if bound > 0:
        return cost / bound
    return 1.0 if cost == 0 else float("inf")


def _aux_graph(g: Graph, x: np.ndarray):
    return g.subgraph_keep(x < 0.5 - LP_TOL)


def run_algorithms(g: Graph, algorithms: list[str], pivtimes: int = 100,
                   lp_solver: Literal["mincut", "highs"] = "mincut", wedge_order: Literal["scan", "random"] = "scan",
                   ilp_time_limit: float = 60.0, ilp_max_edges: int = 5000, ilp_on_limit: Literal["skip", "error"]
                   = "skip", seed: int = 123456) -> GraphReport:
    """Run the named algorithms on ``g`` (``seed``: the official ``Random.seed!(123456)`` before each method;
    numpy's generator draws different permutations than Julia's)."""
    check_algorithms(algorithms)
    if pivtimes < 0:
        raise ZooError(f"pivtimes must be >= 0, got {pivtimes}")
    if lp_solver not in ("mincut", "highs"):
        raise ZooError(f"lp_solver must be 'mincut' or 'highs', got {lp_solver!r}")
    rep = GraphReport(g.name, g.n, g.m)
    tic = time.perf_counter()
    wt: WedgesTriangles = wedges_and_triangles(g, triangles="ilp" in algorithms)
    rep.enumerate_seconds = time.perf_counter() - tic
    rep.n_wedges, rep.n_triangles = wt.n_wedges, wt.n_triangles

    lp: LPSolution | None = None
    if {"lp_pivot", "lp_degree"} & set(algorithms):
        lp = stc_lp_mincut(g, wt) if lp_solver == "mincut" else stc_lp_highs(g, wt)
        rep.lp, rep.lp_seconds = lp.value, lp.seconds + lp.build_seconds
        rep.lp_half = int(np.count_nonzero(np.abs(lp.x - 0.5) < LP_TOL))
        h_lp = _aux_graph(g, lp.x)
    chosen = None
    if {"mfp", "degmfp", "ratmfp"} & set(algorithms):
        tic = time.perf_counter()
        chosen = maximal_disjoint_open_wedges(g, wt, order=wedge_order, seed=seed)
        rep.wedge_seconds = time.perf_counter() - tic
        rep.wedge_bound = len(chosen)
        h_w = _aux_graph(g, wedge_edge_mask(g, wt, chosen))

    for name in algorithms:
        if name == "ilp":
            continue
        rng = np.random.default_rng(seed)
        tic = time.perf_counter()
        extra: dict[str, Any] = {}
        if name == "lp_pivot":
            label = components_if_cliques(g, h_lp)
            extra["components"] = label is not None
            if label is None:
                label, _, costs = best_random_pivot(g, h_lp, 1 + pivtimes, rng)
                extra["mean_cost"] = float(np.mean(costs))
                extra["mean_ratio"] = _ratio(extra["mean_cost"], rep.lp)
        elif name == "lp_degree":
            label = degree_pivot(h_lp)
        elif name == "mfp":
            label, _, costs = best_random_pivot(g, h_w, 1 + pivtimes, rng)
            # the paper's "RanMFP-Avg": the mean cost of all 1 + pivtimes runs over |W| (official avg_ub / lb,
            # with avg_ub = mean of CD_LP_round_timed's objectives)
            extra["mean_cost"] = float(np.mean(costs))
            extra["mean_ratio"] = _ratio(extra["mean_cost"], float(rep.wedge_bound))
        elif name == "degmfp":
            label = degree_pivot(h_w)
        else:
            label = ratio_pivot(h_w)
        # rounding only: H is built above and the wedges before that (the official timer_r also builds H, and its
        # lower-bound timers include the wedge enumeration; ours are rep.enumerate_seconds, lp/wedge_seconds)
        seconds = time.perf_counter() - tic
        if not clusters_are_cliques(g, label):  # cannot happen for a correct H; a bug must not pass silently
            raise RuntimeError(f"{name} produced a cluster that is not a clique of {g.name!r}")
        cost = cd_cost(g, label)
        bound = rep.lp if name.startswith("lp_") else float(rep.wedge_bound)
        rep.rows[name] = {"cost": cost, "bound": bound, "ratio": _ratio(cost, bound),
                          "seconds": seconds, **extra}
        rep.labels[name] = label
    if "ilp" in algorithms:
        # the best clustering found so far is HiGHS's MIP start (it only speeds up the proof)
        start = None
        if rep.labels:
            best = min(rep.labels.values(), key=lambda lab: cd_cost(g, lab))
            start = (best[g.u] != best[g.v]).astype(np.float64)
        try:
            ilp = cd_ilp(g, wt, time_limit=ilp_time_limit, max_edges=ilp_max_edges, start=start)
            rep.opt, rep.ilp_seconds = ilp.opt, ilp.seconds
            rep.rows["ilp"] = {"cost": ilp.opt, "bound": float(ilp.opt), "ratio": 1.0, "seconds": ilp.seconds}
        except ZooError as e:
            if ilp_on_limit == "error":
                raise
            rep.ilp_note = str(e)
    if rep.opt is not None:
        for r in rep.rows.values():
            r["ratio_opt"] = _ratio(r["cost"], rep.opt)
    return rep
