"""The classifier f is selected as the official ``f_model_train`` selects it: after every epoch the model, in eval
mode, is scored on the training split (``all_new_record["tr"]``) and the state with the best *training* accuracy is
saved (``f_model.pt``) and reloaded to compute the bias values. Here: ``val/train_accuracy`` is the monitor, the
validation split's ``val/accuracy`` is reported only, and the bias table is written by ``zoo test`` of
``checkpoints/best-*.ckpt``, the checkpoint the configs' and docs' commands pass."""

import re
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import SequentialSampler, TensorDataset

from datamodules.intersectional import IntersectionalSamplesDataModule
from zoo.bggn import BiasClassifierModule
from zoo.bggn.bias import group_bias
from zoo.cli import main
from zoo.hub import load_checkpoint
from zoo.registry import ROOT

SMOKE = ROOT / "configs" / "smoke" / "bggn_synthetic_classifier.yaml"


def _relabelled(subset, y: torch.Tensor) -> TensorDataset:
    x, _, a = (torch.stack(t) for t in zip(*[subset[i] for i in range(len(subset))]))
    return TensorDataset(x, y, a)


def test_validation_scores_the_training_split_and_selects_on_it():
    dm = IntersectionalSamplesDataModule(source="synthetic", d=5, n_extra=0, min_count=1, feature_dim=2, batch_size=3)
    dm.setup("fit")
    loaders = dm.val_dataloader()  # the training split first (unshuffled), then the validation split
    assert [len(dl.dataset) for dl in loaders] == [29, 3]
    assert loaders[0].dataset is dm.train_set and isinstance(loaders[0].sampler, SequentialSampler)

    torch.manual_seed(0)
    model = BiasClassifierModule(in_dim=2, hidden=(4,))
    with torch.no_grad():
        right = {name: (model(_relabelled(s, torch.zeros(len(s), dtype=torch.long)).tensors[0]) > 0).long()
                 for name, s in (("train", dm.train_set), ("val", dm.val_set))}
    # labels by construction: the training split has 5 of 29 wrong, the validation split all 3 wrong
    y_train = right["train"].clone()
    y_train[:5] = 1 - y_train[:5]
    dm.train_set = _relabelled(dm.train_set, y_train)
    dm.val_set = _relabelled(dm.val_set, 1 - right["val"])

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    out = trainer.validate(model, datamodule=dm, verbose=False)
    logged = {k: v for d in out for k, v in d.items()}
    assert logged["val/train_accuracy"] == pytest.approx(24 / 29, rel=1e-6)
    assert logged["val/accuracy"] == 0.0

    def bce(ds: TensorDataset) -> float:
        with torch.no_grad():
            logit = model(ds.tensors[0]).double().numpy()
        y = ds.tensors[1].numpy()
        return float(np.mean(np.logaddexp(0.0, np.where(y == 1, -logit, logit))))

    assert logged["val/train_loss"] == pytest.approx(bce(dm.train_set), rel=1e-5)
    assert logged["val/loss"] == pytest.approx(bce(dm.val_set), rel=1e-5)
    # the checkpoint callback selects on the training accuracy (official tr acc >= best_tr_ap), higher is better
    assert (BiasClassifierModule.monitor, BiasClassifierModule.monitor_mode) == ("val/train_accuracy", "max")


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return {k[len("net."):]: v for k, v in load_checkpoint(path)["state_dict"].items() if k.startswith("net.")}


@pytest.mark.timeout(300)
def test_bias_table_comes_from_the_epoch_with_the_best_training_accuracy(in_tmp):
    # lr 0.1 and 5 epochs scored on the whole splits: the best training accuracy (epoch 2), the best validation
    # accuracy (epoch 0) and the last epoch (4) are three different epochs
    common = ["--wandb_mode", "disabled", "--model.init_args.lr", "0.1"]
    assert main(["fit", "--config", str(SMOKE), *common, "--trainer.max_steps", "45",
                 "--trainer.limit_val_batches", "1.0"]) == 0
    (run,) = Path("runs", "bggn_synthetic_classifier").iterdir()
    metrics = pd.read_csv(run / "logs" / "fit" / "metrics.csv").dropna(subset=["val/train_accuracy"])
    assert len(metrics) == 5
    best_epoch = int(metrics.loc[metrics["val/train_accuracy"].idxmax(), "epoch"])
    assert best_epoch != int(metrics.loc[metrics["val/accuracy"].idxmax(), "epoch"]), "the test needs them apart"
    assert best_epoch != int(metrics["epoch"].max()), "the test needs the best epoch apart from the last"

    # the command the paper config's comment gives, with the run's timestamp and the checkpoint's epoch and step
    cfg_text = (ROOT / "configs" / "bggn_synthetic_classifier.yaml").read_text()
    (ckpt,) = re.findall(r"zoo test --config \S+ --ckpt_path '([^']+)'", cfg_text)
    (best,) = Path().glob(ckpt.replace("<ts>", "*").replace("<epoch>-<step>", "*"))
    assert int(best.name.split("-")[1]) == best_epoch
    last = run / "checkpoints" / "last.ckpt"
    assert not all(torch.equal(v, _weights(last)[k]) for k, v in _weights(best).items())

    assert main(["test", "--config", str(SMOKE), *common, "--ckpt_path", str(best)]) == 0
    table = pd.read_csv(run / "bias_table.csv")

    # the bias values by hand: per-sample BCE of the best weights over every sample, grouped by combination
    dm = IntersectionalSamplesDataModule(source="synthetic", d=6, n_extra=1000, min_count=20, feature_dim=4)
    dm.setup("test")
    x, y, a = dm.all_set.tensors

    def table_of(weights: Path) -> np.ndarray:
        model = BiasClassifierModule(in_dim=4, hidden=(16,))
        model.net.load_state_dict(_weights(weights))
        model.eval()
        with torch.no_grad():
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y.float(), reduction="none")
        return group_bias(loss, a)[1].numpy()

    np.testing.assert_allclose(table["bias"].to_numpy(), table_of(best), rtol=1e-5)
    assert not np.allclose(table["bias"].to_numpy(), table_of(last), rtol=1e-5)  # the last epoch's would differ


def _classifier_test_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "classifier" in ln and "--ckpt_path" in ln]


@pytest.mark.parametrize("stem", ["bggn_synthetic_classifier", "bggn_celeba_classifier", "bggn_toxic_classifier"])
def test_the_paper_configs_test_the_best_checkpoint(stem):
    lines = _classifier_test_lines((ROOT / "configs" / f"{stem}.yaml").read_text())
    assert lines, f"{stem}.yaml: no `zoo test ... --ckpt_path` command in its comments"
    for ln in lines:
        assert f"--ckpt_path 'runs/{stem}/<ts>/checkpoints/best-<epoch>-<step>.ckpt'" in ln, ln


def test_the_card_and_readme_test_the_best_classifier_checkpoint():
    card = _classifier_test_lines((ROOT / "cards" / "bggn.md").read_text())
    (row,) = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("| `bggn` | [")]
    assert len(card) == 2 and "--ckpt_path" in row
    for ln in [*card, row]:
        assert "last.ckpt" not in ln and "/checkpoints/best-<epoch>-<step>.ckpt" in ln, ln
