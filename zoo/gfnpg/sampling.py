"""Policies (MLPs over state features, masked softmax) and batched forward/backward trajectories."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from zoo.gfnpg.envs import GFNEnv, Guide

# Logit of a masked action: finite, as the official code (inf_value=-1e5), so that KL terms p * (log p - log q) of
# masked actions are 0 * finite instead of 0 * (-inf + inf) = NaN; exp(-1e5) is exactly 0 in float32 and float64.
MASKED_LOGIT = -1e5


def mlp(in_dim: int, out_dim: int, hidden_dim: int = 256, n_hidden_layers: int = 4) -> nn.Sequential:
    """The official ``NeuralNet``: ``n_hidden_layers`` Linear+ReLU layers of width ``hidden_dim``, then a linear head."""
    layers: list[nn.Module] = [nn.Linear(in_dim, hidden_dim), nn.ReLU()]
    for _ in range(n_hidden_layers - 1):
        layers += [nn.Linear(hidden_dim, hidden_dim), nn.ReLU()]
    layers.append(nn.Linear(hidden_dim, out_dim))
    return nn.Sequential(*layers)


def _first_linear(net: nn.Module) -> Optional[nn.Linear]:
    return net[0] if isinstance(net, nn.Sequential) and isinstance(net[0], nn.Linear) else None


def lookup_table(env: GFNEnv, net: Optional[nn.Module]) -> Optional[torch.Tensor]:
    """The first layer's weight as a contiguous (feature_dim, hidden) table for ``net_output``'s lookup, or None (no
    K-hot features, no leading Linear, or the uniform policy). The samplers build it once per call, under no_grad, and
    pass it to every step: the weight does not change while they sample, so every step gathers from the same table
    instead of transposing the weight again (the same values as the per-call copy)."""
    first = _first_linear(net) if net is not None else None
    if first is None or env.hot_index(env.s0(1)) is None:
        return None
    return first.weight.detach().t().contiguous()


def net_output(env: GFNEnv, net: nn.Module, states: torch.Tensor, table: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``net(env.features(states))``. Where the features are K-hot (``env.hot_index``) and the net starts with a
    Linear layer, that layer is evaluated as the sum of the weight columns of the hot features (an embedding lookup):
    the same function and gradients as multiplying by the dense one-hot matrix (tested), without building the
    (N, feature_dim) matrix or multiplying by its zeros. ``F.embedding`` rather than ``embedding_bag``: its backward is
    differentiable again, which RL-T's Hessian-vector products need. ``table``: a prepared ``lookup_table(env, net)``
    (detached: only for evaluations without gradients)."""
    first = _first_linear(net)
    hot = env.hot_index(states) if first is not None else None
    if hot is None:
        p = next(net.parameters())
        return net(env.features(states).to(device=p.device, dtype=p.dtype))
    if table is None:
        # Gathering rows of the transposed weight reads it with stride; above a few dozen rows a contiguous copy
        # (one 512x256 transpose on the paper's grid) is cheaper than the strided reads (measured on one CPU thread).
        table = first.weight.t()
        if len(states) > 64:
            table = table.contiguous()
    h = F.embedding(hot.to(table.device), table).sum(1)
    if first.bias is not None:
        h = h + first.bias
    layers = iter(net)  # the layers after the first, without building a sliced Sequential per call
    next(layers)
    for layer in layers:
        h = layer(h)
    return h


# Where pi_B is evaluated ahead of the backward sampler (moves, rows; see with_ancestors): at the forward children's
# ancestors with the forward costs (backward_log_probs), and at a missing state's ancestors (_known_or_evaluated).
# Widening the call this way makes the sampler call the network far less often per batch than with the forward
# children alone (seen once with fresh networks on the 256x256 grid, not measured by a committed command): on one CPU
# thread a call of pi_B's MLP costs about the same whatever its rows, so fewer, wider calls are cheaper.
KNOWN_ANCESTORS = (3, 256)
LOOKAHEAD = (2, 32)
LOOKAHEAD_TABLE_MAX = 4096  # known rows beyond which a miss is evaluated alone (the table is not merged and re-sorted)

# See _forced_backward; False evaluates pi_B's network at every state (the tests compare both paths).
SKIP_FORCED_BACKWARD = True


def _forced_backward(env: GFNEnv, net: nn.Module, states: torch.Tensor, mask: torch.Tensor,
                     table: Optional[torch.Tensor]) -> torch.Tensor:
    """pi_B's unmasked logits, with the network evaluated only where a state has more than one legal backward action.
    Where it has one (on the hypergrid, every state on an axis; a DAG with one edge), pi_B(.|s) is the point mass on
    that action whatever the network says: its masked row is (0 at the action, MASKED_LOGIT elsewhere) here and
    (l, MASKED_LOGIT) from the network, and both give log-probability exactly 0 (exp(-1e5 - l) is 0 in float32 and
    float64), gradient exactly 0, and the legal action under Gumbel-max whatever the noise. Skipping those rows changes
    no value, draw or gradient (tested against the network on every row); it spares the backward sampler and pi_B's
    passes the forced moves, a large share of the states near the grid's axes. Where every row is forced, a graph of
    zeros to the parameters keeps their gradients at 0 rather than None, so that Adam steps them as before."""
    idx = (mask.sum(1) > 1).nonzero()[:, 0]  # the free rows (nonzero's length is their count: no separate sum)
    n_free = len(idx)
    if n_free == len(states):
        return net_output(env, net, states, table)
    p = next(net.parameters())
    logits = torch.zeros(len(states), mask.shape[1], dtype=p.dtype, device=states.device)
    if n_free:
        return logits.index_copy(0, idx, net_output(env, net, states[idx], table))
    if torch.is_grad_enabled() and p.requires_grad:
        logits = logits + sum(q.reshape(-1)[:1].sum() for q in net.parameters()) * 0.0
    return logits


def distinct_states(env: GFNEnv, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(reps, inverse) with ``reps`` one row per distinct state of ``states`` and ``states == reps[inverse]``. A batch
    of trajectories repeats states heavily: every trajectory passes through s0 and the states next to it (on the
    256x256 grid at batch 128, RL-B's pi_G pass sees ~290 parent states of which ~45 are distinct)."""
    return _distinct_with_keys(env, states)[:2]


def _distinct_with_keys(env: GFNEnv, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """``distinct_states`` and the reps' keys (sorted and distinct: ``known_rows`` of the reps without grouping them
    again), or None where the environment has no ``state_key``."""
    key = env.state_key(states)
    if key is None:
        return (*torch.unique(states, dim=0, return_inverse=True), None)
    keys, inverse, first = _group_by_key(key)
    return states[first], inverse, keys


def _group_by_key(key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted distinct keys, inverse with ``key == keys[inverse]``, one row index per key). Any row of a group will
    do as its representative: the rows of a group hold the same state."""
    keys, inverse = torch.unique(key, return_inverse=True)
    first = torch.empty_like(keys).scatter_(0, inverse, torch.arange(len(inverse), device=inverse.device))
    return keys, inverse, first


def policy_logits(env: GFNEnv, net: Optional[nn.Module], states: torch.Tensor, backward: bool = False,
                  guide: Optional[Guide] = None, dtype: torch.dtype = torch.float32,
                  table: Optional[torch.Tensor] = None, distinct: bool = False) -> torch.Tensor:
    """Masked logits of pi(.|s) over all actions. ``net=None`` is the uniform policy (zero logits: uniform over the
    legal actions, the official ``Uniform`` module). ``guide`` caps the stop logit (RL-G's pi_G, forward only).
    ``table``: see ``net_output``. Backward policies skip the network at forced states (``_forced_backward``).
    ``distinct``: evaluate each distinct state once and copy its row to the repeats (every step here is row-wise, so
    each row is the plain evaluation's row; a repeated state costs a row of every layer and the copy is one gather;
    the module's passes group their rows the same way, through ``forward_log_probs`` / ``backward_log_probs``)."""
    if distinct and net is not None and len(states):
        reps, inverse = distinct_states(env, states)
        return policy_logits(env, net, reps, backward, guide, dtype, table)[inverse]
    n_out = env.n_actions - 1 if backward else env.n_actions
    mask = env.backward_masks(states) if backward else env.forward_masks(states)
    if net is None:
        logits = torch.zeros(len(states), n_out, dtype=dtype, device=states.device)
    elif backward and SKIP_FORCED_BACKWARD:
        logits = _forced_backward(env, net, states, mask, table)
    else:
        logits = net_output(env, net, states, table)
    logits = logits.masked_fill(~mask, MASKED_LOGIT)
    if guide is not None:
        low = env.log_reward(states) <= guide.log_reward_max
        capped = torch.minimum(logits[:, -1], torch.full_like(logits[:, -1], guide.log_eps))
        logits = torch.cat([logits[:, :-1], torch.where(low, capped, logits[:, -1])[:, None]], dim=1)
    return logits


def policy_log_probs(env: GFNEnv, net: Optional[nn.Module], states: torch.Tensor, backward: bool = False,
                     guide: Optional[Guide] = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """log pi(.|s) over all actions, masked (see ``policy_logits``)."""
    return policy_logits(env, net, states, backward, guide, dtype).log_softmax(-1)


def sample_actions(logits: torch.Tensor) -> torch.Tensor:
    """One action per row of a (B, A) table of logits (or log-probabilities: they differ by a constant per row), by
    the Gumbel-max trick (exact, and cheaper than normalising and building a ``Categorical`` at every step)."""
    return (logits - torch.empty_like(logits).exponential_().log()).argmax(-1)


@dataclass
class Trajectories:
    """A batch of padded trajectories.

    Forward: ``states[t]`` for ``t < lengths`` are s_0 .. x (x = ``states[lengths-1]``), ``actions[t]`` the action taken
    there, the last one the stop action. Backward: ``states[0]`` = x, ``states[lengths]`` = s_0, ``actions[t]`` the
    backward action from ``states[t]``. Padding: states -1, actions -1.
    """

    states: torch.Tensor  # (L+1, B, state_dim) long
    actions: torch.Tensor  # (L, B) long
    lengths: torch.Tensor  # (B,) number of actions
    backward: bool = False

    # valid, is_stop and sources are computed once per batch (cached_property; the fields are never reassigned): an
    # iteration reads them a dozen times, and each read was a few small ops. Callers must not modify them in place.
    @cached_property
    def valid(self) -> torch.Tensor:
        return torch.arange(self.actions.shape[0], device=self.actions.device)[:, None] < self.lengths[None, :]

    @cached_property
    def is_stop(self) -> torch.Tensor:
        """(L, B) True at the stop step of forward trajectories."""
        t = torch.arange(self.actions.shape[0], device=self.actions.device)[:, None]
        return (t == self.lengths[None, :] - 1) & (not self.backward)

    @cached_property
    def sources(self) -> torch.Tensor:
        """The states where an action is taken, one row per step (time-major): s_t of the forward moves and stops,
        the children of the backward moves. pi_F and V (forward), pi_B and V_B (backward) are evaluated there."""
        return self.states[:-1][self.valid]

    @property
    def terminal_states(self) -> torch.Tensor:
        if self.backward:
            return self.states[0]
        return self.states[self.lengths - 1, torch.arange(len(self.lengths), device=self.lengths.device)]

    def __len__(self) -> int:
        return int(self.lengths.shape[0])


@torch.no_grad()
def sample_forward(env: GFNEnv, pf: Optional[nn.Module], n: int, device=None) -> Trajectories:
    """n on-policy trajectories from s0 with pi_F (every trajectory ends with the stop action)."""
    s = env.s0(n, device)
    done = torch.zeros(n, dtype=torch.bool, device=s.device)
    states, actions = [s], []
    stop = env.n_actions - 1
    table = lookup_table(env, pf)
    while not done.all():
        act = torch.full((n,), -1, dtype=torch.long, device=s.device)
        live = ~done
        act[live] = sample_actions(policy_logits(env, pf, s[live], table=table))
        moving = live & (act != stop)
        nxt = torch.full_like(s, -1)
        nxt[moving] = env.step(s[moving], act[moving])
        done = done | (act == stop)
        actions.append(act)
        states.append(nxt)
        s = nxt
    a = torch.stack(actions)
    return Trajectories(torch.stack(states), a, (a >= 0).sum(0), backward=False)


def _distinct_sources(env: GFNEnv, traj: Trajectories) -> tuple[torch.Tensor, torch.Tensor]:
    """``distinct_states`` of ``traj.sources``, grouped once per batch: pi_F's and V's passes share the forward
    sources, pi_B's and V_B's the backward ones."""
    cache = traj.__dict__.setdefault("_distinct_sources", {})
    if id(env) not in cache:
        cache[id(env)] = distinct_states(env, traj.sources)
    return cache[id(env)]


def with_ancestors(env: GFNEnv, states: torch.Tensor, moves: int, max_rows: int) -> torch.Tensor:
    """``states`` followed by the distinct states 1, 2, ... ``moves`` backward moves from them, level by level while
    the rows number fewer than ``max_rows`` (``states`` come first and whole; rows may repeat across levels)."""
    out, frontier = [states], states
    rows = len(states)
    for _ in range(moves):
        if rows >= max_rows or not len(frontier):
            break
        legal = env.backward_masks(frontier).nonzero()
        frontier = distinct_states(env, env.backward_step(frontier[legal[:, 0]], legal[:, 1]))[0]
        out.append(frontier)
        rows += len(frontier)
    return torch.cat(out) if len(out) > 1 else states


def known_rows(env: GFNEnv, states: torch.Tensor, rows: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """(sorted distinct keys, one row of ``rows`` per key) for ``sample_backward(known=...)``: rows (e.g. pi_B's masked
    logits) already computed at ``states``; ``None`` where the environment has no ``state_key`` or nothing is known."""
    key = env.state_key(states) if len(states) else None
    if key is None:
        return None
    keys, _, first = _group_by_key(key)
    return keys, rows[first]


def _known_or_evaluated(env: GFNEnv, pb: nn.Module, states: torch.Tensor, known: tuple[torch.Tensor, torch.Tensor],
                        table: Optional[torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """(pi_B's masked logits at ``states``, the known rows for the next step): the known row where the state has
    one, the network at the others (and, while the table is small, at their ancestors, added to the table).
    ``known``: sorted keys ending with a sentinel above every key (``sample_backward`` appends it), so that the
    search lands inside the table without a clamp; most steps find every state, and one comparison says so."""
    keys, rows = known
    key = env.state_key(states)
    pos = torch.searchsorted(keys, key)
    logits, found = rows[pos], keys[pos]
    if torch.equal(found, key):
        return logits, known
    miss = (found != key).nonzero()[:, 0]
    if len(keys) > LOOKAHEAD_TABLE_MAX:  # a large table (long trajectories): re-sorting it per miss costs more
        return logits.index_copy(0, miss, policy_logits(env, pb, states[miss], backward=True, table=table)), known
    # A trajectory that leaves the known states walks on among unknown ones: evaluate the network at the missing
    # states and at their ancestors a few moves down (``LOOKAHEAD``: moves, rows) in one call, and add them to the
    # table, so that the next steps find their states there (one network call instead of one per step).
    wider, inverse = distinct_states(env, with_ancestors(env, states[miss], *LOOKAHEAD))
    wider_logits = policy_logits(env, pb, wider, backward=True, table=table)
    logits = logits.index_copy(0, miss, wider_logits[inverse[:len(miss)]])
    # merged and sorted again, the sentinel kept last (a key already known may repeat: either row is pi_B's there)
    merged_keys = torch.cat([env.state_key(wider), keys])
    order = torch.argsort(merged_keys, stable=True)
    return logits, (merged_keys[order], torch.cat([wider_logits, rows])[order])


@torch.no_grad()
def sample_backward(env: GFNEnv, pb: Optional[nn.Module], x: torch.Tensor,
                    known: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> Trajectories:
    """Backward trajectories from the terminal states ``x`` to s0 with pi_B (``None``: uniform). Their lengths are
    known in advance (the level of x), so the batch is walked in order of decreasing length: the trajectories still
    moving at step t are then a prefix (a view, no boolean indexing per step); every step's rows are written into
    the padded batch, in the batch's order, at the end. ``known``: ``known_rows`` of pi_B's masked logits at states
    where the caller already has them under the same parameters: RL-B evaluates pi_B for its costs at every child of
    the forward trajectories (the terminal states x among them; x = s0 makes no move) and at their ancestors a few
    moves down, and pi_B does not move before the backward update. A step takes a state's row from there and
    evaluates the network only at the others (the same logits, the same draws; see KNOWN_ANCESTORS)."""
    lengths = env.level(x)
    n, L = len(x), int(lengths.max()) if len(x) else 0
    order = torch.argsort(lengths, descending=True, stable=True)
    moving = (lengths[None, :] > torch.arange(L, device=x.device)[:, None]).sum(1).tolist()  # per step
    if pb is None:
        known = None  # the uniform pi_B has nothing to look up
    # with known rows the network runs at a few misses only (0.4 calls per batch with fresh networks on the 256x256
    # grid), each on few rows: no prepared table there (its transposed copy of the first layer cost more than the
    # misses' own reads of the weight; net_output gathers the same values either way)
    table = lookup_table(env, pb) if known is None else None
    if known is not None:
        keys, rows = known
        known = (torch.cat([keys, keys.new_full((1,), torch.iinfo(keys.dtype).max)]), torch.cat([rows, rows[:1]]))
    # Gumbel noise of every step drawn at once: -log E for E ~ Exp(1), the stream sample_actions draws step by step
    # (on CPU the same numbers: exponential_ fills a tensor in order; tested against the per-step sampler)
    p = next(pb.parameters()) if pb is not None else None
    n_out = env.n_actions - 1
    gumbel = torch.empty(sum(moving), n_out, dtype=p.dtype if p is not None else torch.float32,
                         device=x.device).exponential_().log_()
    start = 0
    s = x[order]
    states, actions = [s], []  # per step, the rows still moving (a prefix); padded to the batch once at the end
    for m in moving:
        if m < len(s):
            s = s[:m]
        if known is not None:
            logits, known = _known_or_evaluated(env, pb, s, known, table)
        else:
            logits = policy_logits(env, pb, s, backward=True, table=table)
        a = (logits - gumbel[start:start + m]).argmax(-1)  # sample_actions(logits) with the noise drawn above
        start += m
        s = env.backward_step(s, a)
        actions.append(a)
        states.append(s)
    # one write of every step's rows into the padded batch, in the batch's own order: step t's rows (the prefix
    # order[:m_t], time-major as they were concatenated) go to the flat positions t * n + order[i]
    t = torch.arange(L + 1, device=x.device)[:, None]
    at = t * n + order[None, :]
    sorted_lengths = lengths[order][None, :]
    padded_states = x.new_full(((L + 1) * n, x.shape[1]), -1)
    padded_states[at[t <= sorted_lengths]] = torch.cat(states)
    padded_actions = torch.full((L * n,), -1, dtype=torch.long, device=x.device)
    if L:
        padded_actions[at[:-1][t[:-1] < sorted_lengths]] = torch.cat(actions)
    return Trajectories(padded_states.view(L + 1, n, x.shape[1]), padded_actions.view(L, n), lengths, backward=True)


def forward_log_probs(env: GFNEnv, pf: Optional[nn.Module], traj: Trajectories, guide: Optional[Guide] = None,
                      dtype: torch.dtype = torch.float32, distinct: bool = False) -> torch.Tensor:
    """(L, B) log pi_F of every transition (0 at padding). On a backward trajectory the forward transition of step
    t is states[t+1] -> states[t], taken by forward action actions[t]; the stop action is not part of it.
    ``distinct``: see ``policy_logits``."""
    valid = traj.valid
    parents = traj.states[1:][valid] if traj.backward else traj.sources
    acts = traj.actions[valid]
    out = torch.zeros(valid.shape, dtype=dtype, device=valid.device)
    if distinct and pf is not None and len(parents):
        # each distinct parent once; one index picks (repeat row, action): the rows' values, and with gradients the
        # sum over a state's repeats flows back through one network row (the same gradient, summed in another order)
        reps, inverse = distinct_states(env, parents) if traj.backward else _distinct_sources(env, traj)
        picked = policy_log_probs(env, pf, reps, guide=guide, dtype=dtype)[inverse, acts]
    else:
        picked = policy_log_probs(env, pf, parents, guide=guide, dtype=dtype).gather(1, acts[:, None])[:, 0]
    return out.masked_scatter(valid, picked.to(dtype))


def backward_log_probs(env: GFNEnv, pb: Optional[nn.Module], traj: Trajectories, dtype: torch.dtype = torch.float32,
                       return_logits: bool = False, distinct: bool = False, return_known: bool = False):
    """(L, B) log pi_B(s_t | s_{t+1}) of every move (0 at the stop step and at padding). ``return_logits``: also return
    the masked logits of pi_B at the evaluated states (one row per move, time-major). ``return_known``: instead, also
    return ``known_rows`` of pi_B's logits (for ``sample_backward(known=...)``; with ``distinct``, at the children and
    their ancestors, ``KNOWN_ANCESTORS``; ``None`` for the uniform pi_B). ``distinct``: see ``policy_logits`` (with
    gradients too: the same values, and the gradient of a state's repeats summed before it flows through the
    network)."""
    if traj.backward:
        moves = traj.valid
        children = traj.sources
    else:
        moves = traj.valid & ~traj.is_stop
        children = traj.states[1:][moves]
    acts = traj.actions[moves]
    out = torch.zeros(moves.shape, dtype=dtype, device=moves.device)
    if not len(acts):
        return (out, None) if return_logits or return_known else out
    if distinct and pb is not None:
        reps, inverse = _distinct_sources(env, traj) if traj.backward else distinct_states(env, children)
        if return_known:
            # the known rows also hold pi_B at the children's ancestors a few moves down, evaluated in the same call
            # while that call stays small: the backward sampler's next states, many of which are not forward
            # children themselves (fewer network calls there; with long trajectories the call is large, and the
            # sampler's own lookahead takes over)
            wider, wider_inverse, wider_keys = _distinct_with_keys(env, with_ancestors(env, reps, *KNOWN_ANCESTORS))
            wider_logits = policy_logits(env, pb, wider, backward=True, dtype=dtype)
            # = known_rows(env, wider, wider_logits): the reps' keys are sorted and distinct already
            known = None if wider_keys is None else (wider_keys, wider_logits)
            # the known rows keep the call's graph (grad enabled: known_backward_log_probs reuses it); the costs are
            # constants, computed from the detached rows
            logits = wider_logits.detach()[wider_inverse[:len(reps)]]
        else:
            logits = policy_logits(env, pb, reps, backward=True, dtype=dtype)
            known = None
        picked = logits.log_softmax(-1)[inverse, acts]
        logits = logits[inverse] if return_logits else None
    else:
        logits = policy_logits(env, pb, children, backward=True, dtype=dtype)
        known = known_rows(env, children, logits) if return_known and pb is not None else None
        if return_known:
            logits = logits.detach()
        picked = logits.log_softmax(-1).gather(1, acts[:, None])[:, 0]
    out = out.masked_scatter(moves, picked.to(dtype))
    if return_known:
        return out, known
    return (out, logits) if return_logits else out


def known_backward_log_probs(env: GFNEnv, pb: Optional[nn.Module], traj: Trajectories,
                             known: Optional[tuple[torch.Tensor, torch.Tensor]],
                             dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``backward_log_probs(env, pb, traj, dtype, distinct=True)`` of backward trajectories, with each distinct
    state's masked logits taken from ``known`` (``known_rows``: sorted keys, rows) where it is there and the network
    evaluated only at the other states. RL-B passes the rows of the forward costs' call, evaluated with gradients:
    pi_B has not moved since, so they are the rows a fresh pass would compute, and their graph carries the backward
    update's gradient to the parameters (a state's repeats summed, as in the distinct pass; rows no trajectory
    visits get gradient 0). ``known=None``: the plain distinct pass."""
    if known is None or pb is None or not traj.backward:
        return backward_log_probs(env, pb, traj, dtype, distinct=True)
    moves = traj.valid
    acts = traj.actions[moves]
    out = torch.zeros(moves.shape, dtype=dtype, device=moves.device)
    if not len(acts):
        return out
    reps, inverse = _distinct_sources(env, traj)
    keys, rows = known
    key = env.state_key(reps)
    pos = torch.searchsorted(keys, key).clamp_max_(len(keys) - 1)
    logits = rows[pos]
    miss = (keys[pos] != key).nonzero()[:, 0]
    if len(miss):  # states only the sampler's lookahead (or no call) evaluated: the network, with gradients
        logits = logits.index_copy(0, miss, policy_logits(env, pb, reps[miss], backward=True, dtype=dtype))
    return out.masked_scatter(moves, logits.log_softmax(-1)[inverse, acts].to(dtype))


def state_values(env: GFNEnv, net: nn.Module, traj: Trajectories, distinct: bool = False) -> torch.Tensor:
    """(L, B) net(s_t) at the states where an action is taken (0 at padding): V for the critic, log F for DB/SubTB.
    ``distinct``: each distinct state evaluated once (see ``forward_log_probs``)."""
    valid = traj.valid
    p = next(net.parameters())
    out = torch.zeros(valid.shape, dtype=p.dtype, device=valid.device)
    states = traj.sources
    if distinct and len(states):
        reps, inverse = _distinct_sources(env, traj)
        return out.masked_scatter(valid, net_output(env, net, reps)[inverse, 0])
    return out.masked_scatter(valid, net_output(env, net, states)[:, 0])
