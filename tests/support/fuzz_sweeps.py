"""Fuzz sweep files: each value in a sweep file (a key's value, a list item, an override) replaced in turn by a value
of another kind (null, 0, -1, 1.5, true, "", a word, [], {}, [null], {zz: null}, [[1]], an unknown ${ref},
${seed}), and an unknown top-level key added, each checked with `zoo sweep FILE --dry_run true` (every point parsed
and its settings checked, nothing run). A check must end with exit status 0 or 2 (the one-line `zoo: error: ...`);
one that raises is a finding. The changes accepted are listed too: read them by hand.

    python tests/support/fuzz_sweeps.py [--jobs 2] [--out fuzz.jsonl] [configs/smoke/sweeps/x.yaml ...]

The default files cover the sweep shapes: stages with variants and ${stage} references (rosa_tiny), a grid with
stages (pcdenoiser_camera) and variants over one config (score_digits_lt); about 1,500 checks, 5 minutes on 2 cores.
Prints the findings and exits 1 if a check raised.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from fuzz_settings import ROOT, report, run_forked

DEFAULT = ["rosa_tiny", "pcdenoiser_camera", "score_digits_lt"]
OTHER_KINDS: list[Any] = [None, 0, -1, 1.5, True, "", "zz", [], {}, [None], {"zz": None}, [[1]], "${nope}", "${seed}"]


def places(node: Any, at: tuple = ()) -> list[tuple]:
    """Every path into a YAML tree: the root, each mapping value and each list item, depth first."""
    found = [at]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        found += places(child, (*at, key))
    return found


def replaced(tree: Any, at: tuple, value: Any) -> Any:
    if not at:
        return value
    tree = copy.deepcopy(tree)
    node = tree
    for key in at[:-1]:
        node = node[key]
    node[at[-1]] = value
    return tree


def cases(files: list[Path]) -> list[tuple[Path, tuple, Any]]:
    out = []
    for f in files:
        tree = yaml.safe_load(f.read_text())
        out += [(f, at, value) for at in places(tree) for value in OTHER_KINDS]
        out.append((f, ("zz_unknown",), 1))
    return out


def run(todo: list[tuple[Path, tuple, Any]], jobs: int, timeout: float, work: Path) -> list[dict]:
    argvs = []
    for i, (f, at, value) in enumerate(todo):
        changed = work / f"{f.stem}-{i}.yaml"  # the stem names the sweep (and its folder under --sweep_root)
        changed.write_text(yaml.safe_dump(replaced(yaml.safe_load(f.read_text()), at, value)))
        argvs.append(["sweep", str(changed), "--dry_run", "true", "--sweep_root", str(work / "sweeps")])
    return [{"file": str(f), "at": list(at), "value": value, **r}
            for (f, at, value), r in zip(todo, run_forked(argvs, jobs, timeout, work))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="sweep files (default: three smoke sweeps of every shape)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a check may take before it is killed")
    ap.add_argument("--out", type=Path, help="write every check's result here (JSON lines)")
    args = ap.parse_args(argv)
    files = args.files or [ROOT / "configs" / "smoke" / "sweeps" / f"{n}.yaml" for n in DEFAULT]
    with tempfile.TemporaryDirectory(prefix="zoo-fuzz-sweeps-") as work:
        results = run(cases([f.resolve() for f in files]), args.jobs, args.timeout, Path(work))
    return report(results, args.out, lambda r: f"{Path(r['file']).name} at {r['at']} = {r['value']!r}")


if __name__ == "__main__":
    sys.exit(main())
