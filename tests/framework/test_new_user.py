"""What a new user meets (issue 17): one-line errors for every bad input, no orphan run dirs, resume that refuses
changed settings and keeps a finished run's record, a truthful progress bar, readable commands."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from zoo.cli import main


def _one_error(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: error:")]
    assert len(err) == 1, err
    return err[0]


def _fit(toy_config, *extra) -> Path:
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled", *extra]) == 0
    return sorted(Path("runs/toy").iterdir())[-1]


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "noise.ckpt").write_bytes(os.urandom(4096))
    import torch
    from safetensors.torch import save_file

    # PyTorch files that are not Lightning checkpoints (a plain state dict, say a pytorch_model.bin): a KeyError
    # or AttributeError traceback from deep inside Lightning's restore
    torch.save({"weight": torch.zeros(2)}, tmp_path / "weights.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    save_file({"weight": torch.zeros(2)}, tmp_path / "model.safetensors")
    return tmp_path


@pytest.mark.parametrize("extra, needle", [
    (["--ckpt_path", "{tmp}/noise.ckpt"], "is not a readable PyTorch checkpoint"),
    (["--ckpt_path", "{tmp}/truncated.ckpt"], "is not a readable PyTorch checkpoint"),
    (["--ckpt_path", "{tmp}/missing.ckpt"], "missing.ckpt does not exist"),
    # a stage's weights read weights-only (init_from): random bytes were torch's long unpickling refusal
    (["--model.init_args.init_from", "{tmp}/noise.ckpt"], "noise.ckpt is not a readable PyTorch checkpoint"),
    (["--ckpt_path", "{tmp}/weights.pt"], ("weights.pt is a PyTorch file but not a Lightning checkpoint (no "
                                           "'state_dict' or 'pytorch-lightning_version' among its keys 'weight')")),
    (["--ckpt_path", "{tmp}/list.pt"], "list.pt is a PyTorch file but not a Lightning checkpoint (it holds a list)"),
    (["--ckpt_path", "{tmp}/model.safetensors"], "model.safetensors is a safetensors file of weights"),
    # a checkpoint whose weights do not fit the model (edited, damaged, from another version): torch's
    # load_state_dict traceback from inside Lightning's restore
    (["--ckpt_path", "{tmp}/misfit.ckpt"], ("misfit.ckpt does not fit the model this config builds: size mismatch "
                                            "for net.0.weight: copying a param with shape torch.Size([3, 3])")),
    (["--trainer.max_steps", "-5"], "max_steps"),
    # Lightning took these: a ZeroDivisionError mid-run, numpy's seed error, clipping skipped without a word
    (["--trainer.accumulate_grad_batches", "0"], "trainer.accumulate_grad_batches = 0: accumulate over N >= 1"),
    (["--trainer.val_check_interval", "0"], "trainer.val_check_interval = 0: give a positive number of steps"),
    (["--trainer.gradient_clip_val", "-1"], "trainer.gradient_clip_val = -1: a clip value is >= 0"),
    (["--seed_everything", "-1"], "seed_everything = -1: seeds are integers in [0, 2**32 - 1]"),
    (["--config", "{tmp}/list.yaml"], "is a YAML list, not a mapping of options"),
    (["--config", "{tmp}/empty.yaml"], "empty.yaml is empty"),
    (["--model.init_args.lr", "-0.1"], "model.init_args.lr = -0.1 is a negative learning rate"),
    (["--model.init_args.lr", "0"], "model.init_args.lr = 0: with every learning rate at 0 the run would train nothing"),
    (["--checkpoint_every_n_steps", "0"], "checkpoint_every_n_steps must be a positive number"),
    (["--data.init_args.batch_size", "-4"], "data.init_args.batch_size = -4: a count or size cannot be negative"),
    (["--data.init_args.seed", "-1"], "data.init_args.seed = -1: seeds are non-negative integers"),
    (["--data.init_args.n", "0"], "the training data has no batches (an empty split, e.g. a data setting of 0 "
                                  "samples, or fewer samples than a batch with drop_last): nothing was trained; "
                                  "this config sets data.init_args.n to 0"),  # Lightning: a run dir with no checkpoint
    # null reached the constructor through jsonargparse's class_path init_args: a TypeError traceback
    (["--model.init_args.hidden", "null"], "model.init_args.hidden = null, but ToyRegressor needs a value there (int)"),
    (["--data.init_args.batch_size", "null"], "data.init_args.batch_size = null, but ToyData needs a value there"),
    (["--run_dir", "{tmp}/list.yaml"], "cannot create the run dir {tmp}/list.yaml (File exists"),
    (["--run_root", "{tmp}/list.yaml"], "cannot create the run dir {tmp}/list.yaml/toy (Not a directory"),
])
def test_bad_inputs_are_one_line_errors_and_leave_no_run_dir(in_tmp, toy_config, bad_files, capsys, extra, needle):
    if "truncated" in extra[-1]:
        good = _fit(toy_config) / "checkpoints" / "last.ckpt"
        (bad_files / "truncated.ckpt").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        capsys.readouterr()
    if "misfit" in extra[-1]:
        import torch

        ckpt = torch.load(_fit(toy_config) / "checkpoints" / "last.ckpt", weights_only=False)
        ckpt["state_dict"]["net.0.weight"] = torch.zeros(3, 3)
        torch.save(ckpt, bad_files / "misfit.ckpt")
        capsys.readouterr()
    before = set(Path("runs").rglob("config.yaml")) if Path("runs").exists() else set()
    extra = [a.replace("{tmp}", str(bad_files)) for a in extra]
    assert main(["fit", "--config", str(toy_config), "--wandb_mode", "disabled", *extra]) == 2
    assert needle.replace("{tmp}", str(bad_files)) in _one_error(capsys)
    after = set(Path("runs").rglob("config.yaml")) if Path("runs").exists() else set()
    assert after == before, "a failed run left a run dir behind"


@pytest.mark.parametrize("verb", ["validate", "test"])
def test_a_failed_evaluation_of_a_run_leaves_it_as_it_was(in_tmp, toy_config, capsys, verb):
    """An evaluation of an existing run that fails left its config.<stage>.yaml and logs/<stage> there, for a stage
    the summary and card never listed (its W&B run stays, finished as failed)."""
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]) == 0
    (run,) = Path("runs/toy").iterdir()
    before = sorted(p.relative_to(run) for p in run.rglob("*") if "wandb" not in p.parts)
    summary = (run / "summary.json").read_text()
    capsys.readouterr()
    assert main([verb, "--config", str(toy_config), "--wandb_mode", "disabled", "--data.init_args.n", "0",
                 "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 2
    assert "data has no batches" in _one_error(capsys)
    assert sorted(p.relative_to(run) for p in run.rglob("*") if "wandb" not in p.parts) == before
    assert (run / "summary.json").read_text() == summary


@pytest.mark.parametrize("verb, split", [("test", "test"), ("validate", "validation"), ("predict", "prediction")])
def test_an_evaluation_with_no_data_is_a_one_line_error(in_tmp, toy_config, capsys, verb, split):
    """Lightning only warns that the loader is empty; the run dir would hold a card with no metrics."""
    assert main([verb, "--config", str(toy_config), "--wandb_mode", "disabled", "--data.init_args.n", "0"]) == 2
    err = _one_error(capsys)
    assert f"the {split} data has no batches" in err and err.endswith("this config sets data.init_args.n to 0")
    assert not Path("runs").exists() or not list(Path("runs").rglob("config.yaml"))


def test_a_run_that_fails_after_training_started_is_marked_failed(in_tmp, toy_config, capsys):
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "3", "--wandb_mode", "disabled",
                 "--model.init_args.nan_at_step", "10"]) == 2
    (run,) = Path("runs/toy").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and "non-finite training loss" in summary["error"]
    from zoo.compare import find_runs

    assert find_runs(["runs"]) == []  # lookups skip it


def test_resume_refuses_changed_settings_and_keeps_a_finished_record(in_tmp, toy_config, capsys):
    run = _fit(toy_config)
    last = run / "checkpoints" / "last.ckpt"
    summary = (run / "summary.json").read_text()
    capsys.readouterr()
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled",
                 "--ckpt_path", str(last), "--model.init_args.hidden", "5"]) == 2
    assert "hidden=5 (checkpoint: 8)" in _one_error(capsys)
    # the same settings: nothing left to train, and the finished run's summary is not rewritten
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled",
                 "--ckpt_path", str(last)]) == 0
    assert (run / "summary.json").read_text() == summary


def test_a_resumed_fit_that_trains_no_further_still_names_its_last_checkpoint(in_tmp, toy_config, capsys):
    # a finished run's checkpoint, resumed where it lies (its own run dir) and from a copy (a new run dir, which
    # ended with no checkpoint at all); the copy is the resumed file byte for byte, not a re-save at that step
    last = _fit(toy_config) / "checkpoints" / "last.ckpt"
    copy = in_tmp / "elsewhere.ckpt"
    copy.write_bytes(last.read_bytes())
    for source in (last, copy):
        capsys.readouterr()
        assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled",
                     "--ckpt_path", str(source)]) == 0
        named = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("zoo: last checkpoint ")]
        assert len(named) == 1, named
        assert Path(named[0].split(" ", 3)[-1]).read_bytes() == copy.read_bytes()
    assert len(list(Path("runs/toy").glob("*/checkpoints/last.ckpt"))) == 2


def test_compare_takes_run_dirs_as_words(in_tmp, toy_config, capsys):
    a = _fit(toy_config, "--model.init_args.lr", "0.01")
    b = _fit(toy_config, "--model.init_args.lr", "0.1")
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 3 and rows[0].startswith("run,model.lr")
    assert main(["compare", "--runs", str(a), "--format", "csv"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2  # only the run asked for, not all of runs/


def test_compare_plot_legend_names_what_differs(in_tmp, toy_config, monkeypatch):
    from zoo.compare import local_run, run_labels

    runs = [local_run(_fit(toy_config, "--model.init_args.lr", lr)) for lr in ("0.01", "0.1")]
    assert run_labels(runs) == ["lr=0.01", "lr=0.1"]


def test_list_status_is_checked_and_help_is_whole(capsys):
    assert main(["list", "--status", "bogus"]) == 2
    assert "status" in _one_error(capsys)
    out = subprocess.run(["zoo", "push", "--help"], capture_output=True, text=True).stdout
    head = out.split("positional arguments")[0]
    assert "README.md (its model card)." in " ".join(head.split())


def test_progress_bar_counts_batches_against_batches():
    from callbacks.progress import ZooProgressBar

    bar = ZooProgressBar()
    trainer = SimpleNamespace(num_training_batches=100, max_steps=6, global_step=0, accumulate_grad_batches=2)
    bar._trainer = trainer  # noqa: SLF001 - Lightning's own attribute behind `ProgressBar.trainer`
    assert bar.total_train_batches == 12  # 6 optimizer steps of 2 micro-batches, not 6
    trainer.global_step = 4
    assert bar.total_train_batches == 4
    trainer.max_steps = -1
    assert bar.total_train_batches == 100


def test_model_index_metric_types_are_readable_with_the_split_apart():
    from huggingface_hub import ModelCardData

    from zoo.cards import eval_results

    summary = {"test": {"test/exact_match": 0.5, "test/degmfp/ratio": 1.7, "val/loss": 2.0},
               "card_metadata": {"datasets": [], "data_source": "embedded: seeded graphs"}}
    results = eval_results(summary, ModelCardData())
    assert [(r.metric_type, r.dataset_split, r.metric_value) for r in results] == [
        ("degmfp.ratio", "test", 1.7), ("exact_match", "test", 0.5)]
    assert results[0].dataset_name == "embedded: seeded graphs" and results[0].dataset_type == "zoo-embedded"
    own = {**summary, "card_metadata": {"data_source": "local files in the GSM8K format in /data/mine"}}
    assert eval_results(own, ModelCardData())[0].dataset_type == "local"  # was "zoo-embedded" for a user's files
    fit_only = eval_results({"fit": {"train/loss": 0.25}}, ModelCardData())
    assert [(r.metric_type, r.dataset_split) for r in fit_only] == [("loss", "train")]


@pytest.mark.parametrize("config", ["clusterdel_smallgraphs", "minnorm_gaussian"])
def test_fit_on_an_evaluation_only_paper_names_the_verb_it_takes(in_tmp, capsys, config):
    root = Path(__file__).resolve().parents[2]
    assert main(["fit", "--config", str(root / "configs" / "smoke" / f"{config}.yaml"), "--wandb_mode", "disabled"]) == 2
    assert "is evaluation only (it has no training step): run it with `zoo test`" in _one_error(capsys)
    assert not Path("runs").exists(), "a refused run left a run dir behind"


def test_range_check_reads_names_nested_settings_and_leaves_sentinels_alone():
    from zoo.checks import check_ranges
    from zoo.errors import ZooError

    for name in ("n_layers", "num_heads", "d_model", "r", "max_len", "hidden_dim", "points_per_node", "eval_seed",
                 "embedded_n_train", "top_k", "diagnostic_every", "synthetic_users"):
        with pytest.raises(ZooError, match=rf"model.init_args.{name} = -1: "):
            check_ranges("model", {name: -1})
    with pytest.raises(ZooError, match=r"model.init_args.t5_config.num_layers = -2: a count or size"):
        check_ranges("model", {"t5_config": {"num_layers": -2, "d_model": 8}})
    for name in ("hidden_size", "vocab_size", "num_key_value_heads", "d_kv", "image_size", "n_components", "seq_length",
                 "norm_num_groups", "layers_per_block", "max_position_embeddings", "relative_attention_max_distance",
                 "num_layers", "voxel_size", "sf", "render_dpi", "bin_interval", "bandwidth"):
        with pytest.raises(ZooError, match=rf"model.init_args.m.{name} = 0: a size must be positive"):
            check_ranges("model", {"m": {name: 0}})
    with pytest.raises(ZooError, match=r"model.init_args.t5_config.layer_norm_epsilon = -1.0: an epsilon cannot be"):
        check_ranges("model", {"t5_config": {"layer_norm_epsilon": -1.0}})
    for name, widths in (("hidden", [64, 0]), ("block_out_channels", [0]), ("output_dims", [8, -1])):
        with pytest.raises(ZooError, match=rf"model.init_args.{name} = .*: every width or size in it must be positive"):
            check_ranges("model", {name: widths})
    with pytest.raises(ZooError, match=r"model.init_args.lora_dropout = -0.5: a dropout probability lies in \[0, 1\]"):
        check_ranges("model", {"lora_dropout": -0.5})
    with pytest.raises(ZooError, match=r"model.init_args.cpu_seconds = 0: sandbox limits must be positive"):
        check_ranges("model", {"cpu_seconds": 0})
    # joblib's n_jobs=-1 (every core), a sentinel like nan_at_step=-1, indices, floats and zero pass
    check_ranges("model", {"n_jobs": -1, "nan_at_step": -1, "feature_index": -1, "shift": -3, "strength": -1.0,
                           "n_val": 0, "flag": False, "dropout": 1.0, "cpu_seconds": 0.5, "num_hidden_layers": 0,
                           "n_hidden_layers": 0, "eps": 0.0, "min_distance": 0, "num_workers": 0, "hidden": [],
                           "seeds": [0, -1], "out_indices": [0, 1]})


def test_learning_rates_at_zero_are_refused_only_when_nothing_would_train():
    from zoo.checks import check_learning_rates
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match=r"model.init_args.lr_mapping, model.init_args.lr_potential = 0: with every"):
        check_learning_rates({"lr_mapping": 0.0, "lr_potential": 0, "lr_warmup_steps": 0})
    with pytest.raises(ZooError, match=r"model.init_args.opt.lora_lr = 0: "):
        check_learning_rates({"opt": {"lora_lr": 0}, "min_lr": 0, "warmup_lr": 0.0, "lr_gamma": 0.5})
    # one part frozen on purpose, schedule settings at 0, an evaluation command, or a model with no rate: accepted
    check_learning_rates({"lr_mapping": 0.0, "lr_potential": 1e-3})
    check_learning_rates({"lr": 1e-3, "min_lr": 0.0, "warmup_lr": 0, "lr_decay": 0, "lr_warmup_steps": 0})
    check_learning_rates({"lr": 0.0}, training=False)
    check_learning_rates({"hidden": 0})


def test_damaged_run_records_are_one_line_errors(in_tmp, toy_config, capsys):
    run = _fit(toy_config)
    capsys.readouterr()
    good = (run / "summary.json").read_text()
    (run / "summary.json").write_text("{garbage")
    assert main(["compare", "runs"]) == 2
    assert "summary.json is not a readable run summary (Expecting property name" in _one_error(capsys)
    (run / "summary.json").write_text("[1, 2]")
    assert main(["card", str(run)]) == 2
    assert "summary.json is not a readable run summary (a JSON list, not an object)" in _one_error(capsys)
    (run / "summary.json").write_text(good)
    next(run.glob("logs/fit*/metrics.csv")).write_bytes(b"\x00\x01\xff")
    assert main(["compare", "runs", "--metric", "train/loss", "--plot_path", "curves.png"]) == 2
    assert "metrics.csv is not a readable metrics log ('utf-8' codec" in _one_error(capsys)
    (run / "config.yaml").write_text("model: [\n")
    assert main(["compare", "runs"]) == 2
    assert "config.yaml is not valid YAML (line 2)" in _one_error(capsys)


def test_a_damaged_task_record_fails_its_task_not_the_sweep(tmp_path, capsys):
    from zoo.sweep.runner import RESULT, _finish

    class Manifest(dict):
        def set(self, tid, **fields):
            self[tid].update(fields)

        def counts(self):
            return {"done": 0, "failed": 0, "skipped": 0, "running": 0, "pending": 0}

    (tmp_path / RESULT).write_text('{"state": "do')
    m = Manifest(t={"run_dir": str(tmp_path)})
    _finish(m, "t", 0)
    assert m["t"]["state"] == "failed" and "is not a readable sweep task result" in m["t"]["error"]


def test_a_checkpoint_of_another_model_is_refused_by_name(in_tmp, toy_config, capsys):
    last = _fit(toy_config) / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    other = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "gentle_toy1.yaml"
    assert main(["test", "--config", str(other), "--ckpt_path", str(last), "--wandb_mode", "disabled"]) == 2
    assert (f"{last} holds a ToyRegressor (zoo_toy.ToyRegressor), but the config builds zoo.gentle.GENTLEModule"
            in _one_error(capsys))
    # the same class by another import path is the same model
    from zoo.checks import check_checkpoint_class

    check_checkpoint_class("zoo.gentle.module.GENTLEModule", "zoo.gentle.GENTLEModule", "x.ckpt")


def test_predict_on_a_module_without_predictions_says_so(in_tmp, capsys):
    root = Path(__file__).resolve().parents[2]
    assert main(["predict", "--config", str(root / "configs" / "smoke" / "bymi_simulation.yaml"),
                 "--wandb_mode", "disabled"]) == 2
    assert "ByMIExperiment makes no predictions (it has no predict step): `zoo test` reports its metrics" in \
        _one_error(capsys)
    assert not Path("runs").exists()



def test_ctrl_c_marks_the_run_interrupted_and_a_resume_finishes_it(in_tmp, toy_config, capsys, monkeypatch):
    from zoo.compare import find_runs

    args = ["fit", "--config", str(toy_config), "--trainer.max_epochs", "3", "--wandb_mode", "disabled"]
    monkeypatch.setenv("ZOO_TOY_INTERRUPT_AT", "12")  # in epoch 2; last.ckpt holds epoch 1 (8 steps an epoch)
    assert main(args) == 130
    (run,) = Path("runs/toy").iterdir()
    last = run / "checkpoints" / "last.ckpt"
    hint = f"resume with the same command plus --ckpt_path {last}"
    assert f"zoo: interrupted; {hint}" in capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["error"] == f"interrupted at global step 12; {hint}"
    assert find_runs(["runs"]) == []  # not a finished run

    monkeypatch.delenv("ZOO_TOY_INTERRUPT_AT")
    assert main([*args, "--ckpt_path", str(last)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["error"] is None and summary["global_step"] == 24
    assert find_runs(["runs"]) == [run]  # the resumed run counts again

    # resumed again for more epochs and stopped: the finished mark no longer holds
    monkeypatch.setenv("ZOO_TOY_INTERRUPT_AT", "30")
    assert main([*args[:4], "5", *args[5:], "--ckpt_path", str(last)]) == 130
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"


def test_compare_shows_the_test_metrics_unless_asked_for_more(in_tmp, toy_config, capsys):
    """A table of every training and validation number buries the result: the default is the test stage's metrics
    (the validation stage's where nothing was tested); `--metrics '*'` shows all."""
    run = _fit(toy_config)
    capsys.readouterr()
    assert main(["compare", str(run), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert header[1:] and all(h.startswith("val/") for h in header[1:])
    assert main(["test", "--config", str(toy_config), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
                 "--wandb_mode", "disabled"]) == 0
    capsys.readouterr()
    assert main(["compare", str(run), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert header[1:] and all(h.startswith("test/") for h in header[1:])
    assert main(["compare", str(run), "--format", "csv", "--metrics", "*"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert {h.split("/")[0] for h in header[1:]} >= {"train", "val", "test"}


DATAMODULE_FILES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "datamodules").glob("*.py")
                          if p.stem != "__init__")


@pytest.mark.parametrize("module", DATAMODULE_FILES)
def test_a_file_option_the_source_does_not_read_is_refused(module):
    """README: a file option that the config's `source` does not read (a `path` under `source: embedded`, the smoke
    configs' source) is refused, never silently ignored. Every datamodule declares its file options and their
    readers (`FILE_OPTIONS`, empty where it has no source switch); each is set under a source that does not read it."""
    import importlib
    import inspect
    import re
    import typing

    import lightning as L

    from zoo.errors import ZooError

    mod = importlib.import_module(f"datamodules.{module}")
    classes = [c for c in vars(mod).values()
               if inspect.isclass(c) and issubclass(c, L.LightningDataModule) and c.__module__ == mod.__name__]
    dummy = "/nonexistent/zoo-user-file"
    for cls in classes:
        assert "FILE_OPTIONS" in cls.__dict__, f"{cls.__name__} declares no FILE_OPTIONS (empty: no file option)"
        params = inspect.signature(cls.__init__).parameters
        # the sources a config may name: the `source` parameter's Literal (every class with file options has one
        # and no required argument, so the defaults build the rest)
        sources = typing.get_args(typing.get_type_hints(cls.__init__)["source"]) if cls.FILE_OPTIONS else ()
        for option, readers in cls.FILE_OPTIONS.items():
            assert option in params and set(readers) <= set(sources), (cls.__name__, option, readers, sources)
            other = next((s for s in sources if s not in readers), None)
            assert other is not None, f"{cls.__name__}.{option} is read by every source: it needs no entry"
            try:
                cls(source=other, **{option: dummy})
            except ZooError as e:
                assert re.search(rf"{option}='{dummy}' is read only with source=.*, but source='{other}': pass "
                                 r"--data.init_args.source ", str(e)), f"{cls.__name__}: {e}"
            else:
                pytest.fail(f"{cls.__name__}(source={other!r}, {option}=...) ignored the file option")


@pytest.mark.parametrize("verb", ["list", "push", "pull", "card", "compare", "sweep", "cruxeval-score"])
def test_every_option_of_a_zoo_command_is_explained_by_its_help(verb, capsys):
    """README: '`zoo <command> --help` explain[s] every option': each parameter of the command's function has a
    description in its docstring, and `--help` prints it."""
    import importlib
    import inspect

    import docstring_parser

    from zoo.cli import FUNCTIONS

    module, name = FUNCTIONS[verb]
    fn = getattr(importlib.import_module(module), name)
    described = {p.arg_name: " ".join((p.description or "").split()) for p in docstring_parser.parse(fn.__doc__).params}
    with pytest.raises(SystemExit):
        main([verb, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for param in inspect.signature(fn).parameters:
        assert described.get(param), f"zoo {verb} --help: --{param} has no description"
        assert " ".join(described[param].split()[:4]) in shown, f"zoo {verb} --help does not show --{param}'s text"


def test_the_settings_fuzzer_tells_one_line_refusals_from_tracebacks(tmp_path, toy_config):
    """tests/support/fuzz_settings.py (the tool that found the size-0 and nested-override tracebacks): the toy's
    `hidden` at 0 or -1 is refused in one line, its `sleep` at -1.0 reaches time.sleep in a training step and raises."""
    from fuzz_settings import main as fuzz

    config, out = tmp_path / "toy.yaml", tmp_path / "fuzz.jsonl"
    config.write_text(toy_config.read_text().replace("    hidden: 8\n", "    hidden: 8\n    sleep: 0.0\n"))
    assert fuzz(["--config", str(config), "--keys", "hidden,sleep", "--jobs", "1", "--out", str(out)]) == 1
    got = {(r["key"], r["value"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(got) == [("model.init_args.hidden", "-1"), ("model.init_args.hidden", "0"),
                           ("model.init_args.sleep", "-1.0")]
    assert got["model.init_args.hidden", "0"]["rc"] == got["model.init_args.hidden", "-1"]["rc"] == 2
    assert got["model.init_args.sleep", "-1.0"]["rc"] == 99 and "sleep length must be non-negative" in \
        got["model.init_args.sleep", "-1.0"]["last"]


def test_null_is_refused_only_where_the_signature_does_not_take_none(tmp_path, monkeypatch):
    from zoo.checks import check_nulls
    from zoo.errors import ZooError

    (tmp_path / "null_probe.py").write_text(
        "from __future__ import annotations\nfrom typing import Any, Literal, Optional, Union\n\n"
        "class Settings:\n"
        "    def __init__(self, a: int = 1, b: Optional[int] = 1, c: Union[str, None] = 'x', d: float | None = 1.0,\n"
        "                 e: Literal['x', None] = 'x', f: Any = 1, g: list[int] = None, h: dict[str, Any] = 0):\n"
        "        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    check_nulls("model", "null_probe.Settings", {k: None for k in "bcdefg"})  # each takes None (g: its default)
    for name, hint in (("a", "int"), ("h", "dict[str, Any]")):
        with pytest.raises(ZooError) as info:
            check_nulls("model", "null_probe.Settings", {name: None})
        assert str(info.value) == f"model.init_args.{name} = null, but Settings needs a value there ({hint})"


def test_the_sweep_fuzzer_checks_each_changed_sweep_file_with_a_dry_run(tmp_path, toy_config, monkeypatch):
    """tests/support/fuzz_sweeps.py (the tool that found the unparsed later variants and the KeyError of a ${ref} in
    a grid): each value of the file in turn of another kind, each change refused in one line or accepted."""
    import fuzz_sweeps

    monkeypatch.setattr(fuzz_sweeps, "OTHER_KINDS", [None, "zz", "${nope}/x.ckpt"])
    sweep, out = tmp_path / "toy_sweep.yaml", tmp_path / "fuzz.jsonl"
    sweep.write_text(yaml.safe_dump({"config": str(toy_config), "grid": {"model.init_args.init_from": [None]}}))
    assert fuzz_sweeps.main([str(sweep), "--jobs", "1", "--out", str(out)]) == 0
    got = {(tuple(r["at"]), r["value"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert len(got) == 5 * 3 + 1  # root, config, grid, the axis, its value; and an unknown key
    ref = got[("grid", "model.init_args.init_from", 0), "${nope}/x.ckpt"]  # was a KeyError traceback
    assert ref["rc"] == 2 and "refers to ${nope}, which is not an earlier stage" in ref["last"]
    assert got[("config",), "zz"]["rc"] == 2 and "config 'zz' does not exist" in got[("config",), "zz"]["last"]
    assert got[("zz_unknown",), 1]["rc"] == 2 and "unknown key(s) zz_unknown" in got[("zz_unknown",), 1]["last"]
    assert got[("grid", "model.init_args.init_from", 0), "zz"]["rc"] == 0  # a path is checked when the point runs


def test_the_settings_fuzzer_reaches_a_callbacks_settings_through_a_copy_of_the_config(tmp_path, toy_config):
    """A callback in trainer.callbacks has no command-line key: the fuzzer writes a copy of the config with the one
    setting changed. UnlearningMetrics read every_n_epochs <= 0 as 1 without a word; now it, and a negative count of
    any callback (the settings check's rules), is refused in one line."""
    from fuzz_settings import main as fuzz

    config, out = tmp_path / "toy.yaml", tmp_path / "fuzz.jsonl"
    callback = ("  callbacks:\n    - class_path: callbacks.unlearning_metrics.UnlearningMetrics\n"
                "      init_args: {el_n: 10, every_n_epochs: 2}\n")
    config.write_text(toy_config.read_text().replace("trainer:\n", "trainer:\n" + callback))
    assert fuzz(["--config", str(config), "--keys", "every_n_epochs", "--jobs", "1", "--out", str(out)]) == 0
    got = {(r["key"], r["value"]): r for r in map(json.loads, out.read_text().splitlines())}
    key = "trainer.callbacks.0.init_args.every_n_epochs"
    assert sorted(got) == [(key, "-1"), (key, "0")]
    assert got[key, "0"]["rc"] == 2 and got[key, "0"]["last"] == "zoo: error: every_n_epochs must be >= 1, got 0"
    assert got[key, "-1"]["last"] == f"zoo: error: {key} = -1: a count or size cannot be negative"


def test_the_data_fuzzer_changes_each_field_of_a_valid_file_and_runs_the_command_on_it(tmp_path, toy_config,
                                                                                       monkeypatch):
    """tests/support/fuzz_data.py: each change of a valid CSV's contents is run as the case's command. A reader that
    checks nothing lets a renamed column (KeyError) and a word (float()'s ValueError) out as tracebacks; the
    header alone is refused in one line by the reader, a nan by the trainer's non-finite loss check; -1 is accepted
    (listed, to read by hand)."""
    import fuzz_data

    (tmp_path / "csv_probe.py").write_text(
        "import csv\nimport torch\nfrom torch.utils.data import TensorDataset\nfrom zoo.errors import ZooError\n"
        "from zoo_toy import ToyData\n\n"
        "class CsvData(ToyData):\n"
        "    def setup(self, stage=None):\n"
        "        rows = list(csv.DictReader(open(self.path)))\n"
        "        if not rows:\n"
        "            raise ZooError(f'{self.path} holds no rows')\n"
        "        x = torch.tensor([[float(r['x'])] * 4 for r in rows])\n"
        "        self.ds = TensorDataset(x, x.sum(1))\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the forked runs inherit it

    def write(folder):
        (folder / "d.csv").write_text("x\n" + "".join(f"{i / 4}\n" for i in range(8)))
        return ["--data.class_path=csv_probe.CsvData", f"--data.init_args.path={folder / 'd.csv'}"]

    case = fuzz_data.Case("probe", str(toy_config), write, args=["--trainer.max_epochs=1"])
    monkeypatch.setattr(fuzz_data, "all_cases", lambda: {"probe": case})
    out = tmp_path / "fuzz.jsonl"
    assert fuzz_data.main(["--jobs", "1", "--out", str(out)]) == 1
    got = {r["change"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(got) == sorted(["header only", "column 'x' dropped", "column 'x' renamed"]
                                 + [f"column 'x' {v} in row 1" for v in ("a word", "empty", "nan", "inf", "-1")])
    assert got["header only"]["rc"] == 2 and "holds no rows" in got["header only"]["last"]
    assert got["column 'x' renamed"]["rc"] == got["column 'x' a word in row 1"]["rc"] == 99
    assert "KeyError" in got["column 'x' renamed"]["last"] and "ValueError" in got["column 'x' a word in row 1"]["last"]
    nan = got["column 'x' nan in row 1"]
    assert nan["rc"] == 2 and "non-finite training loss" in nan["last"]
    assert got["column 'x' -1 in row 1"]["rc"] == 0
