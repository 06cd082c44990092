"""The GRF sampler has the spectrum of sigma^2 (-lap + tau^2)^(-alpha) (Li et al.'s sampler used by the paper)."""

import numpy as np
import pytest

from zoo.diffoas.grf import expected_power, sample_grf, sqrt_eigenvalues
from zoo.errors import ZooError


def _empirical_power(x):
    return (np.abs(np.fft.fft2(x)) ** 2).mean(0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("alpha,tau", [(2.5, 7.0), (2.0, 3.0)])
def test_grf_power_spectrum_matches_the_covariance(alpha, tau, dtype):
    s, n = 16, 3000
    x = sample_grf(np.random.default_rng(0), n, s, alpha, tau, dtype=dtype)
    P, E = _empirical_power(x), expected_power(s, alpha, tau)
    m = E > 0
    rel = np.abs(P[m] / E[m] - 1)
    # each bin is an average of 3000 (scaled) chi^2_2 draws: std ~ 1/sqrt(3000) = 1.8%
    assert rel.mean() < 0.03 and rel.max() < 0.12
    # mean mode removed (up to the round-off of the precision drawn in)
    assert P[0, 0] < (1e-20 if dtype == "float64" else 1e-10) * E.max()
    # the pointwise variance is the total power / s^4 (Parseval)
    np.testing.assert_allclose(x.var(), E.sum() / s**4, rtol=0.05)


def test_spectrum_test_can_fail_for_the_wrong_parameters():
    s = 16
    x = sample_grf(np.random.default_rng(0), 3000, s, 2.5, 7.0)
    P = _empirical_power(x)
    for alpha, tau in [(2.5, 5.0), (3.0, 7.0), (2.5, 10.0)]:
        E = expected_power(s, alpha, tau)
        m = E > 0
        assert np.abs(P[m] / E[m] - 1).mean() > 0.3


def test_real_and_imaginary_parts_are_independent_fields():
    # both halves of one complex draw are used as samples; they must be uncorrelated
    x = sample_grf(np.random.default_rng(1), 4000, 8, 2.0, 3.0)
    re, im = x[:2000].reshape(2000, -1), x[2000:].reshape(2000, -1)
    corr = np.corrcoef(re[:, 9], im[:, 9])[0, 1]
    assert abs(corr) < 0.1
    assert sample_grf(np.random.default_rng(1), 5, 8, 2.0, 3.0).shape == (5, 8, 8)


def test_official_eigenvalue_formula():
    lam = sqrt_eigenvalues(8, 2.5, 7.0)
    sigma = 7.0 ** (0.5 * (2 * 2.5 - 2))
    k = 3  # wavenumber (3, 0)
    assert lam[k, 0] == pytest.approx(64 * np.sqrt(2) * sigma * (4 * np.pi**2 * 9 + 49) ** (-1.25))
    assert lam[8 - k, 0] == pytest.approx(lam[k, 0])  # symmetric in k -> -k


def test_bad_grf_parameters():
    with pytest.raises(ZooError, match="alpha"):
        sample_grf(np.random.default_rng(0), 1, 8, alpha=0.5, tau=3.0)
    with pytest.raises(ZooError, match="dtype"):
        sample_grf(np.random.default_rng(0), 1, 8, alpha=2.5, tau=3.0, dtype="float16")


def test_draws_are_reproducible_from_the_numpy_generator():
    a = sample_grf(np.random.default_rng(5), 3, 8, 2.5, 7.0)
    b = sample_grf(np.random.default_rng(5), 3, 8, 2.5, 7.0)
    c = sample_grf(np.random.default_rng(6), 3, 8, 2.5, 7.0)
    assert a.dtype == np.float64 and np.array_equal(a, b) and not np.allclose(a, c)
    # float32 draws are exactly representable in single precision (upcast for the float64 pipeline)
    assert np.array_equal(a, a.astype(np.float32).astype(np.float64))
