"""ByzantineIdentification under DDP, 2 gloo CPU processes (forked by `zoo fit` from this process, which saves the
start-up of a fresh interpreter), in float64: the gathered split-half gradients, where g2 comes from the training
step's own local gradient through the callback's DDP communication hook (one pass), equal a single-process two-pass
computation on the same shards (autograd on each half) to 1e-10, and so do W and the flagged set; and
`action: exclude` (rank 1 attacked and flagged) trains exactly as one process on rank 0's shard alone."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

from callbacks.byzantine_identification import ByzantineAttack, ByzantineIdentification
from datamodules.byzantine import MachineShardDataModule
from zoo.bymi import FeatureClassifier, bymi
from zoo.cli import main

STEPS = 4
MODEL = dict(n_features=20, n_classes=10, hidden=8, lr=0.1)
DATA = dict(source="digits", machines=2, n_per_machine=100, n_components=20)
ATTACK = dict(ranks=[1], attack="ood")
IDENT = dict(every_n_steps=2, alpha=0.1, estimator="master", offset=0, action="exclude", save_tensors=True)


def _config() -> dict:
    return {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp_fork", "max_steps": STEPS, "precision": "64-true",
                    "limit_val_batches": 0, "num_sanity_val_steps": 0, "enable_progress_bar": False,
                    "enable_model_summary": False, "log_every_n_steps": 1,
                    "callbacks": [
                        {"class_path": "callbacks.byzantine_identification.ByzantineAttack", "init_args": ATTACK},
                        {"class_path": "callbacks.byzantine_identification.ByzantineIdentification",
                         "init_args": IDENT}]},
        "model": {"class_path": "zoo.bymi.FeatureClassifier", "init_args": MODEL},
        "data": {"class_path": "datamodules.byzantine.MachineShardDataModule", "init_args": DATA},
    }


def _first_batch(dm: MachineShardDataModule, machine: int):
    dm.hparams.machine = machine
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(0)
    x, y = next(iter(loader))
    return x.clone().double(), y.clone()


def test_two_process_identification_and_exclusion(in_tmp):
    Path("ddp.yaml").write_text(yaml.safe_dump(_config()))
    assert main(["fit", "--config", "ddp.yaml", "--wandb_mode", "disabled", "--run_name", "ddp"]) == 0
    run_dir = next(Path("runs/ddp").iterdir())
    saved = load_file(str(run_dir / "byzantine" / "step_000000.safetensors"))
    with safe_open(str(run_dir / "byzantine" / "step_000000.safetensors"), "pt") as f:
        assert f.metadata()["split"] == "one pass"  # g2 from the step's gradient, and the first-check test agreed
    checks = list(csv.DictReader(open(run_dir / "byzantine" / "checks.csv")))
    rows = [r for r in checks if r["step"] == "0"]

    # the same computation in this one process, shard by shard, at the step-0 parameters
    L.seed_everything(0, verbose=False)
    model = FeatureClassifier(**MODEL).double()
    dm = MachineShardDataModule(**DATA)
    dm.setup("fit")
    ident, attack = ByzantineIdentification(**IDENT), ByzantineAttack(**ATTACK)
    ident._names = [n for n, _ in model.named_parameters()]
    g1, g2 = [], []
    for rank in (0, 1):
        batch = list(_first_batch(dm, rank))
        attack.corrupt_batch(batch, rank, 0)
        a, b, n_half, _ = ident.split_gradients(model, batch, ident.split_generator(0, rank))
        g1.append(a)
        g2.append(b)
    g1, g2 = torch.stack(g1), torch.stack(g2)
    torch.testing.assert_close(saved["g1"], g1, rtol=0, atol=1e-10)
    torch.testing.assert_close(saved["g2"], g2, rtol=0, atol=1e-10)  # (B·g − n1·g1)/n2 vs autograd on D2
    ref = bymi(g1, g2, alpha=0.1, estimator="master", offset=0, n_half=n_half)
    assert float(rows[1]["W"]) == float(saved["W"][0]) and abs(float(rows[1]["W"]) - ref.W.item()) < 1e-10
    assert rows[1]["rank"] == "1" and rows[1]["flagged"] == "1" and bool(ref.flagged.item())

    # rank 1 was excluded from every step: DDP's weights are those of training on rank 0's shard alone
    L.seed_everything(0, verbose=False)
    alone = FeatureClassifier(**MODEL)
    shard0 = MachineShardDataModule(**DATA, machine=0)
    L.Trainer(accelerator="cpu", devices=1, max_steps=STEPS, precision="64-true", limit_val_batches=0, num_sanity_val_steps=0,
              logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False).fit(alone, datamodule=shard0)
    ddp = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert ddp.keys() == alone.state_dict().keys()
    for k, v in alone.state_dict().items():
        torch.testing.assert_close(ddp[k], v, rtol=0, atol=1e-12)
    # which plain DDP would not give: the attacked rank's gradient is far from rank 0's
    full = (g1 + g2) / 2
    assert (full[1] - full[0]).norm() > 0.5 * full[0].norm()
    step2 = [r for r in checks if r["step"] == "2"]
    assert [r["step"] for r in checks] == ["0", "0", "2", "2"]  # the two checks' rows, in order, in one file
    assert step2[1]["flagged"] == "1"  # the second check (g2 from the step's gradient, no direct test) flags it too
    with safe_open(str(run_dir / "byzantine" / "step_000002.safetensors"), "pt") as f:
        assert f.metadata()["split"] == "one pass"
