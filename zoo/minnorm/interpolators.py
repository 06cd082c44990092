"""Minimum-ℓ_p-norm interpolators ŵ = argmin ‖w‖_p s.t. Xw = y, p ∈ [1, 2], in float64.

* p ∈ (1, 2]: Newton with backtracking on the concave dual of min (1/p)‖w‖_p^p s.t. Xw = y,
      max_λ  f(λ) = λᵀy − (1/q)‖Xᵀλ‖_q^q,   q = p/(p−1),
  whose gradient is y − Xw(λ), w(λ)_j = sign(v_j)|v_j|^{q−1}, v = Xᵀλ, and whose Hessian is
  −X diag((q−1)|v|^{q−2}) Xᵀ. At λ*, w(λ*) interpolates and is ŵ (the argmin of ‖·‖_p and of (1/p)‖·‖_p^p
  coincide). Each iteration is one n×n solve and two n×d products, so d ~ 10⁵ fits a CPU.
* p = 1: the LP min 1ᵀ(u+v) s.t. X(u−v) = y, u, v ≥ 0 (basis pursuit) with HiGHS through scipy.
* p = 2: Xᵀ(XXᵀ)⁻¹y by a Cholesky solve.

Shapes: X is (n, d) or (B, n, d); y is (n,) or (B, n). A batch of responses may share one design (X (n, d),
y (B, n): the repetitions of one design's noise draws). Every result is checked to interpolate: a solver that
stops short raises a `ZooError` naming p, the iteration and the residual, never returns a non-interpolating ŵ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linprog

from zoo.errors import ZooError

# Relative interpolation residual ‖Xŵ − y‖₂/‖y‖₂ every returned solution satisfies.
RESIDUAL_RTOL = 1e-10
# Eigenvalue ratio λ_min/λ_max of XXᵀ below which X counts as rank-deficient (condition number > 1e13).
RANK_RTOL = 1e-13


@dataclass
class NewtonResult:
    w: torch.Tensor  # (..., d) the interpolator
    lam: torch.Tensor  # (..., n) the dual optimum, in the scale of the given y
    iterations: int
    residual: float  # max relative residual over the batch


def _as_problem(X, y) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.as_tensor(X, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64)
    if X.ndim not in (2, 3):
        raise ZooError(f"X must be (n, d) or (B, n, d), got shape {tuple(X.shape)}")
    n = X.shape[-2]
    if y.ndim not in (1, 2) or y.shape[-1] != n or (X.ndim == 3 and y.shape[:-1] not in ((X.shape[0],), ())):
        raise ZooError(f"y of shape {tuple(y.shape)} does not match X of shape {tuple(X.shape)} (need (n,) or (B, n))")
    return X, y


def check_problem(X, y, p: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate (X, y, p) and return float64 X, y and the Cholesky factor of G = XXᵀ.

    Errors (one line each): p outside [1, 2]; n ≥ d (no overparameterised interpolation); non-finite entries;
    X rank-deficient, with y outside its range (no interpolator exists) or inside it (drop dependent rows)."""
    if not isinstance(p, (int, float)) or not math.isfinite(p) or not 1.0 <= p <= 2.0:
        raise ZooError(f"p must lie in [1, 2] (minimum ℓ_p-norm interpolation), got p={p!r}")
    X, y = _as_problem(X, y)
    n, d = X.shape[-2:]
    if n >= d:
        raise ZooError(f"need n < d for interpolation (overparameterised regime), got n={n}, d={d}")
    if not torch.isfinite(X).all():
        raise ZooError(f"X has {int((~torch.isfinite(X)).sum())} non-finite entries (NaN or inf)")
    if not torch.isfinite(y).all():
        raise ZooError(f"y has {int((~torch.isfinite(y)).sum())} non-finite entries (NaN or inf)")
    G = X @ X.mT
    eig = torch.linalg.eigvalsh(G)  # ascending, (…, n)
    ratio = eig[..., 0] / eig[..., -1].clamp_min(torch.finfo(torch.float64).tiny)
    if (ratio <= RANK_RTOL).any():
        b = int(torch.argmin(ratio.reshape(-1)))
        Xb = X if X.ndim == 2 else X[b]
        rank = int(torch.linalg.matrix_rank(Xb))
        yb = (y if X.ndim == 2 or y.ndim == 1 else y[b]).reshape(-1, n)
        coef = torch.linalg.lstsq(Xb, yb.mT, driver="gelsd").solution  # least squares: distance of y to range(X)
        res = torch.linalg.norm(yb - (Xb @ coef).mT, dim=-1) / torch.linalg.norm(yb, dim=-1).clamp_min(1e-300)
        if res.max() > 1e-8:
            raise ZooError(f"y is outside the range of X (rank {rank} < n={n}): no interpolator exists "
                           f"(least-squares relative residual {res.max():.2e})")
        raise ZooError(f"X is rank-deficient (rank {rank} < n={n}, cond(XXᵀ) ≈ {1 / max(ratio.min(), 1e-300):.1e}): "
                       "remove the linearly dependent rows")
    return X, y, torch.linalg.cholesky(G)


def _residual(X, w, y) -> torch.Tensor:
    """Relative ℓ2 residual ‖Xw − y‖/‖y‖ per problem (‖y‖ = 0 counts as 1)."""
    r = (X @ w.unsqueeze(-1)).squeeze(-1) - y
    return torch.linalg.norm(r, dim=-1) / torch.linalg.norm(y, dim=-1).clamp_min(1e-300)


def min_l2_interpolator(X, y, chol: torch.Tensor | None = None) -> torch.Tensor:
    """ŵ₂ = Xᵀ(XXᵀ)⁻¹y by a Cholesky solve (float64)."""
    if chol is None:
        X, y, chol = check_problem(X, y, 2.0)
    lam = torch.cholesky_solve(y.unsqueeze(-1), chol).squeeze(-1)
    return (lam.unsqueeze(-2) @ X).squeeze(-2)


def _dual_value(lam, y, a, q) -> torch.Tensor:
    return (lam * y).sum(-1) - (a**q).sum(-1) / q


def dual_newton(X, y, p: float, w0=None, chol=None, rtol: float = 1e-12, max_iter: int = 100,
                armijo: float = 1e-4) -> NewtonResult:
    """Minimum-ℓ_p interpolator for p ∈ (1, 2] by Newton's method with line search on the dual.

    Stability near p = 1 (q = p/(p−1) = 21 at p = 1.05, so w = |v|^20 and the Hessian weights |v|^19 span
    hundreds of orders of magnitude at a poor start):
      1. homogeneity: ŵ(sy) = s ŵ(y), so each y is solved at unit norm and ŵ scaled back;
      2. warm start from a primal guess w0 (the solution at the neighbouring p of a grid, or ŵ₂): the dual start
         is the least-squares λ with Xᵀλ ≈ sign(w0)|w0|^{p−1}, the optimality condition at the new p;
      3. the dual is scaled along that ray to its exact maximiser, c^{q−1} = λᵀy/‖Xᵀλ‖_q^q, which puts
         ‖w(λ)‖ on the scale of y before the first Newton step;
      4. a Cholesky failure of the Hessian (numerically singular when |v|^{q−2} vanishes on most coordinates)
         is met by a small Levenberg ridge, so the step stays an ascent direction.
    """
    if p == 1.0:
        raise ZooError("dual_newton needs p in (1, 2]; p = 1 is the basis-pursuit LP (basis_pursuit)")
    if chol is None:
        X, y, chol = check_problem(X, y, p)
    q = p / (p - 1.0)
    scale = torch.linalg.norm(y, dim=-1, keepdim=True).clamp_min(1e-300)
    yt = y / scale
    if w0 is None:
        w0 = min_l2_interpolator(X, yt, chol)
    else:
        w0 = torch.as_tensor(w0, dtype=torch.float64) / scale
    target = torch.sign(w0) * w0.abs() ** (p - 1.0)
    lam = torch.cholesky_solve((X @ target.unsqueeze(-1)), chol).squeeze(-1)
    if lam.shape != yt.shape:  # a shared warm start for a batch of responses
        lam = lam.expand_as(yt).clone()
    ly = (lam * yt).sum(-1)
    cold = ly <= 0  # the ray does not ascend: fall back to the ℓ2 dual direction, for which λᵀy > 0
    if cold.any():
        lam = torch.where(cold.unsqueeze(-1), torch.cholesky_solve(yt.unsqueeze(-1), chol).squeeze(-1), lam)
        ly = (lam * yt).sum(-1)
    a = (lam.unsqueeze(-2) @ X).squeeze(-2).abs()
    lam = lam * ((ly / (a**q).sum(-1)) ** (1.0 / (q - 1.0))).unsqueeze(-1)

    eye = torch.eye(X.shape[-2], dtype=torch.float64)
    res = torch.full(yt.shape[:-1], math.inf, dtype=torch.float64)
    for it in range(max_iter + 1):
        v = (lam.unsqueeze(-2) @ X).squeeze(-2)
        a = v.abs()
        w = torch.sign(v) * a ** (q - 1.0)
        r = yt - (X @ w.unsqueeze(-1)).squeeze(-1)  # gradient of f
        res = torch.linalg.norm(r, dim=-1)  # ‖yt‖ = 1
        if bool((res <= rtol).all()):
            break
        if it == max_iter:
            break
        D = (q - 1.0) * a ** (q - 2.0)
        H = (X * D.unsqueeze(-2)) @ X.mT  # −Hessian, positive definite
        L, info = torch.linalg.cholesky_ex(H)
        ridge = 1e-14
        while bool((info > 0).any()) and ridge < 1.0:
            tr = torch.diagonal(H, dim1=-2, dim2=-1).mean(-1)
            L, info = torch.linalg.cholesky_ex(H + (ridge * tr)[..., None, None] * eye)
            ridge *= 100.0
        if bool((info > 0).any()):
            raise ZooError(f"dual Newton for p={p:g}: the Hessian is singular at iteration {it} "
                           f"(relative residual {res.max():.2e})")
        step = torch.cholesky_solve(r.unsqueeze(-1), L).squeeze(-1)
        slope = (r * step).sum(-1)  # > 0: an ascent direction
        f0 = _dual_value(lam, yt, a, q)
        t = torch.ones_like(f0)
        todo = res > rtol
        for _ in range(60):
            trial = lam + t.unsqueeze(-1) * step
            f1 = _dual_value(trial, yt, (trial.unsqueeze(-2) @ X).squeeze(-2).abs(), q)
            # Armijo; when the predicted gain is below the rounding of f, the quadratic model is exact
            # enough that the full Newton step is taken (the residual test then decides).
            ok = (f1 >= f0 + armijo * t * slope) | (slope <= 1e-15 * f0.abs().clamp_min(1.0))
            ok = ok | ~todo
            if bool(ok.all()):
                break
            t = torch.where(ok, t, 0.5 * t)
        lam = torch.where(todo.unsqueeze(-1), lam + t.unsqueeze(-1) * step, lam)
    if not bool((res <= rtol).all()):
        raise ZooError(f"dual Newton for p={p:g} stalled at iteration {it}: relative residual "
                       f"{res.max():.2e} > rtol {rtol:.0e} (raise max_iter, or warm-start from a nearer p)")
    return NewtonResult(w=w * scale, lam=lam * scale ** (p - 1.0), iterations=it, residual=float(res.max()))


def basis_pursuit(X, y, return_dual: bool = False, polish: bool = True, time_limit: float | None = None):
    """Minimum-ℓ₁ interpolator by the LP min 1ᵀ(u+v) s.t. X(u−v) = y, u, v ≥ 0 (HiGHS via scipy).

    The simplex solution is a vertex: its support S has at most n columns, X_S has full column rank and ŵ_S
    solves X_S ŵ_S = y. `polish` re-solves that system in float64 (HiGHS's feasibility tolerance is 1e-7), so
    the returned ŵ interpolates to rounding. With `return_dual`, also the equality multipliers λ, the dual
    certificate: ‖Xᵀλ‖_∞ ≤ 1 with (Xᵀλ)_j = sign(ŵ_j) on the support. `time_limit`: seconds per LP for HiGHS
    (reaching it is a ZooError, never a partial solution)."""
    X, y, _ = check_problem(X, y, 1.0)
    n, d = X.shape[-2:]
    Xn, yn = X.numpy(), y.numpy()
    ys = yn.reshape(-1, n)
    ws, lams = np.zeros((ys.shape[0], d)), np.zeros((ys.shape[0], n))
    # presolve off: on a dense random design it finds nothing to remove and costs up to half the solve
    options = {"presolve": False} if time_limit is None else {"presolve": False, "time_limit": float(time_limit)}
    for b in range(ys.shape[0]):
        Xb = Xn if Xn.ndim == 2 else Xn[b]
        out = linprog(np.ones(2 * d), A_eq=np.hstack([Xb, -Xb]), b_eq=ys[b], bounds=(0, None), method="highs",
                      options=options)
        if out.status != 0:
            raise ZooError(f"basis pursuit (p=1) failed for problem {b}: HiGHS status {out.status}: {out.message}")
        w = out.x[:d] - out.x[d:]
        support = np.flatnonzero(w)
        if polish and 0 < support.size <= n:
            w_s = np.linalg.lstsq(Xb[:, support], ys[b], rcond=None)[0]
            if np.all(np.sign(w_s) == np.sign(w[support])):  # still the same vertex: keep the exact solve
                w = np.zeros(d)
                w[support] = w_s
        ws[b], lams[b] = w, out.eqlin.marginals
    w = torch.from_numpy(ws.reshape(*y.shape[:-1], d))
    res = _residual(X, w, y).max()
    if res > RESIDUAL_RTOL:
        raise ZooError(f"basis pursuit (p=1) does not interpolate: relative residual {res:.2e} > {RESIDUAL_RTOL:.0e}")
    if return_dual:
        return w, torch.from_numpy(lams.reshape(*y.shape[:-1], n))
    return w


def min_norm_interpolator(X, y, p: float, w0=None, rtol: float = 1e-12, max_iter: int = 100) -> torch.Tensor:
    """ŵ = argmin ‖w‖_p s.t. Xw = y for p ∈ [1, 2] (float64; batched over the leading axis of X and/or y).

    p = 2: Cholesky closed form; p = 1: basis-pursuit LP (HiGHS); otherwise dual Newton (`w0`: a warm start,
    e.g. the solution at a neighbouring p). The result interpolates to `RESIDUAL_RTOL` or a `ZooError` is raised.
    """
    X, y, chol = check_problem(X, y, p)
    if p == 1.0:
        return basis_pursuit(X, y)
    if p == 2.0:
        w = min_l2_interpolator(X, y, chol)
    else:
        w = dual_newton(X, y, p, w0=w0, chol=chol, rtol=rtol, max_iter=max_iter).w
    res = _residual(X, w, y).max()
    if res > RESIDUAL_RTOL:
        raise ZooError(f"p={p:g}: the solution does not interpolate (relative residual {res:.2e} > "
                       f"{RESIDUAL_RTOL:.0e})")
    return w
