"""Training tuples (official `BiggerTree.get_tuples_clustered` over `utils.cluster_embeddings` /
`create_graph`): embed the queries, build the full agglomerative merge tree, walk it bottom-up and cut the walk
into tuples of at most ``max_tuple_size`` programs; then order the tuples by total query length (the
curriculum).

The walk is the official one: the merge tree as a networkx DiGraph (merge node -> children, leaves named
``"<i>:<id>"``), ``reversed(topological_sort)``, leaves taken in that order. networkx's topological sort goes
generation by generation, so leaves that sit at the same depth of the tree end up next to each other.

Deviations: the last, incomplete tuple is kept (the official loop never appends it, so up to
``max_tuple_size - 1`` programs were silently left out); a single example is one tuple (Ward needs two).
As officially, an example whose query repeats an earlier one in the walk is skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.regal.retrieval import tfidf


def merge_tree(embeddings: np.ndarray, distance_threshold: float = 0.1):
    """`AgglomerativeClustering(n_clusters=None, distance_threshold=...)` (Ward): with a threshold scikit-learn
    always computes the full tree, so ``children_`` holds all n - 1 merges."""
    from sklearn.cluster import AgglomerativeClustering

    return AgglomerativeClustering(n_clusters=None, distance_threshold=distance_threshold).fit(embeddings)


def merge_graph(children: np.ndarray, ids: list[str]):
    import networkx as nx

    graph = nx.DiGraph()
    n = len(ids)
    for i, merge in enumerate(children):
        for child in merge:
            if child < n:
                leaf = f"{child}:{ids[child]}"
                graph.add_node(leaf)
                graph.add_edge(i + n, leaf)
            else:
                graph.add_edge(i + n, int(child))
    return graph


def walk_leaves(children: np.ndarray, ids: list[str]) -> list[int]:
    """Leaf indices in the official bottom-up order."""
    import networkx as nx

    graph = merge_graph(children, ids)
    return [int(node.split(":", 1)[0]) for node in reversed(list(nx.topological_sort(graph)))
            if isinstance(node, str)]


def make_tuples(examples: list[dict[str, Any]], max_tuple_size: int, distance_threshold: float = 0.1,
                curriculum: bool = True) -> list[list[dict[str, Any]]]:
    """Tuples of examples: a partition of the examples with distinct queries, each tuple of size <= max."""
    if max_tuple_size < 1:
        raise ValueError(f"max_tuple_size must be >= 1, got {max_tuple_size}")
    if not examples:
        return []
    if len(examples) == 1:
        order = [0]
    else:
        emb = tfidf([e["query"] for e in examples])
        order = walk_leaves(merge_tree(emb, distance_threshold).children_, [str(e["id"]) for e in examples])
    tuples, current, seen = [], [], set()
    for i in order:
        q = examples[i]["query"]
        if q in seen:
            continue
        seen.add(q)
        current.append(examples[i])
        if len(current) == max_tuple_size:
            tuples.append(current)
            current = []
    if current:
        tuples.append(current)
    if curriculum:  # stable: equal lengths keep the walk's order
        tuples.sort(key=lambda t: len(" ".join(e["query"] for e in t)))
    return tuples
