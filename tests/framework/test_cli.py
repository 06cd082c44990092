"""The `zoo` command end to end on the toy module: run dirs, configs, cards, errors, NaN, list, compare."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from zoo.cli import main, one_line


def _fit(toy_config, *extra):
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", *extra]) == 0
    runs = sorted(Path("runs/toy").iterdir())
    return runs[-1]


def test_help_explains_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in ("fit", "validate", "test", "predict", "list", "push", "pull", "card", "compare"):
        assert f"\n  {verb}" in out
    for verb in ("list", "push", "pull", "card", "compare", "cruxeval-score"):
        with pytest.raises(SystemExit) as e:
            main([verb, "--help"])
        assert e.value.code == 0
        assert "usage:" in capsys.readouterr().out


@pytest.mark.timeout(360)
def test_console_script_fit_help():
    # ~15 s alone (the help imports every registered class); the limits only guard against a hang on a busy machine
    out = subprocess.run(["zoo", "fit", "--help"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0
    assert "--run_root" in out.stdout and "--trainer.max_epochs" in out.stdout


@pytest.mark.parametrize("argv, built", [(["fit"], ["fit"]), (["test"], ["test"]),
                                         (["--help"], ["fit", "validate", "test", "predict"])])
def test_a_command_builds_only_its_own_verbs_parser(monkeypatch, toy_config, argv, built):
    # building the four verbs' parsers was most of a command's parse time (ZooCLI.subcommands)
    from lightning.pytorch.cli import LightningCLI

    from zoo.trainer import ZooCLI, parse_only

    seen, prepare = [], LightningCLI._prepare_subcommand_parser
    monkeypatch.setattr(LightningCLI, "_prepare_subcommand_parser",
                        lambda self, klass, verb, **kw: seen.append(verb) or prepare(self, klass, verb, **kw))
    if argv == ["--help"]:
        with pytest.raises(SystemExit):
            ZooCLI(args=argv)
    else:
        parse_only([*argv, "--config", str(toy_config)])
    assert seen == built


def test_fit_then_test_writes_a_complete_run_dir(in_tmp, toy_config, capsys):
    run = _fit(toy_config)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["seed_everything"] == 7 and cfg["model"]["class_path"] == "zoo_toy.ToyRegressor"
    assert (run / "checkpoints" / "last.ckpt").exists()
    assert list((run / "checkpoints").glob("best-*.ckpt")), "best checkpoint by the module's monitor"
    assert "train/loss" in (run / "logs" / "fit" / "metrics.csv").read_text()
    wandb_runs = list((run / "wandb").glob("offline-run-*/*.wandb"))
    assert wandb_runs, "an offline W&B run inside the run dir"
    # the run's records: full resolved config (seed included), group, tags. W&B's service process writes them; on
    # a loaded machine the file once held only its header when read right after wandb.finish(), so it is re-read
    # for a while before the records count as missing
    needles = (b"seed_everything", b"model.hidden", b"trainer.max_epochs", b"zoo_toy.ToyRegressor")
    for _ in range(120):
        record = wandb_runs[0].read_bytes()
        if all(n in record for n in needles):
            break
        time.sleep(0.5)
    for needle in needles:
        assert needle in record, needle
    assert (run / "README.md").exists()

    assert main(["test", "--config", str(toy_config), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stages"] == ["fit", "test"] and "test/mse" in summary["test"]
    assert (run / "config.test.yaml").exists(), "later stages never overwrite config.yaml"
    card = (run / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    result = front["model-index"][0]["results"][0]
    metrics = result["metrics"]
    assert metrics[0]["type"] == "mse" and result["dataset"]["split"] == "test"
    assert metrics[0]["value"] == pytest.approx(summary["test"]["test/mse"], rel=1e-5)
    assert "toy" in front["tags"]


def test_a_quoted_ckpt_path_glob_takes_the_newest_match(in_tmp, toy_config, capsys):
    """`--ckpt_path 'runs/toy/*/checkpoints/last.ckpt'` (quoted, so the shell leaves it) evaluates the newest run, as
    `init_from` reads a glob; it was refused as a file that does not exist."""
    older, newer = _fit(toy_config), _fit(toy_config)
    os.utime(older / "checkpoints" / "last.ckpt", (1, 1))  # the same second on a fast machine: make the order sure
    assert main(["test", "--config", str(toy_config), "--ckpt_path", "runs/toy/*/checkpoints/last.ckpt"]) == 0
    assert json.loads((newer / "summary.json").read_text())["stages"] == ["fit", "test"]
    assert json.loads((older / "summary.json").read_text())["stages"] == ["fit"]
    capsys.readouterr()
    assert main(["test", "--config", str(toy_config), "--ckpt_path", "runs/nothing/*/last.ckpt"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: error:")]
    assert err == ["zoo: error: --ckpt_path 'runs/nothing/*/last.ckpt' matches nothing; give a checkpoint file, "
                   "e.g. runs/<config>/<ts>/checkpoints/last.ckpt"]


@pytest.mark.parametrize("requested, env, netrc, expected", [
    ("auto", {}, None, "offline"),  # not logged in
    ("auto", {"WANDB_API_KEY": "k" * 40}, None, "online"),
    ("auto", {}, "machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n", "online"),  # `wandb login`
    ("auto", {}, "machine example.org\n  login user\n  password x\n", "offline"),  # another host's entry
    ("auto", {"WANDB_MODE": "disabled", "WANDB_API_KEY": "k" * 40}, None, "disabled"),  # W&B's own setting wins
    ("offline", {"WANDB_API_KEY": "k" * 40}, None, "offline"),  # an explicit --wandb_mode is kept
])
def test_wandb_is_online_only_when_the_user_is_logged_in(monkeypatch, tmp_path, requested, env, netrc, expected):
    from zoo.trainer import wandb_mode

    for key in ("WANDB_MODE", "WANDB_API_KEY", "NETRC"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # netrc.netrc() reads ~/.netrc
    if netrc is not None:
        (tmp_path / ".netrc").write_text(netrc)
        (tmp_path / ".netrc").chmod(0o600)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert wandb_mode(requested) == expected


def test_wandb_runs_are_grouped_by_paper_or_by_sweep(in_tmp, toy_config, monkeypatch):
    """README: a run's W&B group is its paper id ("misc" outside the zoo's papers); a sweep point's is the sweep."""
    from lightning.pytorch import loggers

    seen = []

    class Spy(loggers.WandbLogger):
        def __init__(self, **kwargs):
            seen.append(kwargs)
            super().__init__(**{**kwargs, "mode": "disabled"})

    monkeypatch.setattr(loggers, "WandbLogger", Spy)
    _fit(toy_config, "--wandb_mode", "offline")
    smoke = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "minnorm_gaussian.yaml"
    assert main(["test", "--config", str(smoke), "--wandb_mode", "offline"]) == 0
    point = Path("runs/sweeps/s/seed=3")
    point.mkdir(parents=True)
    (point / "point.json").write_text(json.dumps({"sweep": "s", "stage": "", "point": "seed=3", "axes": {"seed": 3}}))
    _fit(toy_config, "--wandb_mode", "offline", "--run_dir", str(point))
    assert [(k["group"], k["mode"]) for k in seen] == [("misc", "offline"), ("minnorm", "offline"), ("s", "offline")]
    assert "seed=3" in seen[2]["tags"] and seen[2]["config"]["sweep.seed"] == 3


def test_each_stage_records_the_environment_of_its_numbers(in_tmp, toy_config):
    """Seeded runs repeat to the bit only in a matching environment: each stage's summary says which one (code
    commit, library versions, device, torch threads), and the card shows it."""
    import lightning
    import torch

    run = _fit(toy_config)
    assert main(["test", "--config", str(toy_config), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 0
    env = json.loads((run / "summary.json").read_text())["environment"]
    assert set(env) == {"fit", "test"}
    for e in env.values():
        assert e["torch"] == torch.__version__ and e["lightning"] == lightning.__version__
        assert e["torch_threads"] == torch.get_num_threads() and e["cpu"]
    repo = Path(__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode == 0:  # the tests run from a git checkout (CI's clean clone is one)
        assert env["fit"]["zoo_commit"].split("+")[0] == head.stdout.strip()
    card = (run / "README.md").read_text()
    assert f"torch {torch.__version__}" in card and "torch threads" in card


def test_two_runs_of_one_config_never_collide(in_tmp, toy_config):
    a = _fit(toy_config)
    b = _fit(toy_config)
    assert a != b and (a / "config.yaml").exists() and (b / "config.yaml").exists()
    assert len(list(Path("runs/toy").iterdir())) == 2


def test_checkpointing_turned_off_writes_no_checkpoint(in_tmp, toy_config, capsys):
    """`enable_checkpointing: false` is honoured: no last.ckpt, no best, no Lightning default (and no error, which
    Lightning raises for a checkpoint callback in a trainer told to have none)."""
    run = _fit(toy_config, "--trainer.enable_checkpointing", "false", "--wandb_mode", "disabled")
    assert not list(run.rglob("*.ckpt"))
    assert "last checkpoint" not in capsys.readouterr().out


def test_a_fast_dev_run_leaves_a_complete_run_dir(in_tmp, toy_config):
    """Lightning saves no config under fast_dev_run: the run dir had none, so `zoo card` refused it as no run dir
    and `zoo test --ckpt_path` on its checkpoint wrote a new one."""
    run = _fit(toy_config, "--trainer.fast_dev_run", "true", "--wandb_mode", "disabled")
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["fast_dev_run"] is True
    assert main(["card", str(run)]) == 0
    assert main(["test", "--config", str(toy_config), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
                 "--wandb_mode", "disabled"]) == 0
    assert len(list(Path("runs/toy").iterdir())) == 1
    assert json.loads((run / "summary.json").read_text())["stages"] == ["fit", "test"]


def test_seed_is_recorded_when_random(in_tmp, toy_config):
    run = _fit(toy_config, "--seed_everything", "true")
    seed = yaml.safe_load((run / "config.yaml").read_text())["seed_everything"]
    assert isinstance(seed, int) and not isinstance(seed, bool)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--model.init_args.hiden", "3"], "'hiden'"),
        (["--model.init_args.hidden", "abc"], '"hidden"'),
        (["--model.class_path", "zoo_toy.Nope"], "Nope"),
        (["--data.init_args.path", "/no/such/dir"], "/no/such/dir"),
        (["--model.init_args.hidden", "0"], "hidden must be positive"),  # raised inside __init__
        (["--trainer.val_check_interval", "1000"], "val_check_interval"),  # a plain ValueError in Lightning's loop
        (["--trainer.check_val_every_n_epoch", "0"], "check_val_every_n_epoch = 0"),  # was a ZeroDivisionError
        (["--trainer.default_root_dir", "elsewhere"], "--run_root"),  # was ignored without a word
        # each trained nothing without a word: a run dir with a card and no checkpoint
        (["--trainer.limit_train_batches", "0"], "trainer.limit_train_batches = 0 trains nothing"),
        (["--trainer.limit_train_batches", "0.0"], "trainer.limit_train_batches = 0.0 trains nothing"),
        (["--trainer.max_epochs", "0"], "trainer.max_epochs = 0 trains nothing"),
        (["--trainer.max_steps", "0"], "trainer.max_steps = 0 trains nothing"),
        (["--ckpt_path", "."], "checkpoint . is a directory; give a checkpoint file"),  # was ". does not exist"
    ],
)
def test_bad_input_is_one_line_error(in_tmp, toy_config, capsys, extra, needle):
    assert main(["fit", "--config", str(toy_config), *extra]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: error:")]
    assert len(err) == 1 and needle in err[0]


def test_evaluating_a_trainable_model_without_a_checkpoint_says_so(in_tmp, toy_config, capsys):
    """`zoo test` of a trainable module without --ckpt_path scores the weights the config builds (random in a smoke
    config) and its card looked like any result: a note says so; with a checkpoint, or for an evaluation-only
    module, none."""
    assert main(["test", "--config", str(toy_config), "--wandb_mode", "disabled"]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: note:")]
    assert notes == ["zoo: note: ToyRegressor trains, and no --ckpt_path was given: this test scores the weights the "
                     "config builds (random unless it loads pretrained ones); to evaluate a run, add --ckpt_path "
                     "runs/<config>/<ts>/checkpoints/last.ckpt"]
    run = _fit(toy_config, "--wandb_mode", "disabled")
    capsys.readouterr()
    assert main(["test", "--config", str(toy_config), "--wandb_mode", "disabled",
                 "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 0
    assert "zoo: note:" not in capsys.readouterr().err
    from zoo.checks import untrained_evaluation_note

    assert untrained_evaluation_note("zoo.minnorm.MinNormExperiment", "test", None) is None  # evaluation only
    assert untrained_evaluation_note("zoo_toy.ToyRegressor", "fit", None) is None


def test_evaluation_configs_may_take_no_training_step(in_tmp, toy_config):
    # the restoration configs set max_steps: 0 for `zoo test`; only `zoo fit` is refused
    from zoo.checks import check_trainer_settings

    for verb in ("test", "validate", "predict"):
        check_trainer_settings({"max_steps": 0, "limit_train_batches": 0}, verb)
    check_trainer_settings({"max_steps": -1, "max_epochs": None, "limit_train_batches": 1}, "fit")


def test_unknown_key_in_config_file(in_tmp, toy_config, capsys):
    Path("bad.yaml").write_text("trainer:\n  max_epoch: 3\n")
    assert main(["fit", "--config", str(toy_config), "--config", "bad.yaml"]) == 2
    assert "max_epoch" in capsys.readouterr().err


def test_nan_loss_stops_and_keeps_last_good_checkpoint(in_tmp, toy_config, capsys):
    # 8 batches per epoch: epoch 0 ends with a checkpoint, the NaN arrives at step 10 in epoch 1.
    rc = main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "3", "--model.init_args.nan_at_step", "10"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "non-finite training loss" in err and "global step 10" in err
    run = sorted(Path("runs/toy").iterdir())[-1]
    import torch

    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 8
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())


def test_list_filters(capsys):
    from zoo.registry import PAPERS

    papers = list(PAPERS.values())
    by_status = {}
    for p in papers:
        by_status.setdefault(p.status, []).append(p.id)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(p.id in out for p in papers) and all(status in out for status in by_status)
    for status, ids in by_status.items():  # each filter lists exactly its papers
        assert main(["list", "--status", status]) == 0
        listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()}
        assert set(ids) <= listed and not listed & {p.id for p in papers if p.status != status}
    assert main(["list", "--pattern", "gsm8k"]) == 0
    out = capsys.readouterr().out
    assert "rosa" in out and "moment" not in out


def test_a_fit_resumed_with_more_epochs_is_shown_with_its_own_config(in_tmp, toy_config, capsys):
    """The card said "produced by the config below" over config.yaml (max_epochs 1) for weights a resumed fit had
    trained to epoch 2, and zoo compare read the same file; the resumed fit's config.fit.yaml is the one."""
    run = _fit(toy_config, "--wandb_mode", "disabled")
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "2", "--wandb_mode", "disabled",
                 "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 0
    assert yaml.safe_load((run / "config.fit.yaml").read_text())["trainer"]["max_epochs"] == 2
    card = (run / "README.md").read_text()
    assert "<summary>config.fit.yaml</summary>" in card and "max_epochs: 2" in card and "max_epochs: 1" not in card
    from zoo.compare import local_run

    assert local_run(run)["config"]["trainer.max_epochs"] == 2  # what zoo compare tells runs apart by


def test_card_command_refreshes(in_tmp, toy_config, capsys):
    run = _fit(toy_config)
    (run / "README.md").unlink()
    assert main(["card", str(run)]) == 0
    assert "## Results of this run" in (run / "README.md").read_text()


@pytest.mark.parametrize("fmt", ["markdown", "table"])
def test_compare_keeps_one_line_per_run_when_a_value_holds_a_newline_or_a_bar(fmt):
    # RoSA's eval_template ("Question: {question}\nAnswer:") split its row in two, and a | made an extra cell
    from zoo.compare import render

    out = render(["run", "data.eval_template"], [["a", "Q: {q}\nA: x|y"], ["b", 1.5]], fmt).splitlines()
    assert len(out) == 4 and "Q: {q}\\nA:" in out[2] and out[3].startswith(("| b", "b"))
    if fmt == "markdown":
        assert all(line.count("|") - line.count("\\|") == 3 for line in out)


def test_compare_table_and_plot(in_tmp, toy_config, capsys):
    _fit(toy_config, "--model.init_args.lr", "0.01")
    _fit(toy_config, "--model.init_args.lr", "0.1")
    capsys.readouterr()
    assert main(["compare", "--runs", "[runs]", "--format", "markdown", "--metric", "train/loss",
                 "--plot_path", "cmp.png", "--output", "cmp.md"]) == 0
    table = Path("cmp.md").read_text().splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert "model.lr" in header and "val/loss" in header and "model.hidden" not in header
    lr = header.index("model.lr")
    assert sorted(float(r.strip("|").split("|")[lr]) for r in table[2:]) == [0.01, 0.1]
    assert Path("cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert main(["compare", "--runs", "[runs]", "--format", "csv"]) == 0
    csv_out = capsys.readouterr().out
    assert csv_out.splitlines()[0].startswith("run,")


def test_compare_reads_a_wandb_project(monkeypatch, in_tmp, capsys):
    """The online path: runs come from `wandb.Api().runs(project)` (a stand-in API object here, since the
    tests are offline); config keys that differ and numeric summary metrics are aligned like local runs."""
    import wandb

    class Run:
        def __init__(self, name, lr, loss):
            self.name, self.config, self.summary = name, {"model": {"init_args": {"lr": lr}}, "seed": 1}, {
                "val/loss": loss, "_wandb": {"runtime": 3}}
            self._hist = [{"_step": 0, "train/loss": 2 * loss}, {"_step": 1, "train/loss": loss}]

        def scan_history(self, keys):
            return [h for h in self._hist if all(k in h for k in keys)]

    class Api:
        def runs(self, project):
            assert project == "me/zoo"
            return [Run("a", 0.1, 0.5), Run("b", 0.01, 0.7)]

    monkeypatch.setattr(wandb, "Api", Api)
    text = main(["compare", "--wandb_project", "me/zoo", "--format", "csv", "--metric", "train/loss",
                 "--plot_path", "w.png"])
    assert text == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "run,model.lr,val/loss"
    assert out[1] == "a,0.1,0.5" and out[2] == "b,0.01,0.7"
    assert Path("w.png").stat().st_size > 0


def test_compare_without_wandb_credentials_is_one_line(monkeypatch, in_tmp, capsys):
    (in_tmp / "netrc").write_text("")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(in_tmp / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(in_tmp / "wandb_config"))
    assert main(["compare", "--wandb_project", "me/zoo"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: error:")]
    assert len(err) == 1 and err[0].startswith("zoo: error: cannot read W&B project 'me/zoo': ") and \
        "local run dirs need no W&B" in err[0]


def test_one_line_keeps_a_flat_message_once_and_follows_a_nested_one_to_its_cause():
    flat = ValueError("cannot load 'x/y' from the Hub or its cache\nCheck your connection or set HF_HUB_OFFLINE=1.")
    assert one_line(flat) == "cannot load 'x/y' from the Hub or its cache Check your connection or set HF_HUB_OFFLINE=1."
    nested = ValueError("Parser key \"model\":\n  Does not validate:\n    - Option 'hiden' is not accepted\n"
                        "  Other branch")
    assert one_line(nested) == "Parser key \"model\": Does not validate: Option 'hiden' is not accepted"
    assert one_line(ValueError("")) == "ValueError"



def test_one_line_unwraps_an_error_raised_in_a_dataloader_worker():
    from torch.utils.data import DataLoader, Dataset

    from zoo.errors import ZooError

    class Damaged(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise ZooError("/data/x.png is not a readable image (OSError: image file is truncated)")

    with pytest.raises(ZooError) as info:  # torch puts the worker's traceback into the message
        next(iter(DataLoader(Damaged(), num_workers=1)))
    assert one_line(info.value) == "/data/x.png is not a readable image (OSError: image file is truncated)"


def test_predict_writes_its_outputs_to_the_run_dir(in_tmp, toy_config, capsys):
    import torch

    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]) == 0
    run = next(Path("runs/toy").iterdir())
    capsys.readouterr()
    assert main(["predict", "--config", str(toy_config), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
                 "--wandb_mode", "disabled"]) == 0
    path = run / "predictions" / "predict.pt"
    assert f"zoo: predictions {path.resolve()}" in capsys.readouterr().out
    saved = torch.load(path, weights_only=True)  # tensors and plain containers only: no unpickling needed
    (indices,) = saved["batch_indices"]  # one predict loader
    assert [i for batch in indices for i in batch] == list(range(64))  # every example, in loader order
    from zoo_toy import ToyData, ToyRegressor

    from zoo.hub import load_checkpoint

    model = ToyRegressor(hidden=8)
    model.load_state_dict(load_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"])
    data = ToyData()
    data.setup("predict")
    with torch.no_grad():
        expected = model.eval()(data.ds.tensors[0])
    torch.testing.assert_close(torch.cat(saved["predictions"]), expected)


def test_a_value_error_of_our_own_code_is_not_taken_for_a_setting():
    from zoo.cli import _user_error
    from zoo.errors import ZooError

    with pytest.raises(ValueError) as info:
        raise ValueError("a bug in a module")  # raised here, not in Lightning's trainer or loops
    assert _user_error(info.value, ZooError) is None


def test_a_model_and_a_data_option_of_one_name_that_differ_are_one_line(tmp_path):
    """Lightning refuses to merge the module's and the datamodule's hparams when a shared key differs, with a
    RuntimeError from its loggers: that is a setting, reported in one line; another RuntimeError is not."""
    import lightning.pytorch as L
    from lightning.pytorch.loggers import CSVLogger
    from zoo_toy import ToyData, ToyRegressor

    from zoo.cli import _user_error, one_line
    from zoo.errors import ZooError

    class Model(ToyRegressor):
        def __init__(self, grid_size: int = 8):
            super().__init__(hidden=4)
            self.save_hyperparameters()

    class Data(ToyData):
        def __init__(self, grid_size: int = 8):
            super().__init__()
            self.save_hyperparameters()

    trainer = L.Trainer(max_epochs=1, logger=CSVLogger(tmp_path), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(RuntimeError) as info:
        trainer.fit(Model(grid_size=8), Data(grid_size=10))
    assert _user_error(info.value, ZooError) is info.value
    assert one_line(info.value).startswith("Error while merging hparams: the keys ['grid_size'] are present")
    with pytest.raises(RuntimeError) as other:
        raise RuntimeError("a bug in a module")
    assert _user_error(other.value, ZooError) is None


def test_card_refuses_a_directory_that_is_not_a_run_dir(in_tmp, capsys):
    Path("README.md").write_text("# my project\n")  # `zoo card .` used to overwrite it with a model card
    assert main(["card", "."]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error: . is not a run dir (no config.yaml)") and "\n" not in err
    assert Path("README.md").read_text() == "# my project\n"
    assert main(["card", "no/such/run"]) == 2
    assert "no/such/run does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("text, needle", [("model: {class_path: [\n", "is not valid YAML (line 2)"),
                                          ("- a\n", "is not a mapping of options")])
def test_card_refuses_a_damaged_run_config(in_tmp, capsys, text, needle):
    """The card shows config.yaml as the config that produced its numbers: it embedded a damaged one as it was."""
    Path("run").mkdir()
    Path("run/config.yaml").write_text(text)
    assert main(["card", "run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error: run config run/config.yaml ") and needle in err and "\n" not in err
    assert not Path("run/README.md").exists()


def test_a_sweep_points_card_is_named_by_its_point(in_tmp, toy_config):
    # a sweep variant can swap the model class of the config it starts from (rosa_tiny: RoSA from lora_gsm8k's
    # config), so the config's name alone would name the wrong method
    run = _fit(toy_config)
    from zoo.cards import render_card

    assert "- name: toy\n" in render_card(run)
    (run / "point.json").write_text(json.dumps({"sweep": "s", "stage": "finetune", "point": "variant=rosa,seed=1",
                                                "axes": {"variant": "rosa", "seed": 1}}))
    card = render_card(run)
    assert "- name: s/finetune/variant=rosa,seed=1\n" in card
    assert "sweep point `s/finetune/variant=rosa,seed=1`, from config `toy`" in card
    (run / "point.json").write_text(json.dumps({"sweep": "s", "stage": "main", "point": "seed=1", "axes": {"seed": 1}}))
    assert "- name: s/seed=1\n" in render_card(run)


def test_compare_on_a_file_names_the_problem(in_tmp, capsys):
    Path("notes.txt").write_text("x")
    assert main(["compare", "--runs", "[notes.txt]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "zoo: error: run path notes.txt is a file; give a run dir (runs/<config>/<timestamp>) or a folder of runs"


@pytest.mark.parametrize("argv, needle", [
    (["--output", "out"], "--output out is a folder; give the path of a file"),  # was an IsADirectoryError traceback
    (["--output", "missing/t.md"], "--output missing/t.md: the folder missing does not exist"),
    (["--metric", "train/loss", "--plot_path", "out"], "--plot_path out is a folder; give the path of a file"),
    (["--metric", "train/loss", "--plot_path", "p.xyz"], "--plot_path p.xyz: matplotlib cannot write '.xyz' files"),
    (["--metric", "train/loss", "--curve_window", "0"], "--curve_window must be >= 1, got 0"),
])
def test_compare_refuses_where_it_cannot_write_before_printing_anything(in_tmp, toy_config, capsys, argv, needle):
    _fit(toy_config)
    Path("out").mkdir()
    capsys.readouterr()
    assert main(["compare", "--runs", "[runs]", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"zoo: error: {needle}") and len(err.strip().splitlines()) == 1, (out, err)


def test_compare_names_the_plot_file_it_wrote(in_tmp, toy_config, capsys):
    """matplotlib writes `--plot_path curves` as curves.png: the command said `plot: curves`, a file that is not."""
    _fit(toy_config)
    capsys.readouterr()
    assert main(["compare", "--runs", "[runs]", "--metric", "train/loss", "--plot_path", "curves"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "plot: curves.png"
    assert Path("curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not Path("curves").exists()


def test_card_output_that_is_a_folder_is_one_line(in_tmp, toy_config, capsys):
    run = _fit(toy_config)
    capsys.readouterr()
    assert main(["card", str(run), "--output", str(run)]) == 2  # was an IsADirectoryError traceback
    assert capsys.readouterr().err.strip() == f"zoo: error: --output {run} is a folder; give the path of a file"


def test_output_checks_name_a_folder_that_cannot_be_written(tmp_path, monkeypatch):
    """(Tests run as root, who may write anywhere: os.access is made to say no.)"""
    import zoo.rundir
    from zoo.errors import ZooError
    from zoo.rundir import check_output_dir, check_output_file

    (tmp_path / "ok").mkdir()
    monkeypatch.setattr(zoo.rundir.os, "access", lambda path, mode: Path(path) != tmp_path)
    with pytest.raises(ZooError, match=f"^--out {tmp_path}/a/b: the folder {tmp_path} cannot be written$"):
        check_output_file(tmp_path / "a" / "b", "--out", make_parents=True)
    with pytest.raises(ZooError, match=f"^--output {tmp_path}/t.md: the folder {tmp_path} cannot be written$"):
        check_output_file(tmp_path / "t.md", "--output")
    with pytest.raises(ZooError, match=f"^--sweep_root {tmp_path}/s: the folder {tmp_path} cannot be written$"):
        check_output_dir(tmp_path / "s", "--sweep_root")
    assert check_output_dir(tmp_path / "ok" / "s", "--sweep_root") == tmp_path / "ok" / "s"  # nothing made
    assert not (tmp_path / "ok" / "s").exists()


def _refuse_in_a_worker(rank):
    from zoo.errors import ZooError

    raise ZooError(f"rank {rank} refuses")


def _fail_in_a_worker(rank):
    raise KeyError("a bug")


def test_a_zoo_error_in_a_process_lightning_started_is_one_line():
    """Under ddp_fork / ddp_spawn a callback's ZooError (ByMI's "the trusted rank 0 cannot be attacked") came back
    as torch's ProcessRaisedException, printed as two tracebacks; any other error keeps its traceback."""
    import torch.multiprocessing as mp

    from zoo.cli import _user_error, one_line
    from zoo.errors import ZooError

    for fn, expected in ((_refuse_in_a_worker, "rank 0 refuses"), (_fail_in_a_worker, None)):
        with pytest.raises(Exception) as info:
            mp.start_processes(fn, nprocs=1, start_method="fork")
        assert type(info.value).__name__ == "ProcessRaisedException"
        cause = _user_error(info.value, ZooError)
        assert (one_line(cause) if cause is not None else None) == expected
