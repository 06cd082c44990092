"""GFN-PG's sequence tasks (TFbind8, TFbind10, qm9str, sEH): fill the L positions of a sequence over ``nbase``
symbols in any order, one position per move, with the reward looked up in an oracle table.

As the official ``envs/bioseq.py`` (``BioSeqEnv``, built on its ``BitSeqEnv``):
* a state is a length-L vector with -1 at the positions not yet filled; s0 is all -1;
* forward action ``b * L + i`` writes symbol ``b`` at the empty position ``i``; the stop action (last) is legal only
  on complete sequences, so only they are terminal; backward action ``b * L + i`` clears position ``i`` holding ``b``;
* the network input is K-hot: a one-hot of ``nbase`` per position, all zeros where the position is empty
  (official ``KHotPreprocessor(height=nbase, fill_value=-1)``);
* the reward of a complete sequence is row ``sum_i s_i nbase^(L-1-i)`` (official ``nbase2dec``) of the oracle's
  ``y``: sigmoid(3y) first for TFbind10, then clipped below at ``R_min``, raised to ``alpha`` and scaled so that its
  maximum is ``R_max`` (official ``Oracle``: alpha 3, R_max 10, R_min 1e-3). Incomplete states have R = 0.

The oracle files are pickled dicts ``{'x': (N, L) int array, 'y': (N,) or (N, 1) float array}`` (official
``data_bio/<task>/*.pkl``; TFbind10's is gzip-compressed). They are read with an unpickler that admits only numpy
arrays and builtin containers, so a file cannot run code; rows must be in ``nbase2dec`` order of ``x`` (checked).
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import numpy as np
import torch

from zoo.errors import ZooError
from zoo.gfnpg.envs import GFNEnv

ORACLE_SOURCE = ("github.com/niupuhua1234/GFN-PG, gfn-pg/data_bio/<task>/ (tfbind8-exact-v0-all.pkl, "
                 "tfbind10-exact-v0-all.pkl.gz, block_qm9str_v1_s5.pkl; Git LFS files; sEH: the authors' Google "
                 "Drive, see gfn-pg/data_bio/sehstr/readme.txt)")

# what an oracle pickle may reference: numpy's array reconstruction and dtypes, nothing else
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"), ("builtins", "dict"), ("builtins", "list")}


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise ZooError(f"oracle pickle references {module}.{name}: only numpy arrays are read (no code is run)")
        return super().find_class(module, name)


def read_oracle(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(x (N, L) int64, y (N,) float64) of an official oracle file (.pkl, or .pkl.gz)."""
    file = Path(path)
    if not file.is_file():
        raise ZooError(f"oracle file {path} not found: it comes from {ORACLE_SOURCE}")
    raw = file.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw.startswith(b"version https://git-lfs"):
        raise ZooError(f"oracle file {path} is a Git LFS pointer, not the data: run `git lfs pull` in the GFN-PG "
                       "repository")
    try:
        data = _ArraysOnly(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as e:
        raise ZooError(f"oracle file {path} is not a pickled {{'x', 'y'}} dict ({e})") from e
    if not isinstance(data, dict) or not {"x", "y"} <= set(data):
        raise ZooError(f"oracle file {path} must hold a dict with keys 'x' and 'y', got "
                       f"{sorted(data) if isinstance(data, dict) else type(data).__name__}")
    x, y = np.asarray(data["x"]), np.asarray(data["y"], dtype=np.float64)
    if x.size == 0 or y.size == 0:  # numpy's reshape of an empty y raised a ValueError below
        raise ZooError(f"oracle file {path} holds no rows ('x' {x.shape}, 'y' {y.shape}); it holds every sequence "
                       "of the task and its score")
    if x.ndim != 2 or y.reshape(len(y), -1).shape[1] != 1 or len(x) != len(y):
        raise ZooError(f"oracle file {path}: 'x' must be (N, L) and 'y' (N,) or (N, 1), got {x.shape} and {y.shape}")
    return x.astype(np.int64), y.reshape(-1)


def oracle_rewards(y: np.ndarray, alpha: float = 3.0, R_max: float = 10.0, R_min: float = 1e-3,
                   tfbind10: bool = False) -> torch.Tensor:
    """The official reward table (float64): sigmoid(3y) for TFbind10, max(y, R_min)^alpha scaled to max R_max."""
    y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)  # (N,) or (N, 1), as the official squeeze
    if tfbind10:
        y = torch.sigmoid(3 * y)
    if not torch.isfinite(y).all():
        raise ZooError("oracle scores contain NaN or inf: the reward would be undefined")
    if R_min < 0 or alpha <= 0 or R_max <= 0:
        raise ZooError(f"oracle reward needs R_min >= 0, alpha > 0 and R_max > 0, got {R_min}, {alpha}, {R_max}")
    r = y.clamp_min(R_min) ** alpha
    if not r.max() > 0:
        raise ZooError("every oracle reward is 0: nothing to sample")
    return r * (R_max / r.max())


class SequenceEnv(GFNEnv):
    """Sequences of length ``length`` over ``nbase`` symbols; ``rewards`` (nbase**length,) in nbase2dec order."""

    # The official RL-G guide of these tasks is a replay buffer of every terminal sequence seen with its reward
    # (``Replay_G`` in envs/bioseq.py), scoring a step by the mean reward of the buffered sequences that agree with
    # its next state; it is not implemented here.
    guide_hint = ("the sequence tasks' guide, the official replay buffer Replay_G, is not implemented here; "
                  "use RL-B")
    # the official validate_dist also logs mean_diff (E_{P_T}[R] / E_{R/Z}[R]) for these tasks (exact.exact_metrics)
    reports_mean_reward = True

    def __init__(self, rewards: torch.Tensor, nbase: int, length: int, name: str = "bioseq"):
        if nbase < 2 or length < 1:
            raise ZooError(f"a sequence task needs nbase >= 2 and length >= 1, got nbase={nbase}, length={length}")
        rewards = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
        if len(rewards) != nbase**length:
            raise ZooError(f"{name}: {len(rewards):,} oracle rows, but {nbase}^{length} = {nbase**length:,} "
                           "sequences: the table must cover every sequence once")
        if not (torch.isfinite(rewards).all() and (rewards >= 0).all()):
            raise ZooError(f"{name}: a reward is negative or undefined (a GFlowNet needs R(x) >= 0)")
        self.rewards, self.nbase, self.length = rewards, int(nbase), int(length)
        self.name = f"{name}(nbase={nbase}, L={length})"
        self.state_dim = self.length
        self.n_actions = self.nbase * self.length + 1
        self.feature_dim = self.nbase * self.length

    @classmethod
    def from_oracle(cls, x: np.ndarray, y: np.ndarray, nbase: int, name: str = "bioseq", **reward_args):
        x = torch.as_tensor(x, dtype=torch.long)
        length = x.shape[1]
        if x.min() < 0 or x.max() >= nbase:
            raise ZooError(f"{name}: oracle sequences hold symbols outside 0..{nbase - 1}")
        index = (x * nbase ** torch.arange(length - 1, -1, -1)).sum(-1)
        if not torch.equal(index, torch.arange(nbase**length)):
            raise ZooError(f"{name}: oracle rows are not every sequence in base-{nbase} order (the official reward "
                           "is looked up by that index)")
        return cls(oracle_rewards(y, **reward_args), nbase, length, name)

    def s0(self, batch: int, device=None) -> torch.Tensor:
        return torch.full((batch, self.length), -1, dtype=torch.long, device=device)

    def forward_masks(self, states):
        empty = states == -1
        moves = empty.repeat(1, self.nbase)  # action b * L + i
        return torch.cat([moves, (~empty).all(1, keepdim=True)], dim=1)

    def backward_masks(self, states):
        b = torch.arange(self.nbase, device=states.device)
        return (states[:, None, :] == b[None, :, None]).flatten(1)

    def step(self, states, actions):
        pos, sym = actions % self.length, actions // self.length
        return states.scatter(1, pos[:, None], sym[:, None])

    def backward_step(self, states, actions):
        pos = actions % self.length
        return states.scatter(1, pos[:, None], torch.full_like(pos[:, None], -1))

    def sequence_index(self, states: torch.Tensor) -> torch.Tensor:
        base = self.nbase ** torch.arange(self.length - 1, -1, -1, device=states.device)
        return (states.clamp_min(0) * base).sum(-1)

    def log_reward(self, states):
        complete = (states >= 0).all(-1)
        r = self.rewards.to(states.device)[self.sequence_index(states)]
        return torch.where(complete, r.log(), torch.full_like(r, -torch.inf))

    def features(self, states):
        hot = torch.nn.functional.one_hot(states.clamp_min(0), self.nbase) * (states >= 0)[..., None]
        return hot.flatten(-2).float()  # position-major: features [i * nbase + b] = 1[s_i = b]

    def level(self, states):
        return (states >= 0).sum(-1)

    @property
    def n_states(self) -> int:
        return (self.nbase + 1) ** self.length

    def all_states(self):
        axes = [torch.arange(-1, self.nbase)] * self.length
        return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, self.length)

    def state_index(self, states):
        base = (self.nbase + 1) ** torch.arange(self.length - 1, -1, -1, device=states.device)
        return ((states + 1) * base).sum(-1)

    def describe(self):
        return self.name


# official Config.py: (nbase, L, alpha, R_max, R_min) of each task
SEQUENCE_TASKS: dict[str, tuple[int, int, float, float, float]] = {
    "TFbind8": (4, 8, 3.0, 10.0, 1e-3),
    "TFbind10": (4, 10, 3.0, 10.0, 0.0),
    "qm9str": (11, 5, 5.0, 10.0, 1e-3),
    "sehstr": (18, 6, 6.0, 10.0, 1e-3),
}


def sequence_env(task: str, oracle_path: str | None = None, embedded_length: int | None = None,
                 seed: int = 0) -> tuple[SequenceEnv, str]:
    """(environment, where its oracle came from) of an official task: the oracle file at ``oracle_path``, or
    (``embedded_length`` set) a seeded stand-in oracle of U(0, 1) scores over the task's alphabet at that length."""
    if task not in SEQUENCE_TASKS:
        raise ZooError(f"unknown sequence task {task!r}: choose one of {', '.join(SEQUENCE_TASKS)}")
    nbase, length, alpha, r_max, r_min = SEQUENCE_TASKS[task]
    args = {"alpha": alpha, "R_max": r_max, "R_min": r_min, "tfbind10": task == "TFbind10"}
    if embedded_length is not None:
        grid = torch.stack(torch.meshgrid(*[torch.arange(nbase)] * embedded_length, indexing="ij"), -1)
        y = np.random.default_rng(seed).uniform(size=nbase**embedded_length)
        env = SequenceEnv.from_oracle(grid.reshape(-1, embedded_length).numpy(), y, nbase, f"{task}-embedded", **args)
        return env, f"embedded: seeded (seed {seed}) U(0, 1) oracle over {nbase}^{embedded_length} sequences"
    if not oracle_path:
        raise ZooError(f"the {task} task reads its oracle file: set oracle_path (it comes from {ORACLE_SOURCE})")
    x, y = read_oracle(oracle_path)
    if x.shape[1] != length:
        raise ZooError(f"oracle file {oracle_path} has sequences of length {x.shape[1]}, but {task} has {length}")
    return SequenceEnv.from_oracle(x, y, nbase, task, **args), f"local oracle file {oracle_path}"
