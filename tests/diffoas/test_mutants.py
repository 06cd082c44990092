"""Oracles added by mutation testing: each problem's operator is its paper equation (Appendix B.2) on a sine mode,
where the 5-point Laplacian has a closed-form eigenvalue; each problem draws its coefficients and sources from the
laws of Appendix B.2 (power spectra against the exact GRF covariance); DiffOAS combines the basis solutions with
unit-norm weights (Algorithm 1)."""

import numpy as np
import pytest

from zoo.diffoas.generate import PROBLEMS, diffoas_chunks
from zoo.diffoas.grf import expected_power


def _sine_mode(s):
    x = np.linspace(0.0, 1.0, s)[1:-1]
    u = np.outer(np.sin(np.pi * x), np.sin(np.pi * x))  # zero on the boundary
    h = 1.0 / (s - 1)
    lap_eig = -8.0 / h**2 * np.sin(np.pi * h / 2) ** 2  # 5-point Laplacian of the mode, exactly
    return u, lap_eig


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_each_operator_is_its_paper_equation_on_a_sine_mode(name):
    s = 12
    rng = np.random.default_rng(0)
    u, lam = _sine_mode(s)
    q = rng.random((s, s))
    if name == "darcy":  # eq. (8): -div(K grad h), K = 3
        a, expected = 3.0 * np.ones((1, s, s)), -3.0 * lam * u
    elif name == "helmholtz":  # eq. (9): lap(Phi) + k^2 Phi
        a, expected = q[None], lam * u + q[1:-1, 1:-1] * u
    else:  # eq. (10): div(k grad C) + q C, k = 3
        a, expected = np.stack([3.0 * np.ones((s, s)), q]), 3.0 * lam * u + q[1:-1, 1:-1] * u
    got = PROBLEMS[name].operator(a) @ u.ravel()
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-10, atol=1e-10)


def _power_error(x, alpha, tau):
    s = x.shape[-1]
    P, E = (np.abs(np.fft.fft2(x)) ** 2).mean(0), expected_power(s, alpha, tau)
    m = E > 0
    return np.abs(P[m] / E[m] - 1).mean()


# (problem, draw, channel, transform back to the GRF, alpha, tau) as Appendix B.2 states each law
LAWS = [
    ("darcy", "coefficients", 0, np.log, 2.5, 7.0),  # K = exp(GRF(7, 2.5))
    ("darcy", "source", None, np.log, 2.5, 7.0),  # f = exp(GRF(7, 2.5))
    ("helmholtz", "coefficients", 0, lambda v: 10 * v, 2.0, 3.0),  # k^2 = GRF(3, 2) / 10
    ("helmholtz", "source", None, lambda v: 10 * v, 2.0, 3.0),  # S = GRF(3, 2) / 10
    ("diffusion", "coefficients", 0, lambda v: np.log(v / 10), 2.0, 3.0),  # k = 10 exp(GRF(3, 2))
    ("diffusion", "source", None, lambda v: v, 2.0, 3.0),  # f = GRF(3, 2)
]


@pytest.mark.parametrize("name, draw, channel, back, alpha, tau", LAWS)
def test_coefficients_and_sources_follow_the_papers_laws(name, draw, channel, back, alpha, tau):
    s, n = 16, 2000
    v = getattr(PROBLEMS[name], draw)(np.random.default_rng(1), n, s)
    x = back(v if channel is None else v[:, channel])
    assert _power_error(x, alpha, tau) < 0.05  # each bin averages 2000 chi^2_2 draws: ~2% noise
    for wrong in (10.0 * x, 0.1 * x):  # a scale error of 10 would be far outside
        assert _power_error(wrong, alpha, tau) > 0.5


def test_diffusion_reaction_is_uniform_on_0_1():
    q = PROBLEMS["diffusion"].coefficients(np.random.default_rng(2), 500, 16)[:, 1]
    assert q.min() >= 0 and q.max() <= 1
    assert abs(q.mean() - 0.5) < 0.01 and abs(q.var() - 1 / 12) < 0.005


def test_diffoas_combines_the_basis_with_unit_norm_weights():
    s, n = 12, 10
    U = np.random.default_rng(0).standard_normal((5, n * n))
    _, _, u = next(diffoas_chunks(PROBLEMS["darcy"], U, 16, s, np.random.default_rng(1), noise_scale=0.0))
    w, *_ = np.linalg.lstsq(U.T, u.T, rcond=None)  # u = w @ U exactly: recover w
    np.testing.assert_allclose(w.T @ U, u, atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(w, axis=0), 1.0, rtol=1e-10)
