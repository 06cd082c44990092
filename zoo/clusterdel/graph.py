"""Graphs for cluster deletion: a checked simple undirected graph, its edge list, open wedges and triangles.

Every algorithm of the package works on `Graph`: the symmetric 0/1 CSR adjacency (sorted neighbour lists) and
the edge list ``u < v`` in row-major order of the upper triangle, which is the order of the official code's
``Elist = findnz(triu(A))`` up to Julia's column-major traversal. Edge ``e`` is ``(u[e], v[e])``.

Open wedges and triangles come from one vectorised pass over all 2-paths ``j - i - k`` (``j < k`` neighbours of
the centre ``i``), each classified by whether ``jk`` is an edge (neighbour intersection by a sorted-key lookup).
The pass is chunked by centres, so its peak memory is bounded whatever the number of 2-paths (networkx's
clique enumeration ran out of memory on jazz; see the paper notes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from zoo.errors import ZooError

_CHUNK_PATHS = 1 << 22  # 2-paths per chunk of centres (about 4M: a few hundred MB of temporaries)


class Graph:
    """A simple undirected graph: ``adj`` is the symmetric 0/1 CSR adjacency with sorted indices; ``u < v`` lists
    its edges. A plain class, not a dataclass: Lightning's batch transfer rebuilds dataclasses field by field (and
    fails on a frozen one), while an object it does not know, holding no tensors, it passes through as is."""

    __slots__ = ("adj", "name", "u", "v")

    def __init__(self, adj: sp.csr_array, name: str = "graph"):
        self.adj, self.name = adj, name
        upper = sp.triu(adj, k=1, format="csr")
        upper.sort_indices()
        self.u = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(upper.indptr))
        self.v = upper.indices.astype(np.int64)

    def __repr__(self) -> str:
        return f"Graph(name={self.name!r}, n={self.n}, m={self.m})"

    @property
    def n(self) -> int:
        return self.adj.shape[0]

    @property
    def m(self) -> int:
        return len(self.u)

    @property
    def degrees(self) -> np.ndarray:
        return np.diff(self.adj.indptr)

    def edge_keys(self) -> np.ndarray:
        """``u * n + v`` per edge: sorted, so `np.searchsorted` finds an edge id."""
        return self.u * self.n + self.v

    def edge_ids(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Id of edge ``{a, b}`` for each pair, or -1 where it is not an edge."""
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        keys = self.edge_keys()
        q = np.minimum(a, b) * self.n + np.maximum(a, b)
        pos = np.minimum(np.searchsorted(keys, q), max(self.m - 1, 0))
        return np.where((self.m > 0) & (keys[pos] == q) & (a != b), pos, -1)

    def csr_edge_ids(self) -> np.ndarray:
        """Edge id of every stored CSR entry (row ``i``, column ``j``): id of ``{i, j}``."""
        rows = np.repeat(np.arange(self.n, dtype=np.int64), self.degrees)
        return self.edge_ids(rows, self.adj.indices)

    def subgraph_keep(self, keep: np.ndarray) -> sp.csr_array:
        """Adjacency of the spanning subgraph with the edges where ``keep`` is true (the auxiliary graph H)."""
        u, v = self.u[keep], self.v[keep]
        h = sp.coo_array((np.ones(2 * len(u), dtype=np.int8), (np.r_[u, v], np.r_[v, u])), shape=(self.n, self.n))
        h = h.tocsr()
        h.sort_indices()
        return h


def unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values. (numpy 2.4's hash-based ``np.unique`` takes seconds on a few million integers on
    this machine; sorting is ~50x faster.)"""
    x = np.sort(x)
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = x[1:] != x[:-1]
    return x[keep]


def _first_offending_entry(mask: sp.spmatrix | sp.sparray) -> tuple[int, int]:
    coo = sp.coo_array(mask)
    return int(coo.row[0]), int(coo.col[0])


def as_graph(adj, name: str = "graph", standardise: bool = False) -> Graph:
    """Check (or, with ``standardise``, make) a simple undirected graph from a square adjacency matrix.

    ``standardise=True`` is the official ``data/standardize-snap-graphs.jl``: drop the diagonal (self-loops),
    ``A + A'`` (forget directions), then every stored entry becomes 1 (forget weights). Without it the matrix
    must already be symmetric and 0/1 with an empty diagonal (the repository's ``.mat`` graphs are), and any
    deviation is a one-line `ZooError` naming the graph and an offending entry.
    """
    if not sp.issparse(adj):
        adj = np.asarray(adj)
        if adj.ndim != 2:
            raise ZooError(f"adjacency of {name!r} must be a 2-D matrix, got shape {adj.shape}")
        adj = sp.csr_array(adj)
    adj = sp.csr_array(adj, dtype=np.float64)
    if adj.shape[0] != adj.shape[1]:
        raise ZooError(f"adjacency of {name!r} must be square, got shape {adj.shape}")
    if not np.all(np.isfinite(adj.data)):
        raise ZooError(f"adjacency of {name!r} has non-finite entries")
    adj.eliminate_zeros()
    if standardise:
        adj = sp.csr_array(adj - sp.diags_array(adj.diagonal()))
        adj.eliminate_zeros()
        adj = sp.csr_array(adj + adj.T)
        adj.eliminate_zeros()  # an entry cancelled by its negative transpose is no edge
        adj.data[:] = 1.0
    else:
        loops = np.flatnonzero(adj.diagonal())
        if len(loops):
            raise ZooError(f"adjacency of {name!r} has {len(loops)} self-loops (first at node {loops[0]}); "
                           "cluster deletion needs a simple graph (use the snap source to standardise)")
        weighted = adj.data != 1.0
        if weighted.any():
            bad = sp.csr_array((weighted.astype(np.int8), adj.indices, adj.indptr), shape=adj.shape)
            i, j = _first_offending_entry(bad)
            raise ZooError(f"adjacency of {name!r} is weighted: entry ({i}, {j}) is {adj[i, j]:g}, not 1 "
                           "(cluster deletion is unweighted; use the snap source to standardise)")
        asym = abs(adj - adj.T)
        asym.eliminate_zeros()
        if asym.nnz:
            i, j = _first_offending_entry(asym)
            raise ZooError(f"adjacency of {name!r} is not symmetric: entry ({i}, {j}) is {adj[i, j]:g} but "
                           f"({j}, {i}) is {adj[j, i]:g} (use the snap source to standardise directed graphs)")
    if adj.nnz == 0:
        raise ZooError(f"graph {name!r} is empty ({adj.shape[0]} nodes, no edges): nothing to cluster")
    adj = sp.csr_array(adj, dtype=np.int8)
    adj.sort_indices()
    return Graph(adj, name)


@dataclass(frozen=True)
class WedgesTriangles:
    """Open wedges ``j - i - k`` as edge-id pairs (``ij``, ``ik``) with their centre ``i``, in the official scan
    order (centre, then ``j < k`` ascending); triangles once each (smallest vertex as centre) as edge ids
    (``ij``, ``ik``, ``jk``)."""

    center: np.ndarray
    e1: np.ndarray
    e2: np.ndarray
    triangles: np.ndarray  # (T, 3) edge ids

    @property
    def n_wedges(self) -> int:
        return len(self.e1)

    @property
    def n_triangles(self) -> int:
        return len(self.triangles)


def _pairs_for_centres(indptr: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All CSR position pairs (a, b), a < b, inside the rows lo..hi-1: (centre, pos_a, pos_b) in scan order."""
    start, stop = indptr[lo], indptr[hi]
    pos = np.arange(start, stop, dtype=np.int64)
    row = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
    partners = indptr[row + 1] - pos - 1  # later neighbours in the same row
    total = int(partners.sum())
    first = np.repeat(pos, partners)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(partners) - partners, partners)
    return np.repeat(row, partners), first, first + 1 + offsets


def wedges_and_triangles(g: Graph, triangles: bool = True) -> WedgesTriangles:
    """Every open wedge and (if asked) every triangle of ``g``, vectorised and chunked by centres."""
    indptr = g.adj.indptr.astype(np.int64)
    cols = g.adj.indices.astype(np.int64)
    pos_edge = g.csr_edge_ids()
    keys = g.edge_keys()
    deg = np.diff(indptr)
    paths_per_centre = deg * (deg - 1) // 2
    cum = np.concatenate([[0], np.cumsum(paths_per_centre)])
    centres, e1s, e2s, tris = [], [], [], []
    lo = 0
    while lo < g.n:
        # as many centres as fit in one chunk (at least one, however many 2-paths it has)
        hi = int(np.searchsorted(cum, cum[lo] + _CHUNK_PATHS, side="right")) - 1
        hi = min(max(hi, lo + 1), g.n)
        c, pa, pb = _pairs_for_centres(indptr, lo, hi)
        j, k = cols[pa], cols[pb]  # j < k: sorted neighbour lists
        q = j * g.n + k
        at = np.minimum(np.searchsorted(keys, q), g.m - 1)
        closed = keys[at] == q
        open_ = ~closed
        centres.append(c[open_].astype(np.int32))
        e1s.append(pos_edge[pa[open_]])
        e2s.append(pos_edge[pb[open_]])
        if triangles:
            once = closed & (c < j)  # the smallest vertex is the centre: each triangle once
            tris.append(np.stack([pos_edge[pa[once]], pos_edge[pb[once]], at[once]], axis=1))
        lo = hi
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    tri = np.concatenate(tris).astype(np.int64) if tris else np.zeros((0, 3), np.int64)
    return WedgesTriangles(cat(centres, np.int32), cat(e1s, np.int64), cat(e2s, np.int64), tri)
