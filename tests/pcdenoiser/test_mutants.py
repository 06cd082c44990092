"""Oracles added by mutation testing: lambda_max(sym J) when the eigenvalue of largest magnitude is negative (the
shifted second power run), and the centre of an even-sized blur kernel (KAIR's ``p2o``, which the official scripts
use: the kernel rolled by -(size // 2))."""

import numpy as np
import torch

from zoo.pcdenoiser import CircularBlur, sym_jacobian_lambda_max

N = 16


def test_sym_lambda_max_when_the_dominant_eigenvalue_is_negative():
    """sym A has eigenvalues -3 (largest in magnitude), 0.8 (the largest) and the rest in [-0.5, 0.2]: the plain
    power iteration finds -3, and lambda_max = 0.8 comes from the shifted run (eigvalsh is the oracle)."""
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))
    ev = torch.empty(N, dtype=torch.float64).uniform_(-0.5, 0.2, generator=g)
    ev[0], ev[1] = -3.0, 0.8
    W = torch.randn(N, N, generator=g, dtype=torch.float64)
    A = Q @ torch.diag(ev) @ Q.T + 0.2 * (W - W.T)  # a skew part: sym A is the diagonalised S
    lam_true = torch.linalg.eigvalsh(0.5 * (A + A.T))[-1]
    torch.testing.assert_close(lam_true, torch.tensor(0.8, dtype=torch.float64))
    lam = sym_jacobian_lambda_max(lambda x: x @ A.T, torch.zeros(1, N, dtype=torch.float64), iters=300,
                                  u0=torch.ones(1, N, dtype=torch.float64))
    torch.testing.assert_close(lam, lam_true.reshape(1), rtol=0, atol=1e-4)


def test_even_kernel_is_centred_at_size_over_two_as_kairs_p2o():
    """(Kx)[i, j] = sum_{p,q} k[p, q] x[i - p + c, j - q + c] (periodic) with c = size // 2 = 2 for a 4 x 4 kernel;
    an asymmetric kernel, so a centre one pixel off would move the output."""
    k = torch.rand(4, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    k[0] = 0.0
    k = k / k.sum()
    x = torch.rand(1, 1, 9, 11, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    xn, kn = x[0, 0].numpy(), k.numpy()
    c = 4 // 2
    direct = sum(kn[p, q] * np.roll(xn, (p - c, q - c), axis=(0, 1)) for p in range(4) for q in range(4))
    np.testing.assert_allclose(CircularBlur(k, (9, 11)).A(x)[0, 0].numpy(), direct, rtol=1e-10, atol=1e-12)
