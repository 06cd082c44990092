"""The predictor is selected as the official ``bias_predictor_train`` selects it: after every epoch the group MAE on
the training combinations (``tr_reduced``) and on the held-out ones is computed, and the state with the best
*training* MAE is kept and saved for the later phases. Selecting on the held-out combinations would select on the
very combinations the generators are scored on."""

from pathlib import Path

import lightning.pytorch as L
import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from datamodules.intersectional import BiasTableDataModule
from zoo.bggn import BiasPredictorModule, SearchTreeModule, VAEModule
from zoo.bggn.bias import one_hot, split_seen_unseen, write_bias_table
from zoo.cli import main
from zoo.hub import load_checkpoint
from zoo.registry import ROOT

SMOKE_PREDICTOR = ROOT / "configs" / "smoke" / "bggn_synthetic_predictor.yaml"


def test_validation_reports_seen_and_unseen_mae_and_selects_on_seen(tmp_path):
    # 8 combinations, 2 held out; the bias of the held-out ones is far from anything a fresh predictor says, so the
    # two MAEs differ by a wide margin
    a = ((np.arange(8)[:, None] >> np.arange(2, -1, -1)) & 1).astype(np.int64)
    seen = split_seen_unseen(8, 0.25, 0).numpy()  # the datamodule's split (split_seed 0)
    bias = np.linspace(0.1, 0.8, 8) + np.where(seen, 0.0, 5.0)
    write_bias_table(tmp_path / "t.csv", ["x", "y", "z"], a, bias, np.full(8, 5))
    dm = BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=0.25, batch_size=2)
    dm.setup("fit")
    assert torch.equal(dm.table.seen, torch.as_tensor(seen))
    assert [len(dl.dataset) for dl in dm.val_dataloader()] == [6, 2]  # seen first, then the held-out ones

    torch.manual_seed(0)
    model = BiasPredictorModule(d=3, hidden_dim=8, feature_dim=8)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    out = trainer.validate(model, datamodule=dm, verbose=False)
    model.eval()
    with torch.no_grad():
        pred = model(one_hot(torch.as_tensor(a)).float()).double().numpy()
    err = np.abs(pred - bias)
    logged = {k: v for d in out for k, v in d.items()}
    assert logged["val/mae_seen"] == pytest.approx(err[seen].mean(), rel=1e-5)
    assert logged["val/mae_unseen"] == pytest.approx(err[~seen].mean(), rel=1e-5)
    assert logged["val/mae_unseen"] > logged["val/mae_seen"] + 2  # the two really differ
    # the checkpoint callback selects on the seen combinations (official re_tr_grp <= best_re_tr), lower is better
    assert (BiasPredictorModule.monitor, BiasPredictorModule.monitor_mode) == ("val/mae_seen", "min")

    # nothing held out: one loader, the seen one (no empty loader for Lightning to warn about)
    whole = BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=0.0)
    whole.setup("fit")
    assert [len(dl.dataset) for dl in whole.val_dataloader()] == [8]


def _state(path: Path, prefix: str = "predictor.") -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in load_checkpoint(path)["state_dict"].items() if k.startswith(prefix)}


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.timeout(300)
def test_later_phases_load_the_predictor_with_the_best_seen_mae_not_the_last(in_tmp):
    assert main(["fit", "--config", str(SMOKE_PREDICTOR), "--wandb_mode", "disabled"]) == 0
    (run,) = Path("runs", "bggn_synthetic_predictor").iterdir()
    metrics = pd.read_csv(run / "logs" / "fit" / "metrics.csv").dropna(subset=["val/mae_seen"])
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    last = run / "checkpoints" / "last.ckpt"
    # the kept epoch is the one with the lowest MAE on the seen combinations
    assert int(best.name.split("-")[1]) == int(metrics.loc[metrics["val/mae_seen"].idxmin(), "epoch"])
    best_state, last_state = _state(best), _state(last)
    assert not _equal(best_state, last_state), "the smoke run's best epoch is not its last: the test needs them apart"

    def loaded(predictor_from: str, cls=VAEModule) -> dict[str, torch.Tensor]:
        m = cls(d=6, predictor_hidden_dim=32, predictor_feature_dim=16, predictor_from=predictor_from)
        m.setup("fit")
        return m.predictor.state_dict()

    # the paper configs' glob (relative to the project root, here the test's directory)
    cfg = yaml.safe_load((ROOT / "configs" / "bggn_synthetic_vae.yaml").read_text())
    from_config = cfg["model"]["init_args"]["predictor_from"]
    is_best = _equal(loaded(from_config), best_state)
    assert is_best, f"bggn_synthetic_vae's predictor_from {from_config} does not load the best checkpoint"
    # the sweep's stages: ${predictor} is the predictor stage's run dir
    stages = yaml.safe_load((ROOT / "configs" / "sweeps" / "bggn_synthetic.yaml").read_text())["stages"]
    refs = [s["args"]["model.init_args.predictor_from"] for s in stages
            if "model.init_args.predictor_from" in (s.get("args") or {})]
    assert len(refs) == 3  # vae, bggn, tree
    for ref in refs:
        is_best = _equal(loaded(ref.replace("${predictor}", str(run.resolve())), SearchTreeModule), best_state)
        assert is_best, f"the sweep's predictor_from {ref} does not load the best checkpoint"
    # every paper config that loads a predictor loads its best checkpoint
    for path in sorted((ROOT / "configs").glob("bggn_*.yaml")):
        value = yaml.safe_load(path.read_text())["model"]["init_args"].get("predictor_from")
        assert value is None or value.endswith("/checkpoints/best-*.ckpt"), (path.name, value)
