"""The oracle graphs of issue 19: networkx's karate, les_miserables, florentine, davis; three seeded G(40, 0.15);
and the official repository's dolphins, football, polbooks, adjnoun (../shared/data, skipped when absent)."""

from __future__ import annotations

import functools

import networkx as nx
import pytest
import scipy.io as sio

from datamodules.graphs import NX_GRAPHS, gnp_graph
from zoo.clusterdel import as_graph, run_algorithms

NX_NAMES = list(NX_GRAPHS)
GNP_NAMES = [f"gnp40_{s}" for s in range(3)]
REPO_NAMES = ["dolphinsA", "footballA", "polbooksA", "adjnounA"]
ALL_NAMES = NX_NAMES + GNP_NAMES + REPO_NAMES


@functools.cache
def _graph(name: str, root: str | None):
    if name in NX_GRAPHS:
        return as_graph(nx.to_scipy_sparse_array(NX_GRAPHS[name](), weight=None), name)
    if name.startswith("gnp40_"):
        return as_graph(gnp_graph(40, 0.15, seed=int(name[-1])), name)
    return as_graph(sio.loadmat(f"{root}/cluster_deletion/smallgraphs/{name}.mat")["A"], name)


@functools.cache
def _report(name: str, root: str | None):
    # every algorithm once per graph (the ILP gets the combinatorial solutions as its MIP start)
    return run_algorithms(_graph(name, root), ["lp_pivot", "lp_degree", "mfp", "degmfp", "ratmfp", "ilp"],
                          pivtimes=100, ilp_time_limit=60, ilp_on_limit="error")


@pytest.fixture(params=ALL_NAMES)
def oracle_graph(request):
    root = None
    if request.param in REPO_NAMES:
        root = str(request.getfixturevalue("shared_data"))
    return _graph(request.param, root)


@pytest.fixture
def oracle_report(oracle_graph, request):
    root = str(request.getfixturevalue("shared_data")) if oracle_graph.name in REPO_NAMES else None
    return _report(oracle_graph.name, root)


@pytest.fixture
def load_graph():
    """Graph by oracle name (networkx or G(40, 0.15) names only: no shared data needed)."""
    return lambda name: _graph(name, None)
