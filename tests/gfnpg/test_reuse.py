"""RL-B's pi_B evaluated once with gradients: the forward costs' call keeps its graph and the backward update takes
its rows from there (``sampling.known_backward_log_probs``, ``module.REUSE_PB_GRAPH``), against the plain distinct
pass with gradients (float64 networks): the same log-probabilities and gradients, and the same iterations."""

from __future__ import annotations

import pytest
import torch

from zoo.gfnpg import Hypergrid
from zoo.gfnpg.sampling import (
    backward_log_probs,
    distinct_states,
    known_backward_log_probs,
    sample_backward,
    sample_forward,
)

from .conftest import assert_same_iterations


@pytest.mark.parametrize("extra", [False, True])
def test_known_rows_with_their_graph_give_the_distinct_pass(make_net, extra):
    """Backward trajectories from a batch's terminal states (``extra``: and from corner states, whose paths leave the
    known rows): log pi_B with the rows of the forward costs' call (graph kept) equals the distinct pass with
    gradients, values and float64 gradients to 1e-12; the costs' log-probabilities come back detached and equal the
    plain pass."""
    env = Hypergrid(8, 2, R0=0.1)
    pf = make_net(env.feature_dim, env.n_actions, seed=0)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=1)
    torch.manual_seed(0)
    traj = sample_forward(env, pf, 64)
    log_pb, known = backward_log_probs(env, pb, traj, torch.float64, distinct=True, return_known=True)
    assert not log_pb.requires_grad and known[1].requires_grad
    torch.testing.assert_close(log_pb, backward_log_probs(env, pb, traj, torch.float64), rtol=0, atol=1e-12)
    x = torch.cat([traj.terminal_states, env.all_states()[-5:]]) if extra else traj.terminal_states
    with torch.no_grad():
        back = sample_backward(env, pb, x, known=(known[0], known[1].detach()))
    reps = distinct_states(env, back.sources)[0]
    inside = torch.isin(env.state_key(reps), known[0])
    assert inside.any() and (~inside).any() == extra  # the extra case has states outside the known rows
    w = torch.randn(back.actions.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)

    def run(f):
        pb.zero_grad(set_to_none=True)
        out = f()
        (w * out.tanh()).sum().backward(retain_graph=True)  # the known rows' graph serves both arms
        return out.detach(), [p.grad.clone() for p in pb.parameters()]

    fast = run(lambda: known_backward_log_probs(env, pb, back, known, torch.float64))
    plain = run(lambda: backward_log_probs(env, pb, back, torch.float64, distinct=True))
    for a, b in zip([fast[0]] + fast[1], [plain[0]] + plain[1]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # without known rows (or on forward trajectories) it is the plain distinct pass
    torch.testing.assert_close(known_backward_log_probs(env, pb, back, None, torch.float64), plain[0],
                               rtol=0, atol=0)


@pytest.mark.parametrize("variant", ["RL-B", "RL-G"])
def test_reusing_the_pi_b_graph_is_the_plain_update(monkeypatch, variant):
    """Three iterations with pi_B's rows and graph reused in the backward update against the old path (the costs'
    call without gradients, pi_B evaluated again with gradients in the update): the same metrics and parameters."""
    import zoo.gfnpg.module as module_mod

    assert_same_iterations(variant, lambda reuse: monkeypatch.setattr(module_mod, "REUSE_PB_GRAPH", reuse),
                           guide=variant == "RL-G")


@pytest.mark.parametrize("lam", [1.0, 0.99])
def test_gae_of_long_trajectories_equals_its_old_form(lam):
    """Trajectories longer than CUMSUM_MIN_LENGTH (lam = 1: a flipped cumsum instead of the triangular product, and
    the backward actor's advantages as targets - V) against the old advantages_and_targets verbatim (float64)."""
    from zoo.gfnpg.objectives import CUMSUM_MIN_LENGTH, advantages_and_targets

    from .test_distinct import _old_advantages

    g = torch.Generator().manual_seed(0)
    for length in (CUMSUM_MIN_LENGTH + 72, 5):
        lengths = torch.randint(0, length + 1, (9,), generator=g)
        lengths[0] = length
        valid = torch.arange(length)[:, None] < lengths[None, :]
        costs = torch.randn(length, 9, generator=g, dtype=torch.float64) * valid
        values = torch.randn(length, 9, generator=g, dtype=torch.float64)
        for a, b in zip(advantages_and_targets(costs, values, valid, lam), _old_advantages(costs, values, valid, lam)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
