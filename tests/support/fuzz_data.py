"""Fuzz the contents of the data files the datamodules read: each file of a valid data set in the real released
format, changed in turn in what it holds rather than in its bytes (those are `tests/framework/test_damaged_data.py`):
a field or column dropped, null, of another type, NaN, infinite, negative, empty; an array dropped, of strings, with
a NaN, flattened, empty; a row that is not an object; a file with its header only. Each change runs its paper's smoke
command on the changed file. A run must end with exit status 0 or 2 (the one-line `zoo: error: ...`); one that raises
(a traceback) or is killed is a finding. The changes accepted are listed too: read them by hand (an optional field
dropped is fine, a NaN that reaches the loss is not).

    python tests/support/fuzz_data.py [--jobs 2] [--case gsm8k,cps] [--out fuzz.jsonl] [--timeout 180]

The cases (a data set writer and the command that reads it) are in `tests/support/data_cases/`, one module per group
of datamodules. Each case's unchanged data must run (status 0), or the case itself is reported broken. Prints the
findings and exits 1 if a run raised.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import json
import math
import pkgutil
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from fuzz_settings import ROOT, report, run_forked

BOGUS = "zz_bogus"


@dataclass
class Case:
    """A valid data set and the command that reads it. `write(folder)` writes the files into `folder` and returns the
    command's data settings (`--data.init_args.x=...`) naming them; every file it writes is changed in turn, except
    those `keep` names (globs, relative to the folder). `more(path)` adds changes of its own for a file (a format the
    generic ones do not know, or a change only this data set's reader cares about): (what changed, the new bytes)."""

    name: str
    config: str  # a smoke config, relative to the repository root
    write: Callable[[Path], list[str]]
    verb: str = "fit"
    args: list[str] = field(default_factory=list)  # more settings, e.g. a shorter run
    keep: tuple[str, ...] = ()
    more: Callable[[Path], list[tuple[str, bytes]]] = lambda path: []


# ------------------------------------------------------------------------------------------------ changes
def _other_kinds(value) -> list[tuple[str, object]]:
    """A value's replacements: null, a value of another kind, and the edge values of its own kind."""
    if isinstance(value, bool):
        return [("null", None), ("a word", BOGUS)]
    if isinstance(value, (int, float)):
        return [("null", None), ("a word", BOGUS), ("NaN", math.nan), ("inf", math.inf), ("-1", -1)]
    if isinstance(value, str):
        return [("null", None), ("a number", 7), ("empty", ""), ("a list", [BOGUS])]
    if isinstance(value, list):
        return [("null", None), ("a word", BOGUS), ("empty", [])]
    if isinstance(value, dict):
        return [("null", None), ("a word", BOGUS), ("empty", {})]
    return [("a word", BOGUS)]


def _dumps(record) -> str:
    return json.dumps(record)  # NaN and Infinity as Python's json writes them (and reads them back)


def jsonl_changes(text: str) -> list[tuple[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]
    out = [("a row that is not an object", "\n".join([*lines, "[1, 2]"]) + "\n"),
           ("one row only", lines[0] + "\n")]
    if records and isinstance(records[0], dict):
        for key, value in records[0].items():
            out.append((f"{key!r} dropped", "\n".join(_dumps({k: v for k, v in r.items() if k != key})
                                                      for r in records) + "\n"))
            for label, other in _other_kinds(value):
                first = {**records[0], key: other}
                out.append((f"{key!r} {label} in row 1", "\n".join([_dumps(first), *lines[1:]]) + "\n"))
    return out


def json_changes(text: str) -> list[tuple[str, str]]:
    data = json.loads(text)
    out: list[tuple[str, str]] = []
    if isinstance(data, dict):
        out.append(("empty object", "{}"))
        for key, value in data.items():
            out.append((f"{key!r} dropped", _dumps({k: v for k, v in data.items() if k != key})))
            out += [(f"{key!r} {label}", _dumps({**data, key: other})) for label, other in _other_kinds(value)]
    elif isinstance(data, list):
        out.append(("empty list", "[]"))
        if data:
            out += [(f"item 1 {label}", _dumps([other, *data[1:]])) for label, other in _other_kinds(data[0])]
    return out


def csv_changes(text: str, delimiter: str = ",") -> list[tuple[str, str]]:
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    header, body = rows[0], rows[1:]

    def dump(rows):
        buf = io.StringIO()
        csv.writer(buf, delimiter=delimiter, lineterminator="\n").writerows(rows)
        return buf.getvalue()

    out = [("header only", dump([header]))]
    for j, name in enumerate(header):
        out.append((f"column {name!r} dropped", dump([[c for k, c in enumerate(r) if k != j] for r in rows])))
        out.append((f"column {name!r} renamed", dump([[*header[:j], BOGUS, *header[j + 1:]], *body])))
        if body:
            for label, cell in (("a word", BOGUS), ("empty", ""), ("nan", "nan"), ("inf", "inf"), ("-1", "-1")):
                first = [*body[0][:j], cell, *body[0][j + 1:]]
                out.append((f"column {name!r} {label} in row 1", dump([header, first, *body[1:]])))
    return out


def array_changes(arrays: dict[str, np.ndarray]) -> list[tuple[str, dict[str, np.ndarray]]]:
    out = []
    for key, a in arrays.items():
        out.append((f"array {key!r} dropped", {k: v for k, v in arrays.items() if k != key}))
        changed = {"of strings": np.full(a.shape, BOGUS)}
        if a.ndim:  # a 0-d array (a JSON string stored as an array) has no rows to empty and no axis to add
            changed.update({"empty": a[:0], "flattened" if a.ndim > 1 else "with an extra axis":
                            a.reshape(-1) if a.ndim > 1 else a[:, None]})
        if a.dtype.kind in "iuf" and a.size:
            nan = a.astype(float)
            nan.flat[0] = math.nan
            neg = a.astype(np.int64) if a.dtype.kind == "u" else a.copy()  # a -1 does not fit an unsigned type
            neg.flat[0] = -1
            changed.update({"with a NaN": nan, "with a -1": neg})
        out += [(f"array {key!r} {label}", {**arrays, key: v}) for label, v in changed.items()]
    return out


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _mat_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    from scipy.io import savemat

    buf = io.BytesIO()
    savemat(buf, arrays)
    return buf.getvalue()


def changes(path: Path) -> list[tuple[str, bytes]]:
    """Every change of one file's contents that keeps its format: (what changed, the new bytes)."""
    name = path.name.lower()
    if name.endswith(".jsonl"):
        return [(label, t.encode()) for label, t in jsonl_changes(path.read_text())]
    if name.endswith(".json"):
        return [(label, t.encode()) for label, t in json_changes(path.read_text())]
    if name.endswith((".csv", ".tsv")):
        delimiter = "\t" if name.endswith(".tsv") else ","
        return [(label, t.encode()) for label, t in csv_changes(path.read_text(), delimiter)]
    if name.endswith(".npz"):
        with np.load(path, allow_pickle=False) as f:
            arrays = dict(f)
        return [(label, _npz_bytes(a)) for label, a in array_changes(arrays)]
    if name.endswith(".mat"):
        from scipy.io import loadmat

        arrays = {k: v for k, v in loadmat(path).items() if not k.startswith("__")}
        return [(label, _mat_bytes(a)) for label, a in array_changes(arrays)]
    if name.endswith(".npy"):
        return [(label, _npy_bytes(a["x"])) for label, a in array_changes({"x": np.load(path)})
                if "x" in a]
    return []


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ cases
def all_cases() -> dict[str, Case]:
    import data_cases

    found: dict[str, Case] = {}
    for info in pkgutil.iter_modules(data_cases.__path__):
        for case in importlib.import_module(f"data_cases.{info.name}").CASES:
            assert case.name not in found, f"two data cases named {case.name}"
            found[case.name] = case
    return found


def plan(cases: list[Case], work: Path) -> list[dict]:
    """For every change of every file of every case, the unchanged data set first (file ''): the case, the file,
    the change, the case's data set (`template`), the command's data settings, and the file's new bytes."""
    todo = []
    for case in cases:
        template = work / case.name / "template"
        template.mkdir(parents=True)
        settings = case.write(template)
        files = sorted(p for p in template.rglob("*") if p.is_file()
                       and not any(p.relative_to(template).match(g) for g in case.keep))
        base = {"case": case, "template": template, "settings": settings}
        todo.append({**base, "file": "", "change": "unchanged", "data": None})
        for f in files:
            rel = str(f.relative_to(template))
            todo += [{**base, "file": rel, "change": label, "data": data}
                     for label, data in [*changes(f), *case.more(f)]]
    return todo


def run(todo: list[dict], jobs: int, timeout: float, work: Path) -> list[dict]:
    """Each change on its own copy of its case's data set, run as the case's command in a forked child."""
    argvs = []
    for i, t in enumerate(todo):
        folder = t["template"].with_name(str(i))
        shutil.copytree(t["template"], folder)
        if t["data"] is not None:
            (folder / t["file"]).write_bytes(t["data"])
        settings = [a.replace(str(t["template"]), str(folder)) for a in t["settings"]]
        argvs.append([t["case"].verb, "--config", str(ROOT / t["case"].config), *settings, *t["case"].args,
                      "--run_root", str(folder / "runs"), "--wandb_mode", "disabled"])
    return [{"case": t["case"].name, "file": t["file"], "change": t["change"], **r}
            for t, r in zip(todo, run_forked(argvs, jobs, timeout, work))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", help="comma-separated case names (default: every case)")
    ap.add_argument("--list", action="store_true", help="print the cases and their number of changes, run nothing")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a run may take before it is killed")
    ap.add_argument("--out", type=Path, help="write every run's result here (JSON lines)")
    args = ap.parse_args(argv)
    known = all_cases()
    names = args.case.split(",") if args.case else list(known)
    unknown = sorted(set(names) - set(known))
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    with tempfile.TemporaryDirectory(prefix="zoo-fuzz-data-") as work:
        todo = plan([known[n] for n in names], Path(work))
        if args.list:
            for n in names:
                print(n, sum(t["case"].name == n for t in todo) - 1, "changes")
            return 0
        results = run(todo, args.jobs, args.timeout, Path(work))
    broken = [r for r in results if r["change"] == "unchanged" and r["rc"] != 0]
    for r in broken:
        print(f"BROKEN CASE {r['case']}: its unchanged data ended with status {r['rc']}: {r['last']}")
    rc = report([r for r in results if r["change"] != "unchanged"], args.out,
                lambda r: f"{r['case']}: {r['file']} {r['change']}")
    return 1 if broken else rc


if __name__ == "__main__":
    sys.exit(main())
