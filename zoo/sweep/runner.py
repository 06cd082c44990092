"""Running a sweep's tasks: each one the verbs of `zoo fit`/`zoo test` in its own process and run dir.

Local execution forks every task from a server process that has already imported the trainer
(multiprocessing's forkserver with preload), so a task starts in milliseconds yet shares no state with the
sweep or with other tasks. SLURM execution submits the same `run_task` function as job arrays through submitit,
one array per dependency level. What a task finished is read back from its run dir (`summary.json` lists the
stages that completed), so a killed sweep restarted with the same command reruns only what is unfinished, and a
killed fit resumes from its `last.ckpt`.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

from zoo.checks import check_init_args, check_learning_rates
from zoo.configs import flatten
from zoo.errors import ZooError
from zoo.rundir import POINT, read_record, read_summary
from zoo.sweep.spec import Sweep, Task, cli_args

MANIFEST = "manifest.json"
LOG = "sweep.log"
RESULT = "sweep_result.json"


# -- one task ---------------------------------------------------------------------------------------------

def finished_verbs(run_dir: str | Path) -> set[str]:
    return set(read_summary(run_dir).get("stages") or [])


def task_argv(task: dict, verb: str, run_dirs: dict[str, str]) -> list[str]:
    """`zoo <verb> ...` for this task: a fit resumes from its last.ckpt; evaluation after a fit uses it."""
    argv = [verb, *cli_args(task, run_dirs)]
    last = Path(task["run_dir"]) / "checkpoints" / "last.ckpt"
    if verb == "fit" and last.exists():
        argv += ["--ckpt_path", str(last)]
    elif verb != "fit" and "fit" in task["verbs"]:
        argv += ["--ckpt_path", str(last)]
    return argv


def _last_error(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    for ln in reversed(lines):
        if ln.startswith("zoo: error:"):
            return ln[len("zoo: error:"):].strip()
    tail = [ln.strip() for ln in lines if ln.strip()]
    return tail[-1] if tail else "no output"


@contextlib.contextmanager
def _output_to(log: Path):
    """stdout and stderr (file descriptors too, so library output lands there) appended to the task's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("a") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def run_task(task: dict, run_dirs: dict[str, str], zoo_script: str = "zoo") -> dict[str, Any]:
    """Run the task's unfinished verbs exactly as `zoo <verb> ...` would (the command line is this process's
    sys.argv while it runs, which is also what Lightning's DDP launcher starts the other ranks with).
    Returns {"state": "done"|"failed", "error": ...}."""
    from zoo.cli import main

    run_dir = Path(task["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(run_dir):
        return _run_verbs(task, run_dirs, zoo_script, main)


LOCK = ".sweep.lock"


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """Held while a task runs in its run dir, released by the kernel when the process dies: a restarted sweep waits
    here for a task process of a killed sweep that has not died yet, instead of writing into the same dir."""
    import fcntl

    with (run_dir / LOCK).open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_verbs(task: dict, run_dirs: dict[str, str], zoo_script: str, main: Callable) -> dict[str, Any]:
    run_dir = Path(task["run_dir"])
    done = finished_verbs(run_dir)
    if not done and not (run_dir / "checkpoints" / "last.ckpt").exists() and run_dir.exists():
        # a start that left nothing to resume from: begin afresh rather than pile stages into the same dir
        for child in run_dir.iterdir():
            if child.name not in (POINT, LOG, LOCK):
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    log = run_dir / LOG
    for verb in task["verbs"]:
        if verb in done:
            continue
        argv = task_argv(task, verb, run_dirs)
        saved_argv = sys.argv
        with _output_to(log):
            print(f"$ zoo {' '.join(argv)}", flush=True)
            sys.argv = [zoo_script, *argv]
            try:
                code = main()
            except BaseException as e:  # noqa: BLE001 - a point's crash is recorded; the sweep carries on
                traceback.print_exc()
                code = 1 if not isinstance(e, KeyboardInterrupt) else 130
            finally:
                sys.argv = saved_argv
        if code != 0:
            return {"state": "failed", "verb": verb, "error": f"{verb}: {_last_error(log)}"}
    return {"state": "done"}


def _die_with_the_sweep() -> None:
    """A SIGKILLed sweep must not leave a task writing into a run dir that a restart reuses. The task leads its own
    process group (DDP ranks, data workers); a watcher thread kills that group the moment the sweep process is gone
    (the forkserver that forked the task outlives the sweep while any task runs, so a parent-death signal would
    not fire)."""
    import threading

    os.setsid()
    parent = multiprocessing.parent_process()

    def watch() -> None:
        parent.join()
        os.killpg(0, signal.SIGKILL)

    if parent is not None:
        threading.Thread(target=watch, daemon=True, name="zoo-sweep-watch").start()


def gpu_slots(jobs: int) -> list[str | None]:
    """What each of `jobs` parallel points may see as CUDA_VISIBLE_DEVICES: the visible GPUs split into `jobs`
    groups (8 GPUs, 4 jobs: two each; 2 GPUs, 4 jobs: two jobs share each). Without this every point would see every
    GPU: a module's `auto` devices would start one DDP per point over all of them, and one-process modules would all
    land on the first. One job, or no GPU: no restriction (None)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = [g.strip() for g in visible.split(",") if g.strip()]
    else:
        import torch

        gpus = [str(k) for k in range(torch.cuda.device_count())]  # NVML: no CUDA context in the parent
    if jobs < 2 or not gpus:
        return [None] * jobs
    if jobs >= len(gpus):
        return [gpus[k % len(gpus)] for k in range(jobs)]
    share = len(gpus) // jobs
    return [",".join(gpus[k * share:(k + 1) * share]) for k in range(jobs)]


def _task_process(task: dict, run_dirs: dict[str, str], threads: int, zoo_script: str, gpus: str | None) -> None:
    """Entry point of a forked task process."""
    _die_with_the_sweep()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if gpus is not None:  # before anything initialises CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    import torch

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(threads)
    result = run_task(task, run_dirs, zoo_script)
    (Path(task["run_dir"]) / RESULT).write_text(json.dumps(result))
    sys.exit(0 if result["state"] == "done" else 1)


# -- the manifest ----------------------------------------------------------------------------------------

class Manifest:
    """`manifest.json` in the sweep dir: every task, its state (pending/running/done/failed/skipped) and error."""

    def __init__(self, sweep_dir: Path, sweep: Sweep, tasks: list[Task], commands: dict[str, list[str]]):
        self.path = sweep_dir / MANIFEST
        old = read_record(self.path, "sweep manifest")
        self.data = {"sweep": sweep.name, "file": sweep.file, "axes": {a.short: list(a.values) for a in sweep.axes},
                     "tasks": {}}
        for t in tasks:
            prev = (old.get("tasks") or {}).get(t.id, {})
            entry = {**t.to_dict(), "command": commands[t.id], "state": "pending", "error": None}
            if prev.get("command") not in (None, entry["command"]) and finished_verbs(t.run_dir):
                raise ZooError(f"sweep {sweep.name!r} changed for point {t.id} that already ran (its commands "
                               f"differ from {self.path}); run it under another --name or delete {t.run_dir}")
            self.data["tasks"][t.id] = entry
        self.save()

    def __getitem__(self, tid: str) -> dict:
        return self.data["tasks"][tid]

    def set(self, tid: str, **fields: Any) -> None:
        self.data["tasks"][tid].update(fields)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        tmp.replace(self.path)

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in ("done", "failed", "skipped", "running", "pending")}
        for t in self.data["tasks"].values():
            out[t["state"]] += 1
        return out


def progress(m: Manifest, event: str) -> None:
    c = m.counts()
    print(f"zoo sweep: [done {c['done']} | failed {c['failed'] + c['skipped']} | running {c['running']} | "
          f"left {c['pending']}] {event}", flush=True)


# -- executors ---------------------------------------------------------------------------------------------

def forkserver_context():
    """multiprocessing's forkserver, preloaded with the trainer: a process it forks starts with torch and Lightning
    imported (one server per process, so whoever else forks from it must use this preload too)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["zoo.cli", "zoo.trainer"])
    return ctx


def run_local(tasks: list[Task], m: Manifest, jobs: int, threads: int) -> None:
    ctx = forkserver_context()
    zoo_script = shutil.which("zoo") or sys.argv[0]
    order = [t.id for t in tasks]
    run_dirs = {t.id: t.run_dir for t in tasks}
    running: dict[Any, str] = {}  # process sentinel -> task id
    procs: dict[str, Any] = {}
    slots = gpu_slots(jobs)
    free, slot_of = list(range(jobs)), {}  # job slots (each with its GPUs), and the one each running task holds
    try:
        while True:
            for tid in order:
                e = m[tid]
                if e["state"] != "pending" or len(running) >= jobs:
                    continue
                deps = [m[d] for d in e["deps"].values()]
                if any(d["state"] in ("failed", "skipped") for d in deps):
                    bad = next(d["id"] for d in deps if d["state"] in ("failed", "skipped"))
                    m.set(tid, state="skipped", error=f"needs {bad}, which did not finish")
                    progress(m, f"skipped {tid}")
                    continue
                if not all(d["state"] == "done" for d in deps):
                    continue
                refs = {stage: run_dirs[dep] for stage, dep in e["deps"].items()}
                (Path(e["run_dir"]) / RESULT).unlink(missing_ok=True)
                slot_of[tid] = free.pop(0)
                p = ctx.Process(target=_task_process, args=(e, refs, threads, zoo_script, slots[slot_of[tid]]),
                                name=tid)
                p.start()
                running[p.sentinel], procs[tid] = tid, p
                m.set(tid, state="running", started=time.time())
                progress(m, f"running {tid}: {', '.join(v for v in e['verbs'])}")
            if not running:
                break
            for sentinel in wait(list(running)):
                tid = running.pop(sentinel)
                p = procs.pop(tid)
                p.join()
                free.append(slot_of.pop(tid))
                _finish(m, tid, p.exitcode)
    finally:
        for p in procs.values():  # interrupted: no task (nor its DDP ranks or data workers) outlives the sweep
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.join()


def _finish(m: Manifest, tid: str, exitcode: int | None) -> None:
    path = Path(m[tid]["run_dir"]) / RESULT
    try:
        result = read_record(path, "sweep task result") or {
            "state": "failed", "error": f"the task process died (exit code {exitcode})"}
    except ZooError as e:  # one damaged task record fails that task, not the sweep
        result = {"state": "failed", "error": str(e)}
    m.set(tid, state=result["state"], error=result.get("error"), finished=time.time())
    progress(m, f"{result['state']} {tid}" + (f": {result['error']}" if result.get("error") else ""))


def _submitit_job(task: dict, run_dirs: dict[str, str]) -> dict[str, Any]:
    result = run_task(task, run_dirs, shutil.which("zoo") or "zoo")
    (Path(task["run_dir"]) / RESULT).write_text(json.dumps(result))
    return result


def run_submitit(tasks: list[Task], m: Manifest, executor: Any, levels: Callable[[], list[list[Task]]]) -> None:
    """One job array per dependency level; the sweep waits for a level before submitting the next."""
    run_dirs = {t.id: t.run_dir for t in tasks}
    for level in levels():
        todo = []
        for t in level:
            deps = [m[d] for d in t.deps.values()]
            if any(d["state"] != "done" for d in deps):
                m.set(t.id, state="skipped", error="needs " + ", ".join(d["id"] for d in deps if d["state"] != "done"))
                continue
            if m[t.id]["state"] == "pending":
                todo.append(t)
        if not todo:
            continue
        dicts = [m[t.id] for t in todo]
        refs = [{stage: run_dirs[dep] for stage, dep in d["deps"].items()} for d in dicts]
        jobs = executor.map_array(_submitit_job, dicts, refs)
        for t, job in zip(todo, jobs):
            m.set(t.id, state="running", job_id=str(job.job_id))
        progress(m, f"submitted {len(jobs)} jobs ({jobs[0].job_id.split('_')[0]})")
        for t, job in zip(todo, jobs):
            try:
                result = job.result()
            except Exception as e:  # noqa: BLE001 - a job that died is a failed point
                result = {"state": "failed", "error": f"job {job.job_id}: {str(e).strip().splitlines()[-1]}"}
            m.set(t.id, state=result["state"], error=result.get("error"), finished=time.time())
            progress(m, f"{result['state']} {t.id}" + (f": {result['error']}" if result.get("error") else ""))


def validate(tasks: list[Task]) -> None:
    """Parse each distinct (stage, override keys) command with the real CLI parser and check its settings, nothing
    instantiated, so a key that names no config option or a value out of range fails before anything runs; every
    point's own values are checked too, over that command's resolved model settings."""
    resolved: dict[tuple[Any, ...], dict[str, Any]] = {}
    for t in tasks:
        # points that differ only in numbers parse alike (their ranges are checked per point below); a string (a
        # class path, a choice, a path) or a value of another type is parsed in each point that gives it
        key = (t.stage, tuple(sorted((k, _shape(v)) for k, v in t.overrides.items())))
        if key not in resolved:
            resolved[key] = _parse_point(t)
        check_point_values(t, resolved[key])


def _shape(value: Any) -> Any:
    """What of an override value the parser can judge differently: strings verbatim, other values by type."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ("list", *(_shape(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *sorted((str(k), _shape(v)) for k, v in value.items()))
    return type(value).__name__


def _parse_point(t: Task) -> dict[str, Any]:
    """The model settings `t`'s first verb resolves to, checked (`zoo.trainer.parse_only`), quietly."""
    from zoo.trainer import parse_only

    placeholders = {stage: f"/{stage}-run-dir" for stage in t.deps}
    argv = [t.verbs[0], *cli_args(t, placeholders)]
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stderr(null), contextlib.redirect_stdout(null):
            return parse_only(argv)
    except SystemExit as e:
        raise ZooError(f"point {t.id} does not parse (exit {e.code})") from e
    except ZooError as e:
        raise ZooError(f"point {t.id} ({t.verbs[0]}): {e}") from e
    except Exception as e:  # noqa: BLE001 - jsonargparse's errors: report the first line
        from zoo.cli import one_line

        raise ZooError(f"point {t.id} ({t.verbs[0]}) does not parse: {one_line(e)}") from e


def check_point_values(t: Task, model_settings: dict[str, Any]) -> None:
    """A point's own override values (grid, variants, args) against the trainer's settings checks; the learning
    rates are judged as the run will see them: the point's values over its command's resolved `model_settings`."""
    args: dict[str, dict[str, Any]] = {"model": {}, "data": {}}
    for key, value in t.overrides.items():
        group, _, name = key.partition(".init_args.")
        if group in args and name:
            args[group][name] = value
    try:
        check_init_args(args["model"], args["data"], training=False)
        check_learning_rates({**flatten(model_settings), **args["model"]}, training="fit" in t.verbs)
    except ZooError as e:
        raise ZooError(f"point {t.id}: {e}") from e
