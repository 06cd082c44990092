"""Monte-Carlo bias/variance: the exact decomposition, the exact ℓ2 laws, universality across design laws."""

import math

import numpy as np
import pytest
import torch

from datamodules.linear_designs import GeneratedDesigns, ground_truth
from zoo.minnorm import MinNormExperiment, bias_variance, run_instance, solve_path, summarize


def test_risk_is_conditional_bias_plus_variance_exactly():
    """risk = ‖E[ŵ|X] − w*‖² + Var(ŵ|X) holds for any estimator; its plug-in (cond_bias + variance) to rounding."""
    g = torch.Generator().manual_seed(0)
    w_star, w0, W = torch.randn(30, generator=g), torch.randn(30, generator=g), torch.randn(5, 30, generator=g)
    s = bias_variance(w0, W, w_star)
    assert math.isclose(s["risk"], s["cond_bias"] + s["variance"], rel_tol=1e-12)
    assert math.isclose(s["variance"], float(torch.var(W, dim=0, unbiased=True).sum()), rel_tol=1e-12)
    assert math.isclose(s["bias"], float(((w0 - w_star) ** 2).sum()), rel_tol=1e-12)


def test_l2_noise_part_is_the_pseudoinverse_applied_to_the_noise():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((15, 60))
    w_star = ground_truth("sparse", 60, 3)
    noise = 0.5 * rng.standard_normal((4, 15))
    (row,) = run_instance(X, X @ w_star + noise, [2.0], w_star)
    pinv = np.linalg.pinv(X)
    assert math.isclose(row["bias"], float(np.sum((pinv @ X @ w_star - w_star) ** 2)), rel_tol=1e-10)
    assert math.isclose(row["noise_part"], float(np.mean(np.sum((noise @ pinv.T) ** 2, axis=1))), rel_tol=1e-10)


def test_exact_l2_laws_gaussian_n50_d400_2000_repetitions():
    """Gaussian X: E‖ŵ(Xw*) − w*‖² = (1 − n/d)‖w*‖² (projection on a uniform n-dim row space) and
    E‖X⁺ξ‖² = σ² E tr((XXᵀ)⁻¹) = σ² n/(d − n − 1) (inverse-Wishart mean), each within 3 standard errors."""
    n, d, sigma, reps = 50, 400, 0.5, 2000
    data = GeneratedDesigns("gaussian", n, d, sigma, ground_truth("e1", d), reps, 2, seed=0)
    module = MinNormExperiment(ps=[2.0])
    rows = module.evaluate([data[i] for i in range(reps)])
    stats = summarize(rows)[2.0]
    for metric, exact in (("bias", 1 - n / d), ("noise_part", sigma**2 * n / (d - n - 1))):
        mean, se, count = stats[metric]
        assert count == reps
        assert abs(mean - exact) <= 3 * se, (metric, mean, exact, se)
    # the unbiased Var(ŵ | X) estimate has the same expectation as the noise part for the linear ℓ2 interpolator
    mean, se, _ = stats["variance"]
    assert abs(mean - sigma**2 * n / (d - n - 1)) <= 3 * se


def curves(law, n, d, ps, reps, noise, seed):
    data = GeneratedDesigns(law, n, d, 0.5, ground_truth("e1", d), reps, noise, seed)
    rows = [r for i in range(reps) for r in run_instance(data[i]["X"], data[i]["y"], ps, data[i]["w_star"])]
    return summarize(rows)


def test_universality_rademacher_and_gaussian_risk_curves_agree():
    """Reduced size of the reproduction (n = 50, d = 250, 24 designs x 2 noise draws per law, the full p grid):
    at every p the Gaussian and Rademacher mean risks differ by less than 3 standard errors of the difference.
    Universality is a large-n statement: at much smaller n and d the noiseless ℓ_1.25 fit was seen to be
    measurably worse for Gaussian designs, a gap gone at about this size (an uncommitted check); hence this size. Also the shape of issue #20: ℓ1 bias ~ 0 (basis
    pursuit recovers e1), ℓ2 bias ~ 1 − n/d, variance rising as p -> 1."""
    n, d, ps = 50, 250, [1.0, 1.05, 1.1, 1.25, 1.5, 2.0]
    gauss = curves("gaussian", n, d, ps, 24, 2, seed=0)
    rad = curves("rademacher", n, d, ps, 24, 2, seed=0)
    for p in ps:
        (mg, sg, _), (mr, sr, _) = gauss[p]["risk"], rad[p]["risk"]
        assert abs(mg - mr) <= 3 * math.hypot(sg, sr), (p, mg, mr, sg, sr)
    for stats in (gauss, rad):
        assert stats[1.0]["bias"][0] < 1e-12
        assert abs(stats[2.0]["bias"][0] - (1 - n / d)) < 3 * stats[2.0]["bias"][1]
        assert stats[1.0]["variance"][0] > stats[1.5]["variance"][0] > stats[2.0]["variance"][0]


def test_solve_path_warm_starts_match_cold_solves():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((20, 200))
    Y = X[:, 0] + 0.5 * rng.standard_normal((2, 20))
    path = solve_path(X, Y, [1.05, 1.5, 1.25, 2.0])
    from zoo.minnorm import min_norm_interpolator

    for p, out in path.items():
        cold = min_norm_interpolator(X, Y, p)
        assert float(torch.linalg.norm(out["w"] - cold) / torch.linalg.norm(cold)) < 1e-9


def test_grid_outside_one_two_is_rejected():
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match="p must lie in"):
        solve_path(np.ones((2, 5)), np.ones(2), [1.5, 3.0])
