"""j(i): the neighbour of each distinct covariate on the Euclidean minimum spanning tree (the OT term's partner).

The official code builds the MST with igraph on the dense distance matrix; here scipy's
`csgraph.minimum_spanning_tree` runs on the upper triangle of the complete graph, built in row blocks so that the
dense N x N matrix is never held twice (N = 13,745 CPS covariates: ~0.8 GB of float64 edge weights).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import cdist

BLOCK_ROWS = 512


def complete_graph(x: np.ndarray) -> csr_matrix:
    """Upper-triangular CSR matrix of the Euclidean distances between the rows of x (all distinct)."""
    n = len(x)
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.arange(n - 1, -1, -1))
    indices = np.empty(indptr[-1], dtype=np.int32 if n < 2**31 else np.int64)
    data = np.empty(indptr[-1], dtype=np.float64)
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        cols = np.arange(start, n)
        upper = cols[None, :] > np.arange(start, stop)[:, None]  # row-major, as CSR stores the block
        a, b = indptr[start], indptr[stop]
        data[a:b] = cdist(x[start:stop], x[start:])[upper]
        indices[a:b] = np.broadcast_to(cols, upper.shape)[upper]
    if n > 1 and not (data > 0).all():
        raise ValueError("covariates must be distinct: two rows are at distance 0")
    return csr_matrix((data, indices, indptr), shape=(n, n))


def mst_edges(x: np.ndarray) -> np.ndarray:
    """(N - 1, 2) edges (a, b), a < b, of the Euclidean MST of the rows of x, in scipy's row-major order."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        raise ValueError(f"the MST needs at least 2 distinct covariates, got {len(x)}")
    tree = minimum_spanning_tree(complete_graph(x)).tocoo()
    order = np.lexsort((tree.col, tree.row))
    edges = np.stack([tree.row[order], tree.col[order]], axis=1).astype(np.int64)
    return np.sort(edges, axis=1)


def mst_neighbours(x: np.ndarray) -> np.ndarray:
    """(N,) index j(i) of an MST neighbour of every covariate.

    The official rule: for each MST edge (a, b), rel[b] = a if rel[b] is unset, else rel[a] = b if rel[a] is unset.
    A tree has N - 1 edges, so at least one node stays unset (officially -1; the generator step then pairs it with
    the last covariate and the potential step skips it). Here a node left unset gets the MST neighbour nearest to
    it, so every covariate takes part in the OT term.
    """
    x = np.asarray(x, dtype=np.float64)
    edges = mst_edges(x)
    rel = np.full(len(x), -1, dtype=np.int64)
    for a, b in edges:
        if rel[b] == -1:
            rel[b] = a
        elif rel[a] == -1:
            rel[a] = b
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
