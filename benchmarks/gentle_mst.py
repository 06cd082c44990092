"""GENTLE's neighbour graph: the Euclidean minimum spanning tree of the distinct training covariates. Ours (Prim on
distance rows, `zoo.gentle.neighbours.mst_edges`) vs scipy's `csgraph.minimum_spanning_tree` on the complete graph
(its upper triangle as CSR, which is what a scipy user must build; the official code does the same with igraph).

    python benchmarks/gentle_mst.py                      # N = 2,000, 8,927 (CPS balanced), 20,000 (ECM), 5 columns
    python benchmarks/gentle_mst.py --sizes 2000 --dims 9
    python benchmarks/gentle_mst.py --quick              # N = 300 and 1,000 (the test)

Each method runs in a forked child, so its peak RSS (VmHWM after a reset) is its own; both trees must be equal edge
for edge. scipy's time includes building the graph, since that is part of what it needs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _memory import in_forked_child, reset_peak_rss, status_kib  # the sibling helper of the benchmark scripts
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import cdist

from zoo.gentle.neighbours import mst_edges

BLOCK = 512


def scipy_edges(x: np.ndarray) -> np.ndarray:
    """scipy's MST of the complete graph, its upper triangle built in row blocks (no dense N x N held twice)."""
    n = len(x)
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.arange(n - 1, -1, -1))
    indices = np.empty(indptr[-1], dtype=np.int32)
    data = np.empty(indptr[-1])
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        upper = np.arange(start, n)[None, :] > np.arange(start, stop)[:, None]
        data[indptr[start]:indptr[stop]] = cdist(x[start:stop], x[start:])[upper]
        indices[indptr[start]:indptr[stop]] = np.broadcast_to(np.arange(start, n), upper.shape)[upper]
    tree = minimum_spanning_tree(csr_matrix((data, indices, indptr), shape=(n, n))).tocoo()
    edges = np.sort(np.stack([tree.row, tree.col], axis=1), axis=1).astype(np.int64)
    return edges[np.lexsort((edges[:, 1], edges[:, 0]))]


METHODS = {"ours (Prim, distance rows)": mst_edges, "scipy csgraph (complete graph)": scipy_edges}


def _child(method: str, x: np.ndarray, queue) -> None:
    reset_peak_rss()
    before = status_kib("VmRSS")
    t = time.perf_counter()
    edges = METHODS[method](x)
    seconds = time.perf_counter() - t
    queue.put((seconds, (status_kib("VmHWM") - before) / 1024, edges))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 8927, 20000])
    ap.add_argument("--dims", type=int, default=5, help="covariate columns (ECM 5, CPS 9)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [300, 1000] if args.quick else args.sizes
    print(f"Euclidean MST of N standard-normal points in {args.dims} dimensions; one run each, in a forked child\n")
    print("| N | method | seconds | peak MiB | same tree |")
    print("|---|---|---|---|---|")
    for n in sizes:
        x = np.random.default_rng(n).normal(size=(n, args.dims))
        results = {m: in_forked_child(_child, m, x) for m in METHODS}
        reference = results["scipy csgraph (complete graph)"][2]
        for m, (seconds, peak, edges) in results.items():
            print(f"| {n:,} | {m} | {seconds:.2f} | {peak:,.0f} | {np.array_equal(edges, reference)} |")


if __name__ == "__main__":
    main()
