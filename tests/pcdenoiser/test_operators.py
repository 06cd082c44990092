"""Forward models and data terms: FFT blur (adjoint, deepinv's BlurFFT), decimation, Poisson prox, the Poisson-
deblurring prox by inner ADMM, gradients, and the refusals of bad kernels, sigma units and observations; PSNR / SSIM
against scikit-image."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize, minimize_scalar

from zoo.errors import ZooError
from zoo.pcdenoiser import BlurDownsample, CircularBlur, check_kernel, least_squares_grad, poisson_prox
from zoo.pcdenoiser.denoisers import check_sigma
from zoo.pcdenoiser.metrics import psnr, ssim
from zoo.pcdenoiser.operators import PoissonBlurProx, check_poisson_observation
from zoo.pcdenoiser.restore import PnPConfig, restore


def _kernel(size: int, seed: int = 0) -> torch.Tensor:
    k = torch.rand(size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return k / k.sum()


def _dot(a, b):
    return float((a * b).sum())


@pytest.mark.parametrize("op_kind", ["blur", "blur_down"])
def test_adjoint_identity(op_kind):
    g = torch.Generator().manual_seed(1)
    k = _kernel(5)
    op = CircularBlur(k, (12, 16)) if op_kind == "blur" else BlurDownsample(k, (12, 16), 2)
    x = torch.randn(2, 1, 12, 16, generator=g, dtype=torch.float64)
    y = torch.randn(op.A(x).shape, generator=g, dtype=torch.float64)
    assert _dot(op.A(x), y) == pytest.approx(_dot(x, op.A_adjoint(y)), rel=1e-12)


def test_blur_matches_deepinv_blur_fft_and_a_direct_circular_convolution():
    from deepinv.physics import BlurFFT

    k = torch.zeros(5, 5, dtype=torch.float64)
    k[1:4, 0:5] = _kernel(5)[1:4]  # an asymmetric kernel: catches a flipped or shifted centre
    k = k / k.sum()
    x = torch.rand(1, 1, 10, 12, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ours = CircularBlur(k, (10, 12))
    phys = BlurFFT(img_size=(1, 10, 12), filter=k[None, None], device="cpu")
    torch.testing.assert_close(ours.A(x), phys.A(x), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.A_adjoint(x), phys.A_adjoint(x), rtol=1e-10, atol=1e-12)
    # direct: (Kx)[i, j] = sum_{p,q} k[p, q] x[i - p + 2, j - q + 2] (convolution, centre 2, periodic)
    xn, kn = x[0, 0].numpy(), k.numpy()
    direct = sum(kn[p, q] * np.roll(xn, (p - 2, q - 2), axis=(0, 1)) for p in range(5) for q in range(5))
    np.testing.assert_allclose(ours.A(x)[0, 0].numpy(), direct, rtol=1e-10, atol=1e-12)


def test_least_squares_gradient_equals_autograd():
    g = torch.Generator().manual_seed(3)
    op = BlurDownsample(_kernel(3), (8, 8), 2)
    f = torch.randn(1, 1, 4, 4, generator=g, dtype=torch.float64)
    u = torch.randn(1, 1, 8, 8, generator=g, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(0.5 * ((op.A(u) - f) ** 2).sum(), u)
    torch.testing.assert_close(least_squares_grad(op, u.detach(), f), auto, rtol=1e-12, atol=1e-14)


def test_poisson_prox_is_the_numeric_minimiser():
    rng = np.random.default_rng(0)
    for _ in range(6):
        z, f, lam = rng.uniform(-0.5, 1.5), rng.uniform(0.0, 2.0), rng.uniform(0.05, 2.0)
        obj = lambda u, z=z, f=f, lam=lam: 0.5 * (u - z) ** 2 + lam * (u - f * np.log(u))  # noqa: E731
        num = minimize_scalar(obj, bounds=(1e-12, 10.0), method="bounded", options={"xatol": 1e-12}).x
        ours = float(poisson_prox(torch.tensor(z, dtype=torch.float64), torch.tensor(f, dtype=torch.float64), lam))
        assert ours == pytest.approx(num, abs=1e-7)


def _poisson_blur_problem(size: int = 8, seed: int = 5):
    """A small prox problem with an interior minimiser: z, f > 0 and a positive 3x3 kernel (so K v > 0)."""
    g = torch.Generator().manual_seed(seed)
    op = CircularBlur(_kernel(3, seed), (size, size))
    z = 0.2 + 0.8 * torch.rand(1, 1, size, size, generator=g, dtype=torch.float64)
    f = 0.3 + torch.rand(1, 1, size, size, generator=g, dtype=torch.float64)
    return op, z, f


def _prox_objective(op, z, f, lam):
    """1/2 ||v - z||^2 + lam sum(K v - f log K v) and its gradient, for scipy."""
    def obj(flat):
        v = torch.from_numpy(flat).view(z.shape)
        kv = op.A(v)
        val = 0.5 * ((v - z) ** 2).sum() + lam * (kv - f * torch.log(kv)).sum()
        return float(val), (v - z + lam * op.A_adjoint(1 - f / kv)).flatten().numpy()
    return obj


def test_poisson_blur_prox_admm_is_the_numeric_minimiser():
    op, z, f = _poisson_blur_problem()
    lam = 0.7
    res = minimize(_prox_objective(op, z, f, lam), z.flatten().numpy(), jac=True, method="L-BFGS-B",
                   bounds=[(1e-9, None)] * z.numel(), options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 5000})
    assert res.x.min() > 1e-3  # interior: the bounds are inactive
    ours = PoissonBlurProx(op, f, rho=2.0, inner_iters=100)(z, lam)  # the official rho, run to convergence
    np.testing.assert_allclose(ours.flatten().numpy(), res.x, atol=1e-8)
    # its optimality condition v - z + lam K^T (1 - f / K v) = 0 holds to round-off
    grad = ours - z + lam * op.A_adjoint(1 - f / op.A(ours))
    assert float(grad.abs().max()) < 1e-12
    # the official 10 inner steps from the cold start f are already close; a warm-started second call is closer
    prox10 = PoissonBlurProx(op, f, rho=2.0, inner_iters=10)
    err1 = float((prox10(z, lam) - ours).abs().max())
    err2 = float((prox10(z, lam) - ours).abs().max())
    assert err2 < err1 < 1e-2


def test_poisson_blur_prox_with_the_identity_kernel_is_the_closed_form_prox():
    _, z, f = _poisson_blur_problem()
    identity = CircularBlur(torch.ones(1, 1, dtype=torch.float64), tuple(z.shape[-2:]))
    for lam in (0.05, 0.7, 3.0):
        ours = PoissonBlurProx(identity, f, rho=2.0, inner_iters=100)(z, lam)
        torch.testing.assert_close(ours, poisson_prox(z, f, lam), rtol=0, atol=1e-12)


def test_poisson_blur_prox_on_the_0_255_scale_is_255_times_the_unit_scale():
    """The official script runs on 0..255 with lam_255; ours in [0, 1] with lam_255 / 255 and the same rho."""
    op, z, f = _poisson_blur_problem()
    lam_255 = 700.0 / 4  # (official 700 at peak 100; a smaller value keeps this small problem interior)
    unit = PoissonBlurProx(op, f, rho=2.0, inner_iters=10)(z, lam_255 / 255)
    scaled = PoissonBlurProx(op, 255 * f, rho=2.0, inner_iters=10)(255 * z, lam_255)
    torch.testing.assert_close(scaled, 255 * unit, rtol=1e-10, atol=1e-9)


def test_poisson_blur_prox_refusals():
    op, z, f = _poisson_blur_problem()
    with pytest.raises(ZooError, match="Poisson observations"):
        PoissonBlurProx(op, -f)
    with pytest.raises(ZooError, match="rho must be > 0"):
        PoissonBlurProx(op, f, rho=0.0)
    with pytest.raises(ZooError, match="at least 1 iteration"):
        PoissonBlurProx(op, f, inner_iters=0)
    with pytest.raises(ZooError, match="lam > 0"):
        PoissonBlurProx(op, f)(z, 0.0)


def test_psnr_and_ssim_equal_scikit_image():
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    g = torch.Generator().manual_seed(4)
    ref = torch.rand(2, 1, 32, 32, generator=g, dtype=torch.float64)
    est = (ref + 0.1 * torch.randn(ref.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    r8, e8 = [(t.clamp(0, 1) * 255).round().numpy() for t in (ref, est)]
    for i in range(2):
        sk_psnr = peak_signal_noise_ratio(r8[i, 0], e8[i, 0], data_range=255)
        sk_ssim = structural_similarity(r8[i, 0], e8[i, 0], data_range=255, gaussian_weights=True, sigma=1.5,
                                        use_sample_covariance=False)
        # torchmetrics takes the log of data_range in float32: ~1e-6 dB off a float64 formula
        assert float(psnr(est, ref)[i]) == pytest.approx(sk_psnr, abs=1e-5)
        assert float(ssim(est, ref)[i]) == pytest.approx(sk_ssim, abs=1e-6)


def test_bad_kernels_sigmas_and_observations_are_refused():
    with pytest.raises(ZooError, match="sum to 1"):
        check_kernel(torch.ones(3, 3), (8, 8))
    with pytest.raises(ZooError, match="larger than the image"):
        CircularBlur(torch.full((9, 9), 1 / 81), (8, 8))
    with pytest.raises(ZooError, match="non-negative"):
        check_kernel(torch.tensor([[1.5, -0.5]]), (8, 8))
    with pytest.raises(ZooError, match=r"\[0, 1\] units"):
        check_sigma(12.75)
    with pytest.raises(ZooError, match="Poisson observations"):
        check_poisson_observation(torch.tensor([0.2, -0.1]))
    with pytest.raises(ZooError, match="Poisson observations"):
        restore("poisson", -torch.ones(1, 1, 4, 4), lambda x, s: x, PnPConfig(solver="hqs", a=0.8, iters=1))
    with pytest.raises(ZooError, match="scale factor"):
        BlurDownsample(_kernel(3), (9, 9), 2)
    poisson_deblur = PnPConfig(solver="hqs", a=0.8, iters=1)
    with pytest.raises(ZooError, match="Poisson observations"):
        restore("poisson_deblur", -torch.ones(1, 1, 4, 4), lambda x, s: x, poisson_deblur, kernel=_kernel(3))
    with pytest.raises(ZooError, match="needs a blur kernel"):
        restore("poisson_deblur", torch.ones(1, 1, 4, 4), lambda x, s: x, poisson_deblur)
    with pytest.raises(ZooError, match="use solver 'hqs'"):
        restore("poisson_deblur", torch.ones(1, 1, 4, 4), lambda x, s: x, PnPConfig(solver="gd"), kernel=_kernel(3))


def test_poisson_deblurring_with_an_identity_denoiser_reaches_the_maximum_likelihood_image():
    """With D = I and an invertible K, u = K^-1 f (the maximum-likelihood image: K^T (1 - f / K u) = 0) is a fixed
    point of T = prox_{lam F} even with the inexact 10-step inner ADMM (x = f = K u, b stays 0). Picard (linear
    rate) reaches it; Ishikawa's decaying steps (official a, b = 0.8, 0.15) approach it."""
    _, _, f = _poisson_blur_problem(seed=6)
    k = 0.2 * _kernel(3, 6)
    k[1, 1] += 0.8  # a well-conditioned blur (|otf| >= 0.6)
    op = CircularBlur(k, tuple(f.shape[-2:]))
    cfg = PnPConfig(solver="hqs", a=0.8, b=0.15, lam=1.0, iters=60)
    pic, _ = restore("poisson_deblur", f, lambda x, s: x, PnPConfig(**{**cfg.__dict__, "scheme": "picard"}), kernel=k)
    assert float(op.A_adjoint(1 - f / op.A(pic.u)).abs().max()) < 1e-10
    torch.testing.assert_close(op.A(pic.u), f, rtol=0, atol=1e-10)
    ish, _ = restore("poisson_deblur", f, lambda x, s: x, cfg, kernel=k)
    assert float((ish.u - pic.u).abs().max()) < 0.1 * float((f - pic.u).abs().max())
