"""The entropic semi-dual between the generated conditionals at x_i and at its neighbour x_j (the OT term R_i).

With a_k = T(u_k, x_i), b_l = T(u'_l, x_j) (B samples each) and v_l = v_φ(b_l, x_j):

    v^c(a) = -ε log mean_l exp((v_l - c(a, b_l)) / ε)               (the (c, ε)-transform)
    R_i    = mean_k v^c(a_k) + mean_l v_l - ε

max over v of mean_k v^c(a_k) + mean_l v_l is the entropic OT cost between the two empirical measures with the
KL(π | μ⊗ν) regulariser; R_i is that value minus ε, as the official code writes it.

Debiased option (ours, not in the paper or the official code; ``GENTLEModule(debias=True)``): W_ε(α, α) > 0, and it
grows with α's spread, so minimising R_i alone also shrinks both conditionals (cards/gentle.md, toy1). The Sinkhorn
divergence (Ramdas et al. 2017; Feydy et al. 2019) removes that bias:

    S_i = W_ε(α_i, β_j) - ½ W_ε(α_i, α_i) - ½ W_ε(β_j, β_j)  ≥ 0,   = 0 iff α_i = β_j,

with the cross term still the neural semi-dual (R_i + ε) and the two self terms solved exactly on the samples.

Exact cross term (a diagnostic, ours; ``GENTLEModule(ot_term="sinkhorn")``): max_v (R_i + ε) = W_ε(α_i, β_j) solved on
the samples by log-domain Sinkhorn instead of by the potential network, so the generator minimises the exact entropic
cost rather than a trained lower bound. Its gradient in the samples is the envelope-theorem one, Σ π_kl ∇c(a_k, b_l).
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


def self_transport(a: torch.Tensor, epsilon: float = 1.0, cost: Cost = "sqeuclidean", tol: float = 1e-6,
                   max_iter: int = 200) -> torch.Tensor:
    """W_ε(α, α) for each leading index, α the uniform empirical measure of a (..., n).

    The optimal potential of the symmetric problem is a fixed point v = v^c on α's own points; the averaged update
    v ← (v + v^c)/2 (Feydy et al. 2019) reaches it in a few dozen steps for any ε. It runs without gradient; the
    value is then one differentiable c-transform at that fixed v, so its gradient in a is the envelope-theorem one
    (Σ π_kl ∂c(a_k, a_l)), as for a solved OT problem.
    """
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    cost_matrix = ground_cost(a, a, cost)  # once: the fixed-point loop reads it detached, the value with its graph
    with torch.no_grad():
        fixed = cost_matrix.detach()
        v = torch.zeros_like(a)
        for _ in range(max_iter):
            v_next = 0.5 * (v + c_transform(v, fixed, epsilon))
            done = (v_next - v).abs().max() <= tol
            v = v_next
            if done:
                break
    return c_transform(v, cost_matrix, epsilon).mean(-1) + v.mean(-1)


def debiased_semi_dual(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, epsilon: float = 1.0,
                       cost: Cost = "sqeuclidean") -> torch.Tensor:
    """S = (R + ε) - ½ W_ε(α, α) - ½ W_ε(β, β): the semi-dual cross term, debiased (Sinkhorn divergence). At the
    optimal v it is the Sinkhorn divergence of the two empirical measures; 0 when they coincide."""
    return (semi_dual(a, b, v, epsilon, cost) + epsilon
            - 0.5 * (self_transport(a, epsilon, cost) + self_transport(b, epsilon, cost)))


def sinkhorn_potential(a: torch.Tensor, b: torch.Tensor, epsilon: float = 1.0, cost: Cost = "sqeuclidean",
                       tol: float = 1e-7, max_iter: int = 500) -> torch.Tensor:
    """The optimal target potential g (..., m) of W_ε(α, β) for uniform α on a (..., n), β on b (..., m), by
    log-domain Sinkhorn (alternating (c, ε)-transforms f = g^c on a, g = f^c on b), without gradient, in float64. Stops when no
    entry of g moves by more than ``tol`` (the marginal error of the plan is then of the same order / ε)."""
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    with torch.no_grad():  # in float64: a float32 loop stalls at the potentials' rounding noise (~1e-7 at toy1's scale)
        C = ground_cost(a.detach().double(), b.detach().double(), cost)
        Ct = C.transpose(-1, -2)
        g = torch.zeros_like(C[..., 0, :])
        for _ in range(max_iter):
            f = c_transform(g, C, epsilon)
            g_next = c_transform(f, Ct, epsilon)
            done = (g_next - g).abs().max() <= tol
            g = g_next
            if done:
                break
    return g.to(b.dtype)


def entropic_ot(a: torch.Tensor, b: torch.Tensor, epsilon: float = 1.0, cost: Cost = "sqeuclidean",
                tol: float = 1e-7, max_iter: int = 500) -> torch.Tensor:
    """W_ε(α, β) = min_π <C, π> + ε KL(π | α⊗β) for each leading index, solved exactly (`sinkhorn_potential`).

    The value is the semi-dual at the solved potential, R + ε, with g held fixed and the cost recomputed with its
    graph: the c-transform is exact in a, so the gradient is Σ π_kl ∇c(a_k, b_l) in both a and b (envelope theorem;
    π's β-marginal is exact at convergence), the gradient POT's ``ot.solve(..., grad="envelope")`` returns."""
    g = sinkhorn_potential(a, b, epsilon, cost, tol, max_iter)
    return semi_dual(a, b, g, epsilon, cost) + epsilon
