"""Exact terminating distribution P_T by dynamic programming over the state DAG, and the paper's metrics.

P_T(x) = u(x) pi_F(stop|x) with u(s0) = 1 and u(s') = sum_{s in Pa(s')} u(s) pi_F(s'|s) (official
``utils.get_exact_P_T``); states are visited level by level (the number of moves from s0), each level in one
vectorised scatter. Metrics (official ``validate_dist``): TV = 1/2 sum|P_T - R/Z|, JSD, |Z - Z_hat|, |log Z - log Z_hat|.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from zoo.errors import ZooError
from zoo.gfnpg.envs import GFNEnv
from zoo.gfnpg.sampling import policy_log_probs

DEFAULT_MAX_STATES = 2_000_000


class StateGraph:
    """Every state of ``env`` and every (parent, child, action) edge, grouped by the child's level."""

    def __init__(self, env: GFNEnv, max_states: int = DEFAULT_MAX_STATES):
        n = env.n_states
        if n > max_states:
            raise ZooError(f"exact metrics enumerate every state: {env.describe()} has {n:,} states, more than "
                           f"exact_max_states={max_states:,}; use a smaller environment or raise the limit")
        self.env = env
        self.states = env.all_states()
        if not torch.equal(env.state_index(self.states), torch.arange(n)):
            raise ZooError(f"{env.describe()}: all_states() is not in state_index order")
        child, action = env.backward_masks(self.states).nonzero(as_tuple=True)
        parent = env.state_index(env.backward_step(self.states[child], action))
        level = env.level(self.states)
        order = torch.argsort(level[child], stable=True)
        self.child, self.parent, self.action = child[order], parent[order], action[order]
        counts = torch.bincount(level[self.child], minlength=int(level.max()) + 1)
        self.level_slices = [s for s in torch.cumsum(counts, 0).tolist()]
        self.s0 = int(env.state_index(env.s0(1))[0])
        self.log_rewards = env.log_reward(self.states).double()

    @property
    def n_states(self) -> int:
        return len(self.states)

    def terminal_distribution(self, log_pf_all: torch.Tensor) -> torch.Tensor:
        """P_T (n_states,) float64 from log pi_F(.|s) of every state (n_states, n_actions). Float64 throughout (the
        official validate_dist works in float32)."""
        p = log_pf_all.double().cpu().exp()
        u = torch.zeros(self.n_states, dtype=torch.float64)
        u[self.s0] = 1.0
        start = 0
        for end in self.level_slices:  # level 0 has no incoming edges; each level only reads lower levels
            if end > start:
                par, ch, act = self.parent[start:end], self.child[start:end], self.action[start:end]
                u.index_add_(0, ch, u[par] * p[par, act])
            start = end
        return u * p[:, -1]

    @torch.no_grad()
    def policy_log_probs(self, pf: Optional[nn.Module], chunk: int = 16384) -> torch.Tensor:
        dev = next(pf.parameters()).device if pf is not None else torch.device("cpu")
        out = [policy_log_probs(self.env, pf, self.states[i:i + chunk].to(dev), dtype=torch.float64)
               for i in range(0, self.n_states, chunk)]
        return torch.cat(out).double().cpu()  # the DP runs on the host


def jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (nats) with the official 1e-20 floor."""
    p, q = p.clamp_min(1e-20), q.clamp_min(1e-20)
    m = 0.5 * (p + q)
    return 0.5 * ((p * (p / m).log()).sum() + (q * (q / m).log()).sum())


def exact_metrics(p_t: torch.Tensor, log_rewards: torch.Tensor, log_z_hat: float,
                  mean_reward: bool = False) -> dict[str, float]:
    """TV, JSD, |Z - Z_hat|, |log Z - log Z_hat|; ``mean_reward`` (the sequence tasks, as the official
    ``validate_dist`` for ``BitSeqEnv`` and its subclass ``BioSeqEnv``): also ``mean_diff`` = E_{P_T}[R] / E_{R/Z}[R]
    clipped to [0, 1], the expected reward of P_T against that of the target (E_{R/Z}[R] = sum R^2 / sum R)."""
    log_rewards, p_t = log_rewards.double().cpu(), p_t.double().cpu()
    target = torch.softmax(log_rewards, 0)
    log_z = torch.logsumexp(log_rewards, 0)
    log_z_hat = torch.tensor(float(log_z_hat), dtype=torch.float64)
    metrics = {
        "tv": float(0.5 * (p_t - target).abs().sum()),
        "jsd": float(jsd(p_t, target)),
        "z_diff": float((log_z_hat.exp() - log_z.exp()).abs()),
        "logz_diff": float((log_z_hat - log_z).abs()),
    }
    if mean_reward:
        rewards = log_rewards.exp()  # 0 where log R = -inf (states that cannot stop)
        metrics["mean_diff"] = float(((p_t * rewards).sum() / (target * rewards).sum()).clamp(0.0, 1.0))
    return metrics
