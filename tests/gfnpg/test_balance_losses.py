"""The TB / DB / SubTB baselines against their definitions, written as loops over trajectories and transitions.

tests/gfnpg/test_baselines.py compares them with torchgfn, an optional peer that CI does not install (it pins NumPy 1);
without it, mutation testing found the baselines unguarded (TB's sign of log pi_B, SubTB's per-trajectory weights).
These oracles need nothing but the definitions: Malkin et al. 2022 (TB), Bengio et al. 2023 (DB), Madan et al. 2023
(SubTB, the official ``geometric_within`` weighting)."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.gfnpg.objectives import LOG_REWARD_CLIP_MIN, db_loss, subtb_loss, tb_loss
from zoo.gfnpg.sampling import Trajectories


def _batch(seed: int = 0):
    """Five forward trajectories of different lengths (actions incl. the stop), values 0 at padding; one log-reward
    below the clip."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([1, 3, 5, 2, 4])
    L, B = int(lengths.max()), len(lengths)
    traj = Trajectories(states=torch.zeros(L + 1, B, 1, dtype=torch.long), actions=torch.zeros(L, B, dtype=torch.long),
                        lengths=lengths)
    valid = traj.valid.double()
    log_pf, log_pb, log_flows = (torch.randn(L, B, generator=g, dtype=torch.float64) * valid for _ in range(3))
    log_rewards = torch.randn(B, generator=g, dtype=torch.float64) * 3
    log_rewards[2] = LOG_REWARD_CLIP_MIN - 5.0
    return traj, log_pf, log_pb, log_flows, log_rewards


def test_trajectory_balance_is_the_mean_squared_log_ratio():
    traj, log_pf, log_pb, _, log_rewards = _batch()
    log_z = torch.tensor(0.7, dtype=torch.float64)
    residuals = []
    for b, n in enumerate(traj.lengths.tolist()):
        forward = sum(float(log_pf[t, b]) for t in range(n))
        backward = sum(float(log_pb[t, b]) for t in range(n))
        residuals.append(0.7 + forward - backward - max(float(log_rewards[b]), LOG_REWARD_CLIP_MIN))
    expected = sum(r * r for r in residuals) / len(residuals)
    assert float(tb_loss(log_pf, log_pb, log_rewards, log_z)) == pytest.approx(expected, rel=1e-12)


def test_detailed_balance_sums_every_transition_with_the_reward_at_the_stop():
    traj, log_pf, log_pb, log_flows, log_rewards = _batch(1)
    total = 0.0
    for b, n in enumerate(traj.lengths.tolist()):
        for t in range(n):
            if t == n - 1:  # x -> s_f: F(x) pi_F(stop | x) = R(x), unclipped
                r = float(log_flows[t, b] + log_pf[t, b] - log_rewards[b])
            else:  # F(s) pi_F(s'|s) = F(s') pi_B(s|s')
                r = float(log_flows[t, b] + log_pf[t, b] - log_flows[t + 1, b] - log_pb[t, b])
            total += r * r
    expected = total / len(traj.lengths)
    assert float(db_loss(log_pf, log_pb, log_flows, traj, log_rewards)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("lamda", [0.9, 1.0, 2.0])
def test_subtrajectory_balance_weights_each_trajectory_geometrically_within_itself(lamda):
    traj, log_pf, log_pb, log_flows, log_rewards = _batch(2)
    per_trajectory = []
    for b, n in enumerate(traj.lengths.tolist()):
        # the flows of s_0 .. x, then the terminal state's: the (clipped) reward
        log_f = [float(log_flows[t, b]) for t in range(n)] + [max(float(log_rewards[b]), LOG_REWARD_CLIP_MIN)]
        weighted, weights = 0.0, 0.0
        for i in range(n):
            for j in range(i + 1, n + 1):
                r = log_f[i] + sum(float(log_pf[t, b] - log_pb[t, b]) for t in range(i, j)) - log_f[j]
                w = lamda ** (j - i - 1)
                weighted, weights = weighted + w * r * r, weights + w
        per_trajectory.append(weighted / weights)
    expected = math.fsum(per_trajectory) / len(per_trajectory)
    got = float(subtb_loss(log_pf, log_pb, log_flows, traj, log_rewards, lamda))
    assert got == pytest.approx(expected, rel=1e-12)
