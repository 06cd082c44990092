"""The exact entropic cross term (``GENTLEModule(ot_term="sinkhorn")``, a diagnostic, ours): log-domain Sinkhorn
gives POT's KL-regularised OT value with POT's envelope gradient, equals the semi-dual maximised over a free
potential, and in the module it replaces the potential network (which then never moves) in the generator's loss."""

import numpy as np
import pytest
import torch

from zoo.errors import ZooError
from zoo.gentle import GENTLEModule
from zoo.gentle.entropic import entropic_ot, semi_dual, sinkhorn_potential

from .conftest import maximise_semi_dual, pot_kl_value, tabled_model, trainer

ot = pytest.importorskip("ot", reason="POT (pip install pot) is the peer for entropic OT")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("eps", [1.0, 0.1, 0.01])
def test_exact_term_is_pots_kl_value_with_its_envelope_gradient(eps):
    rng = np.random.default_rng(3)
    a = torch.tensor(rng.normal(0.0, 0.25, 40), requires_grad=True)  # toy1's standardised spread, unequal sizes
    b = torch.tensor(rng.normal(0.3, 0.2, 30), requires_grad=True)
    ours = entropic_ot(a, b, eps, tol=1e-13, max_iter=20000)
    ours.backward()
    a_pot, b_pot = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    ref = pot_kl_value(a_pot, b_pot, eps)
    ref.backward()
    assert abs(ours.item() - ref.item()) < 1e-9
    torch.testing.assert_close(a.grad, a_pot.grad, rtol=0, atol=1e-9)
    torch.testing.assert_close(b.grad, b_pot.grad, rtol=0, atol=1e-9)


def test_exact_term_is_the_maximised_semi_dual_and_its_potential_the_maximiser():
    rng = np.random.default_rng(4)
    a, b = torch.tensor(rng.normal(0.0, 0.3, 200)), torch.tensor(rng.normal(0.5, 0.25, 200))
    dual, v = maximise_semi_dual(a, b, 1.0)  # R at the L-BFGS optimum (R + ε is the entropic value)
    assert abs(entropic_ot(a, b, 1.0, tol=1e-12).item() - (dual + 1.0)) < 1e-4
    g = sinkhorn_potential(a, b, 1.0, tol=1e-12)
    assert semi_dual(a, b, g).item() >= dual - 1e-8  # no potential does better than the solved one
    torch.testing.assert_close(g - g.mean(), v - v.mean(), rtol=0, atol=1e-4)  # unique up to a constant


def test_exact_term_is_batched_float32_at_the_default_tolerance_and_checks_epsilon():
    gen = torch.Generator().manual_seed(0)
    A, B = 0.25 * torch.randn(5, 50, generator=gen), 0.1 + 0.25 * torch.randn(5, 50, generator=gen)
    batched = entropic_ot(A, B, 1.0)
    assert batched.dtype == torch.float32
    exact = torch.stack([entropic_ot(A[i].double(), B[i].double(), 1.0, tol=1e-13, max_iter=5000) for i in range(5)])
    torch.testing.assert_close(batched.double(), exact, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        entropic_ot(A, B, 0.0)


def test_module_with_the_exact_term_leaves_the_potential_and_uses_sinkhorn():
    model, dm, x_i, x_j = tabled_model(6, ot_term="sinkhorn")
    torch.manual_seed(0)
    a = model.T(torch.rand(12, 16), x_i)
    value = model.ot_term(a, x_j)
    torch.manual_seed(0)
    with torch.no_grad():
        a0 = model.T(torch.rand(12, 16), x_i)
        b0 = model.T(torch.rand(12, 16), x_j)
    torch.testing.assert_close(value.detach(), (entropic_ot(a0, b0) - 1.0).mean())
    value.backward()
    assert all(p.grad is None for p in model.potential.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.mapping.parameters())
    start_v = [p.detach().clone() for p in model.potential.parameters()]
    trainer(max_epochs=2, limit_val_batches=0).fit(model, datamodule=dm)
    assert all(torch.equal(p0, p) for p0, p in zip(start_v, model.potential.parameters()))
    with pytest.raises(ZooError, match="ot_term='exact': use 'semidual'"):
        GENTLEModule(ot_term="exact")
    with pytest.raises(ZooError, match="debias=true needs ot_term='semidual'"):
        GENTLEModule(ot_term="sinkhorn", debias=True)
