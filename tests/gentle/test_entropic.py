"""The OT term: the entropic semi-dual reaches the KL-regularised primal (strong duality), never exceeds it (weak
duality), and the c-transform is the stable form of its definition."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from zoo.gentle.entropic import c_transform, entropic_ot, ground_cost, semi_dual
from zoo.gentle.kde import interpolate_cdf, kde_cdf_table

from .conftest import maximise_semi_dual

ot = pytest.importorskip("ot", reason="POT (pip install pot) is the peer for entropic OT")

EPS = 1.0


def samples(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 1.0, n), rng.normal(1.0, 0.5, n)


def log_sinkhorn(C, eps, iters=5000, tol=1e-14):
    """Log-domain Sinkhorn for uniform marginals (float64): the optimal plan of min <C,π> + ε KL(π | μ⊗ν)."""
    n, m = C.shape
    log_a, log_b = np.full(n, -math.log(n)), np.full(m, -math.log(m))
    f, g = np.zeros(n), np.zeros(m)
    lse = lambda z, axis: np.log(np.exp(z - z.max(axis, keepdims=True)).sum(axis)) + z.max(axis)
    for _ in range(iters):
        f_old = f
        f = -eps * lse((g[None, :] - C) / eps + log_b[None, :], 1)
        g = -eps * lse((f[:, None] - C) / eps + log_a[:, None], 0)
        if np.abs(f - f_old).max() < tol:
            break
    return np.exp((f[:, None] + g[None, :] - C) / eps + log_a[:, None] + log_b[None, :])


def primal_value(plan, C, eps):
    n, m = C.shape
    return (plan * C).sum() + eps * (plan * np.log(plan * n * m)).sum()


def test_semi_dual_maximum_equals_the_kl_regularised_primal():
    a, b = samples()
    C = (a[:, None] - b[None, :]) ** 2
    plan = log_sinkhorn(C, EPS)
    np.testing.assert_allclose(plan.sum(1), 1 / len(a), rtol=1e-9)  # converged to the marginals
    np.testing.assert_allclose(plan.sum(0), 1 / len(b), rtol=1e-9)
    primal = primal_value(plan, C, EPS)
    dual, _ = maximise_semi_dual(a, b, EPS)
    # R carries the official "- ε": max_v (R + ε) is the entropic OT value
    assert abs((dual + EPS) - primal) < 1e-4, (dual + EPS, primal)


def test_pot_sinkhorn_cross_checks_the_plan_and_its_cost():
    a, b = samples(seed=1)
    C = (a[:, None] - b[None, :]) ** 2
    w = np.full(len(a), 1 / len(a))
    ours = log_sinkhorn(C, EPS)
    pot_plan = ot.sinkhorn(w, w, C, EPS, method="sinkhorn_log", numItermax=5000, stopThr=1e-13)
    np.testing.assert_allclose(pot_plan, ours, atol=1e-10)
    # POT's entropy differs from KL(π | μ⊗ν) by a constant, so the same plan; sinkhorn2 returns <C, π>
    np.testing.assert_allclose(ot.sinkhorn2(w, w, C, EPS, method="sinkhorn_log", numItermax=5000, stopThr=1e-13),
                               (ours * C).sum(), rtol=1e-8)
    dual, _ = maximise_semi_dual(a, b, EPS)
    assert abs(dual + EPS - primal_value(pot_plan, C, EPS)) < 1e-4


def test_weak_duality_for_any_potential():
    a, b = samples(50, seed=2)
    C = (a[:, None] - b[None, :]) ** 2
    primal = primal_value(log_sinkhorn(C, EPS), C, EPS)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        v = 3 * torch.randn(len(b), generator=gen, dtype=torch.float64)
        assert semi_dual(torch.tensor(a), torch.tensor(b), v, EPS).item() + EPS <= primal + 1e-12


@pytest.mark.parametrize("eps", [0.1, 1.0, 10.0])
def test_c_transform_is_the_definition_and_stable(eps):
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 7, generator=gen, dtype=torch.float64), torch.randn(3, 5, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    C = ground_cost(a, b)
    naive = -eps * torch.log(torch.exp((v[:, None, :] - C) / eps).mean(-1))
    torch.testing.assert_close(c_transform(v, C, eps), naive, rtol=1e-12, atol=1e-12)
    # far from the data the naive exp under/overflows; the log-sum-exp form stays finite
    assert torch.isfinite(c_transform(v + 1e4, C, 1e-3)).all()


def test_costs_and_batching():
    a, b = torch.tensor([[0.0, 1.0]]), torch.tensor([[3.0]])
    assert ground_cost(a, b).tolist() == [[[9.0], [4.0]]]
    assert ground_cost(a, b, "euclidean").tolist() == [[[3.0], [2.0]]]
    gen = torch.Generator().manual_seed(2)
    A, B, V = (torch.randn(4, 6, generator=gen, dtype=torch.float64) for _ in range(3))
    batched = semi_dual(A, B, V)
    torch.testing.assert_close(batched, torch.stack([semi_dual(A[i], B[i], V[i]) for i in range(4)]))
    with pytest.raises(ValueError, match="unknown ground cost"):
        ground_cost(a, b, "cosine")


def test_at_the_official_epsilon_narrow_conditionals_pay_their_own_variance():
    """Why the card's toy1 analysis holds: with ε = 1 and conditionals of spread 0.2 (standardised toy1 scale), the
    entropic plan is nearly the independent coupling, so max_v R + ε ≈ Var_i + Var_j + Δmean², not W2² ≈ Δmean²."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 0.2, 100), rng.normal(0.1, 0.2, 100)
    C = (a[:, None] - b[None, :]) ** 2
    value = primal_value(log_sinkhorn(C, EPS), C, EPS)
    w2 = np.mean((np.sort(a) - np.sort(b)) ** 2)
    assert abs(value - C.mean()) < 0.05 * C.mean() and value > 5 * w2
    small = primal_value(log_sinkhorn(C, 0.01), C, 0.01)
    assert small < 0.4 * value  # a small ε brings the term back towards the transport cost


def gaussian_entropic_ot(m1, s1, m2, s2, eps):
    """Closed form of min_π E|a - b|² + ε KL(π | μ⊗ν) for μ = N(m1, s1²), ν = N(m2, s2²) in 1-D: the optimal plan is
    Gaussian with correlation ρ solving ρ / (1 - ρ²) = 2 s1 s2 / ε (Janati et al. 2020; Mallasto et al. 2021)."""
    k = 2 * s1 * s2 / eps
    rho = (math.sqrt(1 + 4 * k * k) - 1) / (2 * k)
    return (m1 - m2) ** 2 + s1**2 + s2**2 - 2 * rho * s1 * s2 - 0.5 * eps * math.log(1 - rho**2)


@pytest.mark.parametrize("m1, s1, m2, s2", [(0.0, 0.25, 0.3, 0.25), (0.0, 1.0, 0.5, 0.7)])
def test_semi_dual_of_two_gaussians_is_the_closed_form(m1, s1, m2, s2):
    """400 Normal quantiles per side stand for the two Gaussians (the closed form is taken at their own std)."""
    q = norm.ppf((np.arange(400) + 0.5) / 400)
    a, b = m1 + s1 * q, m2 + s2 * q
    dual, _ = maximise_semi_dual(a, b, EPS)
    assert abs(dual + EPS - gaussian_entropic_ot(m1, a.std(), m2, b.std(), EPS)) < 1e-4


def test_the_ot_term_pulls_means_together_and_shrinks_spreads():
    """The direction of the generator's OT gradient (the card's toy1 analysis). max_v R + ε grows with the gap
    between the means (so minimising it pulls neighbouring conditionals together, as a smoothness penalty should),
    but it is not zero for two *identical* conditionals and falls when both narrow: the entropic term rewards
    shrinking the spread, unlike W2² = Δm² + (s1 - s2)². At ε = 1 and toy1's standardised spread (~0.25) the plan
    is nearly independent (ρ = 0.12), so the penalty is close to s1² + s2²."""
    value = lambda dm, s: gaussian_entropic_ot(0.0, s, dm, s, EPS)
    assert value(0.3, 0.25) > value(0.1, 0.25) > value(0.0, 0.25) > value(0.0, 0.2) > 0.0
    # d/ds at s1 = s2 = s is 2s(1 - ρ) > 0 by the envelope theorem; finite difference agrees
    s, h = 0.25, 1e-6
    rho = (math.sqrt(1 + 16 * s**4) - 1) / (4 * s**2)
    dv = (gaussian_entropic_ot(0, s + h, 0, s, EPS) - gaussian_entropic_ot(0, s - h, 0, s, EPS)) / (2 * h)
    assert dv == pytest.approx(2 * s * (1 - rho), rel=1e-6) and rho == pytest.approx(0.1231, abs=1e-4)


def spread_objective(s, n=100):
    """A one-covariate model of the generator's objective. The data are n Normal quantiles of std s (standardised),
    F̂ is our KDE CDF of them (bandwidth 0.3), and the generator is T_σ(u) = σΦ⁻¹(u) at a covariate and at its
    identical neighbour. Returns σ/s over [0, 1.3], L_fit(σ), and R + ε (our exact entropic OT between the two)."""
    u = (np.arange(n) + 0.5) / n
    q = norm.ppf(u)
    ratios = np.linspace(0.0, 1.3, 66)
    grid, cdf = (torch.tensor(a).expand(len(ratios), -1) for a in kde_cdf_table([s * q], 0.3))
    t = torch.tensor(np.outer(ratios * s, q))
    fit = ((torch.tensor(u) - interpolate_cdf(grid, cdf, t)) ** 2).mean(-1)
    return ratios, fit.numpy(), entropic_ot(t, t, EPS, tol=1e-10, max_iter=5000).numpy()


def test_where_the_ot_term_outweighs_the_fit_term_the_optimum_collapses():
    """The card's toy2 analysis. Collapsing T to F̂'s median costs the fit term at most E(u - ½)² = 1/12, while the
    OT term at ε = 1 gains λ(R + ε), which grows with the standardised spread s (the Gaussian closed form). At
    toy2's s ≈ 0.97 the optimum collapses (spread ratio 0.16 at λ = 0.3, 0.36 at λ = 0.1; trained: 0.19, 0.36);
    at toy1's s ≈ 0.24 it narrows only partly (0.64, 0.82); without the term the KDE target's width is kept."""
    best = {}
    for s in (0.24, 0.97):
        ratios, fit, ot_value = spread_objective(s)
        assert fit[0] == pytest.approx(1 / 12, abs=1e-3)
        assert ot_value[np.isclose(ratios, 1.0)][0] == pytest.approx(gaussian_entropic_ot(0, s, 0, s, EPS), rel=0.03)
        best.update({(s, lam): ratios[np.argmin(fit + lam * ot_value)] for lam in (0.0, 0.1, 0.3)})
    assert 1.0 <= best[0.24, 0.0] <= 1.1 and 1.0 <= best[0.97, 0.0] <= 1.1  # the KDE widens by √(1 + 0.3²)
    assert best[0.97, 0.3] < 0.25 < best[0.97, 0.1] < 0.5
    assert 0.5 < best[0.24, 0.3] < 0.8 < best[0.24, 0.1] < 0.95
