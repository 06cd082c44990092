"""Jacobian power iterations: against the SVD / eigendecomposition of a linear map, and against deepinv's penalty."""

import pytest
import torch

from zoo.errors import ZooError
from zoo.pcdenoiser import jacobian_spectral_norm_sq, spc_operator, spc_penalty, sym_jacobian_lambda_max
from zoo.pcdenoiser.denoisers import NoiseMapDnCNN

N = 64


def _linear(A: torch.Tensor):
    """f(x) = A x on flat (B, N) inputs (a linear 'denoiser' with Jacobian A everywhere)."""
    return lambda x: x @ A.T


def _random_map(seed: int, kind: str) -> torch.Tensor:
    """A = S + W: S symmetric with a spectral gap (eigenvalues in [-0.5, 0.6] and a top one of 0.9 if `pc`, 1.3
    otherwise), W skew (so sym A = S, yet ||A|| may exceed 1 in the PC case)."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))
    ev = torch.empty(N, dtype=torch.float64).uniform_(-0.5, 0.6, generator=g)
    ev[0] = 0.9 if kind == "pc" else 1.3
    W = torch.randn(N, N, generator=g, dtype=torch.float64) / N**0.5
    return Q @ torch.diag(ev) @ Q.T + 0.3 * (W - W.T)


@pytest.mark.parametrize("seed", [0, 1])
def test_power_iteration_matches_svd_on_a_linear_map(seed):
    g = torch.Generator().manual_seed(seed)
    # a clear spectral gap so 10..60 power steps converge far below 1e-3
    U, _ = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))
    s = torch.linspace(0.1, 1.0, N, dtype=torch.float64)
    s[-1] = 1.7
    A = U @ torch.diag(s) @ V.T
    x = torch.randn(2, N, generator=g, dtype=torch.float64)
    est = jacobian_spectral_norm_sq(_linear(A), x, iters=30, create_graph=False)
    sigma_max_sq = torch.linalg.svdvals(A)[0] ** 2
    torch.testing.assert_close(est, sigma_max_sq.expand(2), rtol=1e-3, atol=0)


@pytest.mark.parametrize("kind", ["pc", "not_pc"])
def test_pc_and_kspc_verdicts_agree_with_the_spectrum(kind):
    A = _random_map(0, kind)
    if kind == "pc":
        assert torch.linalg.svdvals(A)[0] > 1  # PC yet expansive: the case Ishikawa is for
    x = torch.zeros(1, N, dtype=torch.float64)
    S = 0.5 * (A + A.T)
    lam_true = torch.linalg.eigvalsh(S)[-1]
    lam = sym_jacobian_lambda_max(_linear(A), x, iters=250, u0=torch.ones(1, N, dtype=torch.float64))
    torch.testing.assert_close(lam, lam_true.reshape(1), rtol=1e-3, atol=1e-3)
    assert bool(lam <= 1) == bool(lam_true <= 1) == (kind == "pc")
    k = 0.9
    M = k * torch.eye(N, dtype=torch.float64) + (1 - k) * A
    norm_true = torch.linalg.svdvals(M)[0] ** 2
    norm = jacobian_spectral_norm_sq(spc_operator(_linear(A), k), x, iters=250, create_graph=False,
                                     u0=torch.ones(1, N, dtype=torch.float64))
    torch.testing.assert_close(norm, norm_true.reshape(1), rtol=1e-3, atol=0)
    assert bool(norm <= 1) == bool(norm_true <= 1)


def test_kspc_is_weaker_than_nonexpansive_and_implies_pc():
    """||kI + (1-k)A|| <= 1 implies sym A <= I (k-SPC => PC), while A itself may be expansive."""
    A = torch.tensor([[0.0, -0.2], [0.2, 0.0]], dtype=torch.float64) + 0.9 * torch.eye(2, dtype=torch.float64)
    M = 0.9 * torch.eye(2, dtype=torch.float64) + 0.1 * A
    assert torch.linalg.svdvals(M)[0] <= 1
    assert torch.linalg.eigvalsh(0.5 * (A + A.T))[-1] <= 1


def test_residual_constraint_uses_i_minus_d():
    A = _random_map(3, "pc")
    x = torch.zeros(1, N, dtype=torch.float64)
    k = 0.9
    M = k * torch.eye(N, dtype=torch.float64) + (1 - k) * (torch.eye(N, dtype=torch.float64) - A)
    norm = jacobian_spectral_norm_sq(spc_operator(_linear(A), k, "residual"), x, iters=250, create_graph=False,
                                     u0=torch.ones(1, N, dtype=torch.float64))
    torch.testing.assert_close(norm, (torch.linalg.svdvals(M)[0] ** 2).reshape(1), rtol=1e-3, atol=0)


def test_penalty_equals_deepinv_jacobian_spectral_norm():
    """Same network, input and start vector: our ||J||^2 is deepinv's ||J|| squared (tol 0: all 10 steps run)."""
    from deepinv.loss import JacobianSpectralNorm

    torch.manual_seed(0)
    net = NoiseMapDnCNN(1, 8, 3).double()
    x = torch.rand(1, 1, 16, 16, dtype=torch.float64)
    f = spc_operator(lambda z: net(z, 0.1), 0.9)
    torch.manual_seed(123)
    ours = jacobian_spectral_norm_sq(f, x, iters=10)
    (g_ours,) = torch.autograd.grad(ours.sum(), net.body[0].weight)
    xr = x.clone().requires_grad_(True)
    y = f(xr)
    torch.manual_seed(123)
    theirs = JacobianSpectralNorm(max_iter=10, tol=0.0, eval_mode=False)(y, xr) ** 2
    (g_theirs,) = torch.autograd.grad(theirs, net.body[0].weight)
    torch.testing.assert_close(ours[0], theirs, rtol=1e-12, atol=0)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-9, atol=1e-15)  # differentiable in the weights, alike


def test_penalty_hinge_and_clip():
    v = torch.tensor([0.1, 0.95, 5e3])
    torch.testing.assert_close(spc_penalty(v, eps=0.2), torch.tensor([0.8, 0.95, 1e3]).mean())


def test_bad_arguments_are_refused():
    f = _linear(torch.eye(3, dtype=torch.float64))
    with pytest.raises(ZooError, match="power iterations"):
        jacobian_spectral_norm_sq(f, torch.zeros(1, 3, dtype=torch.float64), iters=0)
    with pytest.raises(ZooError, match="0 <= k < 1"):
        spc_operator(f, k=1.0)
    with pytest.raises(ZooError, match="constrain"):
        spc_operator(f, 0.9, "both")
