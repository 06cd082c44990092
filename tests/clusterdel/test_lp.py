"""STC-LP: the min-cut solver against HiGHS, half-integrality, feasibility, and the max-flow against networkx
and OR-Tools on the same network."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from zoo.clusterdel import as_graph, flow_network, run_algorithms, stc_lp_highs, stc_lp_mincut, wedges_and_triangles

KNOWN_LP = {"karate": 39.0, "footballA": 294.0}  # issue 19 / paper notes (both solvers agree there)


def test_mincut_lp_equals_highs_lp_exactly(oracle_graph):
    g = oracle_graph
    wt = wedges_and_triangles(g, triangles=False)
    cut, highs = stc_lp_mincut(g, wt), stc_lp_highs(g, wt)
    assert cut.value == highs.value  # both are exact multiples of 1/2: no tolerance
    if g.name in KNOWN_LP:
        assert cut.value == KNOWN_LP[g.name]
    # half-integral, within [0, 1], every open-wedge constraint met, and the cut is twice the LP
    assert set(np.unique(cut.x)) <= {0.0, 0.5, 1.0}
    assert np.all(cut.x[wt.e1] + cut.x[wt.e2] >= 1.0)
    assert cut.flow_value == 2 * cut.value


def _nx_digraph(net: sp.csr_array) -> nx.DiGraph:
    coo = net.tocoo()
    d = nx.DiGraph()
    d.add_weighted_edges_from(zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()), weight="capacity")
    return d


@pytest.mark.parametrize("name", ["karate", "florentine", "gnp40_1"])
def test_max_flow_equals_networkx_and_ortools(name, load_graph):
    g = load_graph(name)
    wt = wedges_and_triangles(g, triangles=False)
    net, s, t = flow_network(g, wt)
    ours = stc_lp_mincut(g, wt).flow_value
    assert nx.maximum_flow_value(_nx_digraph(net), s, t) == ours
    max_flow = pytest.importorskip("ortools.graph.python.max_flow",
                                   reason="ortools not installed (pip install ortools; or --no-deps ortools "
                                          "absl-py immutabledict next to protobuf 7)")
    f = max_flow.SimpleMaxFlow()
    coo = net.tocoo()
    f.add_arcs_with_capacity(coo.row.astype(np.int32), coo.col.astype(np.int32), coo.data.astype(np.int64))
    assert f.solve(s, t) == f.OPTIMAL
    assert f.optimal_flow() == ours


def test_network_shape_follows_the_construction():
    g = as_graph(nx.to_scipy_sparse_array(nx.path_graph(3), weight=None))  # one open wedge 0-1-2
    wt = wedges_and_triangles(g, triangles=False)
    net, s, t = flow_network(g, wt)
    assert net.shape == (2 * g.m + 2, 2 * g.m + 2) and (s, t) == (0, 2 * g.m + 1)
    # s -> e-, e+ -> t with capacity 1; the wedge's two arcs e1- -> e2+, e2- -> e1+ with capacity m + 1
    arcs = {(int(r), int(c)): int(v) for r, c, v in zip(*sp.find(net))}
    assert arcs == {(0, 1): 1, (0, 3): 1, (2, 5): 1, (4, 5): 1, (1, 4): 3, (3, 2): 3}


def test_all_half_lp_rounds_to_deleting_every_edge():
    """The pitfall of the notes: with x = 1/2 everywhere H is empty, and LP rounding deletes all m = 2 LP edges."""
    g = as_graph(nx.to_scipy_sparse_array(nx.star_graph(3), weight=None), "star")
    lp = stc_lp_mincut(g)
    assert np.all(lp.x == 0.5) and lp.value == 1.5
    rep = run_algorithms(g, ["lp_pivot", "lp_degree"])
    assert rep.rows["lp_pivot"]["cost"] == rep.rows["lp_degree"]["cost"] == g.m == 2 * lp.value
