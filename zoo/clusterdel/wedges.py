"""A maximal set W of edge-disjoint open wedges: the lower bound |W| <= OPT of MatchFlipPivot (MFP).

Each open wedge needs one of its two edges deleted, and disjoint wedges need different edges, so |W| <= OPT; the
2|W| wedge edges are the ones MFP deletes before pivoting (``x_e = 1`` on them, 0 elsewhere).

The official ``maximal_disjoint_openwedge_rounding`` scans the wedges in order (centre i, then neighbours
j < k) and keeps every wedge whose two edges are both still unused. That is the lexicographically first maximal
matching of the wedge graph, and `maximal_disjoint_open_wedges` computes exactly that set without a loop over
wedges: in rounds, every live wedge that comes first (in scan order) at both of its edges is kept, and the live
wedges that touch a kept edge die. A kept wedge is one the sequential scan keeps too (every earlier wedge
sharing an edge with it is already decided against), and each round keeps at least the first live wedge.

Chains of wedges that each wait for the previous one (long paths) make the rounds many; when a round decides
few wedges the remaining ones (in scan order) go through the same rule one by one, which gives the same set.
``order="random"`` instead scans in a seeded random order: a different maximal set, found in few rounds.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from zoo.clusterdel.graph import Graph, WedgesTriangles, unique

_SEQUENTIAL_TAIL = 20_000  # live wedges below which the one-by-one scan finishes the job


def _sequential(e1: list[int], e2: list[int], used: np.ndarray) -> list[int]:
    """The official scan on the live wedges, in order (indices into e1/e2); marks the kept wedges' edges."""
    mark = bytearray(used.tobytes())  # one byte per edge: the fastest lookup a Python loop gets
    kept = []
    for w, a, b in zip(range(len(e1)), e1, e2):
        if not (mark[a] or mark[b]):
            mark[a] = mark[b] = 1
            kept.append(w)
    used[:] = np.frombuffer(bytes(mark), dtype=bool)
    return kept


def maximal_disjoint_open_wedges(g: Graph, wt: WedgesTriangles, order: Literal["scan", "random"] = "scan",
                                 seed: int = 0) -> np.ndarray:
    """Indices (into ``wt``) of a maximal set of edge-disjoint open wedges, in increasing scan position."""
    n_w = wt.n_wedges
    by_prio = np.arange(n_w, dtype=np.int64)
    if order == "random":
        by_prio = np.random.default_rng(seed).permutation(n_w)  # wedge ids in the order they are scanned
    e1, e2 = wt.e1[by_prio], wt.e2[by_prio]
    used = np.zeros(g.m, dtype=bool)
    kept: list[np.ndarray] = []
    # incidences (edge, scan position of a wedge at it), sorted once; filtering keeps them sorted
    inc_edge = np.concatenate([e1, e2])
    inc_pos = np.concatenate([np.arange(n_w, dtype=np.int64)] * 2)
    srt = np.lexsort((inc_pos, inc_edge))
    inc_edge, inc_pos = inc_edge[srt], inc_pos[srt]
    hits = np.zeros(n_w, dtype=np.int8)
    live_wedges = n_w
    while live_wedges:
        if live_wedges <= _SEQUENTIAL_TAIL:
            break
        first = np.ones(len(inc_edge), dtype=bool)
        first[1:] = inc_edge[1:] != inc_edge[:-1]
        cand = inc_pos[first]  # the first live wedge at each edge
        np.add.at(hits, cand, 1)
        take = unique(cand[hits[cand] == 2])  # first at both of its edges
        hits[cand] = 0
        kept.append(take)
        used[e1[take]] = True
        used[e2[take]] = True
        alive = ~(used[e1[inc_pos]] | used[e2[inc_pos]])
        inc_edge, inc_pos = inc_edge[alive], inc_pos[alive]
        before, live_wedges = live_wedges, len(inc_pos) // 2
        if (before - live_wedges) * 64 < live_wedges:  # stalling: 64 more rounds would cost more than one scan
            break
    if live_wedges:
        live = unique(inc_pos) if kept else np.arange(n_w, dtype=np.int64)
        kept.append(live[_sequential(e1[live].tolist(), e2[live].tolist(), used)])
    pos = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    return np.sort(by_prio[pos])


def wedge_edge_mask(g: Graph, wt: WedgesTriangles, chosen: np.ndarray) -> np.ndarray:
    """x_e = 1 on the 2|W| edges of the chosen wedges (the edges MFP deletes), else 0."""
    x = np.zeros(g.m, dtype=np.float64)
    x[wt.e1[chosen]] = 1.0
    x[wt.e2[chosen]] = 1.0
    return x
