"""Sweep files: a reproduction as configs × axes × seeds, expanded into tasks (one run dir per stage and point).

    config: configs/smoke/score_cifar10lt.yaml        # base config, or a list merged in order
    verbs: [fit, test]                                # default [fit, test]
    args: {trainer.max_epochs: 30}                    # overrides for every point (dotted CLI keys)
    grid: {data.init_args.imbalance_ratio: [10, 100]} # axes: every combination
    variants: {ce: {model.init_args.objective: ce}}   # one axis `variant`: name -> overrides
    seeds: [0, 1, 2]                                  # axis `seed` (seed_everything); default [0]

or, for chained experiments, `stages: [{name, config, verbs, args, axes}, ...]` where a string value
``${<stage>}`` is the run dir of that earlier stage at the same point, and `axes` lists the axes a stage depends
on (default: all), so points that agree on them share one run of that stage. ``${<axis>}`` (e.g. ``${seed}``) is
the point's value of that axis, so a datamodule's own seed can follow the seed axis.

Everything here is pure bookkeeping (no torch): `load_sweep` validates the file's shape and `expand` turns it into
`Task`s; checking the overrides against the real config parser happens in `zoo.sweep.runner.validate`.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zoo.configs import read_yaml
from zoo.errors import ZooError
from zoo.registry import ROOT
from zoo.rundir import SINGLE_STAGE

TOP_KEYS = {"name", "description", "config", "verbs", "args", "grid", "variants", "seeds", "stages"}
STAGE_KEYS = {"name", "config", "verbs", "args", "axes"}
VERBS = ("fit", "validate", "test", "predict")
REF = re.compile(r"\$\{([A-Za-z0-9_\-]+)\}")


@dataclass(frozen=True)
class Axis:
    name: str  # the dotted key, `variant` or `seed`
    short: str  # what run dirs and --group_by use
    values: tuple  # grid values, variant names or seeds


@dataclass
class Stage:
    name: str
    configs: list[str]
    verbs: list[str]
    args: dict[str, Any]
    axes: list[str]  # axis names this stage depends on
    refs: list[str] = field(default_factory=list)  # earlier stages its args refer to


@dataclass
class Sweep:
    name: str
    file: str
    axes: list[Axis]
    variants: dict[str, dict[str, Any]]
    stages: list[Stage]

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if name in (a.name, a.short):
                return a
        raise ZooError(f"sweep {self.name!r} has no axis {name!r}; axes: {', '.join(a.short for a in self.axes)}")


@dataclass
class Task:
    """One stage at one point: an ordinary run dir, the verbs to run in it, and the tasks it waits for."""

    id: str  # "<stage>/<point>" (or "<point>" for a single-stage sweep)
    stage: str
    point: str
    axes: dict[str, Any]  # short axis name -> value, only the axes of this stage
    run_dir: str
    configs: list[str]
    overrides: dict[str, Any]  # dotted key -> value; ${stage} references still unresolved
    verbs: list[str]
    deps: dict[str, str] = field(default_factory=dict)  # referenced stage -> task id

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fail(path: Path, msg: str) -> ZooError:
    return ZooError(f"sweep file {path}: {msg}")


def resolve_config(name: str, path: Path) -> str:
    """A config path as given (from the working directory), else from the project root."""
    for base in (Path.cwd(), ROOT):
        p = (base / name) if not Path(name).is_absolute() else Path(name)
        if p.is_file():
            return str(p.resolve())
    raise _fail(path, f"config {name!r} does not exist (looked in {Path.cwd()} and {ROOT})")


def _configs(value: Any, path: Path, where: str) -> list[str]:
    names = [value] if isinstance(value, str) else value
    if not names or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _fail(path, f"{where}`config` must be a path or a non-empty list of paths")
    return [resolve_config(n, path) for n in names]


def _verbs(value: Any, path: Path, where: str) -> list[str]:
    verbs = ["fit", "test"] if value is None else value
    if not isinstance(verbs, list) or not verbs or any(v not in VERBS for v in verbs):
        raise _fail(path, f"{where}`verbs` must be a non-empty list of {', '.join(VERBS)}; got {value!r}")
    return list(verbs)


def _overrides(value: Any, path: Path, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise _fail(path, f"{where} must map dotted config keys to values; got {value!r}")
    return dict(value)


def _axes(raw: dict, path: Path) -> tuple[list[Axis], dict[str, dict[str, Any]]]:
    axes: list[Axis] = []
    grid = raw.get("grid") or {}
    if "grid" in raw and (not isinstance(grid, dict) or not grid):
        raise _fail(path, "`grid` must map dotted config keys to non-empty lists of values")
    lasts = [k.rsplit(".", 1)[-1] for k in grid]
    for key, values in grid.items():
        if not isinstance(values, list):
            raise _fail(path, f"grid axis {key!r} must be a list of values; got {values!r} (one value: put it in "
                              f"`args`, or write [{values!r}])")
        if not values:
            raise _fail(path, f"grid axis {key!r} has no values (an empty grid runs nothing)")
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise _fail(path, f"grid axis {key!r} repeats a value")
        last = key.rsplit(".", 1)[-1]
        axes.append(Axis(key, last if lasts.count(last) == 1 else key, tuple(values)))
    variants = raw.get("variants")
    if variants is not None:
        if not isinstance(variants, dict) or not variants:
            raise _fail(path, "`variants` must map names to overrides (an empty list runs nothing)")
        for name, ov in variants.items():
            _overrides(ov, path, f"variant {name!r}")
        axes.append(Axis("variant", "variant", tuple(variants)))
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise _fail(path, f"`seeds` must be a non-empty list of integers; got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise _fail(path, "`seeds` repeats a seed")
    axes.append(Axis("seed", "seed", tuple(seeds)))
    shorts = [a.short for a in axes]
    if len(set(shorts)) != len(shorts):
        raise _fail(path, f"axis names collide: {shorts}")
    return axes, {k: dict(v or {}) for k, v in (variants or {}).items()}


def _axis_refs(overrides: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """${axis} -> the point's value (the value itself when it is the whole string, so types survive)."""
    out = {}
    for k, v in overrides.items():
        if isinstance(v, str):
            whole = REF.fullmatch(v)
            if whole and whole.group(1) in point:
                v = point[whole.group(1)]
            else:
                v = REF.sub(lambda m: str(point[m.group(1)]) if m.group(1) in point else m.group(0), v)
        out[k] = v
    return out


def _refs(overrides: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for v in overrides.values():
        for name in REF.findall(v) if isinstance(v, str) else ():
            if name not in found:
                found.append(name)
    return found


def load_sweep(file: str | Path, name: str | None = None) -> Sweep:
    """Read and check a sweep file (shape, axes, stage references), before anything runs."""
    path = Path(file)
    if path.is_dir():  # e.g. the sweep's run dir, given to `zoo sweep` instead of `zoo compare`
        raise ZooError(f"sweep file {path} is a directory; give a sweep file, e.g. configs/sweeps/<id>_<name>.yaml "
                       "(`zoo compare` reads a sweep's run dir)")
    if not path.is_file():
        raise ZooError(f"sweep file {path} does not exist")
    raw = read_yaml(path, "sweep file ")
    if not isinstance(raw, dict):
        raise _fail(path, f"must be a mapping of {', '.join(sorted(TOP_KEYS))}; got {type(raw).__name__}")
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise _fail(path, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(TOP_KEYS))}")
    axes, variants = _axes(raw, path)
    names = [a.name for a in axes] + [a.short for a in axes]
    common = _overrides(raw.get("args"), path, "`args`")
    if "stages" in raw:
        if "config" in raw or "verbs" in raw:
            raise _fail(path, "give `config`/`verbs` per stage when the sweep has `stages`")
        raw_stages = raw["stages"]
        if not isinstance(raw_stages, list) or not raw_stages:
            raise _fail(path, "`stages` must be a non-empty list")
    else:
        if "config" not in raw:
            raise _fail(path, "needs `config` (the base config) or `stages`")
        raw_stages = [{"name": SINGLE_STAGE, "config": raw["config"], "verbs": raw.get("verbs")}]
    stages: list[Stage] = []
    for i, rs in enumerate(raw_stages):
        if not isinstance(rs, dict):
            raise _fail(path, f"stage {i} must be a mapping")
        sname = rs.get("name")
        where = f"stage {sname or i}: "
        bad = sorted(set(rs) - STAGE_KEYS)
        if bad:
            raise _fail(path, f"{where}unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(STAGE_KEYS))}")
        if not isinstance(sname, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", sname):
            raise _fail(path, f"{where}needs a `name` of letters, digits, - and _")
        if sname in [s.name for s in stages]:
            raise _fail(path, f"{where}the name is used twice")
        axes_of = rs.get("axes", [a.short for a in axes])
        if not isinstance(axes_of, list) or any(a not in names for a in axes_of):
            raise _fail(path, f"{where}`axes` must list axes of this sweep ({', '.join(a.short for a in axes)}); "
                              f"got {axes_of!r}")
        axes_of = [a.short for a in axes if a.name in axes_of or a.short in axes_of]
        args = {**common, **_overrides(rs.get("args"), path, f"{where}`args`")}
        in_variants = [v for ov in variants.values() for v in ov.values()] if "variant" in axes_of else []
        in_grid = [v for a in axes if a.short in axes_of and a.name not in ("variant", "seed") for v in a.values]
        refs = _refs({**args, **dict(enumerate(in_variants + in_grid))})
        for ref in refs:
            if ref in names and next(a.short for a in axes if ref in (a.name, a.short)) not in axes_of:
                raise _fail(path, f"{where}refers to ${{{ref}}}, an axis this stage does not depend on")
        stage = Stage(sname, _configs(rs.get("config"), path, where), _verbs(rs.get("verbs"), path, where), args,
                      axes_of, [r for r in refs if r not in names])
        for ref in stage.refs:
            earlier = {s.name: s for s in stages}
            if ref not in earlier:
                raise _fail(path, f"{where}refers to ${{{ref}}}, which is not an earlier stage "
                                  f"(earlier: {', '.join(earlier) or 'none'})")
            extra = sorted(set(earlier[ref].axes) - set(stage.axes))
            if extra:
                raise _fail(path, f"{where}refers to ${{{ref}}}, which varies {', '.join(extra)} while "
                                  f"{sname} does not: one {sname} run would match several {ref} runs")
        stages.append(stage)
    sweep_name = name or raw.get("name") or path.stem
    if not isinstance(sweep_name, str) or not re.fullmatch(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*", sweep_name):
        # the name is a folder under the sweep root: a path (../x, a/b) or a number would leave or break it
        raise _fail(path, f"the sweep name {sweep_name!r} must be letters, digits, ., - and _ (not starting with .)")
    return Sweep(sweep_name, str(path), axes, variants, stages)


def _fmt(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))
    return re.sub(r"[^A-Za-z0-9_.+\-=\[\]{}:,]", "_", s)


def point_name(axes: dict[str, Any]) -> str:
    return ",".join(f"{k}={_fmt(v)}" for k, v in axes.items()) or "default"


def expand(sweep: Sweep, sweep_dir: str | Path) -> list[Task]:
    """Every (stage, point) task in dependency order; points that agree on a stage's axes share its task."""
    sweep_dir = Path(sweep_dir)
    tasks: dict[str, Task] = {}
    single = len(sweep.stages) == 1
    for combo in itertools.product(*(a.values for a in sweep.axes)):
        point = {a.short: v for a, v in zip(sweep.axes, combo)}
        ids: dict[str, str] = {}
        for stage in sweep.stages:
            axes = {k: point[k] for k in stage.axes}
            pname = point_name(axes)
            tid = pname if single else f"{stage.name}/{pname}"
            ids[stage.name] = tid
            if tid in tasks:
                continue
            overrides = dict(stage.args)
            for a in sweep.axes:
                if a.short not in axes:
                    continue
                if a.name == "variant":
                    overrides.update(sweep.variants[axes["variant"]])
                elif a.name == "seed":
                    overrides["seed_everything"] = axes["seed"]
                else:
                    overrides[a.name] = axes[a.short]
            overrides = _axis_refs(overrides, axes)
            run_dir = sweep_dir / pname if single else sweep_dir / stage.name / pname
            tasks[tid] = Task(tid, stage.name, pname, axes, str(run_dir), stage.configs, overrides, stage.verbs,
                              {ref: ids[ref] for ref in stage.refs})
    return list(tasks.values())


def resolve_refs(overrides: dict[str, Any], run_dirs: dict[str, str]) -> dict[str, Any]:
    """${stage} -> that stage's run dir (absolute), in every string value."""
    return {k: REF.sub(lambda m: run_dirs[m.group(1)], v) if isinstance(v, str) else v for k, v in overrides.items()}


def cli_args(task: Task | dict, run_dirs: dict[str, str]) -> list[str]:
    """The command-line arguments (after the verb) that make `zoo <verb>` run this task."""
    t = task if isinstance(task, dict) else task.to_dict()
    argv: list[str] = []
    for c in t["configs"]:
        argv += ["--config", c]
    for k, v in resolve_refs(t["overrides"], run_dirs).items():
        argv.append(f"--{k}={v if isinstance(v, str) and not _needs_quoting(v) else json.dumps(v)}")
    return argv + ["--run_dir", t["run_dir"]]


def _needs_quoting(s: str) -> bool:
    """Strings the command line would read as another type (numbers, booleans, null, lists)."""
    try:
        return not isinstance(yaml.safe_load(s), str)
    except yaml.YAMLError:
        return True
