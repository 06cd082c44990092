"""The samplers and the networks' K-hot input layer: exact against the dense computation and the policies' own
distributions (the speed-ups of sampling.py must not change the math)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

from zoo.gfnpg import Hypergrid, StateGraph
from zoo.gfnpg.sampling import (
    Trajectories,
    backward_log_probs,
    lookup_table,
    mlp,
    net_output,
    policy_logits,
    sample_backward,
    sample_forward,
)


@pytest.mark.parametrize("n_rows", [10, 512])  # both gathers: strided (few rows) and from a contiguous copy
def test_k_hot_first_layer_equals_the_dense_one_hot_product(n_rows):
    """Value, gradient and Hessian-vector product (RL-T's TRPO needs it) of the lookup equal those of the MLP on the
    dense K-hot features, in float64."""
    env = Hypergrid(8, 3)
    torch.manual_seed(0)
    net = mlp(env.feature_dim, env.n_actions, hidden_dim=16, n_hidden_layers=2).double()
    states = env.all_states()[torch.randperm(env.n_states)[:n_rows]]
    assert env.hot_index(states).shape == (n_rows, 3)
    weights = torch.randn(n_rows, env.n_actions, dtype=torch.float64)
    params = list(net.parameters())
    v = [torch.randn_like(p) for p in params]

    def derivatives(out):
        loss = (weights * out.tanh()).sum()  # non-linear in the output, so the Hessian is not trivial
        grads = torch.autograd.grad(loss, params, create_graph=True)
        hvp = torch.autograd.grad(sum((g * u).sum() for g, u in zip(grads, v)), params)
        return out.detach(), [g.detach() for g in grads], hvp

    dense = derivatives(net(env.features(states).double()))
    lookup = derivatives(net_output(env, net, states))
    torch.testing.assert_close(lookup[0], dense[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(lookup[1] + list(lookup[2]), dense[1] + list(dense[2])):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n_rows", [10, 512])
def test_prepared_lookup_table_gives_the_same_outputs(n_rows):
    """The samplers gather every step from one table prepared before the loop (``lookup_table``): bit for bit the
    outputs (and masked logits) of the per-call gather, in float64; and it is the transposed first-layer weight."""
    env = Hypergrid(8, 3)
    torch.manual_seed(0)
    net = mlp(env.feature_dim, env.n_actions, hidden_dim=16, n_hidden_layers=2).double()
    states = env.all_states()[torch.randperm(env.n_states)[:n_rows]]
    table = lookup_table(env, net)
    assert table.is_contiguous() and torch.equal(table, net[0].weight.t())
    with torch.no_grad():
        assert torch.equal(net_output(env, net, states, table), net_output(env, net, states))
        assert torch.equal(policy_logits(env, net, states, table=table), policy_logits(env, net, states))
    assert lookup_table(env, None) is None


def test_samplers_draw_the_same_trajectories_as_per_step_logits(grid3, make_net):
    """The samplers (prepared table) draw exactly what a plain loop over per-call masked logits draws from the same
    random stream: same states, actions and lengths, forward and backward."""
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=1)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=2)
    torch.manual_seed(5)
    traj = sample_forward(env, pf, 300)
    torch.manual_seed(5)
    s, done, stop = env.s0(300), torch.zeros(300, dtype=torch.bool), env.n_actions - 1
    with torch.no_grad():
        for t in range(traj.actions.shape[0]):
            live = ~done
            logits = policy_logits(env, pf, s[live])
            act = torch.full((300,), -1, dtype=torch.long)
            act[live] = (logits - torch.empty_like(logits).exponential_().log()).argmax(-1)
            assert torch.equal(act, traj.actions[t])
            moving = live & (act != stop)
            nxt = torch.full_like(s, -1)
            nxt[moving] = env.step(s[moving], act[moving])
            done = done | (act == stop)
            s = nxt
            assert torch.equal(s, traj.states[t + 1])
    x = traj.terminal_states
    torch.manual_seed(6)
    btraj = sample_backward(env, pb, x)
    torch.manual_seed(6)
    order = torch.argsort(env.level(x), descending=True, stable=True)
    s = x[order]
    with torch.no_grad():
        for t in range(btraj.actions.shape[0]):
            m = int((env.level(x) > t).sum())
            logits = policy_logits(env, pb, s[:m], backward=True)
            a = (logits - torch.empty_like(logits).exponential_().log()).argmax(-1)
            assert torch.equal(a, btraj.actions[t][order][:m])
            s = s.clone()
            s[:m] = env.backward_step(s[:m], a)
            assert torch.equal(s[:m], btraj.states[t + 1][order][:m])


def _tv(counts: Counter, probs: dict) -> float:
    n = sum(counts.values())
    keys = set(counts) | set(probs)
    return 0.5 * sum(abs(counts.get(k, 0) / n - probs.get(k, 0.0)) for k in keys)


def test_forward_sampler_draws_the_terminal_distribution_of_its_policy(grid3, make_net):
    """Empirical P_T of 20,000 sampled trajectories equals the dynamic programme's exact P_T (TV at the sampling
    noise, ~0.008); the uniform policy's P_T is far from it, so a sampler that ignored the logits would fail."""
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=3)
    graph = StateGraph(env)
    p_t = graph.terminal_distribution(graph.policy_log_probs(pf))
    exact = {i: float(p) for i, p in enumerate(p_t)}
    torch.manual_seed(0)
    traj = sample_forward(env, pf, 20_000)
    counts = Counter(env.state_index(traj.terminal_states).tolist())
    assert _tv(counts, exact) < 0.02
    uniform = graph.terminal_distribution(graph.policy_log_probs(None))
    assert 0.5 * float((uniform - p_t).abs().sum()) > 0.1


def test_backward_sampler_draws_each_path_with_its_pi_b_probability(grid3, make_net):
    """Backward trajectories from a batch of terminal states of mixed levels (the sampler walks them sorted by
    length and restores the order): each starts at its own x, ends at s0 after level(x) legal moves, and the paths
    into x = (2, 2) (six of them, enumerated) occur with their probabilities prod_t pi_B (TV at the sampling noise)."""
    env = grid3
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=4)
    x = torch.tensor([[2, 2], [1, 0], [0, 0], [2, 1], [0, 2]]).repeat(4000, 1)
    torch.manual_seed(0)
    back = sample_backward(env, pb, x)
    assert torch.equal(back.states[0], x) and torch.equal(back.lengths, env.level(x))
    assert (back.states[back.lengths, torch.arange(len(x))] == 0).all()
    valid = back.valid
    for t in range(back.actions.shape[0]):
        live = valid[t]
        s, a = back.states[t][live], back.actions[t][live]
        assert env.backward_masks(s).gather(1, a[:, None]).all()
        assert torch.equal(back.states[t + 1][live], env.backward_step(s, a))
    assert (back.actions[~valid] == -1).all()
    # exact: the six orders of undoing two steps along each axis, as backward trajectories from (2, 2)
    orders = sorted(set(itertools.permutations((0, 0, 1, 1))))
    states = [torch.tensor([[2, 2]] * 6)]
    for t in range(4):
        states.append(env.backward_step(states[-1], torch.tensor([o[t] for o in orders])))
    enumerated = Trajectories(torch.stack(states), torch.tensor(orders).T, torch.full((6,), 4), backward=True)
    with torch.no_grad():
        p_exact = backward_log_probs(env, pb, enumerated, dtype=torch.float64).sum(0).exp()
    assert abs(float(p_exact.sum()) - 1.0) < 1e-6
    exact = dict(zip(orders, p_exact.tolist()))
    into = (x == torch.tensor([2, 2])).all(1)
    counts = Counter(tuple(back.actions[:4, i].tolist()) for i in torch.nonzero(into)[:, 0].tolist())
    assert _tv(counts, exact) < 0.02
    assert _tv(counts, {k: 1 / 6 for k in exact}) > 0.1  # pi_B is far from uniform here


def test_backward_sampler_reuses_the_forward_costs_logits_at_x():
    """RL-B's backward sampler takes pi_B's logits from the forward costs (the same parameters) wherever it meets a
    forward child (the terminal states x included) or one of their ancestors that the costs' call evaluated too
    (sampling.KNOWN_ANCESTORS): the known rows equal pi_B's logits at those states, and the
    sampler draws the same backward trajectories from them as when it evaluates pi_B itself; wrong known rows change
    the draws (the test can fail)."""
    env = Hypergrid(6, 2, R0=0.1)
    torch.manual_seed(0)
    pf = mlp(env.feature_dim, env.n_actions, hidden_dim=16, n_hidden_layers=2)
    pb = mlp(env.feature_dim, env.n_actions - 1, hidden_dim=16, n_hidden_layers=2)
    traj = sample_forward(env, pf, 200)
    x = traj.terminal_states
    with torch.no_grad():
        log_pb, known = backward_log_probs(env, pb, traj, distinct=True, return_known=True)
    torch.testing.assert_close(log_pb, backward_log_probs(env, pb, traj), rtol=0, atol=0)
    keys, rows = known
    children = env.state_key(traj.states[1:][traj.valid & ~traj.is_stop])
    assert torch.equal(keys, torch.unique(keys)) and torch.isin(children, keys).all()  # and their ancestors
    assert len(keys) > len(torch.unique(children))
    moved = traj.lengths >= 2
    assert 0 < int(moved.sum()) < len(x) and torch.isin(env.state_key(x[moved]), keys).all()  # x is known
    with torch.no_grad():
        direct = policy_logits(env, pb, env.all_states()[keys], backward=True)
    torch.testing.assert_close(rows, direct, rtol=1e-6, atol=1e-6)
    for seed in range(3):
        torch.manual_seed(seed)
        reused = sample_backward(env, pb, x, known=known)
        torch.manual_seed(seed)
        plain = sample_backward(env, pb, x)
        assert torch.equal(reused.states, plain.states) and torch.equal(reused.actions, plain.actions)
    torch.manual_seed(0)
    wrong = sample_backward(env, pb, x, known=(keys, torch.where(rows > -1e4, -10 * rows, rows)))  # legal kept
    torch.manual_seed(0)
    assert not torch.equal(wrong.actions, sample_backward(env, pb, x).actions)


def _old_sample_backward(env, pb, x, known=None):
    """sample_backward before the per-step lists padded once (commit 2753f1d), verbatim but for its removed
    ``first_logits`` argument: the batch's states and actions written into preallocated padded tensors per step, the
    known rows looked up with a clamp, the Gumbel noise drawn per step."""
    from zoo.gfnpg.sampling import sample_actions

    def _known_or_evaluated(env, pb, states, known, table):
        keys, rows = known
        key = env.state_key(states)
        pos = torch.searchsorted(keys, key).clamp_max(len(keys) - 1)
        logits = rows[pos]
        miss = (keys[pos] != key).nonzero()[:, 0]
        if len(miss):
            logits = logits.index_copy(0, miss, policy_logits(env, pb, states[miss], backward=True, table=table))
        return logits

    lengths = env.level(x)
    n, L = len(x), int(lengths.max()) if len(x) else 0
    order = torch.argsort(lengths, descending=True, stable=True)
    states = torch.full((L + 1, n, x.shape[1]), -1, dtype=x.dtype, device=x.device)
    actions = torch.full((L, n), -1, dtype=torch.long, device=x.device)
    states[0] = x[order]
    moving = (lengths[None, :] > torch.arange(L, device=x.device)[:, None]).sum(1).tolist()
    table = lookup_table(env, pb)
    for t, m in enumerate(moving):
        s = states[t, :m]
        if known is not None and pb is not None:
            logits = _known_or_evaluated(env, pb, s, known, table)
        else:
            logits = policy_logits(env, pb, s, backward=True, table=table)
        a = sample_actions(logits)
        actions[t, :m] = a
        states[t + 1, :m] = env.backward_step(s, a)
    restore = torch.argsort(order)
    return Trajectories(states[:, restore], actions[:, restore], lengths, backward=True)


@pytest.mark.parametrize("with_known", [False, True])
def test_backward_sampler_equals_its_old_form(make_net, dag3, with_known):
    """The backward sampler keeping the moving rows per step and padding once, with its Gumbel noise drawn at once and
    the known rows behind a sentinel, draws bit for bit the old sampler's trajectories (grid with terminal states at
    s0 and at every level, 3-node DAGs; with and without known rows; a float64 and a float32 pi_B, and the uniform
    one)."""
    grid = Hypergrid(6, 2, R0=0.1)
    for env, dtype in itertools.product((grid, dag3), (torch.float64, torch.float32, None)):
        pb = make_net(env.feature_dim, env.n_actions - 1, seed=1).to(dtype) if dtype else None
        g = torch.Generator().manual_seed(0)
        x = env.all_states()[torch.randint(0, env.n_states, (100,), generator=g)]
        x = torch.cat([x, env.s0(3)])  # x = s0: no move
        known = None
        if with_known and pb is not None:
            pf = make_net(env.feature_dim, env.n_actions)
            with torch.no_grad():
                _, known = backward_log_probs(env, pb, sample_forward(env, pf, 64), distinct=True, return_known=True)
        for seed in range(2):
            torch.manual_seed(seed)
            new = sample_backward(env, pb, x, known=known)
            torch.manual_seed(seed)
            old = _old_sample_backward(env, pb, x, known=known)
            assert torch.equal(new.states, old.states) and torch.equal(new.actions, old.actions)
            assert torch.equal(new.lengths, old.lengths)
    for x in (grid.s0(4), grid.s0(0)):  # no move at all, and no trajectory
        new = sample_backward(grid, None, x)
        assert new.states.shape == (1, len(x), 2) and new.actions.shape == (0, len(x))


def test_forced_backward_moves_skip_the_network_without_changing_anything(monkeypatch):
    """pi_B's network is skipped at states with one legal backward action (on the grid, the states on an axis): the
    log-probabilities of legal actions, their gradients (float64) and the backward sampler's draws equal those of
    the network evaluated at every state; a batch of forced states only still gives zero gradients, not None."""
    import zoo.gfnpg.sampling as sampling

    env = Hypergrid(6, 2, R0=0.1)
    torch.manual_seed(0)
    pb = mlp(env.feature_dim, env.n_actions - 1, hidden_dim=16, n_hidden_layers=2).double()
    states = env.all_states()[1:]  # s0 has no backward action
    forced = env.backward_masks(states).sum(1) == 1
    assert 0 < int(forced.sum()) < len(states)
    weights = torch.randn(len(states), env.n_actions - 1, dtype=torch.float64)

    def run(skip):
        monkeypatch.setattr(sampling, "SKIP_FORCED_BACKWARD", skip)
        pb.zero_grad(set_to_none=True)
        lp = policy_logits(env, pb, states, backward=True).log_softmax(-1)
        legal = env.backward_masks(states)
        (weights * lp * legal).sum().backward()
        torch.manual_seed(3)
        back = sample_backward(env, pb, states)
        return lp.detach(), legal, [p.grad.clone() for p in pb.parameters()], back

    lp_skip, legal, g_skip, b_skip = run(True)
    lp_full, _, g_full, b_full = run(False)
    torch.testing.assert_close(lp_skip[legal], lp_full[legal], rtol=0, atol=1e-12)
    assert (lp_skip[forced][legal[forced]] == 0).all() and (lp_full[forced][legal[forced]] == 0).all()
    for a, b in zip(g_skip, g_full):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.equal(b_skip.actions, b_full.actions) and torch.equal(b_skip.states, b_full.states)
    monkeypatch.setattr(sampling, "SKIP_FORCED_BACKWARD", True)
    pb.zero_grad(set_to_none=True)
    on_axis = states[forced]
    policy_logits(env, pb, on_axis, backward=True).log_softmax(-1).gather(
        1, env.backward_masks(on_axis).long().argmax(1, keepdim=True)).sum().backward()
    assert all(p.grad is not None and (p.grad == 0).all() for p in pb.parameters())


def test_with_ancestors_lists_the_states_a_few_backward_moves_down():
    """On a grid, the states within k backward moves of x are the y <= x (componentwise) with level(x) - level(y) <= k:
    with_ancestors gives exactly those (x first), and stops adding levels once it holds max_rows rows."""
    from zoo.gfnpg.sampling import with_ancestors

    env = Hypergrid(7, 2)
    x = torch.tensor([[3, 2], [5, 0]])
    out = with_ancestors(env, x, 2, 1000)
    assert torch.equal(out[:2], x)
    got = set(map(tuple, out.tolist()))
    want = {(a, b) for x1, x2 in x.tolist() for a in range(x1 + 1) for b in range(x2 + 1) if x1 + x2 - a - b <= 2}
    assert got == want
    assert len(with_ancestors(env, x, 2, 3)) == 2 + 3  # one level (3 parents), then the row budget is spent
    assert torch.equal(with_ancestors(env, env.s0(2), 3, 100), env.s0(2))  # s0 has no parent
