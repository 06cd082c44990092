"""The README stays true: every file and module it names exists, every paper's status is the registry's, and every
sweep file is named by the README or by its paper's card (with the command that runs it)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from zoo.registry import PAPERS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# a repository path: a top-level folder of the project, then a concrete name (no placeholder such as <id> or *)
PATH = re.compile(r"(?<![\w/.])((?:configs|benchmarks|cards|tests|datamodules|callbacks|zoo)/[\w./-]+)")


def _named_paths(text: str) -> set[str]:
    found = set()
    for m in PATH.finditer(text):
        path, after = m.group(1).rstrip("."), text[m.end():m.end() + 1]
        if after in "<*{[":  # a pattern such as configs/<id>_<dataset>.yaml or configs/sweeps/gentle_*.yaml
            continue
        found.add(path)
    return found


def test_every_path_the_readme_names_exists():
    paths = _named_paths(README)
    assert len(paths) > 50, "the pattern no longer finds the README's paths"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"README names files that do not exist: {missing}"


def test_every_module_the_readme_runs_exists():
    modules = set(re.findall(r"python -m ([\w.]+)", README))
    assert modules
    assert not [m for m in modules if importlib.util.find_spec(m) is None]


def test_every_paper_row_has_the_registry_status():
    row = re.compile(r"^\| `(\w+)` \| \[.*?\]\(.*?\) \| ([\w ]+) \|", re.MULTILINE)
    rows = {m.group(1): m.group(2) for m in row.finditer(README)}
    assert rows == {p.id: p.status for p in PAPERS.values()}


def test_every_sweep_is_named_with_its_command():
    for sweep in sorted((ROOT / "configs" / "sweeps").glob("*.yaml")):
        paper = PAPERS[sweep.stem.split("_")[0]]
        card = (ROOT / "cards" / f"{paper.id}.md").read_text()
        card += "".join(p.read_text() for p in (ROOT / "cards" / paper.id).glob("*.md"))
        command = f"zoo sweep configs/sweeps/{sweep.name}"
        assert command in README or command in card, f"{sweep.name}: neither the README nor {paper.id}'s card runs it"


def test_your_own_data_names_real_datamodules_and_options():
    """Each row of 'Your own data' names a datamodule that exists and `option: value` pairs it takes."""
    import importlib
    import inspect

    section = README[README.index("## Your own data"):README.index("## Papers")]
    rows = [r for r in section.splitlines() if r.startswith("| `")]
    assert {r.split("`")[1] for r in rows} == set(PAPERS)
    for row in rows:
        _, datamodule, options, _ = row.split(" | ", 3)
        module, name = ("datamodules." + re.search(r"`([\w.]+)`", datamodule).group(1)).rsplit(".", 1)
        params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
        named = re.findall(r"`(\w+): [^`]+`", options)
        assert named and not [o for o in named if o not in params], (name, named)
