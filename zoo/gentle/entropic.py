"""The entropic semi-dual between the generated conditionals at x_i and at its neighbour x_j (the OT term R_i).

With a_k = T(u_k, x_i), b_l = T(u'_l, x_j) (B samples each) and v_l = v_φ(b_l, x_j):

    v^c(a) = -ε log mean_l exp((v_l - c(a, b_l)) / ε)               (the (c, ε)-transform)
    R_i    = mean_k v^c(a_k) + mean_l v_l - ε

max over v of mean_k v^c(a_k) + mean_l v_l is the entropic OT cost between the two empirical measures with the
KL(π | μ⊗ν) regulariser; R_i is that value minus ε, as the official code writes it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Cost = Literal["sqeuclidean", "euclidean"]


def ground_cost(a: torch.Tensor, b: torch.Tensor, cost: Cost = "sqeuclidean") -> torch.Tensor:
    """(..., n), (..., m) -> (..., n, m) pairwise cost between 1-D samples."""
    diff = a[..., :, None] - b[..., None, :]
    if cost == "sqeuclidean":
        return diff.square()
    if cost == "euclidean":
        return diff.abs()
    raise ValueError(f"unknown ground cost {cost!r}: use 'sqeuclidean' or 'euclidean'")


def c_transform(v: torch.Tensor, cost_matrix: torch.Tensor, epsilon: float) -> torch.Tensor:
    """v^c at the rows of cost_matrix (..., n, m), for potential values v (..., m): log-sum-exp, stable for any ε."""
    m = v.shape[-1]
    z = (v[..., None, :] - cost_matrix) / epsilon
    return -epsilon * (torch.logsumexp(z, dim=-1) - math.log(m))


def semi_dual(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, epsilon: float = 1.0,
              cost: Cost = "sqeuclidean") -> torch.Tensor:
    """R for each leading index: a (..., n) source samples, b (..., m) target samples, v (..., m) = v(b)."""
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    return c_transform(v, ground_cost(a, b, cost), epsilon).mean(-1) + v.mean(-1) - epsilon
