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


def _torch_split_indices(y: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The previous (session 5) torch formulation of the stratified split's indices, kept here as an oracle."""
    n = len(y)
    classes, counts = torch.unique(y, return_counts=True)
    order = torch.argsort(y.double() * 2 + keys)
    sorted_y = y[order]
    start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(n) - start[torch.searchsorted(classes, sorted_y)]
    odd = counts % 2 == 1
    extra = ((torch.cumsum(odd.long(), 0) - odd.long()) % 2) * odd.long()
    second = rank < (counts // 2 + extra)[torch.searchsorted(classes, sorted_y)]
    return order[~second].sort().values, order[second].sort().values


def test_the_numpy_split_gives_the_torch_formulations_halves():
    """`split_batch` does its index arithmetic in numpy: the same halves as the torch formulation, for random batch
    sizes and class counts (odd and even), from the same generator."""
    for seed in range(60):
        g = torch.Generator().manual_seed(seed)
        n = int(torch.randint(4, 260, (1,), generator=g))
        y = torch.randint(0, int(torch.randint(1, 12, (1,), generator=g)), (n,), generator=g)
        if bool((torch.bincount(y) == 1).any()):
            continue
        x = torch.arange(n).double()
        i1, i2 = _torch_split_indices(y, torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
        b1, b2 = split_batch([x, y], torch.Generator().manual_seed(seed))
        assert torch.equal(b1[0].long(), i1) and torch.equal(b2[0].long(), i2)


class _Trainer:
    """What `_identify` reads of a trainer, for rank 0 of a world of 2 whose gather is replaced by a fixed block."""

    def __init__(self, root):
        self.global_rank, self.world_size, self.is_global_zero = 0, 2, True
        self.callbacks, self.loggers, self.default_root_dir = [], [], str(root)


def test_the_step_average_rebuilt_from_the_halves_equals_the_carried_one(tmp_path):
    """A one-pass check forms the step's gradient average from the gathered block: rebuilt from each rank's halves,
    g_r = (n1 g1_r + n2 g2_r)/B, or carried in the row (a parameter selection). Both give the plain mean of the
    ranks' local gradients (and, with exclude, the unflagged ranks' mean), to float64 rounding."""
    L.seed_everything(4, verbose=False)
    model = FeatureClassifier(hidden=6).double()
    params = list(model.parameters())
    D = sum(p.numel() for p in params)
    batches = [[t.double() if t.is_floating_point() else t for t in _batch(41, seed)] for seed in (0, 1)]
    local = []
    for b in batches:
        _step_gradient(model, b)
        local.append(torch.cat([p.grad.reshape(-1) for p in params]).clone())
    for action in ("log", "exclude"):
        outcomes = []
        for carried in (False, True):
            cb = ByzantineIdentification(estimator="geom", alpha=0.2, offset=0, action=action, log_dir=str(tmp_path))
            cb._params, cb._dim, cb._whole_model = params, D, True
            rows = []
            for rank, b in enumerate(batches):
                _step_gradient(model, b)
                row = torch.empty(2 * D + 3 + (D if carried else 0), dtype=torch.float64)
                cb.split_gradients_from_step(model, b, cb.split_generator(0, rank), out=row[: 2 * D].view(2, D))
                row[2 * D], row[2 * D + 1], row[2 * D + 2] = *cb._sizes, 0.0
                if carried:
                    row[2 * D + 3:] = local[rank]
                rows.append(row.clone())
            cb._all_gather = lambda trainer, row, rows=rows: torch.stack(rows)  # as if rank 1 sent its row
            _step_gradient(model, batches[0])  # rank 0's own .grad, overwritten by the average
            grads = [p.grad for p in params]
            assert cb._identify(_Trainer(tmp_path), model, batches[0], rows[0].clone(), D, False, 0, from_step=True,
                                local=grads, carried=carried)
            outcomes.append((torch.cat([g.reshape(-1) for g in grads]).clone(), list(cb.flagged)))
            cb.teardown(None, model, "fit")
        (rebuilt, flags), (carried_mean, flags_c) = outcomes
        assert flags == flags_c
        want = local[0] if 1 in flags and action == "exclude" else (local[0] + local[1]) / 2
        torch.testing.assert_close(rebuilt, want, rtol=0, atol=1e-15)
        torch.testing.assert_close(carried_mean, want, rtol=0, atol=1e-15)


def test_a_check_s_csv_rows_survive_a_crash_right_after_it(tmp_path):
    """`byzantine/checks.csv` is opened once and kept open; every check's rows are flushed at once, so a process
    that dies right after a check (no teardown, no exception hook: os._exit in a forked child) leaves them."""
    import csv
    import os

    record = {"step": 30, "threshold": 0.25, "flagged": [2], "W": {1: -0.5, 2: 0.75}, "split": "one pass"}
    cb = ByzantineIdentification(log_dir=str(tmp_path))
    pid = os.fork()
    if pid == 0:  # the child: one check written, then a hard crash
        try:
            cb._write(_Trainer(tmp_path), record, torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2))
        finally:
            os._exit(1)
    os.waitpid(pid, 0)
    rows = list(csv.DictReader(open(tmp_path / "byzantine" / "checks.csv")))
    assert [(r["step"], r["rank"], r["W"], r["flagged"]) for r in rows] == [
        ("30", "0", "", "trusted"), ("30", "1", "-0.5", "0"), ("30", "2", "0.75", "1")]
    # in this process: a second check appends to the same open file; an exception closes it
    cb._write(_Trainer(tmp_path), dict(record, step=40), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2))
    assert cb._csv_file is not None
    cb.on_exception(None, None, RuntimeError("boom"))
    assert cb._csv_file is None
    rows = list(csv.DictReader(open(tmp_path / "byzantine" / "checks.csv")))
    assert [r["step"] for r in rows] == ["30"] * 3 + ["40"] * 3  # one header, both checks


def test_a_rank_whose_one_pass_test_failed_is_named_and_the_average_left_to_the_all_reduce(tmp_path):
    """If any rank's first-check test found g2 ≠ (B·g − n1·g1)/n2 (its direct g2 was sent), the halves do not
    rebuild that rank's g: `_identify` warns with the rank, switches to two passes, and leaves `.grad` alone (the
    caller's flat all-reduce averages it)."""
    L.seed_everything(4, verbose=False)
    model = FeatureClassifier(hidden=3).double()
    params = list(model.parameters())
    D = sum(p.numel() for p in params)
    cb = ByzantineIdentification(estimator="geom", alpha=0.2, offset=0, log_dir=str(tmp_path))
    cb._params, cb._dim, cb._whole_model, cb.one_pass = params, D, True, True
    batch = [t.double() if t.is_floating_point() else t for t in _batch(40)]
    _step_gradient(model, batch)
    row = torch.empty(2 * D + 3, dtype=torch.float64)
    cb.split_gradients_from_step(model, batch, cb.split_generator(0, 0), out=row[: 2 * D].view(2, D))
    other = row.clone()
    other[: 2 * D] += 0.01
    other[2 * D:] = torch.tensor([20.0, 20.0, 1.0])  # rank 1: n1, n2, and its test failed
    cb._all_gather = lambda trainer, r: torch.stack([r, other])
    before = [p.grad.clone() for p in params]
    with pytest.warns(UserWarning, match=r"on ranks \[1\] g2 derived"):
        averaged = cb._identify(_Trainer(tmp_path), model, batch, row, D, False, 0, from_step=True,
                                local=[p.grad for p in params])
    cb.teardown(None, model, "fit")
    assert not averaged and not cb.one_pass
    assert all(torch.equal(p.grad, b) for p, b in zip(params, before))
