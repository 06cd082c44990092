"""Shared fixtures of the GFN-PG tests (the root conftest pins torch to one thread)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

# The brute-force oracles in tests/gfnpg/gfnpg_reference.py (pytest runs with --import-mode=importlib, which does
# not put test directories on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo.gfnpg import DAGEnv, Hypergrid, bge_local_scores, enumerate_dags  # noqa: E402


@pytest.fixture
def grid3() -> Hypergrid:
    return Hypergrid(height=3, ndim=2, R0=0.1)


@pytest.fixture
def dag3() -> DAGEnv:
    """3-node DAG task (25 DAGs) with a BGe reward of 30 random observations."""
    data = np.random.default_rng(1).normal(size=(30, 3))
    data[:, 2] += 0.8 * data[:, 0]
    return DAGEnv(bge_local_scores(data), enumerate_dags(3))


def tiny_net(in_dim: int, out_dim: int, seed: int = 0, hidden: int = 8) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(in_dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, out_dim))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return net.double()


@pytest.fixture
def make_net():
    return tiny_net
