"""The DAG task: the DAG list (count, acyclicity, official order) and the BGe score (independent Bayesian computation,
score equivalence checked with pgmpy's I-equivalence)."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
import torch
from scipy.stats import multivariate_t

from zoo.errors import ZooError
from zoo.gfnpg import DAGEnv, bge_local_scores, enumerate_dags
from zoo.gfnpg.bn import check_dag_list


def test_five_nodes_have_29281_distinct_acyclic_graphs():
    dags = enumerate_dags(5)
    assert dags.shape == (29281, 25)
    assert len(torch.unique(dags, dim=0)) == 29281
    assert set(dags.unique().tolist()) == {0, 1}
    adj = dags.view(-1, 5, 5).numpy().astype(np.float64)
    assert not np.linalg.matrix_power(adj, 5).any()  # acyclic <=> nilpotent (no walk of length 5)
    assert not np.einsum("bii->b", adj).any()
    sample = np.random.default_rng(0).choice(len(adj), 300, replace=False)
    assert all(nx.is_directed_acyclic_graph(nx.DiGraph(adj[i])) for i in sample)
    assert [len(enumerate_dags(n)) for n in range(1, 5)] == [1, 3, 25, 543]


def test_dag_order_is_the_official_generators():
    """utils.all_dag: edge subsets by size, lexicographic over permutations(range(n), 2), acyclic ones kept."""
    n = 4
    edges = list(itertools.permutations(range(n), 2))
    expected = []
    for subset in itertools.chain.from_iterable(itertools.combinations(edges, r) for r in range(len(edges) + 1)):
        g = nx.DiGraph(subset)
        g.add_nodes_from(range(n))
        if nx.is_directed_acyclic_graph(g):
            expected.append(nx.to_numpy_array(g, dtype=int, nodelist=range(n)).flatten())
    assert np.array_equal(enumerate_dags(n).numpy(), np.array(expected))


def niw_log_marginal(x: np.ndarray, alpha_mu: float, df: float, scale: np.ndarray) -> float:
    """log p(x_1..x_N) under mu | S ~ N(0, S/alpha_mu), S ~ IW(df, scale), as the product of posterior predictive
    Student-t densities (sequential Bayesian updating; no closed-form marginal)."""
    n, d = x.shape
    kappa, nu, mu, psi = alpha_mu, df, np.zeros(d), scale.copy()
    total = 0.0
    for row in x:
        dof = nu - d + 1
        shape = psi * (kappa + 1) / (kappa * dof)
        total += multivariate_t(loc=mu, shape=shape, df=dof).logpdf(row)
        psi = psi + (kappa / (kappa + 1)) * np.outer(row - mu, row - mu)
        mu = (kappa * mu + row) / (kappa + 1)
        kappa, nu = kappa + 1, nu + 1
    return total


def test_bge_equals_an_independent_bayesian_computation():
    rng = np.random.default_rng(3)
    n, N = 4, 25
    data = rng.normal(size=(N, n))
    data[:, 3] += data[:, 0] - 0.5 * data[:, 1]
    scores = bge_local_scores(data)
    alpha_mu, alpha_w = 1.0, n + 2.0
    t = alpha_mu * (alpha_w - n - 1) / (alpha_mu + 1)

    def log_p(subset):
        if not subset:
            return 0.0
        k = len(subset)  # the marginal of the Wishart prior on a k-subset: IW(alpha_w - n + k, t I_k)
        return niw_log_marginal(data[:, subset], alpha_mu, alpha_w - n + k, t * np.eye(k))

    for j, parents in [(3, []), (3, [0]), (3, [0, 1]), (1, [0, 2, 3]), (2, [3])]:
        mask = sum(1 << p for p in parents)
        expected = log_p(sorted(parents + [j])) - log_p(sorted(parents))
        assert float(scores[j, mask]) == pytest.approx(expected, rel=1e-10, abs=1e-9)
    assert torch.isnan(scores[0, 0b0001])  # a node is never its own parent


def test_bge_is_score_equivalent():
    """Markov-equivalent DAGs (pgmpy's I-equivalence) have equal BGe scores; the true parent beats its absence."""
    DAG = pytest.importorskip("pgmpy.base", reason="pgmpy (the I-equivalence oracle) is not installed").DAG

    rng = np.random.default_rng(0)
    data = rng.normal(size=(60, 4))
    data[:, 1] += 1.5 * data[:, 0]
    env = DAGEnv(bge_local_scores(data), enumerate_dags(4))
    dags = env.all_states()
    scores = env.log_reward(dags)
    skeleton = ((dags.view(-1, 4, 4) + dags.view(-1, 4, 4).transpose(1, 2)) > 0).flatten(1)

    def as_pgmpy(adj):
        g = DAG()
        g.add_nodes_from(range(4))
        g.add_edges_from(zip(*np.nonzero(adj.view(4, 4).numpy())))
        return g

    checked = 0
    for i in rng.choice(len(dags), size=8, replace=False):
        same = torch.nonzero((skeleton == skeleton[i]).all(1))[:, 0]
        gi = as_pgmpy(dags[i])
        for j in same.tolist():
            if gi.is_iequivalent(as_pgmpy(dags[j])):
                assert float(scores[j]) == pytest.approx(float(scores[i]), abs=1e-9)
                checked += int(j != i)
    assert checked > 5
    edge = torch.zeros(1, 16, dtype=torch.long)
    edge[0, 0 * 4 + 1] = 1
    assert float(env.log_reward(edge)[0]) > 5.0


def test_dag_list_checks_name_the_problem():
    good = enumerate_dags(3).numpy()
    assert check_dag_list(good, 3, "x").shape == (25, 9)
    with pytest.raises(ZooError, match="shape"):
        check_dag_list(good[:, :4], 3, "x")
    cyclic = good.copy()
    cyclic[-1] = [0, 1, 0, 0, 0, 1, 1, 0, 0]  # 0 -> 1 -> 2 -> 0
    with pytest.raises(ZooError, match="1 cyclic graphs"):
        check_dag_list(cyclic, 3, "x")
    with pytest.raises(ZooError, match="duplicate"):
        check_dag_list(np.concatenate([good, good[:1]]), 3, "x")
    with pytest.raises(ZooError, match="has 24 DAGs"):
        check_dag_list(good[:-1], 3, "x")
    with pytest.raises(ZooError, match="n <= 5"):
        enumerate_dags(6)


def test_bge_rejects_bad_data():
    with pytest.raises(ZooError, match="NaN"):
        bge_local_scores(np.array([[0.0, math.nan], [1.0, 2.0]]))
    with pytest.raises(ZooError, match="alpha_w"):
        bge_local_scores(np.ones((5, 3)), alpha_w=1.0)
