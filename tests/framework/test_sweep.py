"""`zoo sweep`: grids of real `zoo fit`/`zoo test` runs, resumable, local or through submitit; `zoo compare
--group_by` aggregates their seeds."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from scipy import stats

from zoo.cli import main
from zoo.sweep import expand, load_sweep

# sweeps start real `zoo` subprocesses: the timeout is a hang guard, generous for a busy machine
pytestmark = pytest.mark.timeout(600)

FAST = {"wandb_mode": "disabled", "trainer.max_epochs": 1}


def write_sweep(path: Path, toy_config: Path, **spec) -> Path:
    spec.setdefault("config", str(toy_config))
    spec["args"] = {**FAST, **spec.get("args", {})}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def manifest(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "manifest.json").read_text())


def fits_in(run_dir: Path) -> int:
    return (run_dir / "sweep.log").read_text().count("$ zoo fit")


def test_grid_of_two_axes_and_two_seeds_with_two_jobs_then_compare(in_tmp, toy_config, capsys):
    f = write_sweep(in_tmp / "toy.yaml", toy_config, grid={"model.init_args.hidden": [4, 8]},
                    variants={"slow": {"model.init_args.lr": 0.01}, "fast": {"model.init_args.lr": 0.1}},
                    seeds=[0, 1])
    assert main(["sweep", str(f), "--jobs", "2"]) == 0
    sweep_dir = in_tmp / "runs" / "sweeps" / "toy"
    m = manifest(sweep_dir)
    assert len(m["tasks"]) == 8 and {t["state"] for t in m["tasks"].values()} == {"done"}
    runs = {}
    for t in m["tasks"].values():
        run = Path(t["run_dir"])
        summary = json.loads((run / "summary.json").read_text())
        assert summary["stages"] == ["fit", "test"] and "test/mse" in summary["test"]
        assert (run / "README.md").exists() and (run / "checkpoints" / "last.ckpt").exists()
        cfg = yaml.safe_load((run / "config.yaml").read_text())  # the overrides really reached the run
        assert cfg["model"]["init_args"]["hidden"] == t["axes"]["hidden"]
        assert cfg["model"]["init_args"]["lr"] == {"slow": 0.01, "fast": 0.1}[t["axes"]["variant"]]
        assert cfg["seed_everything"] == t["axes"]["seed"]
        runs[t["point"]] = summary["test"]["test/mse"]
    assert len(set(runs.values())) == 8  # every point trained its own model

    capsys.readouterr()
    assert main(["compare", str(sweep_dir), "--group_by", "hidden", "variant", "--format", "csv",
                 "--metrics", "test/mse"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 4
    for row in rows:
        vals = [runs[f"hidden={row['hidden']},variant={row['variant']},seed={s}"] for s in (0, 1)]
        mean, sd = statistics.mean(vals), statistics.stdev(vals)
        half = stats.t.ppf(0.975, 1) * sd / math.sqrt(2)
        assert int(row["n"]) == 2 and int(float(row["test/mse n"])) == 2
        assert float(row["test/mse mean"]) == pytest.approx(mean, rel=1e-5)
        assert float(row["test/mse std"]) == pytest.approx(sd, rel=1e-5)
        assert float(row["test/mse ci95_low"]) == pytest.approx(mean - half, rel=1e-5)
        assert float(row["test/mse ci95_high"]) == pytest.approx(mean + half, rel=1e-5)

    # paired: each (hidden, fast) run minus the (hidden, slow) run of the same seed
    assert main(["compare", str(sweep_dir), "--group_by", "hidden", "variant", "--format", "csv",
                 "--metrics", "test/mse", "--paired_against", "4,slow"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted((r["hidden"], r["variant"]) for r in rows) == [("4", "fast"), ("8", "fast"), ("8", "slow")]
    for row in rows:
        a = [runs[f"hidden={row['hidden']},variant={row['variant']},seed={s}"] for s in (0, 1)]
        b = [runs[f"hidden=4,variant=slow,seed={s}"] for s in (0, 1)]
        d = [x - y for x, y in zip(a, b)]
        assert int(row["pairs"]) == 2
        assert float(row["test/mse diff mean"]) == pytest.approx(statistics.mean(d), rel=1e-5)
        assert float(row["test/mse diff std"]) == pytest.approx(statistics.stdev(d), rel=1e-5)
        assert int(row["test/mse diff below"]) == sum(x < 0 for x in d)
        assert float(row["test/mse diff p"]) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-4)
    assert main(["compare", str(sweep_dir), "--group_by", "variant", "--paired_against", "medium"]) == 2
    assert "no group 'medium' to pair against" in capsys.readouterr().err

    assert main(["compare", str(sweep_dir), "--group_by", "variant", "--format", "markdown",
                 "--metric", "train/loss", "--plot_path", str(in_tmp / "band.png")]) == 0
    out = capsys.readouterr().out
    assert "| variant | n | " in out and "| slow | 4 |" in out
    assert (in_tmp / "band.png").stat().st_size > 1000

    # the plotted band as a table: each group's mean over its runs, then over windows of 2 logged points
    assert main(["compare", str(sweep_dir), "--group_by", "variant", "--format", "csv", "--output", "t.csv",
                 "--metric", "train/loss", "--curve_window", "2", "--plot_path", str(in_tmp / "band.png")]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out.rsplit("plot:", 1)[0])))
    from zoo.compare import find_runs, local_run

    for row in rows:
        curves = [local_run(d)["curves"]("train/loss") for d in find_runs([str(sweep_dir)])
                  if f"variant={row['variant']}," in d.name]
        steps = sorted(set.intersection(*({x for x, _ in c} for c in curves)))
        mean = [statistics.mean(dict(c)[x] for c in curves) for x in steps]
        assert int(row["n"]) == len(curves) == 4
        assert float(row["train/loss points 1-2"]) == pytest.approx(statistics.mean(mean[:2]), rel=1e-5)
    assert main(["compare", str(sweep_dir), "--curve_window", "2"]) == 2
    assert "--curve_window needs --metric" in capsys.readouterr().err


def test_a_group_of_one_run_shows_its_value_without_a_spread():
    from zoo.compare import grouped_table, paired_table, render

    runs = [{"axes": {"variant": v, "seed": s}, "metrics": {"test/x": x}}
            for v, s, x in (("a", 0, 1.0), ("a", 1, 3.0), ("b", 0, 0.5))]
    out = render(*grouped_table(runs, ["variant"], None, "markdown"), "markdown")
    assert "| a | 2 | 2 ± 1.414 | [-10.71, 14.71] |" in out  # t(0.975, 1) = 12.71
    assert "| b | 1 | 0.5 |  |" in out and "nan" not in out
    out = render(*paired_table(runs, ["variant"], "a", None, "markdown"), "markdown")
    assert "| b | 1 | -0.5 | 1/0 | nan |" in out  # one pair: a difference, no spread and no test


def test_rerun_skips_finished_points_and_a_changed_sweep_is_refused(in_tmp, toy_config, capsys):
    f = write_sweep(in_tmp / "s.yaml", toy_config, seeds=[0, 1])
    assert main(["sweep", str(f)]) == 0
    sweep_dir = in_tmp / "runs" / "sweeps" / "s"
    before = {p: (sweep_dir / p / "summary.json").stat().st_mtime_ns for p in ("seed=0", "seed=1")}
    assert main(["sweep", str(f)]) == 0
    assert before == {p: (sweep_dir / p / "summary.json").stat().st_mtime_ns for p in ("seed=0", "seed=1")}
    write_sweep(f, toy_config, seeds=[0, 1], args={"model.init_args.hidden": 5})
    capsys.readouterr()
    assert main(["sweep", str(f)]) == 2
    assert "changed for point seed=0" in capsys.readouterr().err


def test_sigkill_then_restart_reruns_only_unfinished_points(in_tmp, toy_config):
    # each step sleeps, so the sweep is surely in the middle of a point when it is killed
    f = write_sweep(in_tmp / "k.yaml", toy_config, seeds=[0, 1, 2], args={"model.init_args.sleep": 0.15,
                                                                           "trainer.max_epochs": 2})
    sweep_dir = in_tmp / "runs" / "sweeps" / "k"
    proc = subprocess.Popen([sys.executable, "-m", "zoo.cli", "sweep", str(f)], cwd=in_tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    while time.time() < deadline:
        m = manifest(sweep_dir) if (sweep_dir / "manifest.json").exists() else {"tasks": {}}
        states = {t["point"]: t["state"] for t in m["tasks"].values()}
        if states.get("seed=0") == "done" and states.get("seed=1") == "running" and \
                (sweep_dir / "seed=1" / "checkpoints" / "last.ckpt").exists():
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"the sweep did not reach its second point: {states}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with (sweep_dir / "seed=1" / ".sweep.lock").open() as fh:  # its task process dies with it (parent-death signal)
        fcntl.flock(fh, fcntl.LOCK_EX)
    finished = (sweep_dir / "seed=0" / "summary.json").stat().st_mtime_ns
    assert main(["sweep", str(f)]) == 0
    m = manifest(sweep_dir)
    assert {t["state"] for t in m["tasks"].values()} == {"done"}
    assert (sweep_dir / "seed=0" / "summary.json").stat().st_mtime_ns == finished  # not rerun
    assert fits_in(sweep_dir / "seed=0") == 1
    log = (sweep_dir / "seed=1" / "sweep.log").read_text()
    assert log.count("$ zoo fit") == 2 and "--ckpt_path" in log.split("$ zoo fit")[2]  # resumed from last.ckpt
    summary = json.loads((sweep_dir / "seed=1" / "summary.json").read_text())
    assert summary["global_step"] == 16  # 2 epochs of 8 batches: the resumed run finished its plan


def test_two_stage_sweep_links_each_point_to_its_own_first_stage(in_tmp, toy_config):
    spec = {"seeds": [0, 1], "variants": {"a": {"model.init_args.lr": 0.01}, "b": {"model.init_args.lr": 0.02}},
            "args": FAST,
            "stages": [{"name": "pre", "config": str(toy_config), "verbs": ["fit"], "axes": ["seed"]},
                       {"name": "post", "config": str(toy_config),
                        "args": {"model.init_args.init_from": "${pre}/checkpoints/last.ckpt"}}]}
    f = in_tmp / "two.yaml"
    f.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(f), "--jobs", "2"]) == 0
    sweep_dir = in_tmp / "runs" / "sweeps" / "two"
    m = manifest(sweep_dir)
    assert sorted(m["tasks"]) == ["post/variant=a,seed=0", "post/variant=a,seed=1", "post/variant=b,seed=0",
                                  "post/variant=b,seed=1", "pre/seed=0", "pre/seed=1"]  # pre runs once per seed
    for tid, t in m["tasks"].items():
        assert t["state"] == "done"
        if t["stage"] == "post":
            cfg = yaml.safe_load((Path(t["run_dir"]) / "config.yaml").read_text())
            want = Path(m["tasks"][f"pre/seed={t['axes']['seed']}"]["run_dir"]).resolve() / "checkpoints" / "last.ckpt"
            assert Path(cfg["model"]["init_args"]["init_from"]).resolve() == want
            assert t["deps"] == {"pre": f"pre/seed={t['axes']['seed']}"}


def test_submitit_local_executor_runs_the_same_points(in_tmp, toy_config):
    pytest.importorskip("submitit")
    f = write_sweep(in_tmp / "sub.yaml", toy_config, seeds=[3])
    assert main(["sweep", str(f), "--executor", "submitit_local"]) == 0
    m = manifest(in_tmp / "runs" / "sweeps" / "sub")
    assert {t["state"] for t in m["tasks"].values()} == {"done"}
    assert all(t.get("job_id") for t in m["tasks"].values())
    assert list((in_tmp / "runs" / "sweeps" / "sub" / "submitit").iterdir())


def test_a_failed_point_is_recorded_and_the_sweep_carries_on(in_tmp, toy_config, capsys):
    f = write_sweep(in_tmp / "f.yaml", toy_config, grid={"model.init_args.hidden": [-1, 4]})
    assert main(["sweep", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("zoo: error: 1 of 2 sweep runs did not finish") and "hidden must be positive" in err
    m = manifest(in_tmp / "runs" / "sweeps" / "f")
    states = {t["point"]: (t["state"], t["error"]) for t in m["tasks"].values()}
    assert states["hidden=4,seed=0"] == ("done", None)
    assert states["hidden=-1,seed=0"][0] == "failed" and "hidden must be positive" in states["hidden=-1,seed=0"][1]


@pytest.mark.parametrize("target, needle", [("runs", "is a directory; give a sweep file"),
                                             ("nothing.yaml", "sweep file nothing.yaml does not exist")])
def test_a_sweep_path_that_is_no_file_is_named(in_tmp, capsys, target, needle):
    Path("runs").mkdir()  # a sweep's run dir passed to `zoo sweep` was "does not exist"
    assert main(["sweep", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.parametrize("spec, needle", [
    ({"config": "TOY", "colour": 1}, "unknown key(s) colour"),
    ({"config": "TOY", "grid": {"model.init_args.no_such_key": [1, 2]}}, "does not parse"),
    ({"config": "TOY", "grid": {"model.init_args.hidden": []}}, "has no values"),
    ({"config": "TOY", "grid": {"model.init_args.hidden": 4}}, "must be a list of values; got 4"),
    ({"config": "TOY", "variants": {}}, "`variants` must map names"),
    ({"stages": [{"name": "a", "config": "TOY", "args": {"model.init_args.init_from": "${nope}/x.ckpt"}}]},
     "refers to ${nope}, which is not an earlier stage"),
    ({"config": "TOY", "grid": {"model.init_args.init_from": ["${nope}/x.ckpt"]}},  # was a KeyError traceback
     "refers to ${nope}, which is not an earlier stage"),
    ({"config": "missing.yaml"}, "config 'missing.yaml' does not exist"),
    ({"config": "TOY", "seeds": []}, "`seeds` must be a non-empty list"),
    ({"config": "TOY", "verbs": ["train"]}, "`verbs` must be a non-empty list"),
    ({"config": "TOY", "grid": {"data.init_args.batch_size": [4, -4]}},  # checked point by point, not one per key set
     "point batch_size=-4,seed=0: data.init_args.batch_size = -4: a count or size cannot be negative"),
    ({"config": "TOY", "args": {"model.init_args.lr": -0.1}}, "model.init_args.lr = -0.1 is a negative learning rate"),
    ({"config": "TOY", "grid": {"model.init_args.lr": [0.1, 0.0]}},  # a later point parsed alike, whole settings
     "point lr=0.0,seed=0: model.init_args.lr = 0: with every learning rate at 0 the run would train nothing"),
    ({"config": "GENTLE", "args": {"model.init_args.lr_mapping": 0, "model.init_args.lr_potential": 0.0}},
     "model.init_args.lr_mapping, model.init_args.lr_potential = 0: with every learning rate at 0"),
    # the second of two variants with the same keys: it was not parsed, and failed only when its turn came to run
    ({"config": "TOY", "variants": {"a": {"model.init_args.hidden": 4}, "b": {"model.init_args.hidden": "wide"}}},
     "point variant=b,seed=0 (fit) does not parse"),
    ({"config": "TOY", "name": 5}, "the sweep name 5 must be letters, digits"),  # was a TypeError traceback
    ({"config": "TOY", "name": "../../elsewhere"}, "the sweep name '../../elsewhere' must be"),  # left the root
    ({"config": "EVAL_ONLY"}, "ClusterDeletionEval is evaluation only (it has no training step): run it with `zoo test`"),
])
def test_bad_sweep_files_fail_before_anything_runs(in_tmp, toy_config, capsys, spec, needle):
    eval_only = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "clusterdel_smallgraphs.yaml"
    gentle = eval_only.with_name("gentle_toy1.yaml")
    text = yaml.safe_dump(spec).replace("TOY", str(toy_config)).replace("EVAL_ONLY", str(eval_only)).replace(
        "GENTLE", str(gentle))
    (in_tmp / "bad.yaml").write_text(text)
    assert main(["sweep", str(in_tmp / "bad.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zoo: error: ") and needle in err[0], err
    assert not (in_tmp / "runs").exists()


@pytest.mark.parametrize("option, needle", [(["--jobs", "0"], "--jobs must be at least 1, got 0"),
                                            (["--threads", "-1"], "--threads must be at least 1, got -1")])
def test_bad_sweep_options_fail_before_anything_runs(in_tmp, toy_config, capsys, option, needle):
    """--threads -1 used to start every point, each task dying in torch.set_num_threads."""
    (in_tmp / "s.yaml").write_text(yaml.safe_dump({"config": str(toy_config)}))
    assert main(["sweep", str(in_tmp / "s.yaml"), *option]) == 2
    assert capsys.readouterr().err.strip() == f"zoo: error: {needle}"
    assert not (in_tmp / "runs").exists()


@pytest.mark.parametrize("dry_run", ["false", "true"])
def test_a_sweep_root_that_is_a_file_is_one_line(in_tmp, toy_config, capsys, dry_run):
    """It was a NotADirectoryError traceback from mkdir (and the dry run listed run dirs that could not be made)."""
    (in_tmp / "s.yaml").write_text(yaml.safe_dump({"config": str(toy_config)}))
    (in_tmp / "taken").write_text("a file")
    assert main(["sweep", str(in_tmp / "s.yaml"), "--sweep_root", "taken/sweeps", "--dry_run", dry_run]) == 2
    assert capsys.readouterr().err.strip() == "zoo: error: --sweep_root taken/sweeps/s: taken is a file, not a folder"


@pytest.mark.parametrize("config, key, good, bad", [
    ("score_cifar10lt", "model.init_args.objective", "fl_cf", "fl_fc"),
    ("rosa_gsm8k", "model.init_args.torch_dtype", "bf16", "half"),
    ("vpdm_mvtec", "model.init_args.beta_schedule", "linear", "cosine"),
])
def test_a_misspelt_choice_in_a_later_variant_fails_before_anything_runs(tmp_path, config, key, good, bad):
    """These choices were plain strings checked when the model was built: `zoo sweep` ran every earlier point and
    then failed on this one. As typed choices the parse of each point refuses them."""
    from zoo.errors import ZooError
    from zoo.sweep.runner import validate

    smoke = Path(__file__).resolve().parents[2] / "configs" / "smoke" / f"{config}.yaml"
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"config": str(smoke), "variants": {"a": {key: good}, "b": {key: bad}}}))
    with pytest.raises(ZooError, match=rf"point variant=b,seed=0 \(fit\) does not parse: .*{key.rsplit('.')[-1]}"):
        validate(expand(load_sweep(f), tmp_path / "out"))


def test_a_sweep_may_freeze_one_part_of_a_model_with_a_zero_rate(tmp_path):
    from zoo.sweep.runner import validate

    gentle = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "gentle_toy1.yaml"
    f = tmp_path / "freeze.yaml"
    f.write_text(yaml.safe_dump({"config": str(gentle), "grid": {"model.init_args.lr_potential": [1e-3, 0.0]}}))
    validate(expand(load_sweep(f), tmp_path / "out"))  # the mapping still trains: both points are accepted


def test_checking_a_sweep_leaves_the_random_state_alone(tmp_path):
    """The parse of each point used to seed the caller's generators (and print "Seed set to N" once per parse)."""
    import random

    import torch

    from zoo.sweep.runner import validate

    f = tmp_path / "s.yaml"
    gentle = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "gentle_toy1.yaml"
    f.write_text(yaml.safe_dump({"config": str(gentle), "seeds": [3, 4]}))
    random.seed(11)
    torch.manual_seed(11)
    validate(expand(load_sweep(f), tmp_path / "out"))
    after = (random.random(), torch.rand(1).item())
    random.seed(11)
    torch.manual_seed(11)
    assert after == (random.random(), torch.rand(1).item())


def test_dry_run_prints_every_command_and_runs_nothing(in_tmp, toy_config, capsys):
    f = write_sweep(in_tmp / "d.yaml", toy_config, grid={"model.init_args.hidden": [4, 8]}, seeds=[0, 1, 2])
    assert main(["sweep", str(f), "--dry_run", "true"]) == 0
    out = capsys.readouterr().out
    assert out.count("zoo fit --config") == 6 and out.count("zoo test --config") == 6
    assert "--model.init_args.hidden=8" in out and "--seed_everything=2" in out
    assert not (in_tmp / "runs").exists()


def test_expand_names_points_and_shares_stage_runs(toy_config, tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"seeds": [1, 2], "grid": {"model.init_args.lr": [0.1, 0.2]},
                                 "stages": [{"name": "a", "config": str(toy_config), "axes": ["seed"]},
                                            {"name": "b", "config": str(toy_config),
                                             "args": {"model.init_args.init_from": "${a}/checkpoints/last.ckpt"}}]}))
    tasks = expand(load_sweep(f), tmp_path / "out")
    ids = [t.id for t in tasks]
    assert sorted(ids) == ["a/seed=1", "a/seed=2", "b/lr=0.1,seed=1", "b/lr=0.1,seed=2", "b/lr=0.2,seed=1",
                           "b/lr=0.2,seed=2"]
    assert all(ids.index(d) < ids.index(t.id) for t in tasks for d in t.deps.values())  # dependencies first
    b = tasks[1]
    assert b.overrides == {"model.init_args.init_from": "${a}/checkpoints/last.ckpt", "model.init_args.lr": 0.1,
                           "seed_everything": 1}
    assert b.deps == {"a": "a/seed=1"} and b.run_dir == str(tmp_path / "out" / "b" / "lr=0.1,seed=1")



def test_axis_references_follow_the_point(toy_config, tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text(yaml.safe_dump({"config": str(toy_config), "seeds": [3, 4],
                                 "args": {"data.init_args.seed": "${seed}", "run_name": "s${seed}-h"}}))
    tasks = expand(load_sweep(f), tmp_path / "out")
    assert [(t.overrides["data.init_args.seed"], t.overrides["run_name"]) for t in tasks] == [(3, "s3-h"), (4, "s4-h")]
    f.write_text(yaml.safe_dump({"seeds": [1], "stages": [
        {"name": "a", "config": str(toy_config), "axes": [], "args": {"data.init_args.seed": "${seed}"}}]}))
    with pytest.raises(ValueError, match="an axis this stage does not depend on"):
        load_sweep(f)


def test_slurm_executor_without_slurm_is_refused_before_anything_is_written(in_tmp, toy_config, capsys, monkeypatch):
    import zoo.sweep

    monkeypatch.setattr(zoo.sweep.shutil, "which", lambda name: None)  # no srun: submitit would run it locally
    f = write_sweep(in_tmp / "s.yaml", toy_config)
    assert main(["sweep", str(f), "--executor", "slurm"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: error:")]
    assert err == [("zoo: error: --executor slurm, but this machine has no SLURM (no srun on PATH); run the sweep "
                    "where SLURM is, or use --executor local or submitit_local")]
    assert not (in_tmp / "runs").exists()


@pytest.mark.parametrize("visible, jobs, slots", [
    ("0,1,2,3", 2, ["0,1", "2,3"]), ("0,1,2,3", 4, ["0", "1", "2", "3"]), ("0,1,2,3,4", 2, ["0,1", "2,3"]),
    ("4,7", 3, ["4", "7", "4"]), ("0,1", 1, [None]), ("", 2, [None, None]),
])
def test_parallel_points_get_their_own_gpus(monkeypatch, visible, jobs, slots):
    from zoo.sweep.runner import gpu_slots

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_slots(jobs) == slots


def test_each_running_point_sees_its_slots_gpus(in_tmp, toy_config, monkeypatch):
    # two points at once on a "two-GPU" machine: each run records the one GPU its job slot gave it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    f = write_sweep(in_tmp / "gpus.yaml", toy_config, seeds=[0, 1], verbs=["fit"])
    assert main(["sweep", str(f), "--jobs", "2"]) == 0
    seen = [json.loads((Path(t["run_dir"]) / "summary.json").read_text())["environment"]["fit"]["cuda_visible_devices"]
            for t in manifest(in_tmp / "runs" / "sweeps" / "gpus")["tasks"].values()]
    assert sorted(seen) == ["0", "1"]
