"""MGAN baseline (official train_mgan.py): the least-squares GAN losses and the monotone term against closed forms,
Lightning steps against hand-written Adam replays, the generator's covariates drawn from the training marginal
apart from the batch, the once-per-epoch learning-rate decay, Hub round trip and one-line errors."""

import copy

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.conditional import ConditionalDataModule
from zoo.errors import ZooError
from zoo.gentle import MGANModule
from zoo.gentle.mgan import lsgan_discriminator_loss, lsgan_generator_loss, monotone_term

from .conftest import fit_and_test, tiny_data, trainer


def tiny_rows(**kw):
    """The module tests' tiny toy1 data, in batches of 18 training rows (36 rows: 2 batches an epoch)."""
    return tiny_data(**{"batch_by": "row", "batch_size": 18, **kw})


class RecordingMGAN(MGANModule):
    """Records every training batch and every reference draw (x̃, z2), in order."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.batches, self.draws = [], []

    def draw_reference(self, n):
        out = super().draw_reference(n)
        self.draws.append(tuple(t.clone() for t in out))
        return out

    def training_step(self, batch, batch_idx):
        self.batches.append(tuple(t.clone() for t in batch))
        return super().training_step(batch, batch_idx)


def test_losses_are_their_closed_forms():
    d_real = torch.tensor([1.5, 0.0, 2.0], dtype=torch.float64)
    d_fake = torch.tensor([0.5, -1.0, 1.0], dtype=torch.float64)
    # MSE(D(fake), 1) = ((-0.5)² + (-2)² + 0²) / 3
    assert lsgan_generator_loss(d_fake).item() == pytest.approx((0.25 + 4.0 + 0.0) / 3, abs=1e-15)
    # ½ (((0.5)² + 1² + 1²) / 3 + ((0.5)² + 1² + 1²) / 3)
    assert lsgan_discriminator_loss(d_real, d_fake).item() == pytest.approx(0.5 * (2.25 / 3 + 2.25 / 3), abs=1e-15)
    f = torch.tensor([[1.0], [2.0], [-1.0]], dtype=torch.float64)
    f_prime = torch.tensor([[0.0], [3.0], [-1.0]], dtype=torch.float64)
    z2 = torch.tensor([[0.5], [1.0], [2.0]], dtype=torch.float64)
    z2_prime = torch.tensor([[-0.5], [0.0], [0.0]], dtype=torch.float64)
    # (1 - 0)(0.5 + 0.5), (2 - 3)(1 - 0), (-1 + 1)(2 - 0)
    torch.testing.assert_close(monotone_term(f, f_prime, z2, z2_prime), torch.tensor([1.0, -1.0, 0.0]).double(),
                               rtol=0, atol=0)


def adam(params, grads, state, lr, betas=(0.5, 0.999), eps=1e-8):
    """torch.optim.Adam's update (no weight decay, no amsgrad), written out."""
    state["t"] = t = state.get("t", 0) + 1
    out = []
    for k, (p, g) in enumerate(zip(params, grads)):
        m, v = state.get(("m", k), torch.zeros_like(p)), state.get(("v", k), torch.zeros_like(p))
        m, v = betas[0] * m + (1 - betas[0]) * g, betas[1] * v + (1 - betas[1]) * g * g
        state[("m", k)], state[("v", k)] = m, v
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        out.append((p - lr * m_hat / (v_hat.sqrt() + eps)).detach())
    return out


def test_two_lightning_steps_are_the_hand_computed_updates():
    """Replays the recorded batches and reference draws on a copy of the initial networks: per batch the generator
    minimises MSE(D(x̃, F(z2, x̃)), 1) - c mean ⟨F(z) - F(z'), z2 - z2'⟩, then the discriminator minimises
    ½ (MSE(D(x, y), 1) + MSE(D(x̃, F_before(z)), 0)) on the generator's draws from before its step; both by Adam
    (betas 0.5, 0.999). The logged monotone fraction adds ‖x̃ - x̃'‖² (the official diagnostic)."""
    L.seed_everything(0, verbose=False)
    c = 0.5  # large, so that a wrong sign or a missing term moves the weights visibly
    model = RecordingMGAN(x_dim=3, monotone_param=c, n_eval_samples=10)
    start, initial = copy.deepcopy(model), copy.deepcopy(model)
    t = trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    t.fit(model, datamodule=tiny_rows())  # 36 rows, batches of 18
    assert len(model.batches) == 2 and len(model.draws) == 4
    gen, disc = list(start.generator.parameters()), list(start.discriminator.parameters())
    state_g, state_d = {}, {}
    lr = model.hparams.lr
    for step, (y, x) in enumerate(model.batches):
        (x_ref, z2), (x_ref2, z2p) = model.draws[2 * step: 2 * step + 2]
        fz = start.generator(torch.cat((z2, x_ref), 1)).reshape(-1, 1)
        fzp = start.generator(torch.cat((z2p, x_ref2), 1)).reshape(-1, 1)
        d_fake = start.discriminator(torch.cat((x_ref, fz), 1))
        mon = ((fz - fzp) * (z2 - z2p)).sum(1)
        loss = (d_fake - 1).square().mean() - c * mon.mean()
        new_gen = adam(gen, torch.autograd.grad(loss, gen), state_g, lr)
        d_loss = 0.5 * ((start.discriminator(torch.cat((x, y[:, None]), 1)) - 1).square().mean()
                        + start.discriminator(torch.cat((x_ref, fz.detach()), 1)).square().mean())
        new_disc = adam(disc, torch.autograd.grad(d_loss, disc), state_d, lr)
        with torch.no_grad():
            for p, q in zip(gen, new_gen):
                p.copy_(q)
            for p, q in zip(disc, new_disc):
                p.copy_(q)
    for a, b in zip(model.generator.parameters(), start.generator.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    for a, b in zip(model.discriminator.parameters(), start.discriminator.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert not torch.equal(model.generator.out.weight, initial.generator.out.weight)  # both players moved
    assert not torch.equal(model.discriminator.out.weight, initial.discriminator.out.weight)
    # the logged diagnostics of the last step
    joint = ((mon.detach() + (x_ref - x_ref2).square().sum(1)) >= 0).float().mean()
    assert t.callback_metrics["train/monotone"].item() == pytest.approx(joint.item())
    assert t.callback_metrics["train/monotone_outcome"].item() == pytest.approx((mon >= 0).float().mean().item())
    assert t.callback_metrics["train/monotone"] >= t.callback_metrics["train/monotone_outcome"]


def test_generator_covariates_come_from_the_row_marginal_not_the_batch(tmp_path):
    """Training covariates weighted by their rows (a covariate with three rows is drawn three times as often as one
    with one), without replacement within a draw, and independent of the batch: the official fresh shuffle of the
    covariate rows."""
    rng = np.random.default_rng(0)
    counts = [3, 1, 1, 2, 1]  # 8 rows over 5 distinct covariates
    x = rng.normal(size=(5, 3))
    train = pd.DataFrame(np.repeat(x, counts, axis=0), columns=["x1", "x2", "x3"])
    train["y"] = rng.normal(size=len(train))
    train.to_csv(tmp_path / "train.csv", index=False)
    for split in ("val", "test"):
        ev = pd.DataFrame(np.repeat(x[:1], 20, axis=0), columns=["x1", "x2", "x3"])
        ev["y"] = rng.normal(size=20)
        ev.to_csv(tmp_path / f"{split}.csv", index=False)
    dm = ConditionalDataModule(dataset="toy1", source="local", data_dir=str(tmp_path), batch_by="row", batch_size=4)
    L.seed_everything(1, verbose=False)
    model = RecordingMGAN(x_dim=3, n_eval_samples=10)
    trainer(max_epochs=1, limit_val_batches=0).fit(model, datamodule=dm)
    xs, _ = dm.train_groups()  # distinct covariates in lexicographic order: their row counts in that order
    counts = np.array(counts)[np.argsort(np.unique(x, axis=0, return_inverse=True)[1].ravel())]
    rows = torch.as_tensor(np.repeat(xs, counts, axis=0), dtype=torch.float32)
    torch.testing.assert_close(model.train_covariates, rows)
    # 2 batches of 4 rows: 4 draws of 4 covariate rows, each without replacement
    assert [len(d[0]) for d in model.draws] == [4, 4, 4, 4]
    distinct = torch.as_tensor(xs, dtype=torch.float32)
    totals = torch.zeros(5)
    torch.manual_seed(2)
    for _ in range(4000):
        x_ref, z2 = model.draw_reference(4)
        assert (torch.cdist(x_ref, rows).min(1).values == 0).all() and z2.shape == (4, 1)
        per_cov = torch.cdist(x_ref, distinct).argmin(1).bincount(minlength=5)
        assert (per_cov <= torch.tensor(counts)).all()  # no row twice in one draw
        totals += per_cov
    # each row is in a draw of 4 out of 8 with probability 1/2: covariate k is expected 4000 * counts[k] / 2 times
    expected = 4000 * torch.tensor(counts, dtype=torch.float32) / 2
    assert ((totals - expected).abs() / expected < 0.06).all(), totals
    # the draws are not the batch: in a step, the generator's covariates are not the batch's rows in order
    for (y, xb), (x_ref, _) in zip(model.batches, model.draws[::2]):
        assert not torch.equal(x_ref, xb)
    assert not torch.equal(model.draws[0][0], model.draws[1][0])  # x̃ and x̃' are independent draws


def test_learning_rates_decay_once_per_epoch():
    seen = []

    class LrLog(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append((trainer.current_epoch, tuple(o.param_groups[0]["lr"] for o in trainer.optimizers)))

    L.seed_everything(3, verbose=False)
    model = MGANModule(x_dim=3, n_eval_samples=10)
    trainer(max_epochs=3, limit_val_batches=0, callbacks=[LrLog()]).fit(model, datamodule=tiny_rows())
    assert len(seen) == 6  # 2 batches an epoch
    for epoch, lrs in seen:
        assert lrs == pytest.approx((2e-4 * 0.995**epoch,) * 2, rel=1e-12)
    # the decay is made as each later epoch starts (so that a resumed fit makes it too): after 3 epochs the rate is
    # the last epoch's, 2e-4 * 0.995^2 (the official decay after the last epoch trains nothing)
    assert [o.param_groups[0]["lr"] for o in model.optimizers()] == pytest.approx([2e-4 * 0.995**2] * 2, rel=1e-12)


def test_samples_are_destandardised_and_the_hub_round_trip_keeps_them(tmp_path):
    L.seed_everything(4, verbose=False)
    dm = tiny_rows()
    model = MGANModule(x_dim=3, n_eval_samples=50)
    out = fit_and_test(model, dm)
    assert {"test/wd", "test/ks"} <= set(out) and 0 <= out["test/ks"] <= 1
    x = torch.randn(3, 3)
    torch.manual_seed(0)
    raw = model.sample(x, 6)
    torch.manual_seed(0)
    standardised = model.sample_standardised((x - model.x_mean) / model.x_std, 6)
    torch.testing.assert_close(raw, standardised * model.y_std + model.y_mean)
    assert model.y_std.item() == pytest.approx(float(dm.y_std), rel=1e-6)
    model.save_pretrained(tmp_path)
    again = MGANModule.from_pretrained(tmp_path)
    torch.manual_seed(0)
    torch.testing.assert_close(again.sample(x, 6), raw)
    assert bool(again.standardised) and "mgan" in again.card_metadata()["tags"]


def test_one_line_errors():
    with pytest.raises(ZooError, match="MGAN monotone_param=-0.1 is not allowed: it must be >= 0"):
        MGANModule(monotone_param=-0.1)
    with pytest.raises(ZooError, match="MGAN lr=0.0 is not allowed: it must be > 0"):
        MGANModule(lr=0.0)
    with pytest.raises(ZooError, match="MGAN lr_decay=1.5 is not allowed"):
        MGANModule(lr_decay=1.5)
    with pytest.raises(ZooError, match="set data.init_args.batch_by: row"):
        trainer(max_steps=1).fit(MGANModule(x_dim=3), datamodule=tiny_rows(batch_by="covariate"))
    with pytest.raises(ZooError, match="at least 5 training rows"):
        MGANModule(x_dim=3).draw_reference(5)
