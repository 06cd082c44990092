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


def _set_partitions(items: list[int]):
    """Every partition of ``items`` into blocks (Bell(n) of them), by placing each item in turn."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]


def _brute_force_cd(adj: np.ndarray) -> int:
    """Cluster deletion by enumeration: over every partition whose blocks are cliques, the fewest edges between
    blocks (the deleted ones)."""
    n, best = len(adj), None
    for part in _set_partitions(list(range(n))):
        if all(adj[a, b] for block in part for i, a in enumerate(block) for b in block[i + 1:]):
            label = np.empty(n, int)
            for k, block in enumerate(part):
                label[block] = k
            cost = int(sum(adj[a, b] for a in range(n) for b in range(a + 1, n) if label[a] != label[b]))
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_cd_ilp_equals_brute_force_on_small_graphs(seed):
    # exact cluster deletion against enumeration of all set partitions (Bell(8) = 4,140 at n = 8); the LP
    # relaxation bounds it from below, and the ILP's kept edges (x = 0) form disjoint cliques of that cost
    from zoo.clusterdel import cd_ilp
    from zoo.clusterdel.pivot import cd_cost, clusters_are_cliques

    rng = np.random.default_rng(seed)
    n = 5 + seed % 4
    adj = np.triu(rng.random((n, n)) < (0.35 + 0.05 * (seed % 5)), k=1).astype(int)
    adj = adj + adj.T
    g = as_graph(adj, name=f"small{seed}")
    ilp = cd_ilp(g)
    assert ilp.opt == _brute_force_cd(adj)
    assert stc_lp_highs(g).value <= ilp.opt
    kept = sp.csr_array((1 - ilp.x[np.r_[np.arange(g.m), np.arange(g.m)]],
                         (np.r_[g.u, g.v], np.r_[g.v, g.u])), shape=(n, n))
    kept.eliminate_zeros()
    _, label = sp.csgraph.connected_components(kept, directed=False)
    assert clusters_are_cliques(g, label) and cd_cost(g, label) == ilp.opt == int(ilp.x.sum())
