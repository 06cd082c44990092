"""Fuzz the settings of the smoke configs: every numeric model, data or callback setting at 0 and -1 (floats at
-1.0), every list of numbers empty and as [0] (floats [-1.0]), every short string at a bogus value, each run with its
paper's first smoke verb (a callback's setting through a copy of the config: the command line cannot reach it). A run must end with exit status 0 or 2 (the one-line `zoo: error: ...`); one that raises (a traceback)
or is killed is a finding. Settings are taken once per (class, key, value) across the configs.

    python tests/support/fuzz_settings.py [--jobs 2] [--config configs/smoke/x.yaml ...] [--keys lr,seed]
                                          [--verb test] [--null] [--out fuzz.jsonl] [--timeout 180]

The parent imports the CLI once and forks a child per run, so a run costs its own work, not torch's import. A run
that ends with status 0 on a value that makes no sense (an accepted size of 0) is listed too: read those by hand.
Prints the findings and exits 1 if a run raised.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOGUS = "zz_bogus"


def cases(configs: list[Path], keys: set[str] | None, verb_override: str | None = None,
          null: bool = False) -> list[tuple[str, str, str, str]]:
    """(config, dotted setting, value, verb) for every setting worth trying, once per (class, key, value); with
    `null`, every setting of the class itself (not an entry of a dict it takes) at null instead."""
    import yaml

    from zoo.configs import flatten
    from zoo.registry import PAPERS

    verb = {str(p.config_path(c, smoke=True)): p.smoke_verbs[0] for p in PAPERS.values() for c in p.configs}
    out, seen = [], set()
    for config in configs:
        cfg = yaml.safe_load(config.read_text()) or {}
        sections = {group: cfg.get(group) or {} for group in ("model", "data")}
        callbacks = (cfg.get("trainer") or {}).get("callbacks") or []
        sections.update({f"trainer.callbacks.{i}": c for i, c in enumerate(callbacks) if isinstance(c, dict)})
        for group, section in sections.items():
            for key, value in flatten(section.get("init_args") or {}).items():
                if keys is not None and key.rsplit(".", 1)[-1] not in keys:
                    continue
                if null:
                    values = ["null"] if value is not None and "." not in key else []
                elif isinstance(value, bool):
                    values = []
                elif isinstance(value, int):
                    values = ["-1", "0"]
                elif isinstance(value, float):
                    values = ["-1.0"]
                elif isinstance(value, list) and value and all(isinstance(x, (int, float)) for x in value):
                    values = ["[]", "[0]" if isinstance(value[0], int) else "[-1.0]"]
                else:
                    values = [BOGUS] if isinstance(value, str) and len(value) < 40 and "/" not in value else []
                for v in values:
                    if (section.get("class_path"), key, v) not in seen:
                        seen.add((section.get("class_path"), key, v))
                        out.append((str(config), f"{group}.init_args.{key}", v,
                                    verb_override or verb.get(str(config), "fit")))
    return out


def _with_callback_setting(config: str, key: str, value: str, path: Path) -> Path:
    """A copy of `config` with one callback setting changed: the command line cannot reach into the callback list."""
    import yaml

    cfg = yaml.safe_load(Path(config).read_text())
    _, _, i, _, *names = key.split(".")
    node = cfg["trainer"]["callbacks"][int(i)]["init_args"]
    for name in names[:-1]:
        node = node[name]
    node[names[-1]] = yaml.safe_load(value)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _child(argv: list[str], log: Path) -> None:
    os.chdir(ROOT)  # smoke configs name data paths from the repository root
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives until os._exit
    from zoo.cli import main

    try:
        rc = main(argv)
    except BaseException:  # noqa: BLE001 - the traceback is the finding
        traceback.print_exc()
        rc = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc if isinstance(rc, int) else 98)


def run_forked(argvs: list[list[str]], jobs: int, timeout: float, work: Path) -> list[dict]:
    """Run `zoo <argv>` for each argv in a child forked from this warm process, `jobs` at a time; for each, in the
    order given: its exit status (99: it raised), whether it was killed at `timeout`, and its last error line."""
    import torch  # noqa: F401 - imported once here, inherited by every forked run

    import zoo.cli
    import zoo.trainer  # noqa: F401

    results: dict[int, dict] = {}
    running, queue = {}, list(enumerate(argvs))
    while queue or running:
        while queue and len(running) < jobs:
            i, argv = queue.pop(0)
            log = work / f"{i}.log"
            pid = os.fork()
            if pid == 0:
                _child(argv, log)
            running[pid] = (i, time.time(), log)
        for pid, (i, start, log) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            killed = not done and time.time() - start > timeout
            if killed:
                os.kill(pid, 9)
                done, status = os.waitpid(pid, 0)
            if done:
                del running[pid]
                text = log.read_text(errors="replace")
                lines = [ln for ln in text.splitlines() if "zoo: error:" in ln or "Error" in ln]
                results[i] = {"killed": killed, "rc": os.waitstatus_to_exitcode(status),
                              "last": (lines or [""])[-1][:300]}
        time.sleep(0.05)
    return [results[i] for i in range(len(argvs))]


def run(todo: list[tuple[str, str, str, str]], jobs: int, timeout: float, work: Path) -> list[dict]:
    argvs = []
    for i, (config, key, value, verb) in enumerate(todo):
        setting = ["--config", str(_with_callback_setting(config, key, value, work / f"{i}.yaml"))] if \
            key.startswith("trainer.callbacks.") else ["--config", config, f"--{key}={value}"]
        argvs.append([verb, *setting, "--run_root", str(work / "runs"), "--wandb_mode", "disabled"])
    return [{"config": config, "key": key, "value": value, "verb": verb, **r}
            for (config, key, value, verb), r in zip(todo, run_forked(argvs, jobs, timeout, work))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", nargs="*", type=Path, help="configs to fuzz (default: every smoke config)")
    ap.add_argument("--keys", help="comma-separated setting names (the last part of the dotted key) to try")
    ap.add_argument("--verb", choices=("fit", "validate", "test", "predict"),
                    help="run every case with this verb (default: each paper's first smoke verb)")
    ap.add_argument("--null", action="store_true", help="try every setting at null instead (the class's own settings, "
                                                        "not the entries of a dict it takes)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a run may take before it is killed")
    ap.add_argument("--out", type=Path, help="write every run's result here (JSON lines)")
    args = ap.parse_args(argv)
    configs = args.config or sorted((ROOT / "configs" / "smoke").glob("*.yaml"))
    todo = cases([Path(c).resolve() for c in configs], set(args.keys.split(",")) if args.keys else None, args.verb,
                 args.null)
    with tempfile.TemporaryDirectory(prefix="zoo-fuzz-") as work:
        results = run(todo, args.jobs, args.timeout, Path(work))
    return report(results, args.out, lambda r: f"{r['verb']} {Path(r['config']).name} --{r['key']}={r['value']}")


def report(results: list[dict], out: Path | None, describe: Callable[[dict], str]) -> int:
    """Write every result to `out` (JSON lines), print each one not refused in one line (`describe` names its
    case) and the counts; 1 if any raised."""
    if out:
        out.write_text("".join(json.dumps(r) + "\n" for r in results))
    raised = [r for r in results if r["rc"] not in (0, 2)]
    for r in sorted(results, key=lambda r: (r["rc"] in (0, 2), r["rc"])):
        if r["rc"] != 2:
            print(f"{'RAISED' if r in raised else 'ACCEPTED'} {describe(r)} "
                  f"(status {r['rc']}{', killed' if r['killed'] else ''}) {r['last']}")
    print(f"{len(results)} runs: {sum(r['rc'] == 2 for r in results)} refused in one line, "
          f"{sum(r['rc'] == 0 for r in results)} accepted, {len(raised)} raised")
    return 1 if raised else 0


if __name__ == "__main__":
    sys.exit(main())
