"""The README stays true: every file and module it names exists, every paper's status is the registry's, and every
sweep file is named by the README or by its paper's card (with the command that runs it)."""

from __future__ import annotations

import ast
import importlib.util
import re
import typing
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
        # a value from a fixed set (`source: local`, `env: bn`) is one the option accepts
        hints = typing.get_type_hints(getattr(importlib.import_module(module), name).__init__)
        for option, value in re.findall(r"`(\w+): ([a-z]\w*)`", options):
            allowed = _literals(hints.get(option))
            assert not allowed or value in allowed, f"{name}: {option}: {value} is not one of {sorted(allowed)}"


def _literals(annotation) -> set:
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    return set().union(*[_literals(a) for a in typing.get_args(annotation)]) if typing.get_args(annotation) else set()


def _paper_rows() -> list[tuple[str, str]]:
    section = README[README.index("## Papers"):README.index("### Where we fall short")]
    rows = [r for r in section.splitlines() if r.startswith("| `")]
    return [(r.split("`")[1], r.split(" | ")[3]) for r in rows]


def _names_in_commands(commands: str) -> list[tuple[str, list[Path]]]:
    """Every config, sweep or benchmark a row's commands name, with the files it may mean. A path sets the context
    (its folder and suffix); a bare name after it (`also \\`lora_gsm8k\\``) is a file of that folder; a name
    starting with `_` completes the last full name (`dpformer_movielens` + `_vanilla`, `unlearning_sga_gptneo125m`
    with `_ga` in place of `_sga`)."""
    out, ctx = [], None
    for span in re.findall(r"`([^`]+)`", commands):
        paths = re.findall(r"((?:configs|benchmarks)/[\w/.*<>-]+)", span)
        if paths:
            if not re.search(r"[<*]", paths[-1]):
                path = Path(paths[-1])
                ctx = (ROOT / path.parent, path.suffix, path.stem)
            continue
        if ctx is None or not re.fullmatch(r"_?[a-z0-9]+(?:_[a-z0-9*]+)*(?:\.py)?", span):
            continue
        if "_" not in span and not span.endswith(".py"):
            continue
        folder, suffix, last = ctx
        name = span.removesuffix(".py")
        if name.startswith("_"):
            parts, tail = last.split("_"), name[1:].split("_")
            stems = {"_".join(parts[:i] + tail) for i in range(1, len(parts) + 1)}
            stems |= {"_".join(parts[:i] + tail + parts[i + len(tail):]) for i in range(1, len(parts))}
            out.append((span, [folder / f"{s}{suffix}" for s in sorted(stems)]))
        else:
            out.append((span, sorted(folder.glob(f"{name}{suffix}")) or [folder / f"{name}{suffix}"]))
            if "*" not in name:
                ctx = (folder, suffix, name)
    return out


def test_every_config_a_paper_row_names_exists():
    """The `also` names of the Papers table (`qrosa_gsm8k`, `_vanilla`, `bggn_celeba*`, `minnorm_lp_options.py`)
    each name a config, sweep or benchmark file next to the path before them."""
    rows = _paper_rows()
    assert {pid for pid, _ in rows} == set(PAPERS)
    checked, missing = 0, []
    for pid, commands in rows:
        for name, candidates in _names_in_commands(commands):
            checked += 1
            if not any(c.exists() for c in candidates):
                missing.append(f"{pid}: `{name}` (none of {[str(c.relative_to(ROOT)) for c in candidates]})")
    assert checked > 50, "the pattern no longer finds the rows' names"
    assert not missing, "README's Papers table names files that do not exist:\n" + "\n".join(missing)


def test_the_row_name_check_catches_a_missing_config():
    names = dict(_names_in_commands("`zoo fit --config configs/smoke/dpformer_movielens.yaml` (also `_nope`, "
                                    "`dpformer_amazon`, `dpformer_nope`)"))
    assert not any(p.exists() for p in names["_nope"]) and not any(p.exists() for p in names["dpformer_nope"])
    assert any(p.exists() for p in names["dpformer_amazon"])


def test_every_test_file_the_readme_names_exists():
    """Bare test file names (`test_hub.py` after `tests/framework/test_new_user.py`) exist under tests/."""
    named = set(re.findall(r"`(?:tests/[\w/]+/)?(test_\w+\.py)`", README))
    assert len(named) >= 8
    files = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    assert not named - files, f"README names test files that do not exist: {sorted(named - files)}"


# private attributes of other libraries that the product reads or sets: (attribute, where, library)
PRIVATE_USES = {
    "_ddp_kwargs": ("callbacks/distributed.py", "Lightning"),  # README: no public way to change a built strategy
    "_parser": ("zoo/trainer.py", "Lightning"),  # README: LightningCLI's subcommand parser, from our subclass
    "_exit": ("zoo/sandbox/zygote.py", "os"),
    "_Helper": ("zoo/sandbox/zygote.py", "the standard library's site help"),
    "_scaled_dot_product_flash_attention_for_cpu": ("benchmarks/pmtr_coarse.py", "torch's aten op, for the FLOP count"),
}
API_LIBRARIES = ("lightning", "pytorch_lightning", "lightning_fabric", "transformers", "opacus")


def _private_uses() -> tuple[dict[str, set[str]], list[str]]:
    """`x._name` reads of names the project never defines (so another library's private attribute), and imports
    of private modules or names of Lightning, transformers and opacus."""
    files = [p for top in ("zoo", "callbacks", "datamodules", "benchmarks") for p in sorted((ROOT / top).rglob("*.py"))]
    trees = {p: ast.parse(p.read_text(), filename=str(p)) for p in files}
    defined = set()
    for tree in trees.values():
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                defined.add(n.attr)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                defined.add(n.id)
    uses: dict[str, set[str]] = {}
    imports = []
    for path, tree in trees.items():
        where = str(path.relative_to(ROOT))
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__"):
                if n.attr not in defined:  # on self too: a base class's private attribute (Lightning's _trainer)
                    uses.setdefault(n.attr, set()).add(where)
            elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] in API_LIBRARIES:
                if any(c.startswith("_") for c in n.module.split(".")) or any(a.name.startswith("_") for a in n.names):
                    imports.append(f"{where}:{n.lineno} from {n.module}")
            elif isinstance(n, ast.Import):
                imports += [f"{where}:{n.lineno} import {a.name}" for a in n.names
                            if a.name.split(".")[0] in API_LIBRARIES and any(c.startswith("_") for c in a.name.split("."))]
    return uses, imports


def test_only_public_apis_save_the_readmes_exceptions():
    """Layout: 'only public APIs of Lightning, transformers and opacus are used, save two attributes ...': a new
    private attribute or private import fails here; each Lightning exception is the one the README names."""
    uses, imports = _private_uses()
    assert not imports, f"private modules of Lightning/transformers/opacus imported: {imports}"
    new = {a: sorted(w) for a, w in uses.items() if a not in PRIVATE_USES}
    assert not new, f"private attributes of other libraries used: {new}"
    for attr, (where, library) in PRIVATE_USES.items():
        assert where in uses.get(attr, set()), f"{attr} is no longer used in {where}: drop it here (and in README)"
        if library == "Lightning":
            assert f"{attr}` in `{where}`" in " ".join(README.split()), f"README does not name {attr} in {where}"
