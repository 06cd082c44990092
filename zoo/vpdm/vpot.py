"""VPOT: vague prototypes by entropic optimal transport between an image's feature tokens and K prototypes.

Per image, the N tokens x_n (uniform mass 1/N) are transported to the K learnable prototypes P_k (uniform mass
1/K) under the entropic OT problem  min_T <T, C> - eps * H(T),  T 1 = a,  T^T 1 = b.  The plan T spreads each token
over several prototypes; its row-normalised weights give each token a *vague* condition, a convex combination of
prototypes that carries the normal pattern but not the token's own (possibly abnormal) detail.

The plan is computed for a whole batch at once by Sinkhorn's iterations, one batched tensor op per half-step (no
per-image loop): in the kernel domain with the row minima of C factored out (T = u_n exp((m_n - C_nk) / eps) v_k),
fast and exact while the scalings stay inside the dtype's range, else in the log domain (a log-sum-exp over
[B, N, K] per half-step, stable at any eps). Same fixed point as POT's ``ot.sinkhorn`` (``K = exp(-M / reg)``),
which the tests use as the oracle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from zoo.errors import ZooError


@dataclass
class SinkhornResult:
    plan: torch.Tensor  # (B, N, K)
    iterations: int
    marginal_error: float  # max_b,k |T_b^T 1 - b_b|_k at the stop (the rows are exact after a u-update)
    log_domain: bool  # True when the kernel domain would leave the dtype's range and the log-domain iterations ran


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
    """Entropic OT plans for a batch of cost matrices (B, N, K), in the dtype of ``cost``.

    ``a`` (B, N) / ``b`` (B, K) default to uniform. Stops when the column marginals are within ``tol`` (max abs
    error; the rows are exact after each u-update), checked every ``check_every`` iterations; if ``max_iter`` is
    reached first, raises a ZooError with the iterations and the marginal error (an unconverged plan would silently
    bias the condition)."""
    if cost.dim() != 3:
        raise ZooError(f"Sinkhorn cost must be (batch, tokens, prototypes), got shape {tuple(cost.shape)}")
    if not eps > 0:
        raise ZooError(f"Sinkhorn eps must be > 0, got {eps}")
    bsz, n, k = cost.shape
    if a is None:
        a = cost.new_full((bsz, n), 1.0 / n)
    if b is None:
        b = cost.new_full((bsz, k), 1.0 / k)
    # z = (m_n - C_nk) / eps with m_n the row minimum: the kernel exp(z) has a 1 in every row. A column whose
    # largest entry is exp(-s) needs a scaling v_k ~ exp(s): keep s below a quarter of the dtype's exponent range
    # (float32: 22, float64: 177) so that u, v and the mat-vecs stay representable; beyond it (small eps,
    # spread-out costs) run in the log domain. In place: each full [B, N, K] pass is memory traffic.
    z = (cost.amin(2, keepdim=True) - cost).mul_(1.0 / eps)
    spread = -float(z.amax(1).min())
    if spread < 0.25 * math.log(torch.finfo(cost.dtype).max):
        out = _sinkhorn_kernel(z.exp_(), a, b, max_iter, tol, check_every, eps)
        if out is not None:
            return out
    return _sinkhorn_logdomain(cost, eps, a, b, max_iter, tol, check_every)


def _not_converged(err: float, it: int, tol: float, eps: float) -> ZooError:
    return ZooError(f"Sinkhorn did not converge: marginal error {err:.3g} > tol {tol:g} after {it} iterations "
                    f"(eps={eps:g}; raise ot_max_iter or ot_epsilon)")


def _sinkhorn_kernel(kmat, a, b, max_iter, tol, check_every, eps) -> Optional[SinkhornResult]:
    """u = a / (K v), v = b / (K^T u) by batched mat-vecs; None if a scaling leaves the dtype's range."""
    # Both mat-vecs as row-vector products, (1 x K) @ K^T and (1 x N) @ K, K^T a transposed view (BLAS reads it
    # in place): a batched gemm with one row is several times faster on CPU than the batched gemv K @ v, and one
    # copy of K halves the memory traffic (measured in benchmarks/vpdm_sinkhorn.py's setting).
    kmat_t = kmat.mT
    v = torch.ones_like(b)
    err = float("inf")
    for it in range(1, max_iter + 1):
        u = a / (v[:, None, :] @ kmat_t)[:, 0]  # a / (K v)
        ktu = (u[:, None, :] @ kmat)[:, 0]  # K^T u (B, K)
        if it % check_every == 0 or it == max_iter:  # a check costs a device sync: only every check_every
            # the column marginals of the current (u, v) come free with K^T u, which the v-update needs anyway
            err = float((v * ktu - b).abs().max())
            if not math.isfinite(err):
                return None  # under/overflow: the caller reruns in the log domain
            if err <= tol:
                return SinkhornResult(kmat.mul_(u[:, :, None]).mul_(v[:, None, :]), it, err, False)
        v = b / ktu
    raise _not_converged(err, max_iter, tol, eps)


def _sinkhorn_logdomain(cost, eps, a, b, max_iter, tol, check_every) -> SinkhornResult:
    """Potentials f, g (divided by eps), T = exp(f_n + g_k - C_nk / eps); a log-sum-exp over [B, N, K] per
    half-step."""
    scaled = -cost / eps
    log_a, log_b = a.log(), b.log()
    g = torch.zeros_like(b)
    err = float("inf")
    for it in range(1, max_iter + 1):
        f = log_a - torch.logsumexp(scaled + g[:, None, :], dim=2)
        log_col = torch.logsumexp(scaled + f[:, :, None], dim=1)  # log of the column sums before the g-update
        if it % check_every == 0 or it == max_iter:
            err = float((torch.exp(g + log_col) - b).abs().max())
            if not math.isfinite(err):
                raise ZooError(f"Sinkhorn diverged (non-finite potentials) at iteration {it} (eps={eps:g}; "
                               f"raise ot_epsilon)")
            if err <= tol:
                return SinkhornResult(torch.exp(scaled + f[:, :, None] + g[:, None, :]), it, err, True)
        g = log_b - log_col
    raise _not_converged(err, max_iter, tol, eps)


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
