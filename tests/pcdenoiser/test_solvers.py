"""PnP-Ishikawa vs Picard on a pseudo-contractive, expansive affine map; the three PnP operators; bad exponents."""

import pytest
import torch

from zoo.errors import ZooError
from zoo.pcdenoiser import check_exponents, ishikawa_steps, make_operator, picard, pnp_ishikawa

R = torch.tensor([[0.0, -2.0], [2.0, 0.0]], dtype=torch.float64)  # sym R = 0 (PC), ||R|| = 2 (expansive)
B = torch.tensor([1.0, -0.5], dtype=torch.float64)
X_STAR = torch.linalg.solve(torch.eye(2, dtype=torch.float64) - R, B)  # the fixed point of T


def T_affine(u: torch.Tensor, k: int) -> torch.Tensor:
    return u @ R.T + B


def test_picard_diverges_and_ishikawa_converges_on_an_expansive_pc_map():
    u0 = torch.zeros(1, 2, dtype=torch.float64)
    pic = picard(T_affine, u0, 50)
    # |u_k - x*| = 2^k |x*| (R is 2 x a rotation): about 1e15 after 50 steps
    assert float(torch.linalg.vector_norm(pic.u - X_STAR)) == pytest.approx(2.0**50 * float(X_STAR.norm()), rel=1e-9)
    ish = pnp_ishikawa(T_affine, u0, 2000, a=0.8, b=0.15)
    err = float(torch.linalg.vector_norm(ish.u - X_STAR) ** 2)
    assert err < 1e-20
    assert float(ish.residuals[-1]) < float(ish.residuals[10])


def test_ishikawa_steps_and_a_hand_computed_first_iterate():
    assert ishikawa_steps(0, 0.8, 0.15) == (1.0, 1.0)
    a, b = ishikawa_steps(3, 0.3, 0.15)
    assert a == pytest.approx(4**-0.3) and b == pytest.approx(4**-0.15)
    u0 = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    run = pnp_ishikawa(T_affine, u0, 2, a=0.8, b=0.15)
    u, (al, be) = T_affine(T_affine(u0, 0), 0), ishikawa_steps(1, 0.8, 0.15)  # k = 0: alpha = beta = 1
    v = (1 - be) * u + be * T_affine(u, 1)
    torch.testing.assert_close(run.u, (1 - al) * u + al * T_affine(v, 1), rtol=1e-15, atol=0)


def test_the_official_poisson_deblurring_outer_step_uses_beta_twice():
    u0 = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    run = pnp_ishikawa(T_affine, u0, 2, a=0.8, b=0.15, outer="beta")
    u, (_, be) = T_affine(T_affine(u0, 0), 0), ishikawa_steps(1, 0.8, 0.15)  # k = 0: a step of 1 either way
    v = (1 - be) * u + be * T_affine(u, 1)
    torch.testing.assert_close(run.u, (1 - be) * u + be * T_affine(v, 1), rtol=1e-15, atol=0)
    with pytest.raises(ZooError, match="outer step"):
        pnp_ishikawa(T_affine, u0, 2, a=0.8, b=0.15, outer="gamma")


@pytest.mark.parametrize("a,b,match", [(0.15, 0.3, "0 < b < a"), (0.3, 0.3, "0 < b < a"), (0.8, 0.3, "a \\+ b <= 1"),
                                       (0.5, 0.0, "0 < b < a")])
def test_bad_exponents_are_refused(a, b, match):
    with pytest.raises(ZooError, match=match):
        check_exponents(a, b)
    with pytest.raises(ZooError, match=match):
        pnp_ishikawa(T_affine, torch.zeros(1, 2, dtype=torch.float64), 3, a=a, b=b)


def test_operators_of_the_three_variants():
    g = torch.Generator().manual_seed(0)
    u = torch.rand(1, 1, 6, 6, generator=g, dtype=torch.float64)
    f = torch.rand(1, 1, 6, 6, generator=g, dtype=torch.float64)
    calls = []

    def D(x, s):
        calls.append(s)
        return 0.5 * x + s

    grad = lambda x: x - f  # noqa: E731
    prox = lambda z, lam: (z + lam * f) / (1 + lam)  # noqa: E731
    torch.testing.assert_close(make_operator("gd", D, 0.1, 0.3, grad_F=grad)(u, 0), D(u, 0.1) - 0.3 * grad(u))
    torch.testing.assert_close(make_operator("fbs", D, 0.1, 0.3, grad_F=grad, inner_clamp=None)(u, 0),
                               D(u - 0.3 * grad(u), 0.1))
    torch.testing.assert_close(make_operator("fbs", D, 0.1, 5.0, grad_F=grad)(u, 0),
                               D((u - 5.0 * grad(u)).clamp(0, 1), 0.1))  # the official clip before D
    torch.testing.assert_close(make_operator("hqs", D, 0.1, 0.3, prox_F=prox)(u, 0), D(prox(u, 0.3), 0.1))
    # the official HQS schedule: iteration k uses lam / 1.02^k and sigma / 1.02^(k/2)
    calls.clear()
    out = make_operator("hqs", D, 0.1, 0.3, prox_F=prox, decay=1.02)(u, 4)
    torch.testing.assert_close(out, D(prox(u, 0.3 / 1.02**4), 0.1 / 1.02**2))
    assert calls[0] == pytest.approx(0.1 / 1.02**2)


def test_operator_refusals():
    D = lambda x, s: x  # noqa: E731
    with pytest.raises(ZooError, match="grad_F"):
        make_operator("gd", D, 0.1, 1.0)
    with pytest.raises(ZooError, match="prox_F"):
        make_operator("hqs", D, 0.1, 1.0)
    with pytest.raises(ZooError, match="lambda"):
        make_operator("fbs", D, 0.1, 0.0, grad_F=D)
    with pytest.raises(ZooError, match="unknown PnP solver"):
        make_operator("admm", D, 0.1, 1.0, grad_F=D)
