"""Oracle for the accountants the callback uses: closed-form Gaussian composition (q = 1)."""

import math

import pytest
from scipy.stats import norm

from callbacks.dp_clipping import make_accountant, noise_for_budget
from zoo.errors import ZooError


def gaussian_delta(eps: float, mu: float) -> float:
    """Exact δ(ε) of a Gaussian mechanism with μ = Δ/σ (Balle & Wang 2018, Thm. 8)."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def test_prv_matches_closed_form_gaussian_composition():
    sigma, k, delta = 4.0, 16, 1e-5  # k full-batch steps = one Gaussian mechanism with μ = √k/σ
    acc = make_accountant("prv")
    for _ in range(k):
        acc.step(noise_multiplier=sigma, sample_rate=1.0)
    eps = acc.get_epsilon(delta=delta)
    mu = math.sqrt(k) / sigma
    assert gaussian_delta(eps, mu) == pytest.approx(delta, rel=0.05)


def test_rdp_upper_bounds_the_exact_epsilon():
    sigma, k, delta = 4.0, 16, 1e-5
    acc = make_accountant("rdp")
    acc.history = [(sigma, 1.0, k)]
    eps = acc.get_epsilon(delta=delta)
    assert gaussian_delta(eps, math.sqrt(k) / sigma) <= delta  # RDP is valid, if loose
    assert gaussian_delta(0.8 * eps, math.sqrt(k) / sigma) > delta * 0.5


def test_noise_for_budget_round_trip():
    sigma = noise_for_budget(3.0, 1e-5, 0.01, 1000)
    acc = make_accountant("rdp")
    acc.history = [(sigma, 0.01, 1000)]
    assert 2.95 <= acc.get_epsilon(delta=1e-5) <= 3.0
    with pytest.raises(ZooError, match="unreachable"):
        noise_for_budget(1e-6, 1e-5, 0.5, 10_000)
