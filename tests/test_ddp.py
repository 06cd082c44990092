"""Paper modules under DDP (two CPU processes, gloo, through the real `zoo` command): one module per DDP pattern
trains (two players under manual optimisation; a schedule whose first steps leave parameters idle), the ones that
must train in one process say why before anything runs, and a DDP fit's validation metric is the whole validation
set's, as a one-process `zoo validate` of its checkpoint computes it.

What stopped modules under DDP was a backward that leaves a parameter without a gradient. Every smoke config's
one-process fit (tests/test_smoke_configs.py) checks with `idle_probe.IdleParameters` that a module whose
backwards do so declares it; the toy below shows that the probe sees what DDP stops on. A DDP fit of every module
(two processes, 25-40 s each on 2 cores) cost a third of the suite's time.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from zoo.checks import _resolve
from zoo.cli import main
from zoo.registry import ROOT

SMOKE = ROOT / "configs" / "smoke"
DDP = ["--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu", "--wandb_mode",
       "disabled"]


def zoo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["zoo", *args], capture_output=True, text=True, timeout=500, check=False)


# every module class that may train under DDP, by a smoke config (diffoas_darcy: the validation test below) ...
MAY_SPLIT = [
    "bggn_synthetic_classifier", "bggn_synthetic_predictor", "bggn_synthetic_vae", "bggn_synthetic_tree",
    "bymi_simulation", "bymi_ddp_digits", "dpformer_movielens_nonprivate", "gentle_toy1", "gentle_toy1_cwgan",
    "gentle_toy1_mgan", "iml_cvdb_stage1", "moment_etth1", "moment_ecg5000_head", "moment_pretrain",
    "pcdenoiser_div2k", "pmtr_everyday", "rosa_gsm8k", "lora_gsm8k", "fft_gsm8k", "score_cifar10lt",
    "unlearning_memorize_markov", "vpdm_mvtec",
]
# ... and the ones trained here, one per pattern: GENTLE's two players under manual optimisation (declared as a class
# attribute), RoSA's one-run schedule (declared while its mask stage leaves the sparse values idle); bymi_ddp_digits
# trains on two forked ranks in its own smoke test, the toy in tests/framework/test_reliability.py
TRAINS_UNDER_DDP = ["gentle_toy1", "rosa_gsm8k"]


def model_class(stem: str) -> type:
    return _resolve(yaml.safe_load((SMOKE / f"{stem}.yaml").read_text())["model"]["class_path"])


def test_every_module_that_trains_is_in_one_list_or_the_other():
    import lightning as L

    trains = {cls for cls in map(model_class, sorted(p.stem for p in SMOKE.glob("*.yaml")))
              if cls.training_step is not L.LightningModule.training_step}
    split = {cls for cls in trains if getattr(cls, "single_process", None) is None}
    assert split == {model_class(s) for s in [*MAY_SPLIT, "diffoas_darcy"]}
    assert trains - split == {model_class(s) for s, _ in ONE_PROCESS}


@pytest.mark.timeout(600)  # hang guard: two processes on a busy machine
@pytest.mark.parametrize("stem", TRAINS_UNDER_DDP)
def test_module_trains_under_ddp(in_tmp, stem):
    fit = zoo("fit", "--config", str(SMOKE / f"{stem}.yaml"), *DDP)
    assert fit.returncode == 0, fit.stderr[-3000:]
    (run,) = Path("runs", stem).iterdir()
    assert (run / "checkpoints" / "last.ckpt").exists()


@pytest.mark.timeout(600)
def test_the_idle_probe_sees_what_stops_ddp(in_tmp, toy_config):
    import idle_probe

    idle = ["--config", str(toy_config), "--model.class_path", "zoo_toy.ToyWithIdleLayer"]
    idle_probe.SEEN.clear()
    assert main(["fit", *idle, "--trainer.callbacks+=idle_probe.IdleParameters", "--wandb_mode", "disabled"]) == 0
    (seen,) = idle_probe.SEEN
    assert not seen["declared"] and seen["idle"] and all(names == ["spare.bias", "spare.weight"]
                                                         for _, names in seen["idle"])
    # the same module, undeclared, under DDP: stopped at its second step
    fit = zoo("fit", *idle, *DDP)
    assert fit.returncode != 0 and "parameters that were not used in producing the loss" in fit.stderr, \
        fit.stderr[-3000:]


ONE_PROCESS = [
    ("gfnpg_hypergrid", "GFNPGModule"), ("gentle_toy1_knn", "NearestNeighboursModule"),
    ("gentle_toy1_marginal", "PooledMarginalModule"), ("moment_ecg5000", "MOMENTEmbeddingSVMModule"),
    ("unlearning_sga_gptneo125m", "UnlearningModule"), ("regal_date", "ReGALModule"), ("bggn_synthetic", "BGGNModule"),
]


@pytest.mark.parametrize("stem, module", ONE_PROCESS)
def test_modules_that_train_in_one_process_refuse_several(in_tmp, capsys, stem, module):
    assert main(["fit", "--config", str(SMOKE / f"{stem}.yaml"), *DDP]) == 2  # before anything is built
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: error:")]
    assert len(err) == 1 and err[0].startswith(f"zoo: error: {module} trains in one process: "), err
    assert not Path("runs").exists()


@pytest.mark.timeout(600)
def test_a_ddp_fit_logs_the_whole_validation_sets_metric(in_tmp):
    # 8 validation problems, 4 per process: synced, the mean is over all 8; unsynced it was process 0's 4
    cfg = str(SMOKE / "diffoas_darcy.yaml")
    fit = zoo("fit", "--config", cfg, *DDP, "--trainer.limit_val_batches", "1.0")
    assert fit.returncode == 0, fit.stderr[-3000:]
    (run,) = Path("runs", "diffoas_darcy").iterdir()
    val = zoo("validate", "--config", cfg, "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
              "--wandb_mode", "disabled", "--trainer.limit_val_batches", "1.0")
    assert val.returncode == 0, val.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["fit"]["val/rel_l2"] == pytest.approx(summary["validate"]["val/rel_l2"], rel=1e-5)
