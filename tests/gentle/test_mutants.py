"""Oracles added by mutation testing: which covariates the generator's OT term pairs, and that its gradient reaches θ
through both generated conditionals (R_i depends on θ through T(u, x_i) and T(u', x_j))."""

import lightning as L
import numpy as np
import torch

from zoo.gentle import GENTLEModule
from zoo.gentle.entropic import semi_dual
from zoo.gentle.neighbours import mst_neighbours

from .conftest import tabled_model, tiny_data, trainer


def test_generator_step_pairs_each_covariate_with_its_mst_neighbour():
    """In a training step the generator draws T(u, x_i) and then T(u', x_j) with j = j(i), the MST neighbour
    (recomputed here from the raw covariates), not x_i itself."""
    L.seed_everything(0, verbose=False)
    model = GENTLEModule(x_dim=3, n_u=8, n_eval_samples=10)
    dm = tiny_data()
    dm.setup("fit")
    x_distinct = dm.train_groups()[0]
    expected = torch.as_tensor(x_distinct[mst_neighbours(x_distinct)], dtype=torch.float32)
    calls = []
    original_T = model.T

    def recording_T(u, x):
        calls.append(x.detach().clone())
        return original_T(u, x)

    model.T = recording_T
    trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0).fit(model, datamodule=dm)
    x_i, x_j = calls[0], calls[1]  # the generator step: T(u, x_i), then the partners' draws inside the OT term
    train_x = torch.as_tensor(x_distinct, dtype=torch.float32)
    rows = [int(np.flatnonzero((train_x == r).all(1).numpy())[0]) for r in x_i]
    torch.testing.assert_close(x_j, expected[rows], rtol=0, atol=0)
    assert not torch.equal(x_j, x_i)


def test_ot_term_gradient_reaches_theta_through_both_conditionals():
    """∇_θ of the generator's R equals the gradient of the semi-dual built by hand with b = T_θ(u', x_j) kept in
    the graph (both the samples b and the potential's input v(b, x_j) depend on θ)."""
    model, _, x_i, x_j = tabled_model(4)
    theta = list(model.mapping.parameters())

    torch.manual_seed(0)
    u = torch.rand(12, 16)
    a = model.T(u, x_i)
    got = torch.autograd.grad(model.ot_term(a, x_j), theta)

    torch.manual_seed(0)
    u = torch.rand(12, 16)
    a = model.T(u, x_i)
    b = model.T(torch.rand_like(a), x_j)
    want = torch.autograd.grad(semi_dual(a, b, model.v(b, x_j), model.hparams.epsilon).mean(), theta)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    # and the path through b is not negligible: without it the gradient differs
    torch.manual_seed(0)
    u = torch.rand(12, 16)
    a = model.T(u, x_i)
    b = model.T(torch.rand_like(a), x_j).detach()
    only_a = torch.autograd.grad(semi_dual(a, b, model.v(b, x_j), model.hparams.epsilon).mean(), theta)
    assert not all(torch.allclose(g, w) for g, w in zip(got, only_a))
