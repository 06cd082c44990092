"""The import rule of README's Layout section, checked on every file of the product and the benchmarks.

Layers, top to bottom (an import may only point down, or sideways where allowed, and never close a cycle):
  0 orchestration  zoo/cli.py, zoo/trainer.py, zoo/sweep.py, zoo/compare.py, benchmarks/
  1 components     callbacks/, datamodules/   (neither imports the other)
  2 papers         zoo/<paper id>/            (only its own package; never another paper)
  3 helpers        every other zoo module     (zoo/hub.py, zoo/lm.py, zoo/errors.py, zoo/sandbox/, zoo/dp/, ...)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from zoo.registry import PAPERS, ROOT

ORCHESTRATION = {"zoo.cli", "zoo.trainer", "zoo.sweep", "zoo.compare"}
TOP = ("zoo", "datamodules", "callbacks", "benchmarks")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(mod: str) -> tuple[int, str]:
    """(layer, group): imports inside one group are always allowed (subject to the cycle check)."""
    parts = mod.split(".")
    if parts[0] == "benchmarks" or mod in ORCHESTRATION or any(mod.startswith(o + ".") for o in ORCHESTRATION):
        return 0, "orchestration"
    if parts[0] in ("callbacks", "datamodules"):
        return 1, parts[0]
    if len(parts) > 1 and parts[1] in PAPERS:
        return 2, f"zoo.{parts[1]}"
    return 3, "helpers"


def product_files() -> list[Path]:
    files = []
    for top in TOP:
        files += [p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(files)


def project_modules() -> set[str]:
    return {module_name(p) for p in product_files()}


def imports_of(path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every import of a project module, at any depth (lazy imports count too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            # the longest project module the name refers to (`from zoo.rosa import layer` -> zoo.rosa.layer)
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name.split(".")[0] in TOP and (node.lineno, name) not in out:
                out.append((node.lineno, name))
    return out


def edges() -> dict[str, list[tuple[int, str]]]:
    known = project_modules()
    return {module_name(p): imports_of(p, known) for p in product_files()}


def violation(src: str, dst: str) -> str | None:
    (ls, gs), (ld, gd) = layer(src), layer(dst)
    if dst == src or dst.startswith(src + ".") or src.startswith(dst + ".") and gs == gd:
        return None  # a package and its own submodules
    if gs == gd:
        return None
    if ld > ls:
        return None
    if ls == ld == 1:
        return "callbacks and datamodules never import each other"
    if ls == ld == 2:
        return "a paper package never imports another paper (share code through a helper)"
    return f"layer {gs} may not import {gd} (imports go down: orchestration > components > papers > helpers)"


def test_imports_go_one_way():
    bad = []
    for src, targets in edges().items():
        for line, dst in targets:
            why = violation(src, dst)
            if why:
                bad.append(f"{src}:{line} imports {dst}: {why}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {src: {dst for _, dst in targets if dst != src and not dst.startswith(src + ".")}
             for src, targets in edges().items()}
    # a package's __init__ re-exporting its submodules is not a cycle of the submodules
    for src in graph:
        graph[src] = {d for d in graph[src] if not src.startswith(d + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                cycles.append(" -> ".join(stack[stack.index(m):] + [m]))
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize("src, dst, allowed", [
    ("zoo.trainer", "callbacks.nan_guard", True),
    ("datamodules.pde", "zoo.diffoas.generate", True),
    ("zoo.rosa.module", "datamodules.gsm8k", False),
    ("zoo.trainer", "zoo.cli", True),  # sideways inside orchestration: only the cycle check limits it
    ("callbacks.rosa_mask", "datamodules.gsm8k", False),
    ("zoo.score.module", "zoo.rosa.layer", False),
    ("zoo.hub", "zoo.rosa", False),
    ("zoo.rosa.module", "zoo.hub", True),
])
def test_the_rule_itself(src, dst, allowed):
    assert (violation(src, dst) is None) == allowed
