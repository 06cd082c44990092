"""Oracles for the ℓ_p interpolators: cvxpy/Clarabel, closed forms, optimality certificates, bad input."""

import itertools
import math

import numpy as np
import pytest
import torch

from zoo.errors import ZooError
from zoo.minnorm import basis_pursuit, dual_newton, min_l2_interpolator, min_norm_interpolator


def problem(n=12, d=40, seed=0, batch=None):
    rng = np.random.default_rng(seed)
    shape = (n, d) if batch is None else (batch, n, d)
    X = rng.standard_normal(shape)
    y = X[..., 0] + 0.5 * rng.standard_normal(shape[:-1])
    return torch.from_numpy(X), torch.from_numpy(y)


def rel(a, b) -> float:
    return float(torch.linalg.norm(torch.as_tensor(a) - torch.as_tensor(b)) / torch.linalg.norm(torch.as_tensor(b)))


@pytest.mark.parametrize("p", [1.0, 1.1, 1.5, 2.0])
def test_dual_newton_lp_and_closed_form_agree_with_cvxpy(p):
    cp = pytest.importorskip("cvxpy", reason="cvxpy (the peer) is not installed")
    X, y = problem()
    w = cp.Variable(X.shape[1])
    prob = cp.Problem(cp.Minimize(cp.norm(w, p)), [X.numpy() @ w == y.numpy()])
    # Interior-point solutions are accurate to about sqrt(gap) in w: the default 1e-8 tolerances leave ~1e-6
    # differences, so all four of Clarabel's stopping tolerances are tightened. Near them Clarabel sometimes
    # reports "optimal_inaccurate" (stalled just short of 1e-10): the peer's answer is then checked on its own
    # (feasible, same objective) before the solutions are compared.
    tol = 1e-10
    prob.solve(solver="CLARABEL", tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol, tol_ktratio=tol)
    assert prob.status in ("optimal", "optimal_inaccurate")
    peer = torch.from_numpy(w.value)
    assert torch.linalg.norm(X @ peer - y) / torch.linalg.norm(y) < 1e-8
    ours = min_norm_interpolator(X, y, p)
    assert math.isclose(float(torch.linalg.vector_norm(ours, p)), float(torch.linalg.vector_norm(peer, p)),
                        rel_tol=1e-9)
    assert rel(ours, peer) < 1e-6
    if p == 1.0:
        assert rel(basis_pursuit(X, y), peer) < 1e-6
    else:  # dual Newton on its own, also at p = 2 where it must reproduce the closed form
        newton = dual_newton(X, y, p).w
        assert rel(newton, peer) < 1e-6
        if p == 2.0:
            assert rel(newton, min_l2_interpolator(X, y)) < 1e-12
            G = X @ X.T
            torch.testing.assert_close(ours, X.T @ torch.linalg.solve(G, y), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", [1.05, 1.1, 1.5, 2.0])
def test_kkt_certificate_interpolation_and_row_space(p):
    """Optimality of min ‖w‖_p s.t. Xw = y: Xŵ = y and ∇(1/p)‖ŵ‖_p^p = sign(ŵ)|ŵ|^{p−1} ∈ row space of X."""
    X, y = problem(n=30, d=300, seed=1)
    w = min_norm_interpolator(X, y, p)
    assert torch.linalg.norm(X @ w - y) / torch.linalg.norm(y) < 1e-10
    z = torch.sign(w) * w.abs() ** (p - 1)
    proj = X.T @ torch.linalg.solve(X @ X.T, X @ z)
    assert rel(proj, z) < 1e-9


def test_basis_pursuit_dual_certificate_and_strong_duality():
    X, y = problem(n=30, d=300, seed=2)
    w, lam = basis_pursuit(X, y, return_dual=True)
    assert torch.linalg.norm(X @ w - y) / torch.linalg.norm(y) < 1e-10
    v = X.T @ lam
    assert v.abs().max() <= 1 + 1e-8  # dual feasibility ‖Xᵀλ‖_∞ ≤ 1
    support = w.abs() > 1e-12
    assert 0 < int(support.sum()) <= X.shape[0]  # a vertex: at most n nonzeros
    torch.testing.assert_close(v[support], torch.sign(w[support]), rtol=0, atol=1e-8)  # equality on the support
    assert math.isclose(float(y @ lam), float(w.abs().sum()), rel_tol=1e-9)  # no duality gap


@pytest.mark.parametrize("p", [1.0, 1.1, 2.0])
def test_batches_equal_single_solves(p):
    X, y = problem(n=10, d=50, seed=3, batch=3)
    batched = min_norm_interpolator(X, y, p)
    for b in range(3):
        torch.testing.assert_close(batched[b], min_norm_interpolator(X[b], y[b], p), rtol=1e-8, atol=1e-10)
    shared = min_norm_interpolator(X[0], y, p)  # one design, three responses (noise draws)
    for b in range(3):
        torch.testing.assert_close(shared[b], min_norm_interpolator(X[0], y[b], p), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("scale", [1e-8, 1e8])
def test_homogeneity_keeps_near_one_p_stable_at_any_scale(scale):
    """ŵ(sy) = s ŵ(y): the solver works at unit ‖y‖, so q = 21 (p = 1.05) neither over- nor underflows."""
    X, y = problem(n=40, d=2000, seed=4)
    w = dual_newton(X, y, 1.05).w
    torch.testing.assert_close(dual_newton(X, scale * y, 1.05).w, scale * w, rtol=1e-8, atol=1e-12 * scale)


def test_warm_start_reaches_the_same_solution():
    X, y = problem(n=30, d=600, seed=5)
    cold = dual_newton(X, y, 1.1)
    warm = dual_newton(X, y, 1.1, w0=dual_newton(X, y, 1.25).w)
    assert rel(warm.w, cold.w) < 1e-9


def test_levenberg_ridge_recovers_when_the_hessians_cholesky_fails(monkeypatch):
    """Near p = 1 (q = 101 at p = 1.01) the dual Hessian X diag((q−1)|v|^{q−2}) Xᵀ is numerically singular at some
    Newton iterates: its Cholesky fails and the solver retries with H + ridge·mean(diag H)·I (cards/minnorm.md,
    "a Levenberg ridge"). Spied on torch.linalg.cholesky_ex: the fallback runs and succeeds, and the result still
    interpolates and is cvxpy's minimum-ℓ_p interpolant."""
    p = 1.01
    X, y = problem()
    calls = []
    real = torch.linalg.cholesky_ex

    def spy(A, *args, **kwargs):
        L, info = real(A, *args, **kwargs)
        calls.append((A.clone(), int(info.max())))
        return L, info

    monkeypatch.setattr(torch.linalg, "cholesky_ex", spy)
    ours = min_norm_interpolator(X, y, p)
    monkeypatch.undo()
    ridged = 0
    for (A, info), (B, info_next) in itertools.pairwise(calls):
        if info > 0:  # the next call factors the same matrix plus a positive multiple of the identity
            shift = B - A
            diag = torch.diagonal(shift)
            assert torch.equal(shift - torch.diag(diag), torch.zeros_like(shift))  # off-diagonal untouched
            assert float(diag.min()) > 0  # equal up to the rounding of H_ii + c − H_ii:
            torch.testing.assert_close(diag, diag.mean().expand_as(diag), rtol=0.05, atol=0)
            ridged += info_next == 0
    assert sum(info > 0 for _, info in calls) >= 1 and ridged >= 1, [info for _, info in calls]
    assert calls[-1][1] == 0
    assert torch.linalg.norm(X @ ours - y) / torch.linalg.norm(y) < 1e-10  # interpolates (RESIDUAL_RTOL)

    cp = pytest.importorskip("cvxpy", reason="cvxpy (the peer) is not installed")
    w = cp.Variable(X.shape[1])
    prob = cp.Problem(cp.Minimize(cp.norm(w, p)), [X.numpy() @ w == y.numpy()])
    tol = 1e-10  # as in test_dual_newton_lp_and_closed_form_agree_with_cvxpy (Clarabel may end "optimal_inaccurate")
    prob.solve(solver="CLARABEL", tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol, tol_ktratio=tol)
    assert prob.status in ("optimal", "optimal_inaccurate")
    peer = torch.from_numpy(w.value)
    assert torch.linalg.norm(X @ peer - y) / torch.linalg.norm(y) < 1e-8
    assert float(torch.linalg.vector_norm(ours, p)) <= float(torch.linalg.vector_norm(peer, p)) * (1 + 1e-9)
    assert rel(ours, peer) < 1e-6


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("p", [0.5, 2.5, float("nan")])
def test_p_outside_one_two_is_rejected(p):
    X, y = problem()
    with pytest.raises(ZooError, match=r"p must lie in \[1, 2\]"):
        min_norm_interpolator(X, y, p)


def test_n_at_least_d_is_rejected():
    X, y = problem(n=20, d=20)
    with pytest.raises(ZooError, match="need n < d.*n=20, d=20"):
        min_norm_interpolator(X, y, 1.5)


def test_non_finite_entries_are_rejected():
    X, y = problem()
    X[0, 0] = float("nan")
    with pytest.raises(ZooError, match="X has 1 non-finite"):
        min_norm_interpolator(X, y, 1.5)
    X, y = problem()
    y[1] = float("inf")
    with pytest.raises(ZooError, match="y has 1 non-finite"):
        min_norm_interpolator(X, y, 1.0)


def test_rank_deficient_design_and_y_outside_its_range():
    X, y = problem()
    X[1] = X[0]
    y[1] = y[0]  # consistent: y in the range, but XXᵀ is singular
    with pytest.raises(ZooError, match="rank-deficient.*rank 11 < n=12"):
        min_norm_interpolator(X, y, 1.5)
    y[1] = y[0] + 1.0  # two equal rows with different responses: nothing interpolates
    with pytest.raises(ZooError, match="y is outside the range of X"):
        min_norm_interpolator(X, y, 2.0)


def test_stalled_newton_names_p_iteration_and_residual():
    X, y = problem(n=30, d=600, seed=6)
    with pytest.raises(ZooError, match=r"p=1.05 stalled at iteration 1: relative residual .* > rtol"):
        dual_newton(X, y, 1.05, max_iter=1)


def test_lp_time_limit_is_an_error_not_a_partial_solution():
    X, y = problem(n=30, d=600, seed=7)
    with pytest.raises(ZooError, match="basis pursuit \\(p=1\\) failed .*HiGHS status 1"):
        basis_pursuit(X, y, time_limit=0.0)


def test_shape_mismatch_and_p_one_in_newton():
    X, y = problem()
    with pytest.raises(ZooError, match="does not match X"):
        min_norm_interpolator(X, y[:-1], 1.5)
    with pytest.raises(ZooError, match="basis-pursuit LP"):
        dual_newton(X, y, 1.0)
