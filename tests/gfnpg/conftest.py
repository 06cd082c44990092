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


TINY = dict(batch_size=16, hidden_dim=16, n_hidden_layers=2, value_hidden_layers=1)


def assert_same_iterations(variant: str, choose, guide: bool = False, iterations: int = 3) -> None:
    """Two float64 models with the same weights on a 6×6 grid, `choose(True)` before the first runs `iterations`
    training iterations and `choose(False)` before the second does the same from the same seed: the same metrics and
    parameters (the log-probabilities are gathered in float32, hence the tolerance). `choose` switches between a
    shortcut and the plain path it must equal."""
    from datamodules.gfn_envs import GFNEnvDataModule
    from zoo.gfnpg import GFNPGModule

    dm = GFNEnvDataModule(env="hypergrid", height=6, ndim=2, R0=0.1, guide=guide)
    dm.setup()
    models = {k: GFNPGModule(variant=variant, **TINY) for k in (True, False)}
    for m in models.values():
        m.set_env(dm.env)
        m.double()
    models[False].load_state_dict(models[True].state_dict())
    metrics = {}
    for flag, model in models.items():
        choose(flag)
        opts = model.named_optimizers()
        torch.manual_seed(0)
        metrics[flag] = [model.train_iteration(opts) for _ in range(iterations)]
    for a, b in zip(metrics[True], metrics[False]):
        for k in a:
            torch.testing.assert_close(torch.as_tensor(a[k]).double(), torch.as_tensor(b[k]).double(),
                                       rtol=1e-5, atol=1e-6, msg=k)
    for (name, a), b in zip(models[True].named_parameters(), models[False].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
