"""Pivot rounding on the auxiliary graph H (G minus the edges an LP or a wedge set marks for deletion).

Every pivot p forms the cluster {p} + its H-neighbours among the unclustered nodes U. Two H-edges at one node
never form an open wedge of G (H keeps only x_e = 0 edges, and an open wedge has x_ij + x_ik >= 1), so every
cluster is a clique of G. Pivot choices (paper Sec. 3-4; official ``permutation_pivot``, ``det_pivot_degree``,
``det_pivot_ratio``):

- `random_pivot`: p is the next node of a uniform random permutation (MFP, LP rounding; best of many runs);
- `degree_pivot`: p maximises the degree in H[U] (DegMFP, deterministic LP rounding);
- `ratio_pivot`: p minimises (#2-paths of H[U] ending at p) / (#2-paths of H[U] centred at p) (RatMFP).

A clustering is an int array ``label`` (the pivot of each node's cluster).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from zoo.clusterdel.graph import Graph, unique


def cd_cost(g: Graph, label: np.ndarray) -> int:
    """Cluster-deletion cost: the edges of G between clusters."""
    return int(np.count_nonzero(label[g.u] != label[g.v]))


def clusters_are_cliques(g: Graph, label: np.ndarray) -> bool:
    """Every cluster is a clique of G: the G-edges inside each cluster number size * (size - 1) / 2."""
    _, dense = np.unique(label, return_inverse=True)
    sizes = np.bincount(dense)
    inside = dense[g.u] == dense[g.v]
    within = np.bincount(dense[g.u[inside]], minlength=len(sizes))
    return bool(np.all(within == sizes * (sizes - 1) // 2))


def components_if_cliques(g: Graph, h: sp.csr_array) -> np.ndarray | None:
    """The connected components of H as the clustering when every one is a clique of G (official
    ``CD_LP_round`` tries this first), else None."""
    _, comp = connected_components(h, directed=False)
    return comp if clusters_are_cliques(g, comp) else None


def _gather_rows(h: sp.csr_array, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, neighbour) for every H-entry in the rows ``nodes``, without a loop over the rows."""
    starts, stops = h.indptr[nodes], h.indptr[nodes + 1]
    counts = stops - starts
    total = int(counts.sum())
    owner = np.repeat(nodes, counts)
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, h.indices[np.repeat(starts, counts) + offs].astype(np.int64)


def random_pivot(h: sp.csr_array, rng: np.random.Generator) -> np.ndarray:
    """One run of pivot with a uniform random pivot order (official ``permutation_pivot``).

    Computed without a loop over pivots: p is a pivot exactly when no earlier node of the order among its
    H-neighbours is a pivot (the lexicographically first maximal independent set of H in that order), and every
    other node joins its earliest pivot neighbour. The independent set is found in rounds (a node with no
    undecided earlier neighbour decides); for a random order there are O(log n) of them with high probability.
    """
    n = h.shape[0]
    rank = rng.permutation(n)  # rank[v] = position of v in the pivot order
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(h.indptr))
    cols = h.indices.astype(np.int64)
    earlier = rank[cols] < rank[rows]
    a, b = rows[earlier], cols[earlier]  # b comes before a: b can block a
    state = np.zeros(n, dtype=np.int8)  # 0 undecided, 1 pivot, 2 clustered under an earlier pivot
    while True:
        blocked = np.zeros(n, dtype=bool)
        blocked[a] = True
        new = (state == 0) & ~blocked
        if not new.any():
            break
        state[new] = 1
        # undecided neighbours of new pivots (either direction) are taken
        hit = np.concatenate([a[new[b]], b[new[a]]])
        hit = hit[state[hit] == 0]
        state[hit] = 2
        keep = (state[a] == 0) & (state[b] == 0)
        a, b = a[keep], b[keep]
        if not len(a):
            state[state == 0] = 1
            break
    label = np.arange(n, dtype=np.int64)
    pivots = state == 1
    # every non-pivot joins the pivot neighbour earliest in the order
    sel = ~pivots[rows] & pivots[cols]
    r, c = rows[sel], cols[sel]
    if len(r):
        order = np.lexsort((rank[c], r))
        r, c = r[order], c[order]
        first = np.ones(len(r), dtype=bool)
        first[1:] = r[1:] != r[:-1]
        label[r[first]] = c[first]
    return label


def best_random_pivot(g: Graph, h: sp.csr_array, runs: int, rng: np.random.Generator) -> tuple[np.ndarray, int,
                                                                                               list[int]]:
    """The best of ``runs`` random pivots by CD cost (official ``CD_LP_round``: 1 + pivtimes runs)."""
    best, best_cost, costs = None, None, []
    for _ in range(runs):
        label = random_pivot(h, rng)
        cost = cd_cost(g, label)
        costs.append(cost)
        if best_cost is None or cost < best_cost:
            best, best_cost = label, cost
    return best, best_cost, costs


class _BlockArgmin:
    """argmin over a vector that changes in few places per step: minima of blocks of size ~sqrt(n), refreshed
    only for the blocks that changed. Ties go to the smallest index, like Julia's ``argmin``."""

    def __init__(self, values: np.ndarray):
        n = len(values)
        self.size = max(1, int(np.sqrt(n)))
        nb = -(-n // self.size)
        self.vals = np.full(nb * self.size, np.inf)
        self.vals[:n] = values
        self.grid = self.vals.reshape(nb, self.size)
        self.block_min = self.grid.min(axis=1)

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        self.vals[idx] = values
        blocks = unique(idx // self.size)
        self.block_min[blocks] = self.grid[blocks].min(axis=1)

    def argmin(self) -> tuple[int, float]:
        b = int(np.argmin(self.block_min))
        i = int(np.argmin(self.grid[b]))
        return b * self.size + i, float(self.grid[b, i])


def _finish_matching(h: sp.csr_array, alive: np.ndarray, label: np.ndarray) -> None:
    """When no node of H[U] has two neighbours left, every component is an edge or a node, and any pivot order
    gives the same clusters: pair each node with its one live neighbour (if any)."""
    nodes = np.flatnonzero(alive)
    owner, nb = _gather_rows(h, nodes)
    live = alive[nb]
    owner, nb = owner[live], nb[live]
    label[nodes] = nodes
    label[owner] = np.minimum(owner, nb)
    alive[nodes] = False


def _take_cluster(h: sp.csr_array, p: int, alive: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Pivot p takes itself and its H-neighbours still in U: they leave U (``alive``) labelled p."""
    nbrs = h.indices[h.indptr[p]:h.indptr[p + 1]].astype(np.int64)
    cluster = np.concatenate([[p], nbrs[alive[nbrs]]])
    alive[cluster] = False
    label[cluster] = p
    return cluster


def degree_pivot(h: sp.csr_array) -> np.ndarray:
    """Deterministic pivot: always the node of maximum degree in H[U] (DegMFP; the paper's derandomisation).

    Ties go to the smallest node index; the official bin structure breaks ties by bin insertion order instead,
    which can pick a different node among equal degrees (the 3-approximation holds for any tie-break)."""
    n = h.shape[0]
    deg = np.diff(h.indptr).astype(np.int64)
    label = np.arange(n, dtype=np.int64)
    alive = deg > 0  # isolated nodes are singletons at once (as the official code does)
    tracker = _BlockArgmin(np.where(alive, -deg, np.inf).astype(np.float64))
    while True:
        p, key = tracker.argmin()
        if key == np.inf:
            break
        if key > -2:  # max degree <= 1 left
            _finish_matching(h, alive, label)
            break
        cluster = _take_cluster(h, p, alive, label)
        _, nb = _gather_rows(h, cluster)
        nb = nb[alive[nb]]
        touched, drop = np.unique(nb, return_counts=True)
        deg[touched] -= drop
        alone = touched[deg[touched] == 0]
        alive[alone] = False  # degree 0 in H[U]: a singleton
        idx = np.concatenate([cluster, touched])
        tracker.set(idx, np.where(alive[idx], -deg[idx], np.inf))
    return label


def _ratio(num: np.ndarray, den: np.ndarray, alive: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num / den
    return np.where(alive & (den > 0), r, np.inf)


def ratio_pivot(h: sp.csr_array) -> np.ndarray:
    """Deterministic pivot minimising (#2-paths of H[U] with p as an endpoint) / (#2-paths centred at p)
    (RatMFP; official ``det_pivot_ratio``, ties to the smallest index as Julia's ``argmin``).

    With d the degrees in H[U]: centred(p) = d(p)(d(p) - 1)/2 and ending(p) = sum over neighbours q of (d(q) - 1).
    Both are updated after each cluster only where they change (the cluster's neighbours and theirs)."""
    n = h.shape[0]
    deg = np.diff(h.indptr).astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), deg)
    num = np.bincount(rows, weights=(deg[h.indices] - 1).astype(np.float64), minlength=n)
    den = (deg * (deg - 1) // 2).astype(np.float64)
    label = np.arange(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    tracker = _BlockArgmin(_ratio(num, den, alive))
    while True:
        p, key = tracker.argmin()
        if key == np.inf:  # no 2-path left in H[U]: the rest is edges and single nodes
            _finish_matching(h, alive, label)
            break
        cluster = _take_cluster(h, p, alive, label)
        owner, w = _gather_rows(h, cluster)
        live = alive[w]
        owner, w = owner[live], w[live]
        # w loses the terms (d(c) - 1) of its removed neighbours c, and one degree per removed neighbour
        np.subtract.at(num, w, (deg[owner] - 1).astype(np.float64))
        changed, drop = np.unique(w, return_counts=True)
        deg[changed] -= drop
        den[changed] = deg[changed] * (deg[changed] - 1) // 2
        # live neighbours v of a changed node q lose drop(q) from their (d(q) - 1) term
        q, v = _gather_rows(h, changed)
        live = alive[v]
        q, v = q[live], v[live]
        np.subtract.at(num, v, drop[np.searchsorted(changed, q)].astype(np.float64))
        idx = unique(np.concatenate([cluster, changed, v]))
        tracker.set(idx, _ratio(num[idx], den[idx], alive[idx]))
    return label
