"""Discrete GFlowNet environments in plain torch: the hypergrid and Bayesian-network DAGs.

Conventions shared by both (those of the official code, torchgfn 0.1.3 lineage):
* a state is an integer vector; ``s0`` is the all-zero vector;
* forward actions ``0 .. n_actions-2`` move, the last one (``n_actions-1``) stops, and every state may stop (every
  state is a terminal candidate x);
* backward action ``a`` undoes forward action ``a`` (so ``n_actions-1`` backward actions, no stop);
* ``features`` is the network input (K-hot for the grid, the flat adjacency matrix for DAGs).
Rewards are returned as float64 log-rewards; the training code casts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from zoo.errors import ZooError


@dataclass(frozen=True)
class Guide:
    """RL-G's guided pi_G: pi_F with the stop logit capped at ``log_eps`` where ``log R <= log_reward_max``."""

    log_reward_max: float
    log_eps: float


class GFNEnv:
    """Base class; subclasses set ``name``, ``state_dim``, ``n_actions``, ``feature_dim`` and the methods below."""

    name: str = "env"
    state_dim: int
    n_actions: int
    feature_dim: int
    guide: Optional[Guide] = None
    # what to do when RL-G finds no guide (the error message's hint)
    guide_hint: str = "set the datamodule's guide: true"

    # -- dynamics ------------------------------------------------------------------------------------------------
    def s0(self, batch: int, device=None) -> torch.Tensor:
        return torch.zeros(batch, self.state_dim, dtype=torch.long, device=device)

    def forward_masks(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def backward_masks(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def step(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def backward_step(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def log_reward(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def features(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def hot_index(self, states: torch.Tensor) -> Optional[torch.Tensor]:
        """(N, k) positions of the ones when every feature vector is k-hot (the networks' first layer is then a
        lookup, ``sampling.net_output``); ``None`` when the features are not."""
        return None

    def level(self, states: torch.Tensor) -> torch.Tensor:
        """Number of moves from s0 (the DAG of states is graded by it)."""
        raise NotImplementedError

    def state_key(self, states: torch.Tensor) -> Optional[torch.Tensor]:
        """(N,) integer keys, equal exactly where the states are equal (``sampling.distinct_states`` groups rows by
        them), or ``None``: the rows are then compared whole (``torch.unique(dim=0)``, slower)."""
        return None

    # -- enumeration (exact metrics) -----------------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        raise NotImplementedError

    def all_states(self) -> torch.Tensor:
        """Every state, row ``i`` being the state of index ``i``."""
        raise NotImplementedError

    def state_index(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


# --------------------------------------------------------------------------------------------------- hypergrid
class Hypergrid(GFNEnv):
    """The hypergrid of Bengio et al. (2021) as in the official ``envs/hypergrid.py``: height ``H``, dimension ``d``,

    R(x) = R0 + R1 * prod_i 1[|x_i/(H-1) - 0.5| > 0.25] + R2 * prod_i 1[0.3 < |x_i/(H-1) - 0.5| < 0.4].

    The indicators are evaluated in exact integer arithmetic (``u = |2x - (H-1)|`` is ``2(H-1)|x/(H-1) - 0.5|``), so a
    state on a band edge is never decided by float rounding.
    """

    def __init__(self, height: int = 8, ndim: int = 2, R0: float = 0.1, R1: float = 0.5, R2: float = 2.0,
                 guide_eps: float = 1e-5):
        if height < 2 or ndim < 1:
            raise ZooError(f"hypergrid needs height >= 2 and ndim >= 1, got height={height}, ndim={ndim}")
        for name, v in (("R0", R0), ("R1", R1), ("R2", R2)):
            if not math.isfinite(v) or v < 0:
                raise ZooError(f"hypergrid reward parameter {name}={v} would make the reward negative or undefined; "
                               "R0, R1, R2 must be finite and >= 0 (a GFlowNet needs R(x) >= 0)")
        self.height, self.ndim = int(height), int(ndim)
        self.R0, self.R1, self.R2 = float(R0), float(R1), float(R2)
        self.name = f"hypergrid(H={height}, d={ndim}, R0={R0})"
        self.state_dim = self.ndim
        self.n_actions = self.ndim + 1
        self.feature_dim = self.height * self.ndim
        # Official RL-G guide on the grid: stop logit <= log 1e-5 where R <= R0 (trajectory_RL.py, HyperGrid()).
        self.guide = Guide(log_reward_max=math.log(R0) if R0 > 0 else -math.inf, log_eps=math.log(guide_eps))
        # constants of the dynamics, built once (each was two or three small ops per call, and the samplers call
        # them at every step): the unit move per action, the K-hot offsets i*H, the index weights H^(d-1-i)
        self._unit = torch.eye(self.ndim, dtype=torch.long)
        self._hot_offset = self.height * torch.arange(self.ndim)
        self._index_base = self.height ** torch.arange(self.ndim - 1, -1, -1)

    def forward_masks(self, states):
        moves = states < self.height - 1
        return torch.cat([moves, torch.ones_like(moves[:, :1])], dim=1)

    def backward_masks(self, states):
        return states > 0

    def step(self, states, actions):
        return states + self._unit.to(states.device)[actions]

    def backward_step(self, states, actions):
        return states - self._unit.to(states.device)[actions]

    def reward(self, states: torch.Tensor) -> torch.Tensor:
        h1 = self.height - 1
        u = (2 * states - h1).abs()
        outer = (2 * u > h1).all(dim=-1)
        band = ((5 * u > 3 * h1) & (5 * u < 4 * h1)).all(dim=-1)
        return self.R0 + self.R1 * outer.double() + self.R2 * band.double()

    def log_reward(self, states):
        return self.reward(states).log()

    def features(self, states):
        return torch.nn.functional.one_hot(states, self.height).flatten(-2).float()

    def hot_index(self, states):
        return states + self._hot_offset.to(states.device)  # feature i*H + x_i is 1

    def level(self, states):
        return states.sum(-1)

    def state_key(self, states):
        return self.state_index(states)  # x_1 H^(d-1) + ... + x_d: distinct states, distinct keys

    @property
    def n_states(self) -> int:
        return self.height**self.ndim

    def all_states(self):
        axes = [torch.arange(self.height)] * self.ndim
        return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, self.ndim)

    def state_index(self, states):
        return (states * self._index_base.to(states.device)).sum(-1)

    def describe(self):
        return self.name


# ------------------------------------------------------------------------------------------------- DAG / BN
def transitive_closure(adj: torch.Tensor) -> torch.Tensor:
    """(B, n, n) 0/1 adjacency -> (B, n, n) bool: reach[b, i, j] = there is a path i -> ... -> j (or i == j)."""
    n = adj.shape[-1]
    reach = (adj.bool() | torch.eye(n, dtype=torch.bool, device=adj.device)).float()
    for _ in range(max(1, math.ceil(math.log2(max(n - 1, 1))))):  # repeated squaring covers paths of length n-1
        reach = ((reach @ reach) > 0).float()
    return reach.bool()


class DAGEnv(GFNEnv):
    """Bayesian-network structure learning (Deleu et al., 2022; official ``envs/dagbn.py``).

    A state is the row-major flat adjacency of a DAG on ``n`` nodes (entry ``i*n + j`` = edge i -> j); action
    ``i*n + j`` adds that edge when it is absent and creates no cycle; the backward action removes a present edge.
    ``log R(G) = (score(G) - score(empty)) / alpha``, ``score`` a modular score (``local_scores[j, parent bitmask]``,
    e.g. BGe from ``zoo.gfnpg.bn``). ``dags`` lists every DAG (the state space, needed for exact metrics).
    """

    def __init__(self, local_scores: torch.Tensor, dags: torch.Tensor, alpha: float = 1.0,
                 guide: Optional[Guide] = None, name: str = "dag"):
        n = local_scores.shape[0]
        if local_scores.shape != (n, 2**n):
            raise ZooError(f"local_scores must have shape (n, 2**n), got {tuple(local_scores.shape)}")
        if dags.ndim != 2 or dags.shape[1] != n * n:
            raise ZooError(f"the DAG list must have shape (N, {n * n}) for {n} nodes, got {tuple(dags.shape)}")
        self.n = n
        self.local_scores = local_scores.double()
        self.alpha = float(alpha)
        self.dags = dags.long()
        self.state_dim = n * n
        self.n_actions = n * n + 1
        self.feature_dim = n * n
        self.guide = guide
        self.name = name
        self._bits = 2 ** torch.arange(n * n)
        self._codes, self._order = torch.sort((self.dags * self._bits).sum(-1))
        self._zero_score = self.score(torch.zeros(1, n * n, dtype=torch.long))[0]

    def forward_masks(self, states):
        adj = states.view(-1, self.n, self.n)
        reach = transitive_closure(adj)
        # edge i -> j is legal iff absent and j does not already reach i (reach includes j == i: no self-loops)
        legal = (adj == 0) & ~reach.transpose(1, 2)
        return torch.cat([legal.reshape(-1, self.n * self.n), torch.ones_like(legal[:, 0, :1])], dim=1)

    def backward_masks(self, states):
        return states > 0

    def step(self, states, actions):
        return states.scatter(1, actions[:, None], 1)

    def backward_step(self, states, actions):
        return states.scatter(1, actions[:, None], 0)

    def score(self, states: torch.Tensor) -> torch.Tensor:
        """Modular score: sum over nodes j of local_scores[j, bitmask of j's parents]."""
        adj = states.view(-1, self.n, self.n)
        parent_code = (adj * (2 ** torch.arange(self.n, device=states.device))[None, :, None]).sum(1)  # (B, n)
        ls = self.local_scores.to(states.device)
        return ls[torch.arange(self.n, device=states.device)[None, :], parent_code].sum(-1)

    def log_reward(self, states):
        return (self.score(states) - self._zero_score.to(states.device)) / self.alpha

    def features(self, states):
        return states.float()

    def level(self, states):
        return states.sum(-1)

    @property
    def n_states(self) -> int:
        return int(self.dags.shape[0])

    def all_states(self):
        return self.dags

    def _code(self, states):
        return (states * self._bits.to(states.device)).sum(-1)  # the adjacency matrix as a binary number

    def state_key(self, states):
        return self._code(states)

    def state_index(self, states):
        codes = self._code(states)
        pos = torch.searchsorted(self._codes.to(states.device), codes).clamp_max(len(self._codes) - 1)
        if not torch.equal(self._codes.to(states.device)[pos], codes):
            raise ZooError("a state is not in the DAG list (the list does not hold every DAG of the environment)")
        return self._order.to(states.device)[pos]

    def describe(self):
        return f"{self.name} ({self.n} nodes, {self.n_states} DAGs)"
