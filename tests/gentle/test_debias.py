"""The debiased OT term (``GENTLEModule(debias=True)``, ours): the self terms W_ε(α, α) equal POT's KL-regularised
OT value with its envelope gradient, the debiased term is the Sinkhorn divergence (POT), zero for identical
measures, and on Gaussians it no longer rewards narrowing both conditionals (the toy1 bias of the paper's term)."""

import math

import numpy as np
import pytest
import torch

from zoo.gentle.entropic import debiased_semi_dual, self_transport

from .conftest import maximise_semi_dual, pot_kl_value

ot = pytest.importorskip("ot", reason="POT (pip install pot) is the peer for entropic OT")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("eps", [1.0, 0.1, 0.01])
def test_self_term_is_pots_kl_regularised_value_with_its_envelope_gradient(eps):
    rng = np.random.default_rng(0)
    a = torch.tensor(rng.normal(0.0, 0.25, 30), requires_grad=True)  # toy1's standardised spread
    ours = self_transport(a, eps, tol=1e-13, max_iter=2000)
    ours.backward()
    a_pot = a.detach().clone().requires_grad_(True)
    ref = pot_kl_value(a_pot, a_pot, eps)
    ref.backward()
    assert abs(ours.item() - ref.item()) < 1e-9
    torch.testing.assert_close(a.grad, a_pot.grad, rtol=0, atol=1e-9)


def test_self_term_is_batched_and_converges_from_the_default_tolerance():
    gen = torch.Generator().manual_seed(0)
    A = 0.25 * torch.randn(4, 50, generator=gen, dtype=torch.float64)
    batched = self_transport(A, 1.0)
    exact = torch.stack([self_transport(A[i], 1.0, tol=1e-14, max_iter=5000) for i in range(4)])
    torch.testing.assert_close(batched, exact, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        self_transport(A, 0.0)


@pytest.mark.parametrize("eps", [1.0, 0.1])
def test_debiased_term_is_the_sinkhorn_divergence_and_zero_for_identical_measures(eps):
    rng = np.random.default_rng(1)
    a, b = torch.tensor(rng.normal(0.0, 0.3, 100)), torch.tensor(rng.normal(0.4, 0.2, 100))
    divergence = (pot_kl_value(a, b, eps) - 0.5 * pot_kl_value(a, a, eps) - 0.5 * pot_kl_value(b, b, eps)).item()
    ours = maximise_semi_dual(a, b, eps, debiased_semi_dual)[0]
    assert divergence > 0.1 and abs(ours - divergence) < 1e-4
    # identical measures: 0, while the paper's term (R + ε) is W_ε(α, α) > 0
    assert abs(maximise_semi_dual(a, a, eps, debiased_semi_dual)[0]) < 1e-6
    assert maximise_semi_dual(a, a, eps)[0] + eps > 0.05


def gaussian_entropic_ot(m1, s1, m2, s2, eps):
    k = 2 * s1 * s2 / eps  # optimal Gaussian plan: ρ / (1 - ρ²) = 2 s1 s2 / ε (Janati et al. 2020)
    rho = (math.sqrt(1 + 4 * k * k) - 1) / (2 * k)
    return (m1 - m2) ** 2 + s1**2 + s2**2 - 2 * rho * s1 * s2 - 0.5 * eps * math.log(1 - rho**2)


def gaussian_divergence(m1, s1, m2, s2, eps):
    return (gaussian_entropic_ot(m1, s1, m2, s2, eps) - 0.5 * gaussian_entropic_ot(m1, s1, m1, s1, eps)
            - 0.5 * gaussian_entropic_ot(m2, s2, m2, s2, eps))


def test_debiasing_removes_the_reward_for_narrow_conditionals():
    """Closed form on Gaussians at ε = 1 and toy1's standardised spread 0.25: the paper's term falls when two
    identical conditionals both narrow (d/ds = 2s(1 - ρ) > 0 per side); the divergence is 0 for every s, is
    stationary in s1 at s1 = s2, and still grows with the gap between the means."""
    eps, s, h = 1.0, 0.25, 1e-5
    assert gaussian_entropic_ot(0, 0.2, 0, 0.2, eps) < gaussian_entropic_ot(0, s, 0, s, eps)
    assert gaussian_divergence(0, 0.2, 0, 0.2, eps) == 0.0 == gaussian_divergence(0, s, 0, s, eps)
    d_s1 = (gaussian_divergence(0, s + h, 0, s, eps) - gaussian_divergence(0, s - h, 0, s, eps)) / (2 * h)
    assert abs(d_s1) < 1e-8
    assert gaussian_divergence(0, s, 0.3, s, eps) > gaussian_divergence(0, s, 0.1, s, eps) > 0
    assert gaussian_divergence(0, s, 0, 0.4, eps) > 0  # different spreads still cost


def test_debiased_term_on_normal_quantiles_is_the_closed_form():
    from scipy.stats import norm

    q = norm.ppf((np.arange(400) + 0.5) / 400)
    a, b = torch.tensor(0.25 * q), torch.tensor(0.3 + 0.35 * q)
    ours = maximise_semi_dual(a, b, 1.0, debiased_semi_dual)[0]
    assert abs(ours - gaussian_divergence(0.0, a.std(unbiased=False).item(), 0.3, b.std(unbiased=False).item(),
                                          1.0)) < 1e-4
