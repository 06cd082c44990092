"""RL-T's TRPO step: CG against a dense solve of the Fisher system, the trust region, the line search."""

from __future__ import annotations

import torch
from gfnpg_reference import all_trajectories  # noqa: I001 (tests/gfnpg, on sys.path by its conftest)

from zoo.gfnpg.sampling import policy_log_probs
from zoo.gfnpg.trpo import conjugate_gradient, flat_grad, kl_rows, trpo_step


def _batch(env):
    traj = all_trajectories(env)
    valid = traj.valid
    states, actions = traj.states[:-1][valid], traj.actions[valid]
    adv = torch.randn(len(actions), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return states, actions, adv - adv.mean(), len(traj)


def test_cg_direction_matches_a_dense_solve(grid3, make_net):
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=1, hidden=1)  # 6*1+1 + 1*3+3 = 13 parameters
    params = list(pf.parameters())
    states, actions, adv, n = _batch(env)
    flat0 = torch.nn.utils.parameters_to_vector(params).detach()

    names = [k for k, _ in pf.named_parameters()]
    shapes = [p.shape for p in params]

    def log_probs_at(flat):  # a differentiable function of the flat parameter vector
        chunks = torch.split(flat, [s.numel() for s in shapes])
        weights = {k: c.view(s) for k, c, s in zip(names, chunks, shapes)}

        class Bound(torch.nn.Module):
            def forward(self, x):
                return torch.func.functional_call(pf, weights, (x,))

        bound = Bound()
        bound.register_parameter("dummy", torch.nn.Parameter(flat0[:1]))  # dtype/device for the feature cast
        return policy_log_probs(env, bound, states, dtype=torch.float64)

    old = log_probs_at(flat0).detach()

    def kl_of(flat):  # the KL whose Hessian at theta_old is the Fisher matrix used by the step
        return kl_rows(old, log_probs_at(flat)).sum() / n

    H = torch.autograd.functional.hessian(kl_of, flat0.clone())
    assert torch.linalg.matrix_rank(H) >= 5
    log_all = policy_log_probs(env, pf, states, dtype=torch.float64)
    logp = log_all.gather(1, actions[:, None])[:, 0]
    g = flat_grad((torch.exp(logp - logp.detach()) * adv).sum() / n, params, retain_graph=True)
    kl_grad = flat_grad(kl_rows(log_all.detach(), log_all).sum() / n, params, create_graph=True)
    x = conjugate_gradient(lambda v: flat_grad(kl_grad @ v, params, retain_graph=True), g, n_iter=13, res_tol=0.0)
    # H is singular (softmax shift invariance): CG from 0 stays in range(H) and reaches the minimum-norm solution
    dense = torch.linalg.pinv(H, hermitian=True) @ g
    torch.testing.assert_close(x, dense, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(H @ x, g, rtol=1e-6, atol=1e-9)


def test_trpo_step_respects_the_trust_region_and_improves(grid3, make_net):
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=2)
    states, actions, adv, n = _batch(env)
    params = list(pf.parameters())
    before = torch.nn.utils.parameters_to_vector(params).detach().clone()
    with torch.no_grad():
        old = policy_log_probs(env, pf, states, dtype=torch.float64)
    sur_old = float(adv.sum() / n)
    info = trpo_step(pf, lambda: policy_log_probs(env, pf, states, dtype=torch.float64), actions, adv, n,
                     max_kl=0.01, cg_iters=10, backtracks=20)
    assert info["accepted"] == 1.0
    with torch.no_grad():
        new = policy_log_probs(env, pf, states, dtype=torch.float64)
    kl = float(kl_rows(new, old).mean())
    assert 0 < kl <= 0.01 and abs(kl - info["kl"]) < 1e-12
    new_logp, old_logp = new.gather(1, actions[:, None])[:, 0], old.gather(1, actions[:, None])[:, 0]
    assert float((torch.exp(new_logp - old_logp) * adv).sum() / n) < sur_old
    assert not torch.equal(before, torch.nn.utils.parameters_to_vector(params).detach())


def test_trpo_restores_the_parameters_when_no_step_is_accepted(grid3, make_net):
    env = grid3
    pf = make_net(env.feature_dim, env.n_actions, seed=3)
    states, actions, adv, n = _batch(env)
    params = list(pf.parameters())
    before = torch.nn.utils.parameters_to_vector(params).detach().clone()
    calls = []

    def log_probs_fn():  # from the line search on, a distribution far from pi_old: every step breaks the region
        calls.append(1)
        out = policy_log_probs(env, pf, states, dtype=torch.float64)
        return out if len(calls) == 1 else torch.full_like(out, -1e5).scatter(1, out.argmin(1, keepdim=True), 0.0)

    info = trpo_step(pf, log_probs_fn, actions, adv, n, max_kl=0.01, backtracks=3)
    assert len(calls) == 4
    assert info["accepted"] == 0.0
    assert torch.equal(before, torch.nn.utils.parameters_to_vector(params).detach())


def _official_cg(hvp, b, n_iter, res_tol):
    """Transcription of the loop of the official ``Trajectory_TRPO.conjugate_gradients``: update x and r, then stop
    when r.r < res_tol, else update the direction (the residual is only tested after a step)."""
    x, r, p = torch.zeros_like(b), b.clone(), b.clone()
    r_dot = r @ r
    for _ in range(n_iter):
        h_p = hvp(p)
        step = r_dot / (p @ h_p)
        x = x + step * p
        r = r - step * h_p
        new_dot = r @ r
        if new_dot < res_tol:
            break
        p = r + (new_dot / r_dot) * p
        r_dot = new_dot
    return x


def test_cg_takes_a_step_when_the_gradient_is_below_the_tolerance():
    # a small gradient (|b|^2 = 1.4e-7 < 1e-5) still gives the official direction (at least one CG step), hence a full
    # trust-region step; testing the residual before the first step returned x = 0 and TRPO stopped moving
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    h = a @ a.T + 0.5 * torch.eye(6, dtype=torch.float64)
    for scale in (1e-4, 1.0):
        b = scale * torch.randn(6, generator=gen, dtype=torch.float64)
        ours = conjugate_gradient(lambda v: h @ v, b, n_iter=10, res_tol=1e-5)
        ref = _official_cg(lambda v: h @ v, b, n_iter=10, res_tol=1e-5)
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=0.0)
        assert float(ours.norm()) > 0
    b = 1e-4 * torch.ones(6, dtype=torch.float64)  # one step: x = (b.b / b.Hb) b
    torch.testing.assert_close(conjugate_gradient(lambda v: h @ v, b), (b @ b) / (b @ h @ b) * b, rtol=1e-12, atol=0.0)
