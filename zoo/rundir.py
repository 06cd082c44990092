"""One run-directory layout for every run.

    runs/<config-stem>/<YYYYmmdd-HHMMSS>[-N]/
        config.yaml           resolved config of `fit` (with the seed); other stages: config.<stage>.yaml (a
                              resumed fit: config.fit.yaml, then config.fit-N.yaml)
        checkpoints/          last.ckpt (resume) and best-k checkpoints
        logs/<stage>/metrics.csv
        wandb/                the W&B run (offline unless logged in)
        summary.json          final metrics per stage, paper id, config name, and per stage the environment
                              that produced them: what cards and compare read
        point.json            only for sweep points: the sweep, the stage and the point's axis values
        README.md             the rendered model card
"""

from __future__ import annotations

import functools
import glob
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from zoo.errors import ZooError

RUN_DIR_ENV = "ZOO_RUN_DIR"  # how DDP worker processes (re-launched commands) find rank 0's run dir


def newest_match(path: str, what: str, hint: str) -> str:
    """`path` itself, or, if it is a glob (e.g. ``runs/<stage1>/*/checkpoints/last.ckpt``), its newest match.
    `what` names the setting and `hint` says what to do in the error when nothing matches."""
    if not any(c in path for c in "*?["):
        return path
    matches = sorted(glob.glob(path), key=os.path.getmtime)
    if not matches:
        raise ZooError(f"{what} {path!r} matches nothing; {hint}")
    return matches[-1]


def new_run_dir(root: str | Path, name: str) -> Path:
    """A fresh directory under root/name; never reuses an existing one (two runs never collide)."""
    base = Path(root) / name
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        d = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            d.mkdir(parents=True, exist_ok=False)
            return d
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh run directory under {base}")


def check_output_dir(path: str | Path, option: str) -> Path:
    """A folder a command will create (or fill) at `path`, named by the user as `option`: refused in one line before
    any work when a file stands in its way or its nearest existing folder cannot be written."""
    path = Path(path)
    problem = _folder_problem(path)
    if problem:
        raise ZooError(f"{option} {path}: {problem}")
    return path


def _folder_problem(path: Path) -> str | None:
    """Why the folder `path` (and any parents missing) cannot be made, judged at its nearest existing ancestor."""
    there = path
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        return f"{there} is a file, not a folder"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"the folder {there} cannot be written"
    return None


def check_output_file(path: str | Path, option: str, make_parents: bool = False) -> Path:
    """A file a command will write at `path`, named by the user as `option`: refused in one line before any work
    when it is a folder, or its folder does not exist (unless the command makes it) or cannot be written; found at
    the end, the work before it would be lost."""
    path = Path(path)
    if path.is_dir():
        raise ZooError(f"{option} {path} is a folder; give the path of a file")
    if not make_parents and not path.parent.is_dir():
        raise ZooError(f"{option} {path}: the folder {path.parent} does not exist")
    problem = _folder_problem(path.parent)
    if problem:
        raise ZooError(f"{option} {path}: {problem}")
    if path.exists() and not os.access(path, os.W_OK):
        raise ZooError(f"{option} {path} cannot be written")
    return path


def fit_config(run_dir: str | Path) -> Path:
    """The config of the run's last fit: config.yaml, or the newest config.fit[-N].yaml a resumed fit wrote (it may
    change trainer settings, e.g. max_epochs, so the weights and numbers are its). What cards and compare show."""
    run_dir = Path(run_dir)
    last, n = run_dir / "config.yaml", 0
    while (run_dir / (name := "config.fit.yaml" if n == 0 else f"config.fit-{n}.yaml")).exists():
        last, n = run_dir / name, n + 1
    return last


def check_run_dir(run_dir: str | Path) -> Path:
    """A run dir a zoo command made (its config.yaml inside). Commands that read or write one refuse anything else:
    `zoo card .` in a project would have overwritten the project's README.md."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        what = "does not exist" if not run_dir.exists() else "is not a run dir (no config.yaml)"
        raise ZooError(f"{run_dir} {what}; a run dir is runs/<config name>/<timestamp>/")
    return run_dir


def run_dir_of_checkpoint(ckpt_path: str | Path | None) -> Path | None:
    """The run dir that holds this checkpoint (…/<run>/checkpoints/x.ckpt), if it is one of ours."""
    if not ckpt_path or str(ckpt_path) in ("last", "best", "hpc", "registry"):
        return None
    p = Path(ckpt_path).resolve()
    run = p.parent.parent
    if p.parent.name == "checkpoints" and (run / "config.yaml").exists():
        return run
    return None


def is_worker_process() -> bool:
    """True in processes that Lightning's DDP launcher started for ranks > 0."""
    return any(os.environ.get(k, "0") not in ("", "0") for k in ("LOCAL_RANK", "NODE_RANK")) and (
        RUN_DIR_ENV in os.environ
    )


def stage_dir(run_dir: Path, stage: str) -> Path:
    """logs/<stage>, or logs/<stage>-N when that stage already ran in this run dir (loses nothing)."""
    logs = run_dir / "logs"
    for n in range(1000):
        d = logs / (stage if n == 0 else f"{stage}-{n}")
        if not d.exists():
            return d
    raise RuntimeError(f"too many {stage} stages in {run_dir}")


def read_record(path: Path, what: str) -> dict[str, Any]:
    """A JSON object the zoo wrote (summary.json, point.json, a sweep's manifest), or {} where there is none; a
    damaged one (a full disk, a hand edit) is a one-line error naming the file, not a JSONDecodeError."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ZooError(f"{path} is not a readable {what} ({e}); restore it or delete it") from e
    if not isinstance(data, dict):
        raise ZooError(f"{path} is not a readable {what} (a JSON {type(data).__name__}, not an object); restore it "
                       f"or delete it")
    return data


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    return read_record(Path(run_dir) / "summary.json", "run summary")


def update_summary(run_dir: str | Path, **fields: Any) -> dict[str, Any]:
    summary = read_summary(run_dir)
    for k, v in fields.items():
        if isinstance(v, dict) and isinstance(summary.get(k), dict):
            summary[k].update(v)
        else:
            summary[k] = v
    path = Path(run_dir) / "summary.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str))
    tmp.replace(path)
    return summary


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def _source_commit() -> str | None:
    """The git commit of the zoo checkout this code runs from (None outside one, e.g. an installed wheel); asked
    once per process (the code a process runs is the code it loaded), not at every stage's end."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def run_environment(device: Any = None) -> dict[str, Any]:
    """What a run's numbers depend on beyond its config and seed: the code, the library builds, the device and the
    CPU threads. Seeded training repeats to the bit only where all of these match (a float reduction order differs
    with the thread count or the CPU's vector unit, and training amplifies it), so every stage records them."""
    import lightning
    import numpy
    import torch

    env: dict[str, Any] = {"zoo_commit": _source_commit(), "python": platform.python_version(),
                           "torch": torch.__version__, "lightning": lightning.__version__, "numpy": numpy.__version__,
                           "torch_threads": torch.get_num_threads(), "cpu": _cpu_model()}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:  # which GPUs a sweep's job slot gave this run
        env["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


POINT = "point.json"
SINGLE_STAGE = "main"  # the stage name that a sweep without `stages` records in its points


def read_point(run_dir: str | Path) -> dict[str, Any]:
    """A sweep point's identity ({"sweep", "stage", "point", "axes"}), or {} for a run outside any sweep."""
    return read_record(Path(run_dir) / POINT, "sweep point record")
