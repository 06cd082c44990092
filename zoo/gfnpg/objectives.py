"""GFN-PG's costs and actor-critic quantities, and the TB / DB / SubTB baselines.

All tensors are (L, B): time along a padded trajectory x batch, 0 at padding (``traj.valid`` says where).
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from zoo.gfnpg.sampling import Trajectories

LOG_REWARD_CLIP_MIN = -12.0  # official log_reward_clip_min (roughly log 1e-5)


def rl_costs(log_pf: torch.Tensor, log_pb: torch.Tensor, traj: Trajectories, log_rewards: torch.Tensor,
             log_z: torch.Tensor, clip: float = LOG_REWARD_CLIP_MIN) -> torch.Tensor:
    """Policy-dependent costs: c_t = log pi_F(s_{t+1}|s_t) - log pi_B(s_t|s_{t+1}) for moves and, at the stop step,
    c_T = log pi_F(stop|x) - max(log R(x), clip) + log Z; then E_{P_F}[sum_t c_t] = KL(P_F || P_B R / Z*) + log Z - log Z*
    (official ``get_scores``: the stop step's log pi_B is replaced by log R - log Z)."""
    terminal = (log_rewards.clamp_min(clip) - log_z).to(log_pf.dtype)
    target = torch.where(traj.is_stop, terminal[None, :].expand_as(log_pb), log_pb)
    return (log_pf - target) * traj.valid


@lru_cache(maxsize=32)
def _discount_matrix(length: int, lam: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """W[t, t'] = lam^(t'-t) for t' >= t, else 0. Cached per (length, lam, dtype, device): a run meets few
    trajectory lengths, and building W is ten small ops per call (read-only: callers only multiply by it)."""
    t = torch.arange(length, device=device)
    gap = (t[None, :] - t[:, None]).to(dtype)  # gap[t, t'] = t' - t
    return torch.where(gap >= 0, torch.full_like(gap, lam) ** gap.clamp_min(0), torch.zeros_like(gap))


# Above this length a reverse sum with lam = 1 is a flipped cumsum: O(L) instead of the product's O(L^2) (on one CPU
# thread, 128 trajectories: at L = 13 the product takes 4.5 us and the three ops 10 us; at L = 400, 690 against
# 147 us; at L = 1200, 7.8 ms against 0.4 ms).
CUMSUM_MIN_LENGTH = 128


def discounted_reverse_cumsum(x: torch.Tensor, lam: float) -> torch.Tensor:
    """y_t = sum_{l>=0} lam^l x_{t+l} along dim 0 (x is 0 past each trajectory's end): one product with the cached
    triangular matrix, or, for lam = 1 on long trajectories, a flipped cumsum (the same sums in another order)."""
    if lam == 1.0 and x.shape[0] > CUMSUM_MIN_LENGTH:
        return x.flip(0).cumsum(0).flip(0)
    return _discount_matrix(x.shape[0], float(lam), x.dtype, x.device) @ x


def advantages_and_targets(costs: torch.Tensor, values: torch.Tensor, valid: torch.Tensor, lam: float,
                           centre: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over costs (official ``estimate_advantages``): delta_t = c_t + V(s_{t+1}) - V(s_t) with V = 0 after the last
    step, A_t = sum_l lam^l delta_{t+l}, centred over the batch's steps; the critic's target sum_l delta_{t+l} + V(s_t)
    is the Monte-Carlo cost-to-go sum_{t'>=t} c_{t'} (the official code uses lambda = 1 for it)."""
    mask = valid.to(costs.dtype)  # once: a product with the bool mask converts it at every call
    values = values * mask
    # the masked costs are 0 past each trajectory's end, so their reverse sums are exactly 0 there too: no mask after
    # the products, and the sum over all entries is the sum over the valid steps
    targets = discounted_reverse_cumsum(costs * mask, 1.0)
    if lam == 1.0:
        # the deltas telescope: sum_{t'>=t} delta_t' = sum_{t'>=t} c_t' - V(s_t) (V = 0 after the last step), so
        # A = targets - V, one reverse sum instead of two (the backward actor's GAE; the same values, float64 1e-12)
        adv = targets - values
    else:
        next_values = F.pad(values[1:], (0, 0, 0, 1))  # V(s_{t+1}), 0 after the last step
        deltas = (costs + next_values - values) * mask  # 0 past the end, and so is their reverse sum
        adv = discounted_reverse_cumsum(deltas, lam)
    if centre:
        adv = (adv - adv.sum() / mask.sum()) * mask
    return adv, targets


def actor_loss(advantages: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """mean_tau sum_t A_t log pi(a_t|s_t), A detached: its gradient is the policy-gradient estimate."""
    return (advantages.detach() * log_p).sum(0).mean()


def critic_loss(targets: torch.Tensor, values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return ((targets.detach() - values) ** 2 * valid).sum(0).mean()


def log_z_surrogate(log_z: torch.Tensor, costs: torch.Tensor) -> torch.Tensor:
    """A loss whose gradient in log Z is mean_tau sum_t c_t (official ``Z_diff``): it drives E[sum c] to 0, i.e. log Z
    to log Z* - KL, which is log Z* at the optimum."""
    return log_z * costs.detach().sum(0).mean()


def backward_tb_loss(log_pg: torch.Tensor, log_pb: torch.Tensor, traj_valid: torch.Tensor, log_pg_stop: torch.Tensor,
                     log_rewards: torch.Tensor, log_z: torch.Tensor, clip: float = LOG_REWARD_CLIP_MIN) -> torch.Tensor:
    """pi_B update of the official DAG runs (``B_update_model_Emp`` in train_BN.py): the trajectory-balance residual of
    backward trajectories with pi_G (detached) as the forward policy, mean_tau (sum_t [log pi_G - log pi_B] +
    log pi_G(stop|x) - max(log R, clip) + log Z)^2; only pi_B is trained by it."""
    resid = (((log_pg.detach() - log_pb) * traj_valid).sum(0) + log_pg_stop.detach()
             - log_rewards.clamp_min(clip).to(log_pb.dtype) + log_z.detach())
    return resid.pow(2).mean()


# ------------------------------------------------------------------------------------------------ baselines
def tb_loss(log_pf: torch.Tensor, log_pb: torch.Tensor, log_rewards: torch.Tensor, log_z: torch.Tensor,
            clip: float = LOG_REWARD_CLIP_MIN) -> torch.Tensor:
    """Trajectory balance (Malkin et al. 2022; official ``trajectory_balance.py``): mean of
    (log Z + sum log pi_F - sum log pi_B - max(log R, clip))^2."""
    scores = log_z + log_pf.sum(0) - log_pb.sum(0) - log_rewards.clamp_min(clip).to(log_pf.dtype)
    return scores.pow(2).mean()


def db_loss(log_pf: torch.Tensor, log_pb: torch.Tensor, log_flows: torch.Tensor, traj: Trajectories,
            log_rewards: torch.Tensor) -> torch.Tensor:
    """Detailed balance (official ``detailed_balance.py``): per transition (log F(s) + log pi_F(s'|s) -
    log F(s') - log pi_B(s|s'))^2, with F(s_f) pi_B(x|s_f) = R(x) (unclipped) at the stop step; summed and divided by
    the number of trajectories."""
    next_flows = torch.cat([log_flows[1:], torch.zeros_like(log_flows[:1])])
    target = torch.where(traj.is_stop, log_rewards.to(log_pf.dtype)[None, :].expand_as(log_pb), log_pb + next_flows)
    scores = (log_flows + log_pf - target) * traj.valid
    return scores.pow(2).sum() / len(traj)


def subtb_loss(log_pf: torch.Tensor, log_pb: torch.Tensor, log_flows: torch.Tensor, traj: Trajectories,
               log_rewards: torch.Tensor, lamda: float, clip: float = LOG_REWARD_CLIP_MIN) -> torch.Tensor:
    """Sub-trajectory balance (Madan et al. 2023) with the ``geometric_within`` weighting of the official
    ``sub_trajectory_balance.py``: every sub-trajectory s_i -> s_j (0 <= i < j <= n, s_n = s_f, n = actions incl. stop)
    has residual log F(s_i) + sum log pi_F - sum log pi_B - log F(s_j) (log F(s_n) := max(log R, clip)), weight
    lamda^(j-i-1) normalised within its trajectory, then averaged over trajectories."""
    L, B = log_pf.shape
    n = traj.lengths
    zero = torch.zeros_like(log_pf[:1])
    cum = torch.cat([zero, (log_pf - log_pb).cumsum(0)])  # (L+1, B): sum over steps < t
    flows = torch.cat([log_flows, zero])
    ends = flows.scatter(0, n[None, :], log_rewards.clamp_min(clip).to(flows.dtype)[None, :])  # float64 flows too
    start = flows - cum  # a_i
    end = ends - cum  # b_j
    scores = start[:, None, :] - end[None, :, :]  # (i, j, B)
    t = torch.arange(L + 1, device=n.device)
    pair = (t[:, None, None] < t[None, :, None]) & (t[None, :, None] <= n[None, None, :])
    length = (t[None, :] - t[:, None]).clamp_min(1).to(log_pf.dtype)  # j - i
    w = (lamda ** (length - 1))[:, :, None] * pair
    w = w / w.sum((0, 1), keepdim=True)
    return (w * scores.pow(2)).sum() / B
