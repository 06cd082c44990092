"""Exact P_T by dynamic programming against brute-force enumeration; exact samplers give TV = 0; the metrics."""

from __future__ import annotations

import math

import pytest
import torch
from gfnpg_reference import all_trajectories, exact_flow_policy  # noqa: I001 (tests/gfnpg, on sys.path by its conftest)

from zoo.errors import ZooError
from zoo.gfnpg import Hypergrid, StateGraph, exact_metrics
from zoo.gfnpg.sampling import forward_log_probs, policy_log_probs


def brute_force_p_t(env, pf):
    traj = all_trajectories(env)
    with torch.no_grad():
        log_p = forward_log_probs(env, pf, traj, dtype=torch.float64).sum(0)
    p_t = torch.zeros(env.n_states, dtype=torch.float64)
    return p_t.index_add_(0, env.state_index(traj.terminal_states), log_p.exp())


@pytest.mark.parametrize("env_name", ["grid3", "grid_3d", "dag3"])
def test_dynamic_programming_equals_enumeration(request, make_net, env_name):
    env = Hypergrid(height=3, ndim=3, R0=0.1) if env_name == "grid_3d" else request.getfixturevalue(env_name)
    pf = make_net(env.feature_dim, env.n_actions, seed=3)
    graph = StateGraph(env)
    p_dp = graph.terminal_distribution(graph.policy_log_probs(pf))
    p_bf = brute_force_p_t(env, pf)
    torch.testing.assert_close(p_dp, p_bf, rtol=1e-12, atol=1e-15)
    assert abs(float(p_dp.sum()) - 1.0) < 1e-12


@pytest.mark.parametrize("env_name", ["grid3", "dag3"])
def test_policy_from_exact_flows_has_zero_tv(request, make_net, env_name):
    env = request.getfixturevalue(env_name)
    graph = StateGraph(env)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=5)  # any backward policy has an exact forward partner
    with torch.no_grad():
        log_pb = torch.cat([torch.zeros(1, env.n_actions - 1, dtype=torch.float64),
                            policy_log_probs(env, pb, graph.states[1:], backward=True, dtype=torch.float64)])
    log_pf, log_f0 = exact_flow_policy(env, log_pb)
    p_t = graph.terminal_distribution(log_pf)
    m = exact_metrics(p_t, graph.log_rewards, float(log_f0))
    assert m["tv"] < 1e-12 and m["jsd"] < 1e-12
    assert m["logz_diff"] < 1e-12 and m["z_diff"] < 1e-10
    # and a uniform policy is far from it
    uniform = graph.terminal_distribution(graph.policy_log_probs(None))
    assert exact_metrics(uniform, graph.log_rewards, 0.0)["tv"] > 0.05


def test_metrics_match_their_definitions():
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    log_r = torch.tensor([0.0, math.log(2.0), math.log(3.0)], dtype=torch.float64)
    q = torch.tensor([1 / 6, 2 / 6, 3 / 6], dtype=torch.float64)
    m = exact_metrics(p, log_r, math.log(5.0))
    assert m["tv"] == pytest.approx(0.5 * float((p - q).abs().sum()), abs=1e-15)
    mid = 0.5 * (p + q)
    expected_jsd = 0.5 * float((p * (p / mid).log()).sum() + (q * (q / mid).log()).sum())
    assert m["jsd"] == pytest.approx(expected_jsd, abs=1e-15)
    assert m["z_diff"] == pytest.approx(1.0) and m["logz_diff"] == pytest.approx(math.log(6 / 5))


def test_exact_metrics_refuse_an_environment_too_large_to_enumerate():
    env = Hypergrid(height=64, ndim=4)
    with pytest.raises(ZooError, match="16,777,216 states"):
        StateGraph(env)
    with pytest.raises(ZooError, match="has 64 states, more than exact_max_states=10"):
        StateGraph(Hypergrid(height=8, ndim=2), max_states=10)
