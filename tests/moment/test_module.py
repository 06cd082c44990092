"""The Lightning modules: a pre-training run feeds a later stage, Hub round trips, data/model mismatches."""

import lightning as L
import numpy as np
import pytest
import torch

from datamodules.timeseries import ETTh1DataModule, PretrainingDataModule, UCRClassificationDataModule
from zoo.errors import ZooError
from zoo.moment import (
    MOMENTClassificationModule,
    MOMENTEmbeddingSVMModule,
    MOMENTForecastingModule,
    MOMENTReconstructionModule,
)


def _trainer(tmp_path, **kw):
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, default_root_dir=tmp_path, **kw)


@pytest.fixture(scope="module")
def pretrain_ckpt(tmp_path_factory):
    from .conftest import TINY_T5

    tmp = tmp_path_factory.mktemp("pretrain")
    L.seed_everything(0, verbose=False)
    model = MOMENTReconstructionModule(pretrained=None, t5_config=dict(TINY_T5), warmup_steps=2)
    dm = PretrainingDataModule(sources=["embedded:classification"], batch_size=16, val_fraction=0.0)
    trainer = _trainer(tmp, max_steps=2, limit_val_batches=0)
    trainer.fit(model, dm)
    path = tmp / "last.ckpt"
    trainer.save_checkpoint(path)
    return path, model


def test_a_pretraining_run_initialises_the_svm_stage(tmp_path, pretrain_ckpt):
    path, pre = pretrain_ckpt
    svm = MOMENTEmbeddingSVMModule(pretrained=str(path))
    for k, v in pre.model.state_dict().items():  # the encoder and embedder come from the run; the head is dropped
        if not k.startswith("head."):
            torch.testing.assert_close(svm.model.state_dict()[k], v)
    dm = UCRClassificationDataModule(source="embedded", batch_size=32)
    trainer = _trainer(tmp_path, max_epochs=1, limit_val_batches=0)
    trainer.fit(svm, dm)
    acc = trainer.test(svm, dm, verbose=False)[0]["test/acc"]
    assert 0.0 <= acc <= 1.0 and float(svm.svm_C) > 0
    # the SVM is rebuilt from its buffers after a Hub round trip: same predictions
    svm.save_pretrained(tmp_path / "hub")
    again = MOMENTEmbeddingSVMModule.from_pretrained(tmp_path / "hub")
    feats = svm.svm_features.numpy()
    np.testing.assert_array_equal(again.svm().predict(feats), svm.svm().predict(feats))
    assert again.hparams.pretrained is None  # the published config does not need the pre-training run


def test_an_svm_fit_resumed_mid_epoch_fits_on_every_row(tmp_path):
    """A fit stopped after the first of two batches and resumed from a checkpoint written there fits the SVM on
    the same embeddings as an uninterrupted fit: the first batch's rows travel in the checkpoint, and the resumed
    fit embeds in evaluation mode (no dropout) although it has no epoch start."""
    from .conftest import TINY_T5

    class StopAtSecondBatch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            trainer.save_checkpoint(tmp_path / "mid.ckpt")

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 1:
                raise InterruptedError

    def run(callbacks=(), ckpt_path=None):
        L.seed_everything(13, verbose=False)
        module = MOMENTEmbeddingSVMModule(pretrained=None, t5_config=dict(TINY_T5))
        dm = UCRClassificationDataModule(source="embedded", embedded_n_train=60, batch_size=32)
        _trainer(tmp_path, max_epochs=1, limit_val_batches=0, callbacks=list(callbacks)).fit(
            module, dm, ckpt_path=ckpt_path)
        return module

    straight = run()
    with pytest.raises(InterruptedError):
        run([StopAtSecondBatch()])
    resumed = run(ckpt_path=tmp_path / "mid.ckpt")
    assert len(straight.svm_features) == 60
    torch.testing.assert_close(resumed.svm_features, straight.svm_features, rtol=0, atol=0)
    torch.testing.assert_close(resumed.svm_labels, straight.svm_labels, rtol=0, atol=0)


def test_raw_feature_svm_baseline_needs_no_backbone(tmp_path):
    m = MOMENTEmbeddingSVMModule(pretrained=None, features="raw")
    assert m.model is None
    dm = UCRClassificationDataModule(source="embedded", batch_size=32)
    trainer = _trainer(tmp_path, max_epochs=1, limit_val_batches=0)
    trainer.fit(m, dm)
    assert trainer.test(m, dm, verbose=False)[0]["test/acc"] > 0.5  # the embedded classes are separable


def test_forecasting_hub_round_trip_and_frozen_backbone(tmp_path, tiny_t5):
    m = MOMENTForecastingModule(pretrained=None, t5_config=tiny_t5, forecast_horizon=24).eval()
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    assert trainable == {"model.head.linear.weight", "model.head.linear.bias"}  # linear probing
    m.save_pretrained(tmp_path)
    m2 = MOMENTForecastingModule.from_pretrained(tmp_path)
    x = torch.randn(2, 7, 512)
    torch.testing.assert_close(m(x), m2(x))


def test_horizon_mismatch_is_an_error(tmp_path, tiny_t5):
    m = MOMENTForecastingModule(pretrained=None, t5_config=tiny_t5, forecast_horizon=24)
    dm = ETTh1DataModule(source="embedded", n_rows=1400, train_rows=700, val_rows=200, test_rows=200,
                         forecast_horizon=48)
    with pytest.raises(ZooError, match="forecast_horizon 24 but the data forecast 48"):
        _trainer(tmp_path, max_steps=1).fit(m, dm)


def test_classification_head_channel_mismatch_is_an_error(tmp_path, tiny_t5):
    m = MOMENTClassificationModule(pretrained=None, t5_config=tiny_t5, n_channels=1, num_class=3)
    dm = UCRClassificationDataModule(source="embedded", embedded_n_channels=2)
    with pytest.raises(ZooError, match="takes 1 channel.*data have 2"):
        _trainer(tmp_path, max_steps=1).fit(m, dm)


def test_classification_head_trains(tmp_path, tiny_t5):
    L.seed_everything(0, verbose=False)
    m = MOMENTClassificationModule(pretrained=None, t5_config=tiny_t5, n_channels=1, num_class=3, lr=1e-2)
    dm = UCRClassificationDataModule(source="embedded", batch_size=60)
    _trainer(tmp_path, max_steps=3, limit_val_batches=0).fit(m, dm)
    assert m.trainer.logged_metrics["train/loss"] > 0


def test_anomaly_series_is_assembled_first_window_first():
    # test part of 700 steps: windows at 0 and the end-aligned 188; the overlap keeps the first window's scores
    w0 = (torch.tensor([0]), torch.tensor([700]), torch.zeros(1, 512), torch.zeros(1, 512, dtype=torch.long),
          torch.ones(1, 512))
    lab = torch.zeros(1, 512, dtype=torch.long)
    lab[0, 500:] = 1
    w1 = (torch.tensor([188]), torch.tensor([700]), torch.ones(1, 512), lab, torch.ones(1, 512))
    scores, labels = MOMENTReconstructionModule.assemble_series([w0, w1])
    assert scores.shape == (700,) and scores[:512].sum() == 0 and scores[512:].min() == 1
    assert labels[688:].all() and not labels[:688].any()


def test_module_argument_errors(tiny_t5):
    with pytest.raises(ZooError, match="give pretrained"):
        MOMENTReconstructionModule(pretrained=None, t5_config=None)
    with pytest.raises(ZooError, match="mask_ratio must be in"):
        MOMENTReconstructionModule(pretrained=None, t5_config=tiny_t5, mask_ratio=1.0)
    with pytest.raises(ZooError, match="does not exist"):
        MOMENTEmbeddingSVMModule(pretrained="runs/none/last.ckpt")
    # transformers' KeyError (an activation it does not know) and its validation error (a form it does not read)
    for bad in ({"feed_forward_proj": "gated-nope"}, {"feed_forward_proj": "a-b-c"}):
        with pytest.raises(ZooError, match="cannot build MOMENT's T5 encoder from t5_config"):
            MOMENTReconstructionModule(pretrained=None, t5_config={**tiny_t5, **bad})


def test_pretraining_learning_rates_are_the_official_loops(tmp_path, tiny_t5):
    # oracle: tasks/pretrain.py transcribed: the optimiser starts at init_lr, and after every update
    # LinearWarmupCosineLRScheduler.step(cur_epoch, cur_step=updates so far) sets the next rate (warm-up in epoch 0,
    # a cosine by epoch after it)
    import math

    init, low, start, warm, epochs, batches = 1e-4, 1e-5, 1e-5, 4, 3, 3
    want, lr, steps = [], init, 0
    for epoch in range(epochs):
        for _ in range(batches):
            want.append(lr)
            steps += 1
            if epoch == 0:
                lr = min(init, start + (init - start) * steps / max(warm, 1))
            else:
                lr = (init - low) * 0.5 * (1.0 + math.cos(math.pi * epoch / epochs)) + low

    seen = []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    model = MOMENTReconstructionModule(pretrained=None, t5_config=tiny_t5, lr=init, min_lr=low, warmup_lr=start,
                                       warmup_steps=warm)
    dm = PretrainingDataModule(sources=["embedded:classification"], batch_size=4, val_fraction=0.0)
    _trainer(tmp_path, max_epochs=epochs, limit_train_batches=batches, limit_val_batches=0,
             callbacks=[Record()]).fit(model, dm)
    assert seen == pytest.approx(want, rel=1e-12)


def test_anomaly_fine_tuning_minimises_the_official_unmasked_reconstruction_mse(tiny_t5):
    # oracle: moment-research tasks/anomaly_detection_finetune.py transcribed: the model's forward with mask=None
    # hides no patch, and the loss is nn.MSELoss() (mean over every element) between reconstruction and series
    import yaml

    torch.manual_seed(0)
    module = MOMENTReconstructionModule(pretrained=None, t5_config=tiny_t5, train_objective="reconstruction").double()
    module.eval()  # no dropout, so both sides see the same network
    x = torch.randn(3, 1, 512, dtype=torch.float64) * 2 + 1
    im = torch.ones(3, 512, dtype=torch.float64)
    batch = {"x": x, "input_mask": im}
    with torch.no_grad():
        recon, _ = module.model.reconstruct(x, im, torch.ones_like(im))
        # the module casts the reconstruction to float32 (for AMP) before the loss, as for the masked objective
        want = torch.nn.MSELoss()(recon.float().double(), x)
        got = module._loss(batch, objective=module.hparams.train_objective)
        masked = module._loss(batch, torch.Generator().manual_seed(0), "masked")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    assert not torch.isclose(masked, want)  # the pre-training objective is another loss
    for path in ("configs/moment_ucr_anomaly.yaml", "configs/smoke/moment_ucr_anomaly.yaml"):
        with open(path) as f:
            assert yaml.safe_load(f)["model"]["init_args"]["train_objective"] == "reconstruction", path
    with pytest.raises(ZooError, match="train_objective"):
        MOMENTReconstructionModule(pretrained=None, t5_config=tiny_t5, train_objective="other")
