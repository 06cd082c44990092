"""j(i): the neighbour of each distinct covariate on the Euclidean minimum spanning tree (the OT term's partner).

The official code builds the MST with igraph on the dense N x N distance matrix. scipy's
`csgraph.minimum_spanning_tree` on the complete graph needs the same O(N²) memory: 6.9 GB and 69 s for the 20,000 ECM
covariates here. A complete graph is the dense case where Prim's algorithm is the right one: N rounds of one
distance row each, O(N²) time and O(N) memory (2.7 s at 20,000; `benchmarks/gentle_mst.py`). Its tie-breaking
follows scipy's stable-sorted Kruskal (edges by length, then by (a, b) in row-major order), so both return the same
tree even where lengths tie, as on CPS's binary covariates (checked edge for edge on the official files).
"""

from __future__ import annotations

import numpy as np


def mst_edges(x: np.ndarray) -> np.ndarray:
    """(N - 1, 2) edges (a, b), a < b, of the Euclidean MST of the rows of x (all distinct), sorted by (a, b)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 2:
        raise ValueError(f"the MST needs at least 2 distinct covariates, got {n}")
    columns = [np.ascontiguousarray(x[:, k]) for k in range(x.shape[1])]
    # outside the tree: node rest[k], its shortest known edge into the tree of length best[k], that edge as the key
    # a * n + b (a < b). Edges ordered by (length, key) is the strict total order in which scipy's stable-sorted
    # Kruskal takes them, so the MST is unique and the same as scipy's.
    rest = np.arange(1, n)
    best = np.full(n - 1, np.inf)
    key = np.full(n - 1, n * n, dtype=np.int64)
    edges = np.empty((n - 1, 2), dtype=np.int64)
    new = 0
    for step in range(n - 1):
        # the distance row of the node just added, summed column by column: bit-equal to scipy's cdist, so ties
        # are the same ties
        d = np.zeros(len(rest))
        for col in columns:
            d += (col[rest] - col[new]) ** 2
        d = np.sqrt(d)
        if not (d > 0).all():  # each duplicate pair shows here when its first row joins the tree
            raise ValueError("covariates must be distinct: two rows are at distance 0")
        key_new = np.minimum(rest, new) * n + np.maximum(rest, new)
        better = (d < best) | ((d == best) & (key_new < key))
        best, key = np.where(better, d, best), np.where(better, key_new, key)
        ties = np.flatnonzero(best == best.min())
        k = ties[np.argmin(key[ties])]  # equal lengths: the smallest (a, b), as Kruskal takes them
        edges[step] = divmod(key[k], n)
        new = rest[k]
        # drop k by moving the last entry into its place: O(1), and the order of `rest` plays no part in the choice
        rest[k], best[k], key[k] = rest[-1], best[-1], key[-1]
        rest, best, key = rest[:-1], best[:-1], key[:-1]
    return edges[np.lexsort((edges[:, 1], edges[:, 0]))]


def official_relation(x: np.ndarray) -> np.ndarray:
    """(N,) the official assignment on the MST, with -1 where it leaves a covariate unset.

    For each MST edge (a, b), in (a, b) order: rel[b] = a if rel[b] is unset, else rel[a] = b if rel[a] is unset.
    A tree has N - 1 edges, so at least one node stays unset, usually far more: 1,761 of the 8,927 covariates
    (19.7%) in the official `relation/cps_0.3.npy`, 3,976 of 20,000 (19.9%) in `relation/cancer_0.3.npy`. The
    released generator step pairs each unset node with the last covariate, and its potential step skips them
    (``GENTLEModule(pairing="released")``).
    """
    return _assign(mst_edges(x), len(x))


def _assign(edges: np.ndarray, n: int) -> np.ndarray:
    rel = np.full(n, -1, dtype=np.int64)
    for a, b in edges:
        if rel[b] == -1:
            rel[b] = a
        elif rel[a] == -1:
            rel[a] = b
    return rel


def released_relation(x: np.ndarray, order: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """The released code's pairs: (`official_relation` with the rows of x indexed in ``order``, mapped back to x's
    indexing, -1 where unset; the index in x of ``distinct_x[-1]``, the partner of every unset node).

    The official code indexes its distinct covariates in order of first appearance in the training file. The
    assignment takes the tree's edges in (a, b) order of those indices, and the last index is the unset nodes'
    partner, so both depend on the order (default: x's own).
    """
    order = np.arange(len(x)) if order is None else np.asarray(order)
    in_order = official_relation(np.asarray(x)[order])
    rel = np.full(len(order), -1, dtype=np.int64)
    assigned = in_order != -1
    rel[order[assigned]] = order[in_order[assigned]]
    return rel, int(order[-1])


def mst_neighbours(x: np.ndarray) -> np.ndarray:
    """(N,) index j(i) of an MST neighbour of every covariate: the official assignment, where a node it leaves
    unset gets the MST neighbour nearest to it, so that every covariate takes part in the OT term."""
    x = np.asarray(x, dtype=np.float64)
    edges = mst_edges(x)
    rel = _assign(edges, len(x))
    for i in np.flatnonzero(rel == -1):
        adjacent = np.concatenate([edges[edges[:, 0] == i, 1], edges[edges[:, 1] == i, 0]])
        rel[i] = adjacent[np.argmin(np.linalg.norm(x[adjacent] - x[i], axis=1))]
    return rel


def lipschitz_weights(x: np.ndarray, neighbours: np.ndarray, power: float) -> np.ndarray:
    """(N,) weights ‖x_i - x_j(i)‖^(-power) of the OT term's pairs, normalised to mean 1 (ours: the official code
    weights every pair by 1, which ``power`` 0 gives; ``GENTLEModule(lipschitz_power=...)``)."""
    distance = np.linalg.norm(np.asarray(x, dtype=np.float64) - x[neighbours], axis=1)
    weight = distance ** -float(power)
    return weight / weight.mean()
