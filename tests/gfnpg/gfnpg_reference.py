"""Test oracles (not product code): every trajectory of a small environment, flows of an exact sampler, and a
loop transcription of the official advantage estimator."""

from __future__ import annotations

import torch

from zoo.gfnpg.sampling import Trajectories


def all_trajectories(env) -> Trajectories:
    """Every complete trajectory s0 -> ... -> x -> stop of a small environment, padded like the sampler's."""
    paths = []

    def walk(states, actions):
        s = states[-1]
        mask = env.forward_masks(s[None])[0]
        for a in torch.nonzero(mask)[:, 0].tolist():
            if a == env.n_actions - 1:
                paths.append((states, actions + [a]))
            else:
                walk(states + [env.step(s[None], torch.tensor([a]))[0]], actions + [a])

    walk([env.s0(1)[0]], [])
    L = max(len(a) for _, a in paths)
    states = torch.full((L + 1, len(paths), env.state_dim), -1, dtype=torch.long)
    actions = torch.full((L, len(paths)), -1, dtype=torch.long)
    for b, (ss, aa) in enumerate(paths):
        states[: len(ss), b] = torch.stack(ss)
        actions[: len(aa), b] = torch.tensor(aa)
    return Trajectories(states, actions, torch.tensor([len(a) for _, a in paths]))


def exact_flow_policy(env, log_pb_table):
    """log pi_F (n_states, n_actions) and log F(s0) of the sampler whose P_T is R/Z for the backward policy
    ``log_pb_table`` (n_states, n_actions-1): F(s) = R(s) + sum_{s'} F(s') pi_B(s|s'), pi_F(s'|s) = F(s') pi_B(s|s')/F(s),
    pi_F(stop|s) = R(s)/F(s); written as plain loops over the states, highest level first."""
    states = env.all_states()
    n = len(states)
    R = env.log_reward(states).exp()
    level = env.level(states)
    flow = torch.zeros(n, dtype=torch.float64)
    edge_flow = torch.zeros(n, env.n_actions, dtype=torch.float64)
    for i in sorted(range(n), key=lambda k: -int(level[k])):
        s = states[i]
        f = R[i].clone()
        fmask = env.forward_masks(s[None])[0]
        for a in torch.nonzero(fmask[:-1])[:, 0].tolist():
            child = env.step(s[None], torch.tensor([a]))
            j = int(env.state_index(child)[0])
            edge_flow[i, a] = flow[j] * log_pb_table[j, a].exp()
            f = f + edge_flow[i, a]
        edge_flow[i, -1] = R[i]
        flow[i] = f
    log_pf = (edge_flow / flow[:, None]).log()
    s0 = int(env.state_index(env.s0(1))[0])
    return log_pf, flow[s0].log()


def official_advantages(scores, values, masks, lamb, lamb_v=1.0):
    """Loop transcription of the official ``estimate_advantages`` (time-reversed recursion, then centring)."""
    L, B = scores.shape
    v_next = torch.zeros(B, dtype=scores.dtype)
    adv_next = torch.zeros(B, dtype=scores.dtype)
    tar_next = torch.zeros(B, dtype=scores.dtype)
    adv = torch.zeros_like(scores)
    tar = torch.zeros_like(scores)
    for i in reversed(range(L)):
        for b in range(B):
            if masks[i, b]:
                delta = scores[i, b] + v_next[b] - values[i, b]
                adv_next[b] = delta + lamb * adv_next[b]
                tar_next[b] = delta + lamb_v * tar_next[b]
                adv[i, b] = adv_next[b]
                tar[i, b] = tar_next[b] + values[i, b]
            v_next[b] = values[i, b] if masks[i, b] else 0.0
    adv[masks] = adv[masks] - adv[masks].mean()
    return adv, tar
