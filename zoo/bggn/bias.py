"""Bias values L_f(a) of intersectional sensitive attributes (paper Sec. 3; official ``utils/utils.py::regroup_a_bias_df``).

An intersectional sensitive attribute is a binary vector ``a`` in {0, 1}^d. Its bias value is the mean per-sample loss
of a classifier f over the samples whose sensitive vector is ``a``. A share of the distinct ``a``s is held out as
"unseen" (official ``te_par: 0.3``): the predictor, the VAE and BGGN train on the seen ones only, evaluation counts
what they find among both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from zoo.errors import ZooError
from zoo.rundir import newest_match


def check_binary(a: torch.Tensor | np.ndarray, names: Sequence[str] | None = None) -> None:
    """Every sensitive attribute must take only the values 0 and 1; names the first one that does not."""
    arr = np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a)
    if arr.ndim != 2:
        raise ZooError(f"sensitive attributes must be a (samples, d) array, got shape {arr.shape}")
    bad = ~np.isin(arr, (0, 1))
    if bad.any():
        j = int(np.nonzero(bad.any(axis=0))[0][0])
        name = names[j] if names is not None else f"#{j}"
        vals = sorted({float(v) for v in np.unique(arr[:, j])})[:6]
        raise ZooError(f"sensitive attribute {name!r} is not binary (values {vals}); BGGN needs 0/1 attributes")


def codes(a: torch.Tensor) -> torch.Tensor:
    """(B, d) binary -> (B,) int64 code sum_j a_j 2^(d-1-j) (attribute 0 is the most significant bit)."""
    d = a.shape[-1]
    if d > 62:
        raise ZooError(f"at most 62 sensitive attributes are supported, got {d}")
    weights = 2 ** torch.arange(d - 1, -1, -1, device=a.device, dtype=torch.int64)
    return (a.long() * weights).sum(-1)


def decode(code: torch.Tensor, d: int) -> torch.Tensor:
    """(B,) codes -> (B, d) binary int64 (inverse of `codes`)."""
    shifts = torch.arange(d - 1, -1, -1, device=code.device, dtype=torch.int64)
    return (code.long()[:, None] >> shifts) & 1


def all_combinations(d: int) -> torch.Tensor:
    """(2^d, d): every binary vector, in code order (for enumeration on small d)."""
    return decode(torch.arange(2**d), d)


def one_hot(a: torch.Tensor) -> torch.Tensor:
    """(B, d) binary -> (B, 2d) float: per attribute [a==0, a==1], as the official ``F.one_hot(a, 2).view(-1, 2d)``."""
    return torch.nn.functional.one_hot(a.long(), 2).flatten(-2).to(torch.get_default_dtype())


def to_string(a: torch.Tensor | np.ndarray) -> list[str]:
    """The official key of a combination: its values joined by spaces ("1 0 0 1 ...")."""
    return [" ".join(str(int(v)) for v in row) for row in np.asarray(a)]


@dataclass
class BiasTable:
    """One row per distinct combination: ``a`` (G, d) int64, ``bias`` (G,) float64 L_f(a), ``count`` (G,) samples,
    ``seen`` (G,) bool (False = held out)."""

    names: list[str]
    a: torch.Tensor
    bias: torch.Tensor
    count: torch.Tensor
    seen: torch.Tensor

    def __len__(self) -> int:
        return int(self.a.shape[0])

    @property
    def d(self) -> int:
        return int(self.a.shape[1])


def group_bias(loss: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean per-sample loss per distinct sensitive vector: returns (combinations (G, d), L_f (G,), counts (G,)),
    combinations in code order. Float64 sums so that large datasets do not lose the small groups' precision."""
    if loss.shape[0] != a.shape[0]:
        raise ZooError(f"{loss.shape[0]} losses but {a.shape[0]} sensitive vectors")
    check_binary(a)
    c = codes(a)
    uniq, inv = torch.unique(c, return_inverse=True)
    sums = torch.zeros(len(uniq), dtype=torch.float64).index_add_(0, inv, loss.detach().double())
    counts = torch.bincount(inv, minlength=len(uniq))
    return decode(uniq, a.shape[1]), sums / counts, counts


def split_seen_unseen(n_combinations: int, unseen_share: float, seed: int) -> torch.Tensor:
    """Boolean `seen` mask: a random ``unseen_share`` of the distinct combinations is held out (official ``te_par``).
    Holds out ⌊unseen_share·n⌋ (official), so a share < 1 always leaves a training combination."""
    if not 0.0 <= unseen_share < 1.0:
        raise ZooError(f"unseen_share must be in [0, 1), got {unseen_share}")
    # floor, as the official ``int(te_par * len(...))`` in regroup_a_bias_df (rounding held out one more whenever
    # the fractional part was >= 0.5)
    n_unseen = int(unseen_share * n_combinations)
    if n_combinations - n_unseen < 1:
        raise ZooError(f"unseen_share={unseen_share} of {n_combinations} combinations leaves no training combination")
    g = torch.Generator().manual_seed(seed)
    seen = torch.ones(n_combinations, dtype=torch.bool)
    seen[torch.randperm(n_combinations, generator=g)[:n_unseen]] = False
    return seen


def bias_bins(bias: torch.Tensor, interval: float, n_bins: int) -> torch.Tensor:
    """Class label of the predictor's classification head: the bin of width ``interval`` (official
    ``pred_cls_interval``), the last bin open-ended (``pred_cls_num`` bins)."""
    return torch.clamp((bias / interval).floor().long(), 0, n_bins - 1)


def inverse_frequency_weights(labels: torch.Tensor, n_bins: int, clip: tuple[float, float] = (5, 5000)) -> torch.Tensor:
    """Official ``reweight: inverse`` (``data/{toxic,celebA}.py::_prepare_weights``): weight 1/count(bin) of each
    sample's bias bin, the counts first clipped to [5, 5000] as the official code does (so bins with fewer than 5
    combinations are not up-weighted further), then scaled to mean 1 over the samples (official ``scaling``)."""
    counts = torch.bincount(labels, minlength=n_bins).double().clamp(*clip)
    w = 1.0 / counts[labels]
    return (w * len(w) / w.sum()).to(torch.get_default_dtype())


def read_bias_table(path: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """A bias table CSV (attribute columns, ``count``, ``bias``) -> (names, a, bias, count)."""
    p = Path(newest_match(path, "table_path", "run phase 0 (zoo test of the classifier) first"))
    if not p.is_file():
        raise ZooError(f"bias table {path!r} not found; run phase 0 (zoo test of a BiasClassifierModule run writes "
                       f"bias_table.csv into its run dir) or fix the path")
    df = pd.read_csv(p)
    for col in ("bias", "count"):
        if col not in df.columns:
            raise ZooError(f"bias table {path} has no {col!r} column")
    names = [c for c in df.columns if c not in ("bias", "count")]
    a = df[names].to_numpy()
    check_binary(a, names)
    count = pd.to_numeric(df["count"], errors="coerce").to_numpy(np.float64)
    # checked before the int64 cast, which turns a missing or infinite count into -2**63 and 2.5 into 2
    bad = np.flatnonzero(~np.isfinite(count) | (count != np.round(count)))
    if bad.size:
        shown = "missing or not finite" if not np.isfinite(count[bad[0]]) else f"{count[bad[0]]}, not a whole number"
        raise ZooError(f"bias table {path}: count is {shown} in row {bad[0]} ({bad.size} such row(s)); count is the "
                       "number of samples of the combination")
    return names, a.astype(np.int64), df["bias"].to_numpy(np.float64), count.astype(np.int64)


def write_bias_table(path: str | Path, names: list[str], a: np.ndarray, bias: np.ndarray, count: np.ndarray) -> None:
    df = pd.DataFrame(np.asarray(a), columns=names)
    df["count"], df["bias"] = np.asarray(count), np.asarray(bias)
    df.to_csv(path, index=False)
