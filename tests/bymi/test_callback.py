"""ByzantineIdentification / ByzantineAttack in one process: half splits, gradients, the projection, Σ₀ by vmap vs a
loop, and the one-line errors (too few workers, callback order, disagreeing ranks, non-finite gradients)."""

from unittest import mock

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from callbacks.byzantine_identification import (ByzantineAttack, ByzantineIdentification, check_same_selection,
                                                module_loss, split_batch)
from datamodules.byzantine import MachineShardDataModule
from zoo.bymi import FeatureClassifier
from zoo.errors import ZooError


def _batch(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, 20, generator=g), torch.arange(n) % 4]


def test_stratified_split():
    x, y = _batch(43)
    y = torch.cat([torch.tensor([0, 0, 1]), y[:40] % 3 + 1])  # class 0 twice, classes 1-3 odd/even counts
    b1, b2 = split_batch([x, y], torch.Generator().manual_seed(0))
    assert len(b1[0]) + len(b2[0]) == 43 and abs(len(b1[0]) - len(b2[0])) <= 1
    for c in range(4):
        assert abs(int((b1[1] == c).sum()) - int((b2[1] == c).sum())) <= 1 and (b2[1] == c).any()
    assert sorted(torch.cat([b1[0], b2[0]])[:, 0].tolist()) == sorted(x[:, 0].tolist())
    d1, d2 = split_batch({"x": x, "label": y}, torch.Generator().manual_seed(0), label_index="label")
    assert torch.equal(d1["x"], b1[0])
    with pytest.raises(ZooError, match="single sample of class 5"):
        split_batch([x[:5], torch.tensor([1, 1, 5, 2, 2])], torch.Generator())
    u1, u2 = split_batch([x, y], torch.Generator(), stratify=False)
    assert len(u1[0]) == 22 and len(u2[0]) == 21


class _Logs(FeatureClassifier):
    """No training_loss: the callback falls back to training_step, which calls self.log (no trainer here)."""

    training_loss = None

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self(batch[0]), batch[1])
        self.log("train/loss", loss)  # without a trainer this would raise unless the callback silences it
        return {"loss": loss}


def test_split_gradients_are_autograd_of_each_half():
    L.seed_everything(0, verbose=False)
    model = FeatureClassifier(hidden=5)
    cb = ByzantineIdentification(estimator="master")
    batch = _batch()
    g1, g2, n_half, b1 = cb.split_gradients(model, batch, torch.Generator().manual_seed(3))
    assert n_half == 20
    model.zero_grad()
    F.cross_entropy(model(b1[0]), b1[1]).backward()
    torch.testing.assert_close(g1, torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double())
    fallback = _Logs(hidden=5)
    fallback.load_state_dict(model.state_dict())
    f1, _, _, _ = cb.split_gradients(fallback, batch, torch.Generator().manual_seed(3))
    torch.testing.assert_close(f1, g1)
    assert module_loss(fallback, batch).shape == ()


def test_projection_is_a_fixed_gaussian_matrix_and_selection_restricts():
    model = FeatureClassifier(hidden=0)
    cb = ByzantineIdentification(projection_dim=7, projection_seed=4, parameters=["net.0.weight"])
    assert [n for n, _ in cb._selected(model)] == ["net.0.weight"]
    v = torch.randn(3, 200, dtype=torch.float64)
    P = torch.randn(200, 7, generator=torch.Generator().manual_seed(4), dtype=torch.float64) / 7 ** 0.5
    torch.testing.assert_close(cb._project(v), v @ P)
    torch.testing.assert_close(ByzantineIdentification(projection_dim=7, projection_seed=4)._project(v), v @ P)
    torch.testing.assert_close(cb._project(v[:1]), v[:1] @ P)  # the kept matrix, second use
    assert cb._matrix is not None
    with mock.patch("callbacks.byzantine_identification.PROJECTION_CACHE_BYTES", 0):
        uncached = ByzantineIdentification(projection_dim=7, projection_seed=4)
        torch.testing.assert_close(uncached._project(v), v @ P)  # drawn block by block, not kept
        assert uncached._matrix is None
    with pytest.raises(ZooError, match="selects no trainable parameter"):
        ByzantineIdentification(parameters=["nothing*"])._selected(model)


def test_per_sample_gradients_vmap_equals_the_loop():
    L.seed_everything(1, verbose=False)
    model = FeatureClassifier(hidden=6)
    cb = ByzantineIdentification(sigma0_samples=12)
    batch = _batch(30)
    rows = cb.per_sample_gradients(model, batch)
    assert rows.shape == (12, sum(p.numel() for p in model.parameters()))
    loop = []
    for i in range(12):
        model.zero_grad()
        F.cross_entropy(model(batch[0][i: i + 1]), batch[1][i: i + 1]).backward()
        loop.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double())
    torch.testing.assert_close(rows, torch.stack(loop), rtol=1e-5, atol=1e-7)
    looped = cb.per_sample_gradients(_Logs(hidden=6), batch)  # training_step can't be vmapped with logging: loop
    assert looped.shape == rows.shape


def test_non_finite_gradients_are_an_error():
    model = FeatureClassifier(hidden=0)
    x, y = _batch()
    x[3, 0] = float("nan")
    with pytest.raises(ZooError, match="split-half gradients has non-finite"):
        ByzantineIdentification().split_gradients(model, [x, y], torch.Generator())


def test_ranks_disagreeing_on_parameters_is_an_error():
    check_same_selection(torch.tensor([5, 5, 5]), ["a"])
    with pytest.raises(ZooError, match=r"ranks \[2\] inspect other parameters"):
        check_same_selection(torch.tensor([5, 5, 6]), ["a"])


def _trainer(callbacks, **kw):
    return L.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks, **kw)


def test_a_world_too_small_for_knockoff_plus_is_an_error():
    dm = MachineShardDataModule(machines=1, n_per_machine=50)
    with pytest.raises(ZooError, match=r"world size 1 leaves 0 worker\(s\).*>= 10 workers"):
        _trainer([ByzantineIdentification(alpha=0.1)]).fit(FeatureClassifier(hidden=0), datamodule=dm)
    with pytest.raises(ZooError, match="put ByzantineAttack before"):
        ident = ByzantineIdentification(offset=0)
        ident.on_fit_start(type("T", (), {"world_size": 2, "callbacks": [ident, ByzantineAttack([1])]})(), None)


def test_bad_callback_arguments():
    with pytest.raises(ZooError, match="every_n_steps must be >= 1"):
        ByzantineIdentification(every_n_steps=0)
    with pytest.raises(ZooError, match="offset must be 0 or 1"):
        ByzantineIdentification(offset=2)
    with pytest.raises(ZooError, match="label_flip needs n_classes"):
        ByzantineAttack([1], attack="label_flip")


def test_attack_corrupts_only_its_ranks():
    attack = ByzantineAttack([1], attack="ood", seed=3)
    batch = _batch()
    clean = [t.clone() for t in batch]
    attack.corrupt_batch(batch, 0, 0)
    assert torch.equal(batch[0], clean[0])
    attack.corrupt_batch(batch, 1, 0)
    v = torch.randn(20, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    residual = batch[0].double() - 0.7 * clean[0].double() - v
    assert 0.1 < residual.std() < 0.3  # the 0.2 N(0, I) part
    flip = ByzantineAttack([0], attack="label_flip", n_classes=4)
    flip.corrupt_batch(batch, 0, 0)
    assert torch.equal(batch[1], 3 - clean[1])


class _SumLoss(FeatureClassifier):
    """A sum-reduced loss: the step's gradient is not the batch mean's, so g2 cannot be derived from it."""

    def training_loss(self, batch):
        return F.cross_entropy(self(batch[0]), batch[1], reduction="sum")


def _step_gradient(model, batch):
    model.zero_grad()
    model.training_loss(batch).backward()  # what the training step's backward leaves in .grad (DDP's hook kept it)


def test_g2_from_the_step_gradient_is_the_direct_g2_and_a_sum_loss_is_caught():
    L.seed_everything(2, verbose=False)
    model = FeatureClassifier(hidden=6).double()
    x, y = _batch(41)  # odd: halves of 21 and 20, so n1 != n2 in (B·g − n1·g1)/n2
    batch = [x.double(), y]
    cb = ByzantineIdentification(estimator="master")
    cb._params = list(model.parameters())
    _step_gradient(model, batch)
    d1, d2, n_half, _ = cb.split_gradients(model, batch, torch.Generator().manual_seed(5))
    o1, o2, n_one, mismatch = cb.split_gradients_from_step(model, batch, torch.Generator().manual_seed(5), verify=True)
    assert not mismatch and n_one == n_half == 20
    torch.testing.assert_close(o1, d1, rtol=0, atol=0)
    torch.testing.assert_close(o2, d2, rtol=0, atol=1e-12)
    summed = _SumLoss(hidden=6).double()
    summed.load_state_dict(model.state_dict())
    cb._params = list(summed.parameters())
    _step_gradient(summed, batch)
    s1, s2, _, mismatch = cb.split_gradients_from_step(summed, batch, torch.Generator().manual_seed(5), verify=True)
    assert mismatch  # detected, and the direct g2 is returned instead
    torch.testing.assert_close(s2, cb.split_gradients(summed, batch, torch.Generator().manual_seed(5))[1])


def test_one_pass_is_used_only_where_it_is_exact():
    class DDP:
        def no_sync(self):
            pass

    def trainer(**kw):
        opts = dict(strategy=type("S", (), {"model": DDP()})(), accumulate_grad_batches=1, precision="32-true")
        return type("T", (), {**opts, **kw})()

    model = FeatureClassifier(hidden=4)
    cb = ByzantineIdentification()
    assert cb.one_pass_blocker(trainer(), model) is None
    assert cb.one_pass_blocker(trainer(precision="64-true"), model) is None
    assert "gradient accumulation" in cb.one_pass_blocker(trainer(accumulate_grad_batches=2), model)
    assert "precision 16-mixed" in cb.one_pass_blocker(trainer(precision="16-mixed"), model)
    assert "not a DDP strategy" in cb.one_pass_blocker(trainer(strategy=type("S", (), {"model": model})()), model)
    assert "reuse_step_gradient=False" in ByzantineIdentification(reuse_step_gradient=False).one_pass_blocker(
        trainer(), model)
    noisy = FeatureClassifier(hidden=4)
    noisy.net.insert(1, torch.nn.Dropout(0.1))
    assert "dropout / batch norm in net.1" in cb.one_pass_blocker(trainer(), noisy)
    noisy.net[1].p = 0.0  # the identity
    assert cb.one_pass_blocker(trainer(), noisy) is None
    model.automatic_optimization = False
    assert "manual optimization" in cb.one_pass_blocker(trainer(), model)


def test_the_masked_mean_hook_of_the_two_pass_exclude_path(tmp_path):
    """The comm hook that `exclude` registers when checks take two passes: weight · bucket, all-reduced (a
    one-process gloo group here; the 2-process DDP test covers the one-pass path's hand-made average)."""
    import torch.distributed as dist

    from callbacks.byzantine_identification import _masked_mean_hook

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        state = ByzantineIdentification(action="exclude")
        bucket = type("Bucket", (), {"buffer": lambda self, t=torch.arange(4.0): t})()
        state._weight = 0.5
        torch.testing.assert_close(_masked_mean_hook(state, bucket).wait(), torch.arange(4.0) * 0.5)
        state._weight = 0.0  # a flagged rank contributes nothing
        assert _masked_mean_hook(state, bucket).wait().abs().sum() == 0
    finally:
        dist.destroy_process_group()
