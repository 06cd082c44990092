"""The STC-LP (strong triadic closure relaxation of cluster deletion) and the exact CD-ILP.

STC-LP:  min sum_e x_e  s.t.  x_ij + x_ik >= 1 for every open wedge j-i-k,  0 <= x <= 1.
CD-ILP:  the same with x binary and, for every triangle, x_ij <= x_ik + x_jk in all three orientations.

`stc_lp_mincut` is the paper's combinatorial solver (official ``CDSTC_MINST``): the STC-LP is a fractional vertex
cover of the "wedge graph" (nodes = edges of G, one link per open wedge), which a min s-t cut on the doubled
network solves exactly and half-integrally. `stc_lp_highs` hands the same LP to HiGHS through `scipy.optimize.milp`,
and `cd_ilp` the ILP through highspy (the official code uses Gurobi, which needs a licence).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from zoo.clusterdel.graph import Graph, WedgesTriangles, wedges_and_triangles
from zoo.errors import ZooError


@dataclass
class LPSolution:
    value: float  # the LP optimum, sum of x
    x: np.ndarray  # per edge of the graph, in edge order
    seconds: float  # solver time (network/model building excluded; see `build_seconds`)
    build_seconds: float = 0.0
    flow_value: int | None = None  # min-cut solver: the max-flow value (= 2 * LP)


def flow_network(g: Graph, wt: WedgesTriangles) -> tuple[sp.csr_array, int, int]:
    """The s-t network of the STC-LP (paper Sec. 5; official ``CDSTC_MINST``), as an int32 capacity matrix.

    Nodes: s = 0, e- = 1 + 2e, e+ = 2 + 2e, t = 2m + 1. Arcs: s -> e- and e+ -> t with capacity 1; for each
    open wedge (ij, ik): ij- -> ik+ and ik- -> ij+ with "infinite" capacity. ``scipy``'s max-flow needs integer
    capacities, and m + 1 exceeds any cut made of unit arcs (at most 2m), so it serves as infinity.
    """
    m = g.m
    if m + 1 > np.iinfo(np.int32).max:
        raise ZooError(f"graph {g.name!r} has {m} edges: too many for int32 flow capacities")
    e = np.arange(m, dtype=np.int64)
    minus, plus = 1 + 2 * e, 2 + 2 * e
    s, t = 0, 2 * m + 1
    e1, e2 = wt.e1, wt.e2
    rows = np.concatenate([np.zeros(m, np.int64), plus, 1 + 2 * e1, 1 + 2 * e2])
    cols = np.concatenate([minus, np.full(m, t, np.int64), 2 + 2 * e2, 2 + 2 * e1])
    caps = np.concatenate([np.ones(2 * m, np.int32), np.full(2 * len(e1), m + 1, np.int32)])
    net = sp.csr_array((caps, (rows, cols)), shape=(2 * m + 2, 2 * m + 2))
    net.sort_indices()
    return net, s, t


def max_source_set(net: sp.csr_array, flow: sp.csr_array, t: int) -> np.ndarray:
    """The maximal source side of a minimum cut: nodes that cannot reach t in the residual graph (official
    ``source_nodes``, which keeps the nodes a reverse BFS from t does not label)."""
    residual = sp.csr_array(net.astype(np.int64) - flow.astype(np.int64))
    residual.data = (residual.data > 0).astype(np.int8)
    residual.eliminate_zeros()
    reach_t = breadth_first_order(residual.T.tocsr(), t, directed=True, return_predecessors=False)
    in_s = np.ones(net.shape[0], dtype=bool)
    in_s[reach_t] = False
    return in_s


def stc_lp_mincut(g: Graph, wt: WedgesTriangles | None = None) -> LPSolution:
    """Exact STC-LP by one max-flow: x_e = 1/2 + ([e+ in S] - [e- in S]) / 2 for the maximal source set S."""
    tic = time.perf_counter()
    wt = wt if wt is not None else wedges_and_triangles(g, triangles=False)
    net, s, t = flow_network(g, wt)
    build = time.perf_counter() - tic
    tic = time.perf_counter()
    res = maximum_flow(net, s, t, method="dinic")
    in_s = max_source_set(net, res.flow, t)
    seconds = time.perf_counter() - tic
    minus_in = in_s[1:-1:2].astype(np.float64)
    plus_in = in_s[2:-1:2].astype(np.float64)
    x = 0.5 + (plus_in - minus_in) / 2
    # An optimal cut never cuts an infinite arc, so the cut is the unit arcs it crosses: sum_e (1 - x_e) + x_e
    # counted twice over the halves, i.e. exactly 2 * LP (checked in tests against the flow value).
    return LPSolution(float(x.sum()), x, seconds, build, int(res.flow_value))


def _wedge_matrix(g: Graph, wt: WedgesTriangles) -> sp.csr_array:
    rows = np.repeat(np.arange(wt.n_wedges, dtype=np.int64), 2)
    cols = np.stack([wt.e1, wt.e2], axis=1).ravel()
    return sp.csr_array((np.ones(2 * wt.n_wedges), (rows, cols)), shape=(wt.n_wedges, g.m))


def _triangle_matrix(g: Graph, wt: WedgesTriangles) -> sp.csr_array:
    """Three rows per triangle (ij, ik, jk): x_a - x_b - x_c <= 0 for each choice of a."""
    t = wt.triangles
    rows = np.repeat(np.arange(3 * len(t), dtype=np.int64), 3)
    # rows triangle-major, orientation-minor; the first column of each orientation gets +1
    cols = np.stack([t[:, [0, 1, 2]], t[:, [1, 0, 2]], t[:, [2, 0, 1]]], axis=1).reshape(-1)
    vals = np.tile([1.0, -1.0, -1.0], 3 * len(t))
    return sp.csr_array((vals, (rows, cols)), shape=(3 * len(t), g.m))


def stc_lp_highs(g: Graph, wt: WedgesTriangles | None = None, time_limit: float | None = None) -> LPSolution:
    """The STC-LP through HiGHS (``scipy.optimize.milp`` without integrality): the peer of the min-cut solver."""
    tic = time.perf_counter()
    wt = wt if wt is not None else wedges_and_triangles(g, triangles=False)
    cons = [LinearConstraint(_wedge_matrix(g, wt), lb=1.0, ub=np.inf)] if wt.n_wedges else []
    build = time.perf_counter() - tic
    tic = time.perf_counter()
    opts = {"time_limit": time_limit} if time_limit else {}
    res = milp(np.ones(g.m), constraints=cons, bounds=Bounds(0.0, 1.0), integrality=np.zeros(g.m), options=opts)
    if res.status != 0 or res.x is None:
        raise ZooError(f"HiGHS did not solve the STC-LP of {g.name!r} ({g.m} edges, {wt.n_wedges} open wedges): "
                       f"{res.message}")
    return LPSolution(float(res.fun), res.x, time.perf_counter() - tic, build)


@dataclass
class ILPSolution:
    opt: int
    x: np.ndarray
    seconds: float
    n_constraints: int


def highs_solve(cost: np.ndarray, rows: sp.csr_array, row_lo: np.ndarray, row_hi: np.ndarray, integer: bool,
                time_limit: float | None = None, start: np.ndarray | None = None):
    """min cost.x s.t. row_lo <= rows x <= row_hi, 0 <= x <= 1, through HiGHS's own Python API (highspy).

    Returns (model status name, objective, x). highspy ships a newer HiGHS than scipy's bundled copy and takes a
    MIP start; on the CD-ILP of adjnoun it needed 1 s where ``scipy.optimize.milp`` needed 15-19 s here."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if time_limit:
        h.setOptionValue("time_limit", float(time_limit))
    if integer:
        h.setOptionValue("mip_rel_gap", 0.0)  # stop only at a proof of optimality
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(cost), rows.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_, lp.col_upper_ = np.zeros(len(cost)), np.ones(len(cost))
    lp.row_lower_, lp.row_upper_ = np.asarray(row_lo, np.float64), np.asarray(row_hi, np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = rows.indptr.astype(np.int32)
    lp.a_matrix_.index_ = rows.indices.astype(np.int32)
    lp.a_matrix_.value_ = rows.data.astype(np.float64)
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * len(cost)
    h.passModel(lp)
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = list(map(float, start))
        sol.value_valid = True
        h.setSolution(sol)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    x = np.asarray(h.getSolution().col_value, dtype=np.float64)
    return status, float(h.getInfo().objective_function_value), x


def cd_ilp(g: Graph, wt: WedgesTriangles | None = None, time_limit: float = 60.0, max_edges: int = 5000,
           start: np.ndarray | None = None) -> ILPSolution:
    """Exact cluster deletion (CD-ILP, official ``CDSTC_Gurobi(clusterdeletion=true)``) with HiGHS.

    ``start``: a feasible clustering's x (1 on deleted edges) as the MIP start. A graph over ``max_edges`` edges,
    or a solve that does not prove optimality within ``time_limit`` seconds, is a one-line `ZooError` naming the
    edge, wedge and triangle counts: OPT is reported only when it is proven.
    """
    wt = wt if wt is not None else wedges_and_triangles(g, triangles=True)
    counts = f"{g.m} edges, {wt.n_wedges} open wedges, {wt.n_triangles} triangles"
    if g.m > max_edges:
        raise ZooError(f"CD-ILP of {g.name!r} refused: {counts}; {g.m} edges exceed ilp max_edges={max_edges} "
                       "(raise it, or drop 'ilp' from the algorithms)")
    rows = sp.vstack([_wedge_matrix(g, wt), _triangle_matrix(g, wt)], format="csr")
    lo = np.r_[np.ones(wt.n_wedges), np.full(3 * wt.n_triangles, -np.inf)]
    hi = np.r_[np.full(wt.n_wedges, np.inf), np.zeros(3 * wt.n_triangles)]
    tic = time.perf_counter()
    status, obj, x = highs_solve(np.ones(g.m), rows, lo, hi, integer=True, time_limit=time_limit, start=start)
    seconds = time.perf_counter() - tic
    if status != "Optimal":
        raise ZooError(f"CD-ILP of {g.name!r} not solved to optimality within ilp time_limit={time_limit:g}s "
                       f"({counts}): HiGHS status {status!r}")
    return ILPSolution(round(obj), np.round(x), seconds, rows.shape[0])
