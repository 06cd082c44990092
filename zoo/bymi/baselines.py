"""The comparison methods of the paper's experiments (official ByMI_function.R), batched over leading dimensions.

Krum, FABA and Zeno remove a fixed number of workers, ``removal_count`` = ⌈const_f·ε·(m+1)⌉ with m+1 machines
(official: ``ceiling(nworker*const_f*eps)``); RMDP-BH tests each worker's robust Mahalanobis distance and applies
Benjamini–Hochberg. Every function returns a bool mask of removed (flagged) rows.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from zoo.bymi.threshold import bh_reject
from zoo.errors import ZooError


def removal_count(eps: float, n_machines: int, const_f: float = 1.2) -> int:
    """Workers Krum, FABA and Zeno remove: ``ceiling(nworker * const_f * eps)`` of the official driver, where
    ``nworker`` counts the master too. The official FABA counts ``ceiling(alpha*(m+1))`` with
    ``alpha = const_f*eps``, i.e. ``(const_f*eps)*nworker`` in another floating-point order, which is one fewer in
    a few settings (125 machines at ε = 0.14: 21 against Krum's and Zeno's 22), none of the paper's. One count
    serves all three here."""
    return math.ceil(n_machines * const_f * eps)


def krum(X: torch.Tensor, f: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Krum (Blanchard et al., 2017) as the official ``Krum(X, f)``: score_i = the sum of the m − f − 2 smallest
    squared distances from row i (its zero distance to itself included), i* = argmin, and the f rows farthest
    from row i* are removed. Returns (removed (..., m) bool, the selected row (..., d))."""
    m = X.shape[-2]
    if m - f - 2 < 1:
        raise ZooError(f"Krum needs m - f - 2 >= 1 (m={m} workers, f={f} to remove)")
    dist = torch.cdist(X, X) ** 2
    score = dist.sort(dim=-1).values[..., : m - f - 2].sum(dim=-1)
    best = score.argmin(dim=-1)
    to_best = dist.gather(-2, best[..., None, None].expand(*dist.shape[:-2], 1, m)).squeeze(-2)
    order = torch.argsort(to_best, dim=-1, stable=True)
    removed = torch.zeros(to_best.shape, dtype=torch.bool, device=X.device)
    if f:
        removed.scatter_(-1, order[..., m - f:], True)
    chosen = X.gather(-2, best[..., None, None].expand(*X.shape[:-2], 1, X.shape[-1])).squeeze(-2)
    return removed, chosen


def faba(X: torch.Tensor, f: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FABA (Xia et al., 2019) as the official ``FABA``: f times, remove the remaining row farthest from the mean of
    the remaining rows. Returns (removed (..., m) bool, the mean of the kept rows (..., d))."""
    m = X.shape[-2]
    if f >= m:
        raise ZooError(f"FABA cannot remove {f} of {m} workers")
    removed = torch.zeros(X.shape[:-1], dtype=torch.bool, device=X.device)
    for _ in range(f):
        keep = (~removed).to(X.dtype)
        centre = (X * keep.unsqueeze(-1)).sum(dim=-2) / keep.sum(dim=-1, keepdim=True)
        dist = ((X - centre.unsqueeze(-2)) ** 2).sum(dim=-1)
        dist = torch.where(removed, torch.full_like(dist, -1.0), dist)
        removed.scatter_(-1, dist.argmax(dim=-1, keepdim=True), True)
    keep = (~removed).to(X.dtype)
    return removed, (X * keep.unsqueeze(-1)).sum(dim=-2) / keep.sum(dim=-1, keepdim=True)


def zeno(g: torch.Tensor, loss_at: Callable[[torch.Tensor], torch.Tensor], theta0: torch.Tensor, lr: float,
         rho: float, b: int) -> torch.Tensor:
    """Zeno (Xie et al., 2019): score_j = L(θ₀) − L(θ₀ − γ g_j) − ρ‖g_j‖² with L the master's loss; the b lowest
    scores are removed. ``g`` (..., m, P) flattened gradients, ``loss_at`` maps (..., P) parameters to losses.

    Two deliberate differences from the official ``Zeno``: its "loss" is ``mean(Y·log Ŷ)``, the cross-entropy with
    the wrong sign (÷ number of classes), so its score rewards gradients that *increase* the master's loss; and it
    steps along the centred, scaled gradients ``(g_j − ḡ)·√n``. Here L is the real loss and the steps are g_j."""
    m = g.shape[-2]
    if not 0 <= b < m:
        raise ZooError(f"Zeno cannot remove {b} of {m} workers")
    base = loss_at(theta0)
    stepped = loss_at(theta0 - lr * g)
    score = base.unsqueeze(-1) - stepped - rho * (g ** 2).sum(dim=-1)
    order = torch.argsort(score, dim=-1, stable=True)
    removed = torch.zeros(score.shape, dtype=torch.bool, device=g.device)
    if b:
        removed.scatter_(-1, order[..., :b], True)
    return removed


# ------------------------------------------------------------------------------------------------ RMDP-BH
RMDP_CHUNK = 2 ** 23  # numbers per block of parallel random starts (~64 MB in float64)


def _diag_distance(y: torch.Tensor, mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    return ((y - mu.unsqueeze(-2)) ** 2 / var.unsqueeze(-2)).sum(dim=-1)


def _subset_stats(y: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (n−1) variance per column of the rows in ``mask`` (..., n)."""
    w = mask.to(y.dtype).unsqueeze(-1)
    k = w.sum(dim=-2)
    mu = (y * w).sum(dim=-2) / k
    var = (((y - mu.unsqueeze(-2)) ** 2) * w).sum(dim=-2) / (k - 1)
    return mu, var


def _tr_corr_sq(y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """tr(R²) of the correlation matrix R of the rows in ``mask`` (R's ``sum(diag(cor(y)%*%cor(y)))``)."""
    w = mask.to(y.dtype).unsqueeze(-1)
    k = w.sum(dim=-2)
    mu = (y * w).sum(dim=-2) / k
    z = (y - mu.unsqueeze(-2)) * w
    cov = z.transpose(-1, -2) @ z / (k - 1).unsqueeze(-1)
    sd = cov.diagonal(dim1=-2, dim2=-1).sqrt()
    R = cov / (sd.unsqueeze(-1) * sd.unsqueeze(-2))
    return (R * R).sum(dim=(-2, -1))


def rmdp_clean(y: torch.Tensor, alpha: float = 0.01, itertime: int = 100, generator: torch.Generator | None = None,
               max_csteps: int = 16) -> torch.Tensor:
    """The RMDP outlier screen of Ro et al. (2015) as the official ``RMDP(y, alpha, itertime)``: a diagonal MCD
    (``itertime`` random starts from 2 rows, concentration steps on the h = round(n/2)+1 closest rows, keep the
    subset of least ∏ variances), a one-step reweighting at δ = α/2, and the final test at α with the
    small-sample correction. Returns the rows judged clean (..., n) bool.

    The random starts run in parallel here; the official loop carries the previous start's subset into the
    next start's convergence check, which only shortens some starts by a step."""
    *batch, n, p = y.shape
    rows = math.prod(batch)
    if rows > 1 and rows * itertime * n * p > RMDP_CHUNK:  # the parallel starts of many repeats: in chunks
        flat = y.reshape(rows, n, p)
        size = max(1, RMDP_CHUNK // (itertime * n * p))
        out = [rmdp_clean(c, alpha, itertime, generator, max_csteps) for c in flat.split(size)]
        return torch.cat(out).reshape(*batch, n)
    h = round(n / 2) + 1  # R rounds half to even, as Python's round does
    delta = alpha / 2
    ys = y.unsqueeze(-3).expand(*batch, itertime, n, p)
    keys = torch.rand((*batch, itertime, n), generator=generator, dtype=y.dtype, device=y.device)
    start = torch.zeros(keys.shape, dtype=torch.bool, device=y.device)
    start.scatter_(-1, keys.argsort(dim=-1)[..., :2], True)
    mu, var = _subset_stats(ys, start)
    dist = _diag_distance(ys, mu, var)
    subset = torch.zeros_like(start)
    for _ in range(max_csteps):  # official: `while(crit != 0 & l <= 15)`
        order = torch.argsort(dist, dim=-1, stable=True)  # NaN last, like R's order()
        new = torch.zeros_like(subset)
        new.scatter_(-1, order[..., :h], True)
        changed = (new != subset).any(dim=-1)
        subset = new
        mu, var = _subset_stats(ys, subset)
        dist = _diag_distance(ys, mu, var)
        if not bool(changed.any()):
            break
    det = var.prod(dim=-1)
    best = torch.where(torch.isnan(det), torch.full_like(det, math.inf), det).argmin(dim=-1)
    final = subset.gather(-2, best[..., None, None].expand(*batch, 1, n)).squeeze(-2)

    mu, var = _subset_stats(y, final)
    dist = _diag_distance(y, mu, var)
    dist = dist * p / torch.quantile(dist, 0.5, dim=-1, keepdim=True)  # R's median
    tr2_h = _tr_corr_sq(y, final)
    tr2 = tr2_h - p ** 2 / h
    cpn0 = 1 + tr2_h / p ** 1.5
    q_delta = torch.special.ndtri(torch.tensor(1 - delta, dtype=y.dtype))
    w0 = (dist - p) / torch.sqrt(2 * tr2 * cpn0).unsqueeze(-1) < q_delta
    nw = w0.sum(dim=-1).to(y.dtype)
    mu, var = _subset_stats(y, w0)
    tr2_h = _tr_corr_sq(y, w0)
    tr2 = tr2_h - p ** 2 / nw
    dist = _diag_distance(y, mu, var)
    scale = 1 + 1 / math.sqrt(2 * math.pi) * torch.exp(-q_delta ** 2 / 2) / (1 - delta) * torch.sqrt(2 * tr2) / p
    dist = dist / scale.unsqueeze(-1)
    cpn1 = 1 + tr2_h / p ** 1.5
    q_alpha = torch.special.ndtri(torch.tensor(1 - alpha, dtype=y.dtype))
    return (dist - p) / torch.sqrt(2 * tr2 * cpn1).unsqueeze(-1) < q_alpha


def rmdp_bh(g: torch.Tensor, sigma0: torch.Tensor, n: int, alpha: float, generator: torch.Generator | None = None,
            itertime: int = 100, screen_alpha: float = 0.01) -> torch.Tensor:
    """RMDP-BH as the official ``RMDP_BH(X = grad[-1, ], n = local_size, Sig_hat, alpha)``: a robust centre of the
    workers' full gradients ``g`` (..., m, d) from the RMDP screen (at level 0.01, 100 starts) of ``(g − ḡ)·√n``,
    the standardised distance ``S_j = (d²_j − d) / √(2 tr(R²))`` with ``d²_j = (g_j − ĝ)ᵀ D⁻¹ (g_j − ĝ)``,
    ``D = diag(Σ₀)/n`` and R the correlation matrix of Σ₀, one-sided normal p-values, and BH at ``alpha``."""
    d = g.shape[-1]
    centre = g.mean(dim=-2)
    scaled = (g - centre.unsqueeze(-2)) * math.sqrt(n)
    clean = rmdp_clean(scaled, alpha=screen_alpha, itertime=itertime, generator=generator)
    w = clean.to(g.dtype).unsqueeze(-1)
    g_hat = (scaled * w).sum(dim=-2) / w.sum(dim=-2) / math.sqrt(n) + centre
    diag = sigma0.diagonal(dim1=-2, dim2=-1) / n
    d2 = ((g - g_hat.unsqueeze(-2)) ** 2 / diag.unsqueeze(-2)).sum(dim=-1)
    sd = diag.sqrt()
    R = (sigma0 / n) / (sd.unsqueeze(-1) * sd.unsqueeze(-2))
    S = (d2 - d) / torch.sqrt(2 * (R * R).sum(dim=(-2, -1))).unsqueeze(-1)
    pvalues = torch.special.ndtr(-S)  # pnorm(S, lower.tail = FALSE), without the cancellation of 1 − Φ(S)
    return bh_reject(pvalues, alpha)
