"""`zoo sweep`: a reproduction (configs × axes × seeds, optionally in chained stages) as ordinary zoo runs.

    zoo sweep configs/sweeps/score_digits_lt.yaml --jobs 2
    zoo compare runs/sweeps/score_digits_lt --group_by variant imbalance_ratio --format markdown

Layout: ``runs/sweeps/<name>/manifest.json`` (every task with its state and error) and one ordinary run dir per
stage and point (``<name>/<point>/`` or ``<name>/<stage>/<point>/``, e.g. ``variant=fl,seed=1``) with its
``point.json``. File format: `zoo.sweep.spec`; execution: `zoo.sweep.runner`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Literal, Optional

from zoo.errors import ZooError
from zoo.rundir import POINT, check_output_dir
from zoo.sweep.spec import Sweep, Task, cli_args, expand, load_sweep

__all__ = ["Sweep", "Task", "expand", "load_sweep", "sweep"]


def levels(tasks: list[Task]) -> list[list[Task]]:
    """Tasks grouped by dependency depth (stage order already respects references)."""
    depth: dict[str, int] = {}
    for t in tasks:
        depth[t.id] = 1 + max((depth[d] for d in t.deps.values()), default=-1)
    return [[t for t in tasks if depth[t.id] == d] for d in range(max(depth.values(), default=-1) + 1)]


def _write_points(sweep: Sweep, tasks: list[Task]) -> None:
    for t in tasks:
        d = Path(t.run_dir)
        d.mkdir(parents=True, exist_ok=True)
        point = {"sweep": sweep.name, "stage": t.stage, "point": t.point, "axes": t.axes}
        (d / POINT).write_text(json.dumps(point, indent=2, default=str))


def sweep(file: str, jobs: int = 1, executor: Literal["local", "slurm", "submitit_local"] = "local",
          dry_run: bool = False, name: Optional[str] = None, sweep_root: str = "runs/sweeps",
          threads: Optional[int] = None, slurm: Optional[dict] = None) -> str:
    """Run every point of a sweep file as ordinary `zoo fit`/`zoo test` runs; resumable (finished points are kept).

    Args:
        file: the sweep file (configs/sweeps/<id>_<name>.yaml).
        jobs: points run at once in local processes.
        executor: 'local' (processes on this machine), 'slurm' (job arrays through submitit) or 'submitit_local'
            (submitit's local executor: the SLURM code path on one machine).
        dry_run: print the points and their commands, run nothing.
        name: sweep name (default: the file's `name`, else its stem); the sweep dir is <sweep_root>/<name>.
        sweep_root: where sweep dirs go.
        threads: torch threads per local task (default: cores / jobs).
        slurm: submitit parameters for 'slurm', e.g. {partition: gpu, timeout_min: 120, gpus_per_node: 1}.
    """
    from zoo.sweep.runner import Manifest, finished_verbs, progress, run_local, run_submitit, task_argv, validate

    spec = load_sweep(file, name)
    if jobs < 1:
        raise ZooError(f"--jobs must be at least 1, got {jobs}")
    if threads is not None and threads < 1:  # each task process would die in torch.set_num_threads
        raise ZooError(f"--threads must be at least 1, got {threads}")
    sweep_dir = check_output_dir(Path(sweep_root) / spec.name, "--sweep_root")
    tasks = expand(spec, sweep_dir)
    validate(tasks)
    run_dirs = {t.id: t.run_dir for t in tasks}
    refs = {t.id: {s: run_dirs[d] for s, d in t.deps.items()} for t in tasks}
    if dry_run:
        print(f"sweep {spec.name}: {len(tasks)} runs in {sweep_dir}")
        for t in tasks:
            for verb in t.verbs:
                print(f"  {t.id}: zoo {shlex.join(task_argv(t.to_dict(), verb, refs[t.id]))}")
        return str(sweep_dir)
    if executor == "slurm" and shutil.which("srun") is None:  # submitit's AutoExecutor would run it here, silently
        raise ZooError("--executor slurm, but this machine has no SLURM (no srun on PATH); run the sweep where SLURM "
                       "is, or use --executor local or submitit_local")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    copy = sweep_dir / "sweep.yaml"
    if not copy.exists():
        shutil.copyfile(file, copy)
    manifest = Manifest(sweep_dir, spec, tasks, {t.id: cli_args(t, refs[t.id]) for t in tasks})
    _write_points(spec, tasks)
    for t in tasks:
        if set(t.verbs) <= finished_verbs(t.run_dir):
            manifest.set(t.id, state="done")
    progress(manifest, f"sweep {spec.name}: {len(tasks)} runs in {sweep_dir}")
    if executor == "local":
        run_local(tasks, manifest, jobs, threads or max(1, (os.cpu_count() or 1) // jobs))
    else:
        import submitit

        folder = sweep_dir / "submitit"
        ex = submitit.LocalExecutor(folder=folder) if executor == "submitit_local" else \
            submitit.AutoExecutor(folder=folder)
        params = dict(slurm or {})
        if executor == "submitit_local":
            params.setdefault("timeout_min", 60)
        ex.update_parameters(**params)
        run_submitit(tasks, manifest, ex, lambda: levels(tasks))
    counts = manifest.counts()
    failed = [t for t in manifest.data["tasks"].values() if t["state"] in ("failed", "skipped")]
    print(f"zoo sweep: {counts['done']} of {len(tasks)} runs done in {sweep_dir}; compare them with: "
          f"zoo compare {sweep_dir} --group_by {' '.join(a.short for a in spec.axes if a.short != 'seed') or 'seed'}")
    if failed:
        raise ZooError(f"{len(failed)} of {len(tasks)} sweep runs did not finish (first: {failed[0]['id']}: "
                       f"{failed[0]['error']}); see {manifest.path}; rerun the same command to retry them")
    return str(sweep_dir)

