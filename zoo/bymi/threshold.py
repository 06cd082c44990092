"""The two multiple-testing rules of ByMI and its RMDP-BH baseline, batched over leading dimensions.

* `knockoff_threshold`: the knockoff+ data-driven threshold of Barber & Candès (2015) that ByMI applies to its
  symmetric scores W (paper, Sec. 2; official `ByMI()` in ByMI_function.R):
  ``L = min{t ∈ {|W_j|} : (offset + #{W_j ≤ −t}) / max(1, #{W_j ≥ t}) ≤ α}``, reject ``{j : W_j ≥ L}``.
* `bh_reject`: the Benjamini–Hochberg step-up on p-values (official `bh.func`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from zoo.errors import ZooError


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ZooError(f"the FDR level alpha must lie in (0, 1), got {alpha}")


def knockoff_threshold(W: torch.Tensor, alpha: float, offset: int = 1) -> torch.Tensor:
    """Knockoff+ threshold of scores ``W`` (..., m); ``+inf`` where no ``t`` qualifies (nothing is rejected).

    Candidates are the non-zero ``|W_j|`` (Barber & Candès: t > 0), so a score of exactly 0 is never rejected; the
    official R code would also try t = 0. The counts are over all scores, so the result does not depend on the order
    of tied scores. ``offset=1`` is knockoff+ (FDR ≤ α); ``offset=0`` controls only a modified FDR.
    """
    if W.dim() == 1 and W.device.type == "cpu" and not W.requires_grad:  # one problem: numpy's ops cost less
        return torch.tensor(knockoff_threshold_np(W.numpy(), alpha, offset), dtype=W.dtype)  # (checks its args)
    _check_alpha(alpha)
    if offset not in (0, 1):
        raise ZooError(f"knockoff offset must be 0 or 1, got {offset}")
    m = W.shape[-1]
    sorted_W = W.sort(dim=-1).values.contiguous()
    t = W.abs().contiguous()
    # #{W >= t} and #{W <= -t} for every candidate t at once, by binary search in the sorted scores
    n_pos = m - torch.searchsorted(sorted_W, t, right=False)
    n_neg = torch.searchsorted(sorted_W, -t, right=True)
    ratio = (offset + n_neg).to(W.dtype) / n_pos.clamp_min(1).to(W.dtype)
    ok = (ratio <= alpha) & (t > 0)
    inf = torch.full_like(t, math.inf)
    return torch.where(ok, t, inf).amin(dim=-1)


def knockoff_threshold_np(W: np.ndarray, alpha: float, offset: int = 1) -> float:
    """`knockoff_threshold` of one score vector in numpy (the same counts by binary search)."""
    _check_alpha(alpha)
    if offset not in (0, 1):
        raise ZooError(f"knockoff offset must be 0 or 1, got {offset}")
    sorted_W = np.sort(W)
    t = np.abs(W)
    n_pos = len(W) - np.searchsorted(sorted_W, t, side="left")
    n_neg = np.searchsorted(sorted_W, -t, side="right")
    ok = ((offset + n_neg) / np.maximum(n_pos, 1) <= alpha) & (t > 0)
    return float(t[ok].min()) if ok.any() else math.inf


def knockoff_select(W: torch.Tensor, alpha: float, offset: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(flagged (..., m) bool, threshold (...,)): ``W_j ≥ L``."""
    L = knockoff_threshold(W, alpha, offset)
    return W >= L.unsqueeze(-1), L


def min_rejection_size(alpha: float, offset: int = 1) -> int:
    """The fewest scores knockoff+ can reject: the smallest k ≥ 1 with ``offset / k ≤ α`` (⌈1/α⌉ for offset 1).

    Computed with the same floating-point comparison as `knockoff_threshold`, so it is exact at α = 1/k."""
    _check_alpha(alpha)
    if offset == 0:
        return 1
    k = max(1, math.ceil(1 / alpha) - 1)
    while offset / k > alpha:
        k += 1
    return k


def bh_reject(pvalues: torch.Tensor, alpha: float) -> torch.Tensor:
    """Benjamini–Hochberg step-up over the last dimension: reject ``p ≤ p_(k)`` for the largest k with
    ``p_(k) ≤ k α / m`` (nothing if no k qualifies). Returns a bool mask like ``pvalues``."""
    _check_alpha(alpha)
    m = pvalues.shape[-1]
    sorted_p = pvalues.sort(dim=-1).values
    k = torch.arange(1, m + 1, dtype=pvalues.dtype, device=pvalues.device)
    ok = sorted_p <= k / m * alpha
    # the largest qualifying rank (0 = none): step-up, so every smaller p-value is rejected too
    last = torch.where(ok, k, torch.zeros_like(k)).amax(dim=-1).long()
    cutoff = sorted_p.gather(-1, (last - 1).clamp_min(0).unsqueeze(-1))
    return (pvalues <= cutoff) & (last > 0).unsqueeze(-1)
