"""VPOT: vague prototypes by entropic optimal transport between an image's feature tokens and K prototypes.

Per image, the N tokens x_n (uniform mass 1/N) are transported to the K learnable prototypes P_k (uniform mass
1/K) under the entropic OT problem  min_T <T, C> - eps * H(T),  T 1 = a,  T^T 1 = b.  The plan T spreads each token
over several prototypes; its row-normalised weights give each token a *vague* condition, a convex combination of
prototypes that carries the normal pattern but not the token's own (possibly abnormal) detail.

The plan is computed for a whole batch at once by Sinkhorn's iterations, stabilised in the log domain (stable at
small eps): potentials f (B, N), g (B, K) and scalings u, v with  T = u_n exp((f_n + g_k - C_nk) / eps) v_k.  Same fixed point as POT's ``ot.sinkhorn``
(``K = exp(-M / reg)``), which the tests use as the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from zoo.errors import ZooError


@dataclass
class SinkhornResult:
    plan: torch.Tensor  # (B, N, K)
    iterations: int
    marginal_error: float  # max_b,n |T_b 1 - a_b|_n after the last iteration (columns are exact after a g-update)


def prototype_cost(tokens: torch.Tensor, prototypes: torch.Tensor,
                   kind: Literal["sqeuclidean", "cosine"] = "sqeuclidean") -> torch.Tensor:
    """Cost C (B, N, K) between tokens (B, N, D) and prototypes (K, D).

    ``sqeuclidean`` is divided by D (a mean squared difference), so eps means the same for any feature width
    (our choice: the paper's cost is not available here); ``cosine`` is 1 - cos."""
    if kind == "sqeuclidean":
        d = tokens.shape[-1]
        # ||x||^2 - 2 x.p + ||p||^2, clamped: the expansion may go slightly negative in float32
        c = (tokens.pow(2).sum(-1, keepdim=True) - 2 * tokens @ prototypes.T + prototypes.pow(2).sum(-1))
        return c.clamp_min(0) / d
    if kind == "cosine":
        t = torch.nn.functional.normalize(tokens, dim=-1)
        p = torch.nn.functional.normalize(prototypes, dim=-1)
        return 1 - t @ p.T
    raise ZooError(f"cost {kind!r} is not one of 'sqeuclidean', 'cosine'")


def sinkhorn_log(cost: torch.Tensor, eps: float, a: Optional[torch.Tensor] = None, b: Optional[torch.Tensor] = None,
                 max_iter: int = 1000, tol: float = 1e-6, check_every: int = 10) -> SinkhornResult:
    """Entropic OT plans for a batch of cost matrices (B, N, K), log-domain Sinkhorn.

    ``a`` (B, N) / ``b`` (B, K) default to uniform. Stops when the row marginals are within ``tol`` (max abs
    error), checked every ``check_every`` iterations; if ``max_iter`` is reached first, raises a ZooError with the
    iterations and the marginal error (an unconverged plan would silently bias the condition)."""
    if cost.dim() != 3:
        raise ZooError(f"Sinkhorn cost must be (batch, tokens, prototypes), got shape {tuple(cost.shape)}")
    if not eps > 0:
        raise ZooError(f"Sinkhorn eps must be > 0, got {eps}")
    bsz, n, k = cost.shape
    if a is None:
        a = cost.new_full((bsz, n), 1.0 / n)
    if b is None:
        b = cost.new_full((bsz, k), 1.0 / k)
    # Log-domain stabilised Sinkhorn (Schmitzer 2019): the potentials f, g hold the large part of the scalings and
    # the iterations run on the kernel exp((f + g - C) / eps) with scalings u, v by batched mat-vecs; whenever u or v
    # leave [1e-30, 1e30] they are absorbed into f, g and the kernel is rebuilt. One log-sum-exp update of each
    # potential first, so that no row or column of the kernel underflows to zero at small eps.
    scaled = -cost / eps
    f = eps * (a.log() - torch.logsumexp(scaled, dim=2))
    g = eps * (b.log() - torch.logsumexp(scaled + f[:, :, None] / eps, dim=1))

    def kernel():
        return torch.exp(scaled + (f[:, :, None] + g[:, None, :]) / eps)

    kmat = kernel()
    u, v = torch.ones_like(a), torch.ones_like(b)
    err = float("inf")
    it = 0
    while it < max_iter:
        it += 1
        u = a / (kmat @ v[:, :, None])[..., 0]
        v = b / (kmat.transpose(1, 2) @ u[:, :, None])[..., 0]
        if it % check_every == 0 or it == max_iter:  # checks cost a device sync: only every check_every
            if not (torch.isfinite(u).all() and torch.isfinite(v).all()):
                raise ZooError(f"Sinkhorn diverged (non-finite scalings) at iteration {it} (eps={eps:g}; "
                               f"raise ot_epsilon)")
            if max(u.max(), v.max()) > 1e30 or min(u.min(), v.min()) < 1e-30:
                f, g = f + eps * u.log(), g + eps * v.log()
                kmat, u, v = kernel(), torch.ones_like(u), torch.ones_like(v)
            # columns are exact after the v-update; the row marginals are the residual
            err = (u * (kmat @ v[:, :, None])[..., 0] - a).abs().max().item()
            if err <= tol:
                return SinkhornResult(u[:, :, None] * kmat * v[:, None, :], it, err)
    raise ZooError(f"Sinkhorn did not converge: marginal error {err:.3g} > tol {tol:g} after {it} iterations "
                   f"(eps={eps:g}; raise ot_max_iter or ot_epsilon)")


def vague_condition(plan: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """c_n = sum_k (T_nk / sum_k' T_nk') P_k: per token a convex combination of the prototypes (B, N, D)."""
    weights = plan / plan.sum(-1, keepdim=True)
    return weights @ prototypes


def ot_loss(plan: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
    """L_OT = <T, C> per image, averaged over the batch.

    T is held fixed (computed without gradient): by the envelope theorem the gradient of the entropic OT value
    with respect to the cost is exactly the optimal plan, so <stop_grad(T), C> has the same gradient with respect
    to the prototypes (and costs no backward pass through the iterations)."""
    return (plan.detach() * cost).sum((1, 2)).mean()
