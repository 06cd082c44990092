"""SCoReModule: two-stage schedule, metrics, encoders, Hub round trip, bad input."""

import math

import lightning as L
import numpy as np
import pytest
import torch

from datamodules.cifar_lt import CIFARLTDataModule
from datamodules.medmnist import MedMNISTDataModule
from zoo.errors import ZooError
from zoo.score import SCoReModule
from zoo.score.model import build_encoder
from zoo.score.module import long_tail_metrics


def _params(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()]).clone()


def test_two_stage_trains_encoder_then_only_the_probe(tmp_path):
    dm = CIFARLTDataModule(source="embedded", image_size=8, imbalance_ratio=10, batch_size=32, num_workers=0,
                           augment="light", hflip=False)
    model = SCoReModule(encoder="tiny_cnn", num_classes=10, proj_dim=16, objective="fl_cf", stage1_epochs=1,
                        many_threshold=50, few_threshold=15)
    snaps = [(_params(model.net.encoder), _params(model.net.classifier))]

    class Snapshot(L.Callback):
        def on_train_epoch_end(self, trainer, module):
            snaps.append((_params(module.net.encoder), _params(module.net.classifier)))

    trainer = L.Trainer(max_epochs=2, callbacks=[Snapshot()], accelerator="cpu", devices=1, limit_train_batches=2,
                        limit_val_batches=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(tmp_path), num_sanity_val_steps=0)
    trainer.fit(model, dm)
    trainer.test(model, dm)
    (enc0, cls0), (enc1, cls1), (enc2, cls2) = snaps
    assert not torch.equal(enc0, enc1) and torch.equal(cls0, cls1)  # stage 1: classifier untouched
    assert torch.equal(enc1, enc2) and not torch.equal(cls1, cls2)  # stage 2: frozen encoder, probe trains
    logged = trainer.callback_metrics
    assert {"test/acc", "test/acc_many", "test/acc_medium", "test/acc_few", "test/acc_class_9"} <= set(logged)
    assert (tmp_path / "per_class_accuracy.csv").read_text().count("\n") == 11


def _fit_two_stage(dm, tmp_path, callbacks=(), max_epochs=2, num_classes=3):
    model = SCoReModule(encoder="tiny_cnn", num_classes=num_classes, proj_dim=16, objective="fl_cf", stage1_epochs=1,
                        many_threshold=50, few_threshold=15)
    trainer = L.Trainer(max_epochs=max_epochs, callbacks=list(callbacks), accelerator="cpu", devices=1,
                        limit_train_batches=2, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(model, dm)
    return model


def test_the_probe_trains_on_the_probe_view_not_on_a_supcon_view(tmp_path, flat_colour_dermamnist):
    """The probe stage fed the encoder view 0 of SupCon's stage-1 augmentation (colour-jittered with p 0.8,
    greyscaled with p 0.2); the official trainval_stage2.py trains on crop + flip only. Flat-colour images show it:
    the probe stage's encoder inputs must be the batch's probe view, every one still one of the images' colours."""
    root, data = flat_colour_dermamnist
    colours = {tuple(c) for c in data["train_images"][:, 0, 0]}
    dm = MedMNISTDataModule(flag="dermamnist", root=str(root), batch_size=24, num_workers=0, augment="supcon")
    seen = []  # per probe step: (the encoder's input, the batch)

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if module.in_probe_stage:
                self.handle = module.net.encoder.register_forward_pre_hook(
                    lambda m, args: seen.append((args[0], batch)))

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if module.in_probe_stage:
                self.handle.remove()

    _fit_two_stage(dm, tmp_path, [Record()])
    assert len(seen) == 2  # two probe steps
    for encoder_input, batch in seen:
        rgb = {tuple(round(v) for v in ((x[:, 0, 0] * 0.5 + 0.5) * 255).tolist()) for x in encoder_input}
        assert rgb <= colours, f"{len(rgb - colours)} of {len(rgb)} probe inputs colour-jittered or greyscaled"
        assert torch.equal(encoder_input, batch[2])


def test_two_stage_without_a_probe_view_is_a_one_line_error(tmp_path):
    dm = CIFARLTDataModule(source="embedded", image_size=8, imbalance_ratio=10, batch_size=32, num_workers=0,
                           augment="light", probe_augment=None)
    with pytest.raises(ZooError, match="data.probe_augment is null; set it .the official probe's transform is 'crop'"):
        _fit_two_stage(dm, tmp_path, num_classes=10)
    model = SCoReModule(encoder="tiny_cnn", num_classes=10, stage1_epochs=0)
    model.trainer = L.Trainer(logger=False)  # epoch 0 >= stage1_epochs: the probe stage
    x = torch.randn(4, 2, 3, 8, 8)
    with pytest.raises(ZooError, match=r"the probe stage needs training batches \(views, labels, probe view\)"):
        model.training_step((x, torch.zeros(4, dtype=torch.long)), 0)


def test_long_tail_metrics_closed_form():
    correct = torch.tensor([9, 5, 1, 0])
    total = torch.tensor([10, 10, 5, 0])  # class 3 absent from the evaluation set
    m = long_tail_metrics(correct, total, train_counts=[500, 50, 5, 3])
    assert m["acc"] == pytest.approx(15 / 25)
    assert m["acc_balanced"] == pytest.approx((0.9 + 0.5 + 0.2) / 3)
    assert m["acc_many"] == pytest.approx(0.9) and m["acc_medium"] == pytest.approx(0.5)
    assert m["acc_few"] == pytest.approx(0.2)  # the absent class does not count


def test_cifar_resnet32_has_the_published_size():
    net = build_encoder("resnet32_cifar")
    assert sum(p.numel() for p in net.parameters()) == pytest.approx(0.46e6, rel=0.02)  # He et al. 2016, 0.46M
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 64)


def test_timm_resnet_with_cifar_stem():
    net = build_encoder("resnet18", in_chans=1, cifar_stem=True)
    assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
    assert net(torch.randn(2, 1, 32, 32)).shape == (2, 512)
    with pytest.raises(ZooError, match="unknown encoder 'resnet-18'"):
        build_encoder("resnet-18")


def test_hub_round_trip(tmp_path):
    model = SCoReModule(encoder="tiny_cnn", num_classes=4, objective="gc_cf", lamda=0.5).eval()
    model.save_pretrained(tmp_path)
    again = SCoReModule.from_pretrained(tmp_path).eval()
    x = torch.randn(3, 3, 8, 8)
    torch.testing.assert_close(model.net(x), again.net(x))
    assert again.hparams.objective == "gc_cf" and again.hparams.lamda == 0.5


def test_bad_module_arguments():
    with pytest.raises(ZooError, match="unknown SCoRe objective 'facility'"):
        SCoReModule(encoder="tiny_cnn", objective="facility")
    with pytest.raises(ZooError, match="set training: joint"):
        SCoReModule(encoder="tiny_cnn", objective="ce", training="two_stage")


def _official_stage1_lrs(lr, epochs, n_batches, cosine, milestones=(), decay=0.1, warm_epochs=0, warm_from=0.01):
    """Oracle: the official util.adjust_learning_rate (per epoch, epochs counted from 1) then
    util.warmup_learning_rate (per batch), transcribed; the learning rate of every optimiser step."""
    eta_min = lr * decay ** 3
    warm_to = (eta_min + (lr - eta_min) * (1 + math.cos(math.pi * warm_epochs / epochs)) / 2) if cosine else lr
    out = []
    for epoch in range(1, epochs + 1):
        if cosine:
            e_lr = eta_min + (lr - eta_min) * (1 + math.cos(math.pi * epoch / epochs)) / 2
        else:
            e_lr = lr * decay ** int(np.sum(epoch > np.asarray(milestones)))
        for b in range(n_batches):
            if epoch <= warm_epochs:
                p = (b + (epoch - 1) * n_batches) / (warm_epochs * n_batches)
                e_lr = warm_from + p * (warm_to - warm_from)
            out.append(e_lr)
    return out


@pytest.mark.parametrize("schedule", ["cosine", "step"])
def test_stage1_learning_rates_follow_the_official_warmup_and_schedule(schedule):
    dm = CIFARLTDataModule(source="embedded", image_size=8, imbalance_ratio=10, batch_size=32, num_workers=0,
                           augment="light", hflip=False)
    model = SCoReModule(encoder="tiny_cnn", num_classes=10, proj_dim=8, width=1, objective="gc_cf", stage1_epochs=6,
                        lr=0.05, lr_schedule=schedule, milestones=[3, 4], warmup_epochs=2, probe_lr=0.1)
    seen = []

    class Record(L.Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer):
            seen.append([g["lr"] for g in optimizer.param_groups])

    trainer = L.Trainer(max_epochs=7, callbacks=[Record()], accelerator="cpu", devices=1, limit_train_batches=3,
                        limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, dm)
    want = _official_stage1_lrs(0.05, 6, 3, schedule == "cosine", milestones=(3, 4), warm_epochs=2)
    got = [enc for enc, _ in seen[:18]]
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert all(cls == 0.0 for _, cls in seen[:18])  # the classifier waits for stage 2
    assert seen[18:] == [[0.0, 0.1]] * 3  # the probe: frozen encoder, probe_lr


def test_settings_that_would_train_or_report_nonsense_are_refused(tmp_path):
    with pytest.raises(ZooError, match="proj_dim must be >= 1, got 0"):  # trained a 0-d projection
        SCoReModule(encoder="tiny_cnn", proj_dim=0)
    with pytest.raises(ZooError, match="few_threshold=50 exceeds many_threshold=10"):
        SCoReModule(encoder="tiny_cnn", many_threshold=10, few_threshold=50)
    # a fit that ends within stage 1 tested a classifier that never trained
    dm = CIFARLTDataModule(source="embedded", image_size=8, imbalance_ratio=10, batch_size=32, num_workers=0,
                           augment="light")
    model = SCoReModule(encoder="tiny_cnn", num_classes=10, proj_dim=8, stage1_epochs=2)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(ZooError, match=r"trainer.max_epochs=2 ends within stage 1 \(stage1_epochs=2\)"):
        trainer.fit(model, dm)
