"""Pivots and the wedge scan against plain sequential references (the official loops, written naively here)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from zoo.clusterdel import (
    as_graph,
    clusters_are_cliques,
    degree_pivot,
    maximal_disjoint_open_wedges,
    random_pivot,
    ratio_pivot,
    stc_lp_mincut,
    wedge_edge_mask,
    wedges_and_triangles,
)


def seq_random(h, rank):
    """Official permutation_pivot: the next unclustered node of the order takes its unclustered neighbours."""
    label = -np.ones(h.shape[0], dtype=np.int64)
    for p in np.argsort(rank):
        if label[p] < 0:
            label[p] = p
            nb = h.indices[h.indptr[p]:h.indptr[p + 1]]
            label[nb[label[nb] < 0]] = p
    return label


def seq_scores(h, pick):
    """Recompute degrees / 2-path counts of H[U] from scratch before every pivot."""
    a = (h.toarray() > 0).astype(np.int64)
    n = len(a)
    alive = np.ones(n, dtype=bool)
    label = np.arange(n)
    while alive.any():
        b = a * alive[:, None] * alive[None, :]
        p = pick(b, alive)
        cluster = np.r_[p, np.flatnonzero(b[p])]
        label[cluster] = p
        alive[cluster] = False
    return label


def pick_degree(b, alive):
    d = np.where(alive, b.sum(1), -1)
    return int(np.argmax(d))


def pick_ratio(b, alive):
    d = b.sum(1)
    ending, centred = b @ (d - 1), d * (d - 1) / 2  # 2-paths ending at / centred at each node
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(alive & (centred > 0), ending / centred, np.inf)
    return int(np.argmin(score)) if np.isfinite(score).any() else int(np.flatnonzero(alive)[0])


def seq_scan(g, wt):
    """Official maximal_disjoint_openwedge_rounding: keep a wedge when both edges are unused, in scan order."""
    used, kept = set(), []
    for w, (a, b) in enumerate(zip(wt.e1.tolist(), wt.e2.tolist())):
        if a not in used and b not in used:
            used |= {a, b}
            kept.append(w)
    return np.array(kept, dtype=np.int64)


def same_partition(a, b):
    return len(set(zip(a.tolist(), b.tolist()))) == len(set(a.tolist())) == len(set(b.tolist()))


CASES = [(n, p, s) for s, (n, p) in enumerate([(12, 0.3), (25, 0.15), (30, 0.3), (45, 0.1), (50, 0.25), (60, 0.08)])]


@pytest.mark.parametrize("n, p, seed", CASES)
def test_pivots_match_sequential_references(n, p, seed):
    g = as_graph(nx.to_scipy_sparse_array(nx.gnp_random_graph(n, p, seed=seed), weight=None), "g")
    wt = wedges_and_triangles(g, triangles=False)
    chosen = maximal_disjoint_open_wedges(g, wt)
    assert np.array_equal(chosen, seq_scan(g, wt))
    for x in (wedge_edge_mask(g, wt, chosen), stc_lp_mincut(g, wt).x):
        h = g.subgraph_keep(x < 0.5 - 1e-8)
        rank = np.random.default_rng(seed).permutation(g.n)
        lab = random_pivot(h, np.random.default_rng(seed))  # draws the same permutation first
        assert np.array_equal(lab, seq_random(h, rank))
        deg, rat = degree_pivot(h), ratio_pivot(h)
        assert same_partition(deg, seq_scores(h, pick_degree))
        assert same_partition(rat, seq_scores(h, pick_ratio))
        assert all(clusters_are_cliques(g, lab_) for lab_ in (lab, deg, rat))


def test_wedge_rounds_equal_the_scan_on_a_larger_graph():
    """Enough wedges for the vectorised rounds to run before the sequential tail (and the random order too)."""
    from zoo.clusterdel import wedges

    g = as_graph(nx.to_scipy_sparse_array(nx.gnp_random_graph(300, 0.08, seed=3), weight=None), "g")
    wt = wedges_and_triangles(g, triangles=False)
    assert wt.n_wedges > 3 * wedges._SEQUENTIAL_TAIL
    assert np.array_equal(maximal_disjoint_open_wedges(g, wt), seq_scan(g, wt))
    rnd = maximal_disjoint_open_wedges(g, wt, order="random", seed=1)
    mark = np.zeros(g.m, bool)
    mark[np.r_[wt.e1[rnd], wt.e2[rnd]]] = True
    assert mark.sum() == 2 * len(rnd) and np.all(mark[wt.e1] | mark[wt.e2])  # disjoint and maximal


def test_wedges_and_triangles_match_networkx():
    G = nx.gnp_random_graph(70, 0.2, seed=5)
    g = as_graph(nx.to_scipy_sparse_array(G, weight=None), "g")
    wt = wedges_and_triangles(g)
    assert wt.n_triangles == sum(nx.triangles(G).values()) // 3
    two_paths = sum(d * (d - 1) // 2 for _, d in G.degree)
    assert wt.n_wedges == two_paths - 3 * wt.n_triangles
    tri = {tuple(sorted({int(g.u[e]) for e in t} | {int(g.v[e]) for e in t})) for t in wt.triangles}
    assert tri == {tuple(sorted(c)) for c in nx.enumerate_all_cliques(G) if len(c) == 3}
