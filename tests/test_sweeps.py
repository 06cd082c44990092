"""Every reproduction is a sweep file: each belongs to a registered paper, parses with the real CLI parser, and its
smoke twin runs end to end through `zoo sweep`, then aggregates through `zoo compare --group_by`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.registry import PAPERS, ROOT
from zoo.sweep import expand, load_sweep
from zoo.sweep.runner import validate

SWEEPS = sorted((ROOT / "configs" / "sweeps").glob("*.yaml")) + \
    sorted((ROOT / "configs" / "smoke" / "sweeps").glob("*.yaml"))
SMOKE = [(p, s) for p in PAPERS.values() if p.status != "planned" for s in p.sweeps]


def test_every_sweep_file_belongs_to_a_paper_and_has_a_smoke_twin():
    stems = {s for p in PAPERS.values() for s in p.sweeps}
    assert not [f.name for f in SWEEPS if f.stem not in stems], "sweep files not listed in the registry"
    for p in PAPERS.values():
        for s in p.sweeps:
            assert p.sweep_path(s).exists() and p.sweep_path(s, smoke=True).exists(), f"{p.id}: {s}"


@pytest.mark.parametrize("path", SWEEPS, ids=lambda f: str(f.relative_to(ROOT / "configs")))
def test_every_sweep_file_parses(path, tmp_path):
    tasks = expand(load_sweep(path), tmp_path)
    assert tasks
    validate(tasks)  # every stage's overrides against the real config parser, nothing instantiated


@pytest.mark.timeout(600)  # a hang guard: each point is a real `zoo` subprocess, slow on a busy machine
@pytest.mark.parametrize("paper, stem", SMOKE, ids=[s for _, s in SMOKE])
def test_smoke_sweep_end_to_end(in_tmp, paper, stem, capsys):
    f = paper.sweep_path(stem, smoke=True)
    assert main(["sweep", str(f), "--jobs", "2", "--sweep_root", str(in_tmp / "sweeps")]) == 0
    spec = load_sweep(f)
    sweep_dir = in_tmp / "sweeps" / spec.name
    tasks = json.loads((sweep_dir / "manifest.json").read_text())["tasks"]
    assert {t["state"] for t in tasks.values()} == {"done"}
    for t in tasks.values():
        summary = json.loads((Path(t["run_dir"]) / "summary.json").read_text())
        assert summary["paper"] == paper.id and set(t["verbs"]) <= set(summary["stages"])
    axes = [a.short for a in spec.axes if a.short != "seed"] or ["seed"]
    if len(spec.stages) > 1:
        axes = ["stage", *axes]
    capsys.readouterr()
    assert main(["compare", str(sweep_dir), "--group_by", *axes, "--format", "markdown"]) == 0
    assert "| n |" in capsys.readouterr().out
