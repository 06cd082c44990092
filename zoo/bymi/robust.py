"""Robust location estimators that give ByMI its centre μ̂ (official ByMI_function.R, geom_solver_C.cpp), batched over
leading dimensions: rows are machines, columns gradient coordinates.

* `mad`: R's ``mad()`` (median centre, constant 1.4826, the median of an even count is the mean of the middle two).
* `filtering_mean`: the spectral filter of the official ``filtering_refine`` (Diakonikolas et al.'s filtering with
  the master's covariance Σ₀ subtracted, soft down-weighting along the top eigenvector).
* `geometric_median`: Weiszfeld's iteration with the Vardi–Zhang step at a data point (official ``geom_solver_C``).
* `trimmed_mean_1d`: the iterative 1-D trimmed mean of ByMI-Filter+ (official ``est_dim_one``).

A single small problem (a 2-D CPU tensor of at most `SMALL` entries, no autograd) runs the same iterations in numpy
on the tensor's own memory: at ByMI's size (150 machines × 20 coordinates) one torch op costs ~5-10 µs of dispatch
against ~1-2 µs for numpy, and the inner loops are dozens of tiny ops per iteration (profiled: the per-op overhead
was most of a 3.7 ms call). Batched inputs keep the torch path; `tests/bymi/test_robust.py` checks that both paths
give the same values. The bound keeps numpy's BLAS (its own thread pool, which `torch.set_num_threads` does not
govern) on products too small for it to spread over threads.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from zoo.errors import ZooError

MAD_CONSTANT = 1.4826  # R's mad() default (1/Φ⁻¹(3/4) rounded as R rounds it)
ZERO_WEIGHT = 1e-18  # official filtering_refine: weights below this are set to 0
TIE_RADIUS = 1e-6  # official geom_solver_C: an iterate this close to a data point sits on it
SMALL = 1 << 12  # entries up to which a single 2-D problem runs in numpy (see the module docstring)
# rows up to which a single 2-D problem of any width runs in numpy too (`is_few_rows`): the DDP callback's problem of
# a few ranks × a whole model's gradient, where torch's per-op cost and its short-dimension sort dominate
FEW_ROWS = 8


def is_small(x: torch.Tensor) -> bool:
    """A single CPU problem small enough that numpy's lower per-op cost wins (no autograd through numpy)."""
    return (x.dim() <= 2 and x.device.type == "cpu" and x.dtype in (torch.float64, torch.float32)
            and x.numel() <= SMALL and not x.requires_grad)


def is_few_rows(x: torch.Tensor) -> bool:
    """A single CPU problem of at most `FEW_ROWS` rows (machines), any width. Its numpy kernels use no BLAS product
    (`_weiszfeld_direct_np` by einsum), so numpy's own BLAS thread pool never spins up on a wide gemv."""
    return (x.dim() == 2 and x.device.type == "cpu" and x.dtype in (torch.float64, torch.float32)
            and x.shape[0] <= FEW_ROWS and not x.requires_grad)


def r_median(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Median as R computes it: the mean of the two middle values for an even count (torch.median takes the lower)."""
    n = x.shape[dim]
    if n == 2:  # (min + max)/2 is the two sorted values' mean, bit for bit; torch's sort over a short non-last
        # dimension is slow (~0.9 ms for 2 x 15,882 here, against ~0.1 ms): the two-rank DDP check's case
        return (x.amin(dim=dim) + x.amax(dim=dim)) / 2
    if n % 2:  # the middle value; a selection is ~2.5x cheaper than a full sort at 500 x 201 x 20
        return x.median(dim=dim).values
    s = x.sort(dim=dim).values
    return (s.narrow(dim, n // 2 - 1, 1) + s.narrow(dim, n // 2, 1)).squeeze(dim) / 2


def mad(x: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """R's ``mad(x)``: 1.4826 · median(|x − median(x)|) along ``dim`` (default: over machines)."""
    if is_small(x):
        return torch.from_numpy(mad_np(x.numpy(), dim))
    centre = r_median(x, dim).unsqueeze(dim)
    return MAD_CONSTANT * r_median((x - centre).abs(), dim)


def r_median_np(a: np.ndarray, axis: int) -> np.ndarray:
    """`r_median` in numpy, by a sort (cheaper than np.median's partition machinery at these sizes)."""
    n = a.shape[axis]
    s = np.sort(a, axis=axis)
    if n % 2:
        return s.take(n // 2, axis=axis)
    return (s.take(n // 2 - 1, axis=axis) + s.take(n // 2, axis=axis)) / 2


def mad_np(a: np.ndarray, axis: int = -2) -> np.ndarray:
    """`mad` in numpy. Along the first axis of a 2-D array (the numpy path's case) by one sort: |x − median| is
    taken on the sorted copy in place (the median of a column does not depend on its order) and sorted again."""
    if a.ndim != 2 or axis not in (0, -2):
        centre = np.expand_dims(r_median_np(a, axis), axis)
        return MAD_CONSTANT * r_median_np(np.abs(a - centre), axis)
    n, k = a.shape[0], a.shape[0] // 2
    if n == 2:  # as `r_median`: (min + max)/2, bit for bit the sorted pair's mean, without a strided sort
        # (numpy sorts each column of a (2, 15,882) array separately: ~1.1 ms, against ~0.05 ms for this)
        centre = np.minimum(a[0], a[1])
        centre += np.maximum(a[0], a[1])
        centre /= 2
        dev = np.abs(a - centre)
        out = np.minimum(dev[0], dev[1])
        out += np.maximum(dev[0], dev[1])
        out /= 2
        return MAD_CONSTANT * out
    s = np.sort(a, axis=0)
    np.subtract(s, s[k] if n % 2 else (s[k - 1] + s[k]) / 2, out=s)
    np.abs(s, out=s)
    s.sort(axis=0)
    return MAD_CONSTANT * (s[k] if n % 2 else (s[k - 1] + s[k]) / 2)


def _top_eigvec_by_magnitude(cov: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(eigenvalue, unit eigenvector) of the eigenvalue largest in absolute value of symmetric ``cov`` (..., d, d).

    The official code runs a power iteration (5000 steps, relative tolerance 1e-8), which converges to this pair;
    an exact symmetric eigendecomposition gives it without the iteration's residual error. The eigenvalues come
    sorted, so the largest magnitude is the first or the last one."""
    vals, vecs = torch.linalg.eigh(cov)
    last = vals[..., -1].abs() >= vals[..., 0].abs()
    lam = torch.where(last, vals[..., -1], vals[..., 0])
    u = torch.where(last.unsqueeze(-1), vecs[..., :, -1], vecs[..., :, 0])
    return lam, u


def filtering_mean(X: torch.Tensor, eps: float, sigma0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Spectral filtering of rows ``X`` (..., m, d) whose honest rows have covariance ≈ ``sigma0`` (d, d) or (..., d, d).

    Official ``filtering_refine(Xbar, w0 = 1/m, ep, Sig_0)``: at most ``⌊ep·m⌋`` rounds of
    1. ``C = Σ_i w_i x_i x_iᵀ − μμᵀ − Σ₀`` (weighted covariance in excess of the honest one),
    2. its eigenvector ``u`` of largest |eigenvalue| λ, outlyingness ``τ_i = ((x_i − μ)ᵀu)²`` (0 for removed rows),
    3. ``w_i ← w_i (1 − τ_i/max τ)`` if λ ≥ 0, else ``w_i (1 + τ_i/max τ)``; renormalise; ``μ = Σ w_i x_i``,
    stopping once ``Σ_i w_i / (m · max w) ≤ 1 − ep`` (about an ep share of the mass removed).
    The official loop has no eigenvalue-based stop (it is commented out), and neither has this one.
    Returns (μ (..., d), weights (..., m)).
    """
    *batch, m, d = X.shape
    if m < 2:
        raise ZooError(f"filtering needs at least 2 machines, got {m}")
    # R's `for (i in 1:(ep*m))`: floor(ep*m) rounds, and one round when 0 < ep*m < 1
    rounds = max(1, math.floor(eps * m))
    if is_small(X) and is_small(sigma0):
        mu, w = _filtering_mean_np(X.numpy(), eps, sigma0.numpy(), rounds)
        return torch.from_numpy(mu), torch.from_numpy(w)
    w = torch.full((*batch, m), 1.0 / m, dtype=X.dtype, device=X.device)
    mu = (w.unsqueeze(-2) @ X).squeeze(-2)
    active = torch.ones(batch, dtype=torch.bool, device=X.device)
    for _ in range(rounds):
        cov = (X * w.unsqueeze(-1)).mT @ X - mu.unsqueeze(-1) * mu.unsqueeze(-2) - sigma0
        lam, u = _top_eigvec_by_magnitude(cov)
        tau = ((X - mu.unsqueeze(-2)) @ u.unsqueeze(-1)).squeeze(-1) ** 2 * (w >= ZERO_WEIGHT)
        ratio = tau / tau.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(X.dtype).tiny)
        new_w = w * (1 + torch.where(lam >= 0, -1.0, 1.0).unsqueeze(-1) * ratio)
        new_w = new_w * (new_w >= ZERO_WEIGHT)
        new_w = new_w / new_w.sum(dim=-1, keepdim=True)
        w = torch.where(active.unsqueeze(-1), new_w, w) if batch else new_w
        mu = (w.unsqueeze(-2) @ X).squeeze(-2)
        active = active & ((w / (w.amax(dim=-1, keepdim=True) * m)).sum(dim=-1) > 1 - eps)
        if not bool(active.any()):
            break
    return mu, w


def _filtering_mean_np(X: np.ndarray, eps: float, sigma0: np.ndarray, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """`filtering_mean` of one problem in numpy, the same steps as the torch loop above."""
    m = X.shape[0]
    w = np.full(m, 1.0 / m, dtype=X.dtype)
    mu = w @ X
    for _ in range(rounds):
        cov = (X * w[:, None]).T @ X - np.outer(mu, mu) - sigma0
        vals, vecs = np.linalg.eigh(cov)
        j = -1 if abs(vals[-1]) >= abs(vals[0]) else 0  # the eigenvalue largest in magnitude
        tau = ((X - mu) @ vecs[:, j]) ** 2 * (w >= ZERO_WEIGHT)
        ratio = tau / max(tau.max(), np.finfo(X.dtype).tiny)
        w = w * (1 + (-1.0 if vals[j] >= 0 else 1.0) * ratio)
        w = w * (w >= ZERO_WEIGHT)
        with np.errstate(invalid="ignore"):  # every weight removed (e.g. two rows): NaN, silently, as in torch
            w = w / w.sum()
        mu = w @ X
        if not (w / (w.max() * m)).sum() > 1 - eps:  # as the torch loop: NaN weights stop it too
            break
    return mu, w


def geometric_median(X: torch.Tensor, tol: float = 1e-10, max_iter: int = 10000) -> torch.Tensor:
    """Geometric median ``argmin_y Σ_i ‖x_i − y‖`` of rows ``X`` (..., m, d) by Weiszfeld's iteration.

    As the official ``geom_solver_C``: start at the mean, stop when an update moves less than ``tol`` (1e-10) or
    after 10,000 updates, and treat an iterate within 1e-6 of data points as sitting on them. There the official
    code forgets to normalise the weighted sum (and stops, without moving, once r ≤ η); this uses the Vardi–Zhang
    (2000) step it intends: ``y ← (1 − η/r)⁺ T(y) + min(1, η/r) x_tie``, with η the number of points at y, x_tie
    their mean, T(y) the Weiszfeld map over the other points and r = ‖Σ_{x_i ≠ y} (x_i − y)/‖x_i − y‖‖.
    """
    if is_small(X):  # one small problem: the same iterates in numpy (see `_weiszfeld_np`)
        return torch.from_numpy(_weiszfeld_np(X.numpy(), tol, max_iter))
    batched = X.dim() > 2
    y = X.mean(dim=-2)
    active = torch.ones(X.shape[:-2], dtype=torch.bool, device=X.device)
    for _ in range(max_iter):
        diff = X - y.unsqueeze(-2)
        dist = diff.norm(dim=-1)
        if bool((dist < TIE_RADIUS).any()):
            new_y = _vardi_zhang_step(X, y, diff, dist)
        else:  # the plain Weiszfeld step
            inv = 1.0 / dist
            new_y = (inv.unsqueeze(-2) @ X).squeeze(-2) / inv.sum(dim=-1, keepdim=True)
        moved = (new_y - y).norm(dim=-1)
        y = torch.where(active.unsqueeze(-1), new_y, y) if batched else new_y
        active = active & (moved >= tol)
        if not bool(active.any()):
            break
    return y


def _weiszfeld_np(A: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """Weiszfeld's iteration on the rows of one (m, d) array, the same iterates as the torch loop.

    In float64 a step needs only two (m, d) products instead of a subtraction and a row norm over all m × d
    entries (profiled: those two were over half of a step at 150 × 20): with an augmented iterate ŷ = (y, 1),
    ``‖x_i − y‖² = [−2x_i, ‖x_i‖²]·ŷ + ‖y‖²`` is one product with B = [−2X | ‖x‖²], and ``[X | 1]ᵀ w`` gives
    the weighted sum and the weights' total at once, so dividing by its last entry yields the next ŷ. The
    expansion loses ~1 ulp of ‖x_i‖² + ‖y‖² in each squared distance; a step where some squared distance is
    below 1% of that scale (an iterate near a data point, or data far from the origin) is taken the direct
    way, and so is the step at a data point (Vardi–Zhang, by the torch `_vardi_zhang_step` on the same
    memory). float32 problems always take the direct way."""
    m, d = A.shape
    if A.dtype != np.float64 or m <= FEW_ROWS:  # few rows: no BLAS (see `is_few_rows`), nothing to gain by products
        return _weiszfeld_direct_np(A, tol, max_iter)
    xx = np.einsum("ij,ij->i", A, A)
    Aa = np.empty((m, d + 1))  # [X | 1]
    Aa[:, :d] = A
    Aa[:, d] = 1.0
    B = np.empty((m, d + 1))  # [-2X | ‖x‖²]
    np.multiply(A, -2.0, out=B[:, :d])
    B[:, d] = xx
    scale = 1e-2 * float(xx.max())  # the guard below, without ‖y‖² (added per step)
    ya = Aa.sum(axis=0) / m  # (mean, 1): the official start
    ya[d] = 1.0
    d2 = np.empty(m)
    diff = None
    for _ in range(max_iter):
        yy = float(ya @ ya) - 1.0
        np.matmul(B, ya, out=d2)
        d2 += yy
        if d2.min() < scale + 1e-2 * yy:  # too close for the expansion's rounding: the direct step
            if diff is None:
                diff = np.empty_like(A)
            y = ya[:d]
            np.subtract(A, y, out=diff)
            np.sqrt(np.einsum("ij,ij->i", diff, diff, out=d2), out=d2)
            if d2.min() < TIE_RADIUS:
                new_y = _vardi_zhang_step(torch.from_numpy(A), torch.from_numpy(y.copy()), torch.from_numpy(diff),
                                          torch.from_numpy(d2)).numpy()
            else:
                inv = np.divide(1.0, d2, out=d2)
                new_y = inv @ A
                new_y /= inv.sum()
            new = np.empty(d + 1)
            new[:d] = new_y
            new[d] = 1.0
        else:
            np.sqrt(d2, out=d2)
            np.divide(1.0, d2, out=d2)
            new = d2 @ Aa
            new /= new[d]  # (Σ w x / Σ w, 1)
        step = ya - new
        ya = new
        if math.sqrt(step @ step) < tol:
            break
    return ya[:d].copy()


def _weiszfeld_direct_np(A: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """The plain Weiszfeld step by a subtraction and row norms (in place on two work arrays); the weighted sum by
    einsum, numpy's own loop, not a BLAS gemv (which would start numpy's BLAS threads on a wide problem)."""
    y = A.mean(axis=0)
    diff, dist = np.empty_like(A), np.empty(A.shape[0], dtype=A.dtype)
    for _ in range(max_iter):
        np.subtract(A, y, out=diff)
        np.sqrt(np.einsum("ij,ij->i", diff, diff, out=dist), out=dist)
        if dist.min() < TIE_RADIUS:
            new_y = _vardi_zhang_step(torch.from_numpy(A), torch.from_numpy(y), torch.from_numpy(diff),
                                      torch.from_numpy(dist)).numpy()
        else:
            inv = np.divide(1.0, dist, out=dist)
            new_y = np.einsum("i,ij->j", inv, A)
            new_y /= inv.sum()
        step = y - new_y
        y = new_y
        if math.sqrt(np.einsum("i,i->", step, step)) < tol:
            break
    return y


def _vardi_zhang_step(X: torch.Tensor, y: torch.Tensor, diff: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
    """One Weiszfeld step that handles an iterate sitting on data points (see `geometric_median`)."""
    tie = dist < TIE_RADIUS
    inv = torch.where(tie, torch.zeros_like(dist), 1.0 / dist.clamp_min(TIE_RADIUS))
    total = inv.sum(dim=-1, keepdim=True)
    # all points on the iterate: it is the median
    T = torch.where(total > 0, (inv.unsqueeze(-2) @ X).squeeze(-2) / total.clamp_min(1e-300), y)
    n_tie = tie.sum(dim=-1, keepdim=True).to(X.dtype)
    r = (inv.unsqueeze(-2) @ diff).squeeze(-2).norm(dim=-1, keepdim=True)
    frac = torch.where(n_tie > 0, (n_tie / r.clamp_min(1e-300)).clamp(max=1.0), torch.zeros_like(r))
    # the points the iterate sits on (official x_tie): with r <= η the median is exactly that point
    at = torch.where(n_tie > 0, (tie.to(X.dtype).unsqueeze(-2) @ X).squeeze(-2) / n_tie.clamp_min(1), y)
    return (1 - frac) * T + frac * at


def trimmed_mean_1d(z: torch.Tensor, eps: float, max_iter: int = 2000) -> torch.Tensor:
    """Official ``est_dim_one``: repeat ``μ = mean of the kept z; drop the ⌊eps·m⌋ z farthest from μ`` (starting
    from all of them). The official loop always runs 2000 rounds; the map is deterministic, so stopping at its fixed
    point (the same set dropped twice) gives the same result. ``z`` (..., m) → μ (...,)."""
    m = z.shape[-1]
    n_drop = math.floor(eps * m)
    if n_drop >= m:
        raise ZooError(f"the 1-D trimmed mean would drop all {m} values (eps={eps})")
    keep = torch.ones_like(z, dtype=torch.bool)
    mu = z.mean(dim=-1)
    for _ in range(max_iter):
        dev = (z - mu.unsqueeze(-1)) ** 2
        # R's order() is stable: the n_drop largest deviations, ties broken towards the later index
        order = torch.argsort(dev, dim=-1, stable=True)
        new_keep = torch.ones_like(keep)
        if n_drop:
            new_keep.scatter_(-1, order[..., m - n_drop:], False)
        mu = (z * new_keep).sum(dim=-1) / (m - n_drop)
        if torch.equal(new_keep, keep):
            break
        keep = new_keep
    return mu
