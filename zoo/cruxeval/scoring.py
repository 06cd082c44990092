"""CRUXEval scoring: answer parsing, check construction, execution in the sandbox, pass@k.

A candidate is correct when ``{code}\\nassert {output} == {answer}`` runs to its end (output prediction:
the answer is a literal; input prediction: the answer is a call ``f(...)``), exactly the program the official
harness executes (evaluation/utils_general.py). Execution happens in :class:`zoo.sandbox.Sandbox` instead of
the official ``multiprocessing.Process`` + ``reliability_guard`` (which its own docstring calls "NOT a
security sandbox").

Deviations from the official scorer, on purpose:

* A rejected candidate (input answer without ``f(``, output answer that calls ``f(<input>)``, no answer
  tag in a CoT completion, empty answer) counts as a failed sample with ``n`` = all samples. The official
  code drops rejected candidates from ``n`` when another candidate of the row passes, which inflates pass@k.
* pass@k is not reported for k > n (the official formula returns 1.0 there).
* Identical check programs of one run are executed once (sampling at T=0.2 repeats answers often);
  execution is deterministic up to hash randomisation, which the official harness does not fix either.
* Bad input (malformed row, missing generations, unparsable answer or code) becomes a failed verdict whose
  ``reason`` says why; scoring never raises on data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo.cruxeval.prompts import Mode
from zoo.errors import ZooError
from zoo.sandbox import Sandbox, Verdict

ROW_KEYS = ("code", "input", "output", "id")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021, Eq. 1): 1 - C(n-c, k) / C(n, k), as a stable product in float64."""
    if not (0 <= c <= n) or k < 1:
        raise ZooError(f"pass@k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ZooError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def row_problem(row: Any) -> str | None:
    """Why a row is unusable (None when it is a valid benchmark row)."""
    if not isinstance(row, Mapping):
        return f"malformed row: expected an object, got {type(row).__name__}"
    if row.get("_error"):
        return str(row["_error"])
    missing = [k for k in ROW_KEYS if not isinstance(row.get(k), str)]
    if missing:
        return f"malformed row: missing or non-string field(s) {', '.join(missing)}"
    return None


def extract_answer(completion: str, mode: Mode, cot: bool = False) -> tuple[str | None, str]:
    """The answer expression inside a completion (text generated after the prompt), or (None, reason).

    Follows the official post-processing (inference/tasks/*_prediction.py): take the text after
    ``[ANSWER]`` in CoT mode; for input prediction keep what precedes ``==`` and start it at ``f(`` of
    ``assert f``; for output prediction keep what follows ``==``. A CoT completion without the tag is
    rejected (the official code would score the whole thought)."""
    if not isinstance(completion, str):
        return None, f"completion is not a string ({type(completion).__name__})"
    text = completion.split("[/ANSWER]")[0]
    if "[ANSWER]" in text:
        text = text.split("[ANSWER]")[1]
    elif cot:
        return None, "no [ANSWER] tag in the completion"
    text = text.strip()
    if mode == "input":
        if "==" in text:
            text = text.split("==")[0].strip()
        if "assert f" in text:
            text = "f" + text.split("assert f")[1].strip()
    elif "==" in text:
        text = text.split("==")[1].strip()
    text = text.strip()
    return (text, "") if text else (None, "empty answer")


def make_check(row: Mapping[str, str], answer: str, mode: Mode) -> tuple[str | None, str]:
    """The program that passes iff the answer is right, or (None, reason) when the answer is rejected."""
    if mode == "input" and "f(" not in answer:
        return None, "input answer does not call f"
    if mode == "output" and f"f({row['input']})" in answer:
        return None, "output answer calls f on the input instead of giving a literal"
    return f"{row['code']}\nassert {row['output']} == {answer}", ""


@dataclass
class SampleResult:
    """All candidates of one benchmark row."""

    id: str
    answers: list[str | None]
    verdicts: list[dict[str, Any]]
    passed: list[bool]
    pass_at: dict[str, float] = field(default_factory=dict)
    error: str = ""

    @property
    def n(self) -> int:
        return len(self.passed)

    @property
    def c(self) -> int:
        return sum(self.passed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rejected(reason: str) -> dict[str, Any]:
    return {"passed": False, "status": "rejected", "reason": reason}


def _verdict_dict(v: Verdict) -> dict[str, Any]:
    return {"passed": v.passed, "status": v.status, "reason": v.reason}


def extract_answers(completions: Sequence[str], mode: Mode, cot: bool = False) -> tuple[list, list[str]]:
    """``extract_answer`` of every completion of one row: (answers, reasons)."""
    parsed = [extract_answer(c, mode, cot) for c in completions]
    return [a for a, _ in parsed], [r for _, r in parsed]


def score_answers(rows: Sequence[Mapping[str, Any]], answers: Mapping[str, Sequence[str | None]] | Sequence[
        Sequence[str | None]], mode: Mode, sandbox: Sandbox, ks: Iterable[int] = (1, 5),
        reasons: Mapping[str, Sequence[str]] | Sequence[Sequence[str]] | None = None) -> list[SampleResult]:
    """Execute every (row, answer) check in the sandbox; ``answers`` (and ``reasons``) by row id or in row order.

    ``None`` answers count as failed; ``reasons`` (same shape) says why they are None."""
    if mode not in ("output", "input"):
        raise ZooError(f"mode must be 'output' or 'input', got {mode!r}")
    ks = sorted(set(ks))
    results: list[SampleResult] = []
    todo: dict[str, list[tuple[int, int]]] = {}
    for i, row in enumerate(rows):
        rid = row.get("id", f"row_{i}") if isinstance(row, Mapping) else f"row_{i}"
        rid = str(rid)
        if isinstance(answers, Mapping):
            cand = answers.get(rid)
        else:
            cand = answers[i] if i < len(answers) else None
        if isinstance(reasons, Mapping):
            why = list(reasons.get(rid, ()))
        else:
            why = list(reasons[i]) if reasons is not None and i < len(reasons) else []
        problem = row_problem(row)
        if problem is None and (cand is None or isinstance(cand, str) or not isinstance(cand, Sequence)):
            problem = f"no list of generations for {rid}"
        if problem is not None:
            k = len(cand) if isinstance(cand, Sequence) and not isinstance(cand, str) and cand else 1
            results.append(SampleResult(rid, [None] * k, [_rejected(problem)] * k, [False] * k, error=problem))
            continue
        res = SampleResult(rid, list(cand), [], [])
        for j, a in enumerate(cand):
            if not isinstance(a, str):
                reason = why[j] if j < len(why) and why[j] else "no answer"
                res.verdicts.append(_rejected(reason))
                res.passed.append(False)
                continue
            program, reason = make_check(row, a, mode)
            res.verdicts.append(_rejected(reason))
            res.passed.append(False)
            if program is not None:
                todo.setdefault(program, []).append((len(results), j))
        results.append(res)
    programs = list(todo)
    for program, verdict in zip(programs, sandbox.map(programs)):
        for i, j in todo[program]:
            results[i].verdicts[j] = _verdict_dict(verdict)
            results[i].passed[j] = verdict.passed
    for res in results:
        res.pass_at = {f"pass@{k}": pass_at_k(res.n, res.c, k) for k in ks if k <= res.n}
    return results


def summarize(results: Sequence[SampleResult], ks: Iterable[int] = (1, 5)) -> dict[str, float]:
    """Benchmark-level pass@k in percent (mean over rows), as the paper reports it."""
    out: dict[str, float] = {}
    for k in sorted(set(ks)):
        vals = [r.pass_at[f"pass@{k}"] for r in results if f"pass@{k}" in r.pass_at]
        if vals and len(vals) == len(results):
            out[f"pass@{k}"] = 100.0 * float(np.mean(vals))
    out["num_problems"] = float(len(results))
    out["num_failed_rows"] = float(sum(1 for r in results if r.error))
    return out


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a CRUXEval jsonl; a line that is not a JSON object becomes a row carrying its error."""
    path = Path(path)
    if not path.exists():
        raise ZooError(f"CRUXEval data file {path} not found; get it from "
                       "https://github.com/facebookresearch/cruxeval (data/cruxeval.jsonl) or use source='hub'")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            row = {"id": f"line_{n}", "_error": f"malformed row: line {n} is not valid JSON ({e.msg})"}
        if not isinstance(row, dict):
            row = {"id": f"line_{n}", "_error": f"malformed row: line {n} is not a JSON object"}
        rows.append(row)
    return rows


def hub_rows(name: str = "cruxeval-org/cruxeval", split: str = "test") -> list[dict[str, Any]]:
    try:
        import datasets

        return [dict(r) for r in datasets.load_dataset(name, split=split)]
    except Exception as e:  # offline, unknown repo or split: say how to get the data instead
        raise ZooError(f"could not load {name!r} (split {split!r}) from the Hub ({type(e).__name__}); go online "
                       "once, or pass a local jsonl (data/cruxeval.jsonl of github.com/facebookresearch/cruxeval)") from e


def score_generations(generations: str | Path | dict[str, list[str]], mode: Mode,
                      data: str | Path | None = None, raw: bool = False, cot: bool = False,
                      ks: list[int] = [1, 5], out: str | Path | None = None, workers: int = 2,
                      cpu_seconds: float = 3.0, wall_timeout: float = 5.0,
                      memory_mb: int = 1024) -> dict[str, float]:
    """Score a generations file without a model.

    Args:
        generations: JSON file (or dict) mapping row id -> list of candidates, the official format
            (``{"sample_0": ["f('abc')", ...], ...}``).
        mode: ``output`` or ``input`` prediction (never guessed from the file name).
        data: the benchmark jsonl (real schema: code/input/output/id); None loads ``cruxeval-org/cruxeval``
            (split ``test``) from the Hub through `datasets`.
        raw: candidates are raw completions; extract the answer first (official post-processing).
        cot: the completions come from the CoT prompts (an ``[ANSWER]`` tag is then required).
        ks: which pass@k to report.
        out: optional path for per-sample verdicts (jsonl) next to the metrics (``<out>.metrics.json``).
        workers / cpu_seconds / wall_timeout / memory_mb: sandbox settings (official timeout: 3 s).

    Returns:
        ``{"pass@1": ..., "pass@5": ..., "num_problems": ...}`` in percent.
    """
    if isinstance(generations, (str, Path)):
        p = Path(generations)
        if not p.exists():
            raise ZooError(f"generations file {p} not found")
        try:
            generations = json.loads(p.read_text())
        except ValueError as e:
            raise ZooError(f"generations file {p} is not valid JSON: {e}") from e
    if not isinstance(generations, Mapping):
        raise ZooError("generations must map row id -> list of candidates (e.g. {'sample_0': [...]})")
    rows = load_rows(data) if data is not None else hub_rows()
    answers, reasons = generations, None
    if raw:
        answers, reasons = {}, {}
        for rid, cands in generations.items():
            answers[rid], reasons[rid] = extract_answers(cands if isinstance(cands, list) else [], mode, cot)
    with Sandbox(workers=workers, cpu_seconds=cpu_seconds, wall_timeout=wall_timeout, memory_mb=memory_mb) as sb:
        results = score_answers(rows, answers, mode, sb, ks, reasons)
    metrics = summarize(results, ks)
    if out is not None:
        write_results(results, metrics, Path(out))
    return metrics


def write_results(results: Sequence[SampleResult], metrics: Mapping[str, float], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for r in results:
            fh.write(json.dumps(r.to_dict()) + "\n")
    path.with_suffix(".metrics.json").write_text(json.dumps(dict(metrics), indent=2))
