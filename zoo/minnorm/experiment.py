"""Monte-Carlo bias / variance of minimum-ℓ_p interpolators for y = Xw* + ξ, ξ ~ N(0, σ²I), risk ‖ŵ − w*‖₂².

Per design X (one instance) with K noise draws y_k = Xw* + ξ_k and the noiseless response y₀ = Xw*:

* ``bias``       ‖ŵ(y₀) − w*‖²: the noiseless fit (the "bias" of the issue and of the notes);
* ``noise_part`` (1/K) Σ_k ‖ŵ(y_k) − ŵ(y₀)‖²: what the noise adds to the noiseless fit;
* ``variance``   (1/(K−1)) Σ_k ‖ŵ(y_k) − ŵ̄‖², ŵ̄ = mean_k ŵ(y_k): unbiased for Var(ŵ | X) = E[‖ŵ − E[ŵ|X]‖² | X],
                 the conditional variance whose expectation E Var(ŵ | X) the paper lower-bounds (abstract);
* ``risk``       (1/K) Σ_k ‖ŵ(y_k) − w*‖²;
* ``cond_bias``  ‖ŵ̄ − w*‖² − variance/K: unbiased for ‖E[ŵ|X] − w*‖².

The exact conditional decomposition risk = ‖E[ŵ|X] − w*‖² + Var(ŵ|X) holds for every estimator, and its plug-in
holds to rounding: risk = cond_bias + variance. ŵ is nonlinear in y for p ≠ 2, so E[ŵ|X] ≠ ŵ(y₀): there the
noiseless-fit bias and cond_bias differ and risk ≠ bias + noise_part. For p = 2 (linear) E[ŵ|X] = ŵ(y₀) and
E[noise_part | X] = Var(ŵ|X) = σ² tr((XXᵀ)⁻¹).
"""

from __future__ import annotations

import math
import time

import torch

from zoo.errors import ZooError
from zoo.minnorm.interpolators import basis_pursuit, check_problem, dual_newton, min_l2_interpolator

METRICS = ("bias", "variance", "risk", "noise_part", "cond_bias")


def solve_path(X, Y, ps, rtol: float = 1e-12, max_iter: int = 100) -> dict[float, dict]:
    """Minimum-ℓ_p interpolators of one design X (n, d) for the responses Y (m, n), at every p of the grid.

    The p grid is walked from 2 down: ŵ₂ (closed form) starts the largest p < 2, and each dual Newton run is
    warm-started from the solution at the previous, larger p (continuation towards p = 1, where q = p/(p−1)
    blows up). p = 1 is the LP. Returns {p: {"w": (m, d), "iterations": int, "seconds": float}}."""
    ps = sorted({float(p) for p in ps}, reverse=True)
    for p in ps:
        if not 1.0 <= p <= 2.0:
            raise ZooError(f"p must lie in [1, 2], got p={p!r} in the grid {ps}")
    X, Y, chol = check_problem(X, Y, 2.0)
    out: dict[float, dict] = {}
    t0 = time.perf_counter()
    w_prev = min_l2_interpolator(X, Y, chol)
    if 2.0 in ps:
        out[2.0] = {"w": w_prev, "iterations": 0, "seconds": time.perf_counter() - t0}
    for p in ps:
        if p in (1.0, 2.0):
            continue
        t0 = time.perf_counter()
        res = dual_newton(X, Y, p, w0=w_prev, chol=chol, rtol=rtol, max_iter=max_iter)
        out[p] = {"w": res.w, "iterations": res.iterations, "seconds": time.perf_counter() - t0}
        w_prev = res.w
    if 1.0 in ps:
        t0 = time.perf_counter()
        out[1.0] = {"w": basis_pursuit(X, Y), "iterations": 0, "seconds": time.perf_counter() - t0}
    return out


def bias_variance(w_noiseless: torch.Tensor, W: torch.Tensor, w_star: torch.Tensor) -> dict[str, float]:
    """The statistics of the module docstring from ŵ(y₀) (d,), ŵ(y_k) (K, d) and w* (d,)."""
    K = W.shape[0]
    mean = W.mean(0)
    variance = float(((W - mean) ** 2).sum(-1).sum() / (K - 1)) if K > 1 else math.nan
    return {
        "bias": float(((w_noiseless - w_star) ** 2).sum()),
        "noise_part": float(((W - w_noiseless) ** 2).sum(-1).mean()),
        "variance": variance,
        "risk": float(((W - w_star) ** 2).sum(-1).mean()),
        "cond_bias": float(((mean - w_star) ** 2).sum() - variance / K) if K > 1 else math.nan,
    }


def run_instance(X, Y, ps, w_star=None, rtol: float = 1e-12, max_iter: int = 100) -> list[dict]:
    """One design: per p a row with the statistics above (when w* is known), ‖ŵ‖_p of the first response,
    the support size of ŵ₁, Newton iterations and solve time."""
    X = torch.as_tensor(X, dtype=torch.float64)
    Y = torch.as_tensor(Y, dtype=torch.float64).reshape(-1, X.shape[-2])
    if w_star is not None:
        w_star = torch.as_tensor(w_star, dtype=torch.float64)
        if w_star.shape != (X.shape[-1],):
            raise ZooError(f"w_star has shape {tuple(w_star.shape)}, expected ({X.shape[-1]},) for X of shape "
                           f"{tuple(X.shape)}")
        Y = torch.cat([(X @ w_star).unsqueeze(0), Y])  # row 0: the noiseless response y₀ = Xw*
    path = solve_path(X, Y, ps, rtol=rtol, max_iter=max_iter)
    rows = []
    for p in sorted(path):
        W = path[p]["w"]
        row = {"p": p, "iterations": path[p]["iterations"], "seconds": path[p]["seconds"]}
        w_obs = W[1] if w_star is not None else W[0]
        row["norm_p"] = float(torch.linalg.vector_norm(w_obs, ord=p))
        row["support"] = int((w_obs.abs() > 1e-9 * w_obs.abs().max()).sum())
        if w_star is not None:
            row.update(bias_variance(W[0], W[1:], w_star))
        rows.append(row)
    return rows


def summarize(rows: list[dict], metrics=METRICS) -> dict[float, dict[str, tuple[float, float, int]]]:
    """Per p and metric: (mean, standard error of the mean over instances, number of instances)."""
    out: dict[float, dict[str, tuple[float, float, int]]] = {}
    for p in sorted({r["p"] for r in rows}):
        out[p] = {}
        for m in metrics:
            vals = torch.tensor([r[m] for r in rows if r["p"] == p and m in r and not math.isnan(r[m])],
                                dtype=torch.float64)
            if vals.numel():
                se = float(vals.std() / math.sqrt(vals.numel())) if vals.numel() > 1 else math.nan
                out[p][m] = (float(vals.mean()), se, vals.numel())
    return out
