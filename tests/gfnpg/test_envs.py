"""The environments: hypergrid rewards against torchgfn's HyperGrid, DAG legality against networkx."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from zoo.errors import ZooError
from zoo.gfnpg import Hypergrid
from zoo.gfnpg.sampling import policy_log_probs, sample_backward, sample_forward


@pytest.mark.parametrize("height, ndim, R0", [(8, 2, 0.1), (256, 2, 0.01), (16, 3, 0.001), (9, 4, 0.0)])
def test_hypergrid_rewards_equal_torchgfn_on_every_state(height, ndim, R0):
    gym = pytest.importorskip("gfn.gym", reason="torchgfn (peer) is not installed")
    ref = gym.HyperGrid(ndim=ndim, height=height, reward_fn_kwargs={"R0": R0, "R1": 0.5, "R2": 2.0},
                        store_all_states=True, validate_modes=False)
    env = Hypergrid(height, ndim, R0)
    states = env.all_states()
    assert torch.equal(ref.all_states.tensor, states)  # same state order
    assert torch.equal(env.state_index(states), torch.arange(height**ndim))
    r_ref = ref.reward(ref.States(states)).double()
    torch.testing.assert_close(env.reward(states), r_ref, rtol=1e-6, atol=0)
    assert set(env.reward(states).unique().tolist()) <= {R0, R0 + 0.5, R0 + 2.5}


def test_hypergrid_dynamics():
    env = Hypergrid(4, 2)
    s = torch.tensor([[0, 3], [2, 1]])
    assert env.forward_masks(s).tolist() == [[True, False, True], [True, True, True]]
    assert env.backward_masks(s).tolist() == [[False, True], [True, True]]
    a = torch.tensor([0, 1])
    assert torch.equal(env.backward_step(env.step(s, a), a), s)
    assert env.features(s).shape == (2, 8) and env.features(s).sum(1).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("bad", [{"R0": -0.1}, {"R1": -1.0}, {"R2": float("nan")}])
def test_negative_reward_is_an_error(bad):
    with pytest.raises(ZooError, match="reward negative or undefined"):
        Hypergrid(8, 2, **{"R0": 0.1, **bad})


def test_dag_masks_allow_exactly_the_acyclic_additions(dag3):
    env = dag3
    states = env.all_states()
    masks = env.forward_masks(states)
    assert masks[:, -1].all()
    for s, m in zip(states, masks):
        for a in range(env.n_actions - 1):
            child = s.clone()
            child[a] = 1
            legal = s[a] == 0 and nx.is_directed_acyclic_graph(nx.DiGraph(child.view(3, 3).numpy()))
            assert bool(m[a]) == legal
    torch.testing.assert_close(env.backward_masks(states), states > 0)
    assert torch.equal(env.state_index(states), torch.arange(25))


def test_dag_log_reward_is_relative_to_the_empty_graph(dag3):
    empty = torch.zeros(1, 9, dtype=torch.long)
    assert float(dag3.log_reward(empty)[0]) == 0.0
    one_edge = empty.clone()
    one_edge[0, 0 * 3 + 2] = 1  # 0 -> 2, the dependence in the fixture's data
    ls = dag3.local_scores
    assert float(dag3.log_reward(one_edge)[0]) == pytest.approx(float(ls[2, 0b001] - ls[2, 0]), abs=1e-12)
    assert float(dag3.log_reward(one_edge)[0]) > 0


@pytest.mark.parametrize("env_name", ["grid3", "dag3"])
def test_sampled_trajectories_are_legal(request, make_net, env_name):
    env = request.getfixturevalue(env_name)
    torch.manual_seed(0)
    traj = sample_forward(env, make_net(env.feature_dim, env.n_actions), 64)
    valid = traj.valid
    for t in range(traj.actions.shape[0]):
        live = valid[t]
        s, a = traj.states[t][live], traj.actions[t][live]
        assert env.forward_masks(s).gather(1, a[:, None]).all()
        moving = a != env.n_actions - 1
        assert torch.equal(traj.states[t + 1][live][moving], env.step(s[moving], a[moving]))
    assert (traj.actions[~valid] == -1).all()
    back = sample_backward(env, make_net(env.feature_dim, env.n_actions - 1, seed=1), traj.terminal_states)
    assert torch.equal(back.lengths, env.level(traj.terminal_states))
    ends = back.states[back.lengths, torch.arange(len(back))]
    assert (ends == 0).all()


def test_guided_policy_caps_the_stop_logit_at_low_reward_states():
    env = Hypergrid(8, 2, R0=0.1)
    s = torch.tensor([[0, 0], [3, 3]])  # R(0,0) = R0 + 0.5 (outer ring), R(3,3) = R0 (low)
    plain = policy_log_probs(env, None, s)
    guided = policy_log_probs(env, None, s, guide=env.guide)
    torch.testing.assert_close(guided[0], plain[0])
    assert float(guided[1, -1].exp()) == pytest.approx(1e-5 / (2 + 1e-5), rel=1e-5)


@pytest.mark.parametrize("height, ndim", [(5, 2), (4, 3)])
def test_hypergrid_constants_built_once_give_the_old_per_call_values(height, ndim):
    """step / backward_step by the cached unit moves, hot_index and state_index by cached offsets and weights: the
    integers the per-call forms gave (scatter_add of +-1, arange products), on every state and action."""
    env = Hypergrid(height, ndim)
    states = env.all_states()
    for a in range(ndim):
        act = torch.full((len(states),), a)
        up, down = states[:, a] < height - 1, states[:, a] > 0
        assert torch.equal(env.step(states[up], act[up]), states[up].scatter_add(1, act[up, None], torch.ones_like(
            act[up, None])))
        assert torch.equal(env.backward_step(states[down], act[down]),
                           states[down].scatter_add(1, act[down, None], torch.full_like(act[down, None], -1)))
    assert torch.equal(env.hot_index(states), states + height * torch.arange(ndim))
    assert torch.equal(env.state_index(states), (states * height ** torch.arange(ndim - 1, -1, -1)).sum(-1))
