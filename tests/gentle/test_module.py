"""Lightning modules: MLPM layout, one smoothed-GDA step through Lightning, the λ = 0 ablation, the CWGAN schedule,
the pooled marginal, Hub round trip, checkpointed anchors and one-line errors."""

import lightning as L
import numpy as np
import pytest
import torch

from zoo.errors import ZooError
from zoo.gentle import CWGANModule, GENTLEModule, NearestNeighboursModule, PooledMarginalModule
from zoo.gentle.nets import MLPM

from .conftest import fit_and_test, tabled_model, tiny_data, trainer


def test_mlpm_layout_and_initialisation():
    net = MLPM(4)
    shapes = [tuple(m.weight.shape) for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert shapes == [(256, 4), (256, 260), (128, 256), (128, 132), (64, 128), (64, 68), (1, 64)]
    for m in net.modules():
        if isinstance(m, torch.nn.Linear):
            fan_in, fan_out = m.weight.shape[1], m.weight.shape[0]
            assert m.weight.abs().max() <= (6 / (fan_in + fan_out)) ** 0.5 and (m.bias == 0).all()
    x = torch.randn(5, 4)
    assert net(x).shape == (5,)
    assert torch.allclose(net(x)[2], net(x[2:3])[0])  # rows are independent


def test_one_lightning_step_is_one_smoothed_gda_step():
    L.seed_everything(0, verbose=False)
    model = GENTLEModule(x_dim=3, n_u=16, n_eval_samples=20)
    start_t = [p.detach().clone() for p in model.mapping.parameters()]
    start_v = [p.detach().clone() for p in model.potential.parameters()]
    trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0).fit(model, datamodule=tiny_data())
    beta, mu = model.hparams.beta, model.hparams.mu
    for p0, p, a in zip(start_t, model.mapping.parameters(), model.anchors["mapping"]):
        torch.testing.assert_close(a, (1 - beta) * p0 + beta * p.detach())  # anchors started at the initial weights
    for p0, p, a in zip(start_v, model.potential.parameters(), model.anchors["potential"]):
        torch.testing.assert_close(a, (1 - mu) * p0 + mu * p.detach())
    # one Adam step: every weight with a gradient moves by at most lr
    moved = torch.cat([(p.detach() - p0).abs().flatten() for p0, p in zip(start_t, model.mapping.parameters())])
    assert 0 < moved.max() <= model.hparams.lr_mapping * (1 + 1e-5)
    assert model.neighbour.shape == (12,) and (model.neighbour != torch.arange(12)).all()
    assert model.cdf_grid.shape == (12, 1000)


def test_without_ot_the_potential_never_moves_and_training_fits_the_kde():
    L.seed_everything(1, verbose=False)
    # bandwidth 1: wide KDE CDFs, so the fit term has a gradient from the start (narrow ones are flat far away)
    model = GENTLEModule(x_dim=3, lambda_ot=0.0, n_u=64, n_eval_samples=20, lr_mapping=1e-2, bandwidth=1.0)
    start_v = [p.detach().clone() for p in model.potential.parameters()]
    dm = tiny_data()
    dm.setup("fit")
    model.build_tables(*dm.train_groups())

    def fit_loss():
        with torch.no_grad():
            u = torch.rand(12, 256)
            from zoo.gentle.kde import interpolate_cdf
            return (u - interpolate_cdf(model.cdf_grid, model.cdf_values, model.T(u, model.train_x))).square().mean()

    before = fit_loss().item()
    trainer(max_epochs=25, limit_val_batches=0).fit(model, datamodule=dm)
    assert all(torch.equal(p0, p) for p0, p in zip(start_v, model.potential.parameters()))
    assert fit_loss().item() < 0.6 * before  # 25 epochs of the fit term alone: about half the initial loss
    assert "ablation-no-ot" in model.card_metadata()["tags"]


def test_debias_changes_only_the_generators_gradient():
    """debias=True subtracts the self terms ½ W_ε(α_i, α_i) + ½ W_ε(β_j, β_j), which depend on θ only: the
    potential's gradient stays the paper's, the generator's changes, and the value is the Sinkhorn-divergence form."""
    from zoo.gentle.entropic import self_transport, semi_dual

    model, dm, x_i, x_j = tabled_model(5)

    def term(debias, through_generator):
        model.hparams.debias = debias
        model.zero_grad()
        torch.manual_seed(0)
        a = model.T(torch.rand(12, 16), x_i)
        value = model.ot_term(a if through_generator else a.detach(), x_j, through_generator=through_generator)
        value.backward()
        players = model.mapping if through_generator else model.potential
        return value.detach(), torch.cat([p.grad.flatten() for p in players.parameters()])

    r_paper, g_v_paper = term(False, False)
    r_debiased, g_v_debiased = term(True, False)
    torch.testing.assert_close(g_v_debiased, g_v_paper)
    torch.manual_seed(0)
    with torch.no_grad():
        a = model.T(torch.rand(12, 16), x_i)
        b = model.T(torch.rand(12, 16), x_j)
        expected = semi_dual(a, b, model.v(b, x_j)) + 1.0 - 0.5 * (self_transport(a) + self_transport(b))
    torch.testing.assert_close(r_paper, semi_dual(a, b, model.v(b, x_j)).mean())
    torch.testing.assert_close(r_debiased, expected.mean())
    assert not torch.allclose(term(True, True)[1], term(False, True)[1])
    model.hparams.debias = True  # and a Lightning training step runs with it
    trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0).fit(model, datamodule=dm)


def test_gradient_norms_are_the_closed_form_gradients_and_their_cosine():
    from zoo.gentle.gda import gradient_norms

    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([0.3, 0.1, -1.0], dtype=torch.float64)
    out = gradient_norms({"fit": (w @ x) ** 2, "ot": w.sum()}, [w])
    g_fit, g_ot = 2 * (w @ x).detach() * x, torch.ones(3, dtype=torch.float64)  # ∇(w·x)² = 2(w·x)x, ∇Σw = 1
    torch.testing.assert_close(out["fit"], g_fit.norm())
    torch.testing.assert_close(out["ot"], g_ot.norm())
    torch.testing.assert_close(out["cos"], (g_fit @ g_ot) / (g_fit.norm() * g_ot.norm()))
    assert w.grad is None  # nothing accumulated


def test_gradient_norm_logging_leaves_the_training_step_unchanged():
    params = {}
    for diagnose in (False, True):
        L.seed_everything(3, verbose=False)
        model = GENTLEModule(x_dim=3, n_u=16, n_eval_samples=10, log_grad_norms=diagnose)
        t = trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0)
        t.fit(model, datamodule=tiny_data(batch_size=6))
        params[diagnose] = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.testing.assert_close(params[True], params[False], rtol=0, atol=0)
    logged = t.callback_metrics
    assert {"train/grad_fit", "train/grad_ot", "train/grad_prox", "train/grad_cos"} <= set(logged)
    # second step: θ - θ̄ = (1 - β)(θ1 - θ0) after the first anchor update, so the proximal pull is non-zero
    assert logged["train/grad_fit"] > 0 and logged["train/grad_ot"] > 0 and logged["train/grad_prox"] > 0
    assert -1 <= logged["train/grad_cos"] <= 1
    ablation = GENTLEModule(x_dim=3, lambda_ot=0.0, n_u=8, n_eval_samples=10, log_grad_norms=True)  # fit term only
    t = trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0)
    t.fit(ablation, datamodule=tiny_data())
    assert {"train/grad_fit", "train/grad_prox"} <= set(t.callback_metrics) and "train/grad_ot" not in t.callback_metrics


def test_evaluation_logs_wd_and_ks_and_samples_are_destandardised():
    L.seed_everything(2, verbose=False)
    dm = tiny_data()
    model = PooledMarginalModule(x_dim=3, n_eval_samples=50)
    out = fit_and_test(model, dm)
    assert set(out) == {"test/wd", "test/ks", "test/spread_ratio"} and 0 <= out["test/ks"] <= 1
    draws = model.sample(torch.zeros(2, 3), 40).numpy()
    train_y = dm.frames["train"]["y"].to_numpy()
    gap = np.abs(draws.reshape(-1, 1) - train_y[None, :]).min(1)
    assert gap.max() < 1e-4  # resampled training y's, back in raw units (float32 round trip)


def test_nearest_neighbours_pools_the_k_nearest_covariates_draws():
    """Against scikit-learn's NearestNeighbors: each evaluation covariate's draws are exactly the training y's of its
    k nearest distinct covariates (standardised), every pooled y is drawn, and k = 1 at a training covariate
    resamples that covariate's own y's."""
    from sklearn.neighbors import NearestNeighbors

    L.seed_everything(5, verbose=False)
    dm = tiny_data()
    model = NearestNeighboursModule(x_dim=3, k=3, n_eval_samples=20)
    trainer(max_epochs=1, limit_val_batches=0).fit(model, datamodule=dm)
    x_distinct, y_groups = dm.train_groups()
    queries = np.random.default_rng(0).normal(size=(6, 3))
    nearest = NearestNeighbors(n_neighbors=3).fit(x_distinct).kneighbors(queries, return_distance=False)
    draws = model.sample_standardised(torch.as_tensor(queries, dtype=torch.float32), 4000).double().numpy()
    for q in range(len(queries)):
        pooled = np.concatenate([y_groups[i] for i in nearest[q]])
        np.testing.assert_allclose(np.unique(draws[q]), np.unique(pooled.astype(np.float32)), rtol=0, atol=1e-6)
    one = NearestNeighboursModule(x_dim=3, k=1, n_eval_samples=20)
    trainer(max_epochs=1, limit_val_batches=0).fit(one, datamodule=dm)
    own = one.sample_standardised(torch.as_tensor(x_distinct[:1], dtype=torch.float32), 200).double().numpy()
    assert set(np.round(own[0], 5)) <= set(np.round(y_groups[0], 5))
    with pytest.raises(ZooError, match="k must be >= 1"):
        NearestNeighboursModule(k=0)
    with pytest.raises(ZooError, match="only 12 distinct training covariates"):
        trainer(max_epochs=1, limit_val_batches=0).fit(NearestNeighboursModule(x_dim=3, k=13), datamodule=dm)


def test_cwgan_alternates_critic_and_generator_steps():
    L.seed_everything(3, verbose=False)
    model = CWGANModule(x_dim=3, critic_steps=3, n_eval_samples=20)
    g0 = [p.detach().clone() for p in model.generator.parameters()]
    dm = tiny_data(batch_by="row", batch_size=6)  # 36 rows: 6 batches per epoch
    trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0).fit(model, datamodule=dm)
    assert all(torch.equal(a, b) for a, b in zip(g0, model.generator.parameters()))  # batches 1, 2: critic only
    trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=0).fit(model, datamodule=dm)
    assert not all(torch.equal(a, b) for a, b in zip(g0, model.generator.parameters()))  # batch 3: generator
    y = model.sample(torch.zeros(4, 3), 10)
    assert y.shape == (4, 10) and torch.isfinite(y).all()


def test_cwgan_gradient_penalty_equals_its_closed_form():
    """ds-wgan's one-sided penalty mean(relu(|d critic/dy| - 1)) at the interpolates m = a y + (1 - a) y_hat: for the
    critic c(y, x) = w y^2 x the derivative is 2 w m x (float64), and the penalty is differentiable in w."""
    from zoo.gentle.baselines import gradient_penalty

    torch.manual_seed(0)
    y, y_hat, x = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64), torch.randn(64, 1).double()
    w = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(1)
    gp = gradient_penalty(lambda a, b: w * a**2 * b[:, 0], y, y_hat, x)
    torch.manual_seed(1)
    alpha = torch.rand_like(y)
    m = alpha * y + (1 - alpha) * y_hat
    expected = torch.relu((2 * w * m * x[:, 0]).abs() - 1).mean()
    assert 0 < expected.item() and gp.item() == pytest.approx(expected.item(), abs=1e-14)
    (g_gp,) = torch.autograd.grad(gp, w)
    (g_ex,) = torch.autograd.grad(expected, w)
    assert float(g_gp) == pytest.approx(float(g_ex), abs=1e-14)


def test_cwgan_clips_at_the_lower_bound():
    model = CWGANModule(x_dim=9)
    model.set_standardisation({"x_mean": torch.zeros(9), "x_std": torch.ones(9), "y_mean": torch.tensor([5.0]),
                               "y_std": torch.tensor([2.0]), "y_lower": torch.tensor([0.0])})
    with torch.no_grad():
        model.generator.net[-1].bias.fill_(-100.0)
    assert (model.eval().sample(torch.zeros(3, 9), 7) == 0).all()


@pytest.mark.parametrize("cls", [GENTLEModule, CWGANModule, PooledMarginalModule, NearestNeighboursModule])
def test_hub_round_trip_keeps_weights_and_standardisation(tmp_path, cls):
    model = cls(x_dim=2, n_eval_samples=10)
    stats = {"x_mean": torch.tensor([1.0, 2.0]), "x_std": torch.tensor([3.0, 4.0]), "y_mean": torch.tensor([5.0]),
             "y_std": torch.tensor([6.0]), "y_lower": torch.tensor([-7.0])}
    model.set_standardisation(stats)
    if cls is PooledMarginalModule:
        model.pooled_y = torch.linspace(-1, 1, 9)
    if cls is NearestNeighboursModule:
        model.covariates, model.ys = torch.randn(6, 2), torch.linspace(-1, 1, 9)
        model.owner = torch.tensor([0, 0, 1, 2, 2, 3, 4, 5, 5])
    model.save_pretrained(tmp_path)
    again = cls.from_pretrained(tmp_path)
    x = torch.randn(3, 2)
    torch.manual_seed(0)
    a = model.eval().sample(x, 5)
    torch.manual_seed(0)
    torch.testing.assert_close(again.eval().sample(x, 5), a)
    assert again.y_lower.item() == -7.0 and bool(again.standardised)


def test_checkpoint_carries_the_anchors(tmp_path):
    L.seed_everything(4, verbose=False)
    model = GENTLEModule(x_dim=3, n_u=8, n_eval_samples=10)
    t = trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0)
    t.fit(model, datamodule=tiny_data())
    t.save_checkpoint(tmp_path / "x.ckpt")
    state = torch.load(tmp_path / "x.ckpt", weights_only=False)
    assert "gda_anchors" in state and not any(k.startswith(("cdf_", "train_x", "neighbour")) for k in state["state_dict"])
    fresh = GENTLEModule(x_dim=3, n_u=8, n_eval_samples=10)
    fresh.on_load_checkpoint(state)
    for a, b in zip(fresh.anchors["mapping"], model.anchors["mapping"]):
        torch.testing.assert_close(a, b)


def test_a_seeded_fit_repeats_exactly():
    """The card's claim that per-seed numbers repeat exactly on one machine, libraries and thread count: two fits
    from the same seed (data, initialisation, u-draws and covariate batches) end with the same weights to the bit,
    and another seed does not."""
    def fit(seed):
        L.seed_everything(seed, verbose=False)
        model = GENTLEModule(x_dim=3, lambda_ot=0.1, n_u=8, n_eval_samples=10)
        trainer(max_epochs=3, limit_val_batches=0).fit(model, datamodule=tiny_data(batch_size=4))
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first, again, other = fit(7), fit(7), fit(8)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_lipschitz_power_weights_each_pair_by_its_inverse_distance():
    """lipschitz_power=p: R = mean_i w_i R_i with w_i ∝ ‖x_i - x_j(i)‖^-p (mean 1), in both players' steps; the
    per-pair R_i are the paper's semi-duals, recomputed here from the same draws."""
    from zoo.gentle.entropic import semi_dual

    model, dm, x_i, x_j = tabled_model(7, lipschitz_power=2.0)
    d = (x_i - x_j).norm(dim=1)
    torch.testing.assert_close(model.pair_weight, d**-2 / (d**-2).mean())
    torch.manual_seed(0)
    a = model.T(torch.rand(12, 16), x_i)
    value = model.ot_term(a, x_j, weight=model.pair_weight)
    torch.manual_seed(0)
    with torch.no_grad():
        a = model.T(torch.rand(12, 16), x_i)
        b = model.T(torch.rand(12, 16), x_j)
        per_pair = semi_dual(a, b, model.v(b, x_j))
    torch.testing.assert_close(value.detach(), (per_pair * d**-2).sum() / (d**-2).sum())
    assert not torch.allclose(value.detach(), per_pair.mean())  # the weights matter on these covariates
    trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0).fit(model, datamodule=dm)


def test_released_pairing_is_the_official_loops():
    """pairing='released', cost='released': train_gentle.py as released. Its generator loop adds R_i (squared
    cost) only for the covariates the official assignment leaves at -1, each against distinct_x[-1]; its potential
    loop skips those and adds R_i (|a - b|) for the others against their assigned neighbour; both divide by the
    batch size. Recomputed here covariate by covariate from the same draws."""
    from zoo.gentle.entropic import semi_dual
    from zoo.gentle.neighbours import released_relation

    L.seed_everything(9, verbose=False)
    model = GENTLEModule(x_dim=3, n_u=16, n_eval_samples=10, pairing="released", cost="released")
    dm = tiny_data(n_train_covariates=40, batch_size=40)
    dm.setup("fit")
    order = dm.train_appearance_order()  # the simulator's draw order, not the lexicographic one
    assert (order != np.arange(40)).any()
    model.build_tables(*dm.train_groups(), order=order)
    xs, n = model.train_x, 40
    rel, last = released_relation(dm.train_groups()[0], order)
    unset = torch.as_tensor(rel == -1)
    assert 1 <= unset.sum() < n // 2 and last == order[-1]
    assert (model.neighbour == last).all()

    def official_loop(covariates, partners, cost):
        torch.manual_seed(0)
        with torch.no_grad():
            a = model.T(torch.rand(n, 16), xs)
            b = model.T(torch.rand(len(covariates), 16), xs[partners])
            total = sum(semi_dual(a[i:i + 1], b[k:k + 1], model.v(b[k:k + 1], xs[partners[k]][None]), 1.0, cost)
                        for k, i in enumerate(covariates))
        return total.squeeze() / n

    unset_idx = np.flatnonzero(rel == -1)
    assigned = np.flatnonzero(rel != -1)
    torch.manual_seed(0)
    a = model.T(torch.rand(n, 16), xs)
    generator = model.ot_term(a, xs[model.neighbour], weight=model.pair_weight)
    torch.testing.assert_close(generator.detach(), official_loop(unset_idx, np.full(len(unset_idx), last), "sqeuclidean"))
    torch.manual_seed(0)
    with torch.no_grad():
        a = model.T(torch.rand(n, 16), xs)
    potential = model.ot_term(a, xs[model.potential_neighbour], through_generator=False,
                              weight=model.potential_pair_weight)
    torch.testing.assert_close(potential.detach(), official_loop(assigned, rel[assigned], "euclidean"))
    # the generator's term does not reach the assigned covariates' samples at all
    a = a.clone().requires_grad_()
    model.ot_term(a, xs[model.neighbour], weight=model.pair_weight).backward()
    assert a.grad[~unset].abs().max() == 0 and a.grad[unset].abs().max() > 0
    trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0).fit(model, datamodule=dm)
    with pytest.raises(ZooError, match="pairing='nearest': use 'neighbour'"):
        GENTLEModule(pairing="nearest")
    with pytest.raises(ZooError, match="weights no pair: set lipschitz_power: 0"):
        GENTLEModule(pairing="released", lipschitz_power=1.0)


def test_one_line_errors():
    with pytest.raises(ZooError, match="GENTLE beta=1.5 is not allowed: it must be in \\(0, 1\\]"):
        GENTLEModule(beta=1.5)
    with pytest.raises(ZooError, match="lipschitz_power=-1.0 is not allowed: it must be >= 0"):
        GENTLEModule(lipschitz_power=-1.0)
    with pytest.raises(ZooError, match="epsilon=0.0"):
        GENTLEModule(epsilon=0.0)
    with pytest.raises(ZooError, match="debias='yes': use true or false"):
        GENTLEModule(debias="yes")
    with pytest.raises(ZooError, match="log_grad_norms=1: use true or false"):
        GENTLEModule(log_grad_norms=1)
    with pytest.raises(ZooError, match="critic_steps=1"):
        CWGANModule(critic_steps=1)
    with pytest.raises(ZooError, match="model x_dim=2 but the toy1 data have 3"):
        trainer(max_steps=1).fit(GENTLEModule(x_dim=2, n_u=4), datamodule=tiny_data())
    with pytest.raises(ZooError, match="set data.init_args.batch_by: row"):
        trainer(max_steps=1).fit(CWGANModule(x_dim=3), datamodule=tiny_data())
    with pytest.raises(ZooError, match="fit it"):
        PooledMarginalModule(x_dim=3).sample(torch.zeros(1, 3), 2)
    with pytest.raises(ZooError, match="fit it"):
        NearestNeighboursModule(x_dim=3).sample(torch.zeros(1, 3), 2)
