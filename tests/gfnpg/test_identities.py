"""The identities GFN-PG rests on, exactly, with every trajectory of a 3x3 grid enumerated (float64)."""

from __future__ import annotations

import math

import torch
from gfnpg_reference import all_trajectories, official_advantages  # noqa: I001 (tests/gfnpg, on sys.path)

from zoo.gfnpg import StateGraph
from zoo.gfnpg.objectives import actor_loss, advantages_and_targets, log_z_surrogate, rl_costs
from zoo.gfnpg.sampling import backward_log_probs, forward_log_probs, state_values

LOG_Z = 0.3


def _costs(env, pf, pb, traj, log_z=LOG_Z):
    log_pf = forward_log_probs(env, pf, traj, dtype=torch.float64)
    log_pb = backward_log_probs(env, pb, traj, dtype=torch.float64)
    log_r = env.log_reward(traj.terminal_states)
    return log_pf, log_pb, rl_costs(log_pf, log_pb, traj, log_r, torch.tensor(log_z, dtype=torch.float64))


def test_policy_gradient_identity(grid3, make_net):
    """grad J = sum_tau P_F(tau) sum_t grad log pi_F(a_t|s_t) sum_{t'>=t} c_t' for J = E_{P_F}[sum_t c_t], where c
    itself depends on pi_F; the extra term E[sum_t grad c_t] vanishes; a state baseline V changes nothing."""
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=1)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=2)  # a parameterised (fixed) backward policy
    traj = all_trajectories(env)
    params = list(pf.parameters())
    log_pf, _, costs = _costs(env, pf, pb, traj)
    prob = log_pf.sum(0).exp()  # P_F(tau)
    assert abs(float(prob.detach().sum()) - 1.0) < 1e-12
    J = (prob * costs.sum(0)).sum()
    grad_J = torch.autograd.grad(J, params, retain_graph=True)

    # the estimator the actor uses, with lambda = 1 and no baseline: advantages = cost-to-go
    ctg, targets = advantages_and_targets(costs.detach(), torch.zeros_like(costs), traj.valid, 1.0, centre=False)
    torch.testing.assert_close(ctg, targets, rtol=0, atol=1e-14)
    estimator = (prob.detach() * (ctg * log_pf).sum(0)).sum()
    grad_est = torch.autograd.grad(estimator, params, retain_graph=True)
    for a, b in zip(grad_J, grad_est):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)
    assert max(float(g.abs().max()) for g in grad_J) > 1e-3  # not a vacuous comparison

    # E[sum_t grad c_t] = E[sum_t grad log pi_F(a_t|s_t)] = 0
    direct = torch.autograd.grad((prob.detach() * costs.sum(0)).sum(), params, retain_graph=True)
    assert max(float(g.abs().max()) for g in direct) < 1e-12

    # a state-dependent baseline (the critic) and the centring constant leave the expected gradient unchanged
    value = make_net(env.feature_dim, 1, seed=4)
    with torch.no_grad():
        values = state_values(env, value, traj)
    adv, _ = advantages_and_targets(costs.detach(), values, traj.valid, 1.0, centre=False)
    adv = adv - 0.7 * traj.valid
    with_baseline = torch.autograd.grad((prob.detach() * (adv * log_pf).sum(0)).sum(), params)
    for a, b in zip(grad_J, with_baseline):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


def test_expected_cost_is_kl_plus_log_z_gap(grid3, make_net):
    """E_{P_F}[sum c] = KL(P_F(tau) || P_B(tau|x) R(x) / Z*) + log Z - log Z*, and the target is a distribution."""
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=7)
    traj = all_trajectories(env)
    with torch.no_grad():
        log_pf, log_pb, costs = _costs(env, pf, None, traj)  # uniform pi_B (RL-U)
    log_r = env.log_reward(traj.terminal_states)
    log_z_star = float(torch.logsumexp(env.log_reward(env.all_states()), 0))
    log_target = log_pb.sum(0) + log_r - log_z_star
    assert abs(float(log_target.exp().sum()) - 1.0) < 1e-12
    p = log_pf.sum(0).exp()
    kl = float((p * (log_pf.sum(0) - log_target)).sum())
    assert kl > 1e-3
    expected_cost = float((p * costs.sum(0)).sum())
    assert abs(expected_cost - (kl + LOG_Z - log_z_star)) < 1e-12


def test_log_z_gradient_is_the_mean_total_cost(grid3, make_net):
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=2)
    traj = all_trajectories(env)
    log_z = torch.tensor(LOG_Z, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        _, _, costs = _costs(env, pf, None, traj)
    (g,) = torch.autograd.grad(log_z_surrogate(log_z, costs), [log_z])
    assert float(g) == float(costs.sum(0).mean())


def test_stop_cost_and_reward_clip(grid3, make_net):
    env = grid3
    traj = all_trajectories(env)
    pf = make_net(env.feature_dim, env.n_actions, seed=0)
    with torch.no_grad():
        log_pf = forward_log_probs(env, pf, traj, dtype=torch.float64)
        log_pb = backward_log_probs(env, None, traj, dtype=torch.float64)
    log_r = torch.full((len(traj),), -20.0, dtype=torch.float64)  # below the official clip of -12
    c = rl_costs(log_pf, log_pb, traj, log_r, torch.tensor(0.5, dtype=torch.float64))
    stop = traj.is_stop
    torch.testing.assert_close(c[stop], log_pf[stop] + 12.0 + 0.5)
    torch.testing.assert_close(c[traj.valid & ~stop], (log_pf - log_pb)[traj.valid & ~stop])
    assert (c[~traj.valid] == 0).all()
    # uniform pi_B on the grid: log pi_B = -log(number of parents)
    parents = (traj.states[1:] > 0).sum(-1)
    moves = traj.valid & ~stop
    torch.testing.assert_close(log_pb[moves], -parents[moves].double().log())


def test_gae_and_cost_to_go_match_a_hand_written_loop():
    g = torch.Generator().manual_seed(0)
    L, B = 9, 6
    lengths = torch.tensor([1, 3, 9, 5, 2, 7])
    valid = torch.arange(L)[:, None] < lengths[None]
    costs = torch.randn(L, B, generator=g, dtype=torch.float64) * valid
    values = torch.randn(L, B, generator=g, dtype=torch.float64) * valid
    for lam in (0.0, 0.5, 0.99, 1.0):
        adv, tar = advantages_and_targets(costs, values, valid, lam)
        ref_adv, ref_tar = official_advantages(costs, values, valid, lam)
        torch.testing.assert_close(adv, ref_adv, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(tar, ref_tar, rtol=1e-12, atol=1e-12)
    # cost-to-go by definition
    ctg = torch.stack([costs[t:].sum(0) for t in range(L)]) * valid
    torch.testing.assert_close(tar, ctg, rtol=1e-12, atol=1e-12)
    assert abs(float(adv[valid].mean())) < 1e-12


def test_actor_loss_gradient_weights_log_probs_by_detached_advantages():
    log_p = torch.tensor([[-0.1, -0.2], [-0.3, 0.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, 2.0], [3.0, 0.0]], dtype=torch.float64, requires_grad=True)
    loss = actor_loss(adv, log_p)
    loss.backward()
    torch.testing.assert_close(log_p.grad, adv.detach() / 2)
    assert adv.grad is None
    assert math.isclose(float(loss), float((adv * log_p).sum(0).mean()))


def test_exact_expected_cost_is_zero_at_the_optimum(grid3):
    """With pi_F from exact flows (uniform pi_B) and log Z = log Z*, every trajectory's total cost is 0."""
    from gfnpg_reference import exact_flow_policy

    env = grid3
    graph = StateGraph(env)
    log_pb = torch.cat([torch.zeros(1, 2, dtype=torch.float64),
                        (env.backward_masks(graph.states[1:]).double()
                         / env.backward_masks(graph.states[1:]).sum(1, keepdim=True)).log()])
    log_pf_table, log_f0 = exact_flow_policy(env, log_pb)
    traj = all_trajectories(env)
    idx = env.state_index(traj.states[:-1].clamp_min(0).flatten(0, 1)).view(traj.actions.shape)
    log_pf = torch.where(traj.valid, log_pf_table[idx, traj.actions.clamp_min(0)], torch.zeros(()))
    log_pb_t = backward_log_probs(env, None, traj, dtype=torch.float64)
    c = rl_costs(log_pf, log_pb_t, traj, env.log_reward(traj.terminal_states), log_f0)
    assert float(c.sum(0).abs().max()) < 1e-12


def test_backward_costs_on_backward_trajectories(grid3, make_net):
    """Backward trajectories x -> s0: P_B(tau|x) sums to 1 over the paths into x, sum_tau P_F(moves of tau) is the
    visit probability u(x) = P_T(x) / pi_F(stop|x) of the dynamic programme, and E_{P_B}[sum c^B] =
    KL(P_B(.|x) || P_F(.|x)) - log u(x) with c^B_t = log pi_B - log pi_F (RL-B's backward cost)."""
    from zoo.gfnpg.sampling import Trajectories

    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=8)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=9)
    fwd = all_trajectories(env)
    graph = StateGraph(env)
    log_pf_all = graph.policy_log_probs(pf)
    p_t = graph.terminal_distribution(log_pf_all)
    for x in ([2, 1], [1, 2], [2, 2]):
        ix = int(env.state_index(torch.tensor([x]))[0])
        into = torch.nonzero((fwd.terminal_states == torch.tensor(x)).all(1))[:, 0]
        moves = fwd.lengths[into] - 1
        L = int(moves.max())
        states = torch.full((L + 1, len(into), 2), -1, dtype=torch.long)
        actions = torch.full((L, len(into)), -1, dtype=torch.long)
        for b, (i, m) in enumerate(zip(into.tolist(), moves.tolist())):
            states[: m + 1, b] = fwd.states[: m + 1, i].flip(0)
            actions[:m, b] = fwd.actions[:m, i].flip(0)
        back = Trajectories(states, actions, moves, backward=True)
        with torch.no_grad():
            log_pb = backward_log_probs(env, pb, back, dtype=torch.float64)
            log_pg = forward_log_probs(env, pf, back, dtype=torch.float64)
        p_b = log_pb.sum(0).exp()
        assert abs(float(p_b.sum()) - 1.0) < 1e-12
        u = float(log_pg.sum(0).exp().sum())
        assert abs(u - float(p_t[ix] / log_pf_all[ix, -1].exp())) < 1e-12
        costs = (log_pb - log_pg) * back.valid
        kl = float((p_b * (log_pb.sum(0) - (log_pg.sum(0) - math.log(u)))).sum())
        assert abs(float((p_b * costs.sum(0)).sum()) - (kl - math.log(u))) < 1e-12
