"""The passes without gradients that evaluate each distinct state once (``distinct=True``: RL-B/RL-G's pi_B costs and
pi_G) against the plain passes that evaluate every row (float64 networks): the same log-probabilities, logits and
RL-B / RL-G iterations."""

from __future__ import annotations

import pytest
import torch

from zoo.gfnpg import Hypergrid
from zoo.gfnpg.sampling import (
    backward_log_probs,
    distinct_states,
    forward_log_probs,
    policy_logits,
    sample_backward,
    sample_forward,
    state_values,
)

from .conftest import assert_same_iterations


class _NoKey(Hypergrid):
    """The generic path: no integer keys, rows compared whole."""

    def state_key(self, states):
        return None


@pytest.mark.parametrize("env_name", ["grid", "grid_nokey", "dag3"])
def test_distinct_states_regroup_the_rows(request, env_name):
    env = {"grid": lambda: Hypergrid(5, 3), "grid_nokey": lambda: _NoKey(5, 3),
           "dag3": lambda: request.getfixturevalue("dag3")}[env_name]()
    g = torch.Generator().manual_seed(0)
    states = env.all_states()[torch.randint(0, min(env.n_states, 12), (200,), generator=g)]
    reps, inverse = distinct_states(env, states)
    assert torch.equal(reps[inverse], states)
    assert len(torch.unique(reps, dim=0)) == len(reps) == len(torch.unique(states, dim=0))


@pytest.mark.parametrize("env_name", ["grid", "grid_nokey", "dag3"])
def test_distinct_passes_equal_the_plain_ones(request, make_net, env_name):
    """log pi_F on backward trajectories (with RL-G's guide), log pi_B and its logits on forward trajectories."""
    env = {"grid": lambda: Hypergrid(6, 2, R0=0.1), "grid_nokey": lambda: _NoKey(6, 2, R0=0.1),
           "dag3": lambda: request.getfixturevalue("dag3")}[env_name]()
    pf = make_net(env.feature_dim, env.n_actions, seed=0)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=1)
    torch.manual_seed(0)
    traj = sample_forward(env, pf, 64)
    back = sample_backward(env, pb, traj.terminal_states)
    for guide in (None, env.guide):
        plain = forward_log_probs(env, pf, back, guide=guide, dtype=torch.float64)
        fast = forward_log_probs(env, pf, back, guide=guide, dtype=torch.float64, distinct=True)
        torch.testing.assert_close(fast, plain, rtol=0, atol=1e-12)
    (lp, logits), (lp_d, logits_d) = (backward_log_probs(env, pb, traj, torch.float64, True, distinct=d)
                                      for d in (False, True))
    torch.testing.assert_close(lp_d, lp, rtol=0, atol=1e-12)
    torch.testing.assert_close(logits_d, logits, rtol=0, atol=1e-12)
    children = traj.states[1:][traj.valid & ~traj.is_stop]
    assert len(torch.unique(children, dim=0)) < len(children)  # the case is not trivial: states repeat
    torch.testing.assert_close(policy_logits(env, pb, children, backward=True, distinct=True),
                               policy_logits(env, pb, children, backward=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("env_name", ["grid", "grid_nokey", "dag3"])
def test_distinct_passes_with_gradients_equal_the_plain_ones(request, make_net, env_name):
    """The passes with gradients (pi_F and pi_B log-probabilities, V / log F values) evaluated once per distinct
    state: the same values, and the same float64 gradients (a state's repeats summed before the network instead of
    after), on forward and backward trajectories."""
    env = {"grid": lambda: Hypergrid(6, 2, R0=0.1), "grid_nokey": lambda: _NoKey(6, 2, R0=0.1),
           "dag3": lambda: request.getfixturevalue("dag3")}[env_name]()
    pf = make_net(env.feature_dim, env.n_actions, seed=0)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=1)
    value = make_net(env.feature_dim, 1, seed=2)
    torch.manual_seed(0)
    traj = sample_forward(env, pf, 64)
    back = sample_backward(env, pb, traj.terminal_states)
    g = torch.Generator().manual_seed(3)
    weights = [torch.randn(t.actions.shape, generator=g, dtype=torch.float64) for t in (traj, back) for _ in range(3)]

    def run(distinct):
        nets = (pf, pb, value)
        for net in nets:
            net.zero_grad(set_to_none=True)
        outs = [f(t) for t in (traj, back) for f in (
            lambda t: forward_log_probs(env, pf, t, dtype=torch.float64, distinct=distinct),
            lambda t: backward_log_probs(env, pb, t, torch.float64, distinct=distinct),
            lambda t: state_values(env, value, t, distinct=distinct))]
        # a non-linear loss, so that every row's gradient differs
        sum((w * o.tanh()).sum() for w, o in zip(weights, outs)).backward()
        return [o.detach() for o in outs], [p.grad.clone() for net in nets for p in net.parameters()]

    (out_d, grad_d), (out_p, grad_p) = run(True), run(False)
    for a, b in zip(out_d + grad_d, out_p + grad_p):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    parents = traj.states[:-1][traj.valid]
    assert len(distinct_states(env, parents)[0]) < len(parents)  # the case is not trivial: states repeat


def _every_row(monkeypatch):
    """choose(use): the distinct passes (use) or every row evaluated (distinct_states as the identity grouping)."""
    import zoo.gfnpg.sampling as sampling

    real = sampling.distinct_states

    def choose(use: bool) -> None:
        monkeypatch.setattr(sampling, "distinct_states",
                            real if use else lambda env, s: (s, torch.arange(len(s), device=s.device)))

    return choose


@pytest.mark.parametrize("variant", ["RL-U", "TB-U", "TB-B", "DB-B", "SubTB-B"])
def test_distinct_gradient_passes_give_the_plain_update_of_every_method(monkeypatch, variant):
    """The deduplicated passes with gradients in the baselines and RL-U: three iterations equal those with every row
    evaluated (RL-B / RL-G: the next test)."""
    assert_same_iterations(variant, _every_row(monkeypatch))


@pytest.mark.parametrize("variant", ["RL-B", "RL-G"])
def test_distinct_passes_give_the_plain_update(monkeypatch, variant):
    """Three iterations with the distinct passes against the same with every row evaluated (``distinct_states``
    replaced by the identity grouping): the same metrics and parameters (float64 networks; log-probabilities are
    gathered in float32, hence the tolerance)."""
    assert_same_iterations(variant, _every_row(monkeypatch), guide=variant == "RL-G")


def _old_advantages(costs, values, valid, lam):
    """advantages_and_targets before the float mask and the cached discount matrix (commit feb807b), verbatim."""
    def discounted(x, lam):
        if lam == 1.0:
            return x.flip(0).cumsum(0).flip(0)
        t = torch.arange(x.shape[0], device=x.device)
        gap = (t[None, :] - t[:, None]).to(x.dtype)
        weights = torch.where(gap >= 0, torch.full_like(gap, lam) ** gap.clamp_min(0), torch.zeros_like(gap))
        return weights @ x

    values = values * valid
    next_values = torch.cat([values[1:], torch.zeros_like(values[:1])])
    deltas = (costs + next_values - values) * valid
    adv = discounted(deltas, lam) * valid
    targets = discounted(costs * valid, 1.0) * valid
    return (adv - adv[valid].mean()) * valid, targets


@pytest.mark.parametrize("lam", [0.99, 0.5, 1.0])
def test_advantages_equal_their_old_form(lam):
    """The float mask and the cached discount matrix change no value (float64; each length twice: the cache's hit)."""
    from zoo.gfnpg.objectives import advantages_and_targets

    g = torch.Generator().manual_seed(0)
    for length in (7, 3, 7, 3):
        lengths = torch.randint(0, length + 1, (9,), generator=g)
        valid = torch.arange(length)[:, None] < lengths[None, :]
        costs = torch.randn(length, 9, generator=g, dtype=torch.float64) * valid
        values = torch.randn(length, 9, generator=g, dtype=torch.float64)
        for a, b in zip(advantages_and_targets(costs, values, valid, lam), _old_advantages(costs, values, valid, lam)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_cached_masks_equal_fresh_ones(make_net):
    """Trajectories.valid / is_stop, computed once per batch, equal the expressions they replace."""
    env = Hypergrid(6, 2, R0=0.1)
    torch.manual_seed(0)
    for traj in (sample_forward(env, make_net(env.feature_dim, env.n_actions), 32),):
        t = torch.arange(traj.actions.shape[0])[:, None]
        assert torch.equal(traj.valid, t < traj.lengths[None, :]) and traj.valid is traj.valid
        assert torch.equal(traj.is_stop, t == traj.lengths[None, :] - 1)
        back = sample_backward(env, None, traj.terminal_states)
        assert torch.equal(back.valid, t[: back.actions.shape[0]] < back.lengths[None, :])
        assert not back.is_stop.any()


def _known_table(make_net):
    """pi_B's known rows at the forward children of a batch, and terminal states plus corner states (whose backward
    paths leave the known set)."""
    from zoo.gfnpg.sampling import known_rows

    env = Hypergrid(8, 2, R0=0.1)
    pf = make_net(env.feature_dim, env.n_actions, seed=0)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=1)
    torch.manual_seed(0)
    traj = sample_forward(env, pf, 64)
    children = traj.states[1:][traj.valid & ~traj.is_stop]
    _, logits = backward_log_probs(env, pb, traj, torch.float64, return_logits=True)
    known = known_rows(env, children, logits)
    x = torch.cat([traj.terminal_states, env.all_states()[-5:]])
    return env, pb, children, logits, known, x


def test_backward_sampler_with_known_rows_draws_the_plain_trajectories(make_net):
    """sample_backward(known=...): pi_B's rows looked up at states the forward costs evaluated, the network at the
    rest; the same draws as the sampler evaluating the network at every step (float64), with states both inside and
    outside the known set."""
    from zoo.gfnpg.sampling import known_rows

    env, pb, children, logits, known, x = _known_table(make_net)
    torch.manual_seed(1)
    plain = sample_backward(env, pb, x)
    torch.manual_seed(1)
    fast = sample_backward(env, pb, x, known=known)
    assert torch.equal(fast.states, plain.states) and torch.equal(fast.actions, plain.actions)
    visited = env.state_key(plain.states[:-1][plain.valid])
    inside = torch.isin(visited, known[0])
    assert inside.any() and (~inside).any()
    assert known_rows(_NoKey(8, 2), children, logits) is None


def test_backward_sampler_without_lookahead_draws_the_same(monkeypatch, make_net):
    """A known table above LOOKAHEAD_TABLE_MAX rows: misses are evaluated alone, not merged; the same draws."""
    import zoo.gfnpg.sampling as sampling

    env, pb, _, _, known, x = _known_table(make_net)
    draws = []
    for table_max in (10**9, 0):
        monkeypatch.setattr(sampling, "LOOKAHEAD_TABLE_MAX", table_max)
        torch.manual_seed(1)
        draws.append(sample_backward(env, pb, x, known=known))
    assert torch.equal(draws[0].states, draws[1].states) and torch.equal(draws[0].actions, draws[1].actions)
