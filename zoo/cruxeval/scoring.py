"""CRUXEval scoring: answer parsing, check construction, execution in the sandbox, pass@k.

The official harness (evaluation/utils_general.py) counts a candidate as correct when
``{code}\nassert {output} == {answer}`` runs to its end in a ``multiprocessing.Process`` guarded by
``reliability_guard`` (which its own docstring calls "NOT a security sandbox"). Here every check runs in
:class:`zoo.sandbox.Sandbox`, and the verdict never comes from a process where model-written code could have
written it (:func:`plan_check` decides how each candidate is checked):

* **trusted** (nearly every honest answer): the answer lies in a small subset of Python that can only do
  builtin data operations (literals, operators, comprehensions, lambdas over those, calls of pure builtins,
  the benchmark's own functions, public methods of builtin types). The program ``{code}`` followed by
  ``({output}) == ({answer})`` then contains nothing that can reach a file descriptor, a module, a frame or
  ``exit``; its value decides (``True`` = correct).
* **value** / **arguments**: any other answer is evaluated in a sandbox of its own, and only its value (output
  prediction) or the values of f's arguments (input prediction) come back, as plain data parsed by the parent;
  the parent compares the value with the expected output, or a trusted program calls f on those arguments. A
  program that fakes its report only chooses which data comes back, i.e. gives another answer.

Two modes (``compat``):

* ``strict`` (default): the answer must be one Python expression and is compared as a whole (no operator
  precedence games: ``None or True`` means ``output == (None or True)``); an input answer must be a call
  ``f(...)``; an output answer may not use the benchmark's functions.
* ``official``: the official rules and program exactly. Where the answer's text changes what the official,
  unparenthesised ``assert {output} == {answer}`` tests (``None or True``, ``f(0) if False else True``, an
  assert message, further statements), the official program runs and is judged by running to its end inside
  the sample's own process, as the official harness does; those verdicts can be gamed there too, and are
  counted (``num_in_process_verdicts``) and warned about. A check that does not even compile fails unrun.

On honest answers the two modes agree: on the 2 x 8,000 official Code Llama 7B sample generations both give
the official scored file's verdict for every candidate (see cards/cruxeval.md).

Deviations from the official scorer, on purpose:

* A rejected candidate (input answer without ``f(``, output answer that calls ``f(<input>)``, no answer
  tag in a CoT completion, empty answer) counts as a failed sample with ``n`` = all samples. The official
  code drops rejected candidates from ``n`` when another candidate of the row passes, which inflates pass@k.
* pass@k is not reported for k > n (the official formula returns 1.0 there).
* Identical checks of one run are executed once (sampling at T=0.2 repeats answers often); execution is
  deterministic up to hash randomisation, which the official harness does not fix either.
* An answer outside the trusted subset must evaluate to plain data (``ast.literal_eval`` of its repr): an
  object with a custom ``__eq__`` no longer passes; arguments reach f as copies of their values.
* Bad input (malformed row, missing generations, unparsable answer or code) becomes a failed verdict whose
  ``reason`` says why; scoring never raises on data. Candidates whose check ended in a sandbox error (the
  harness failed twice, not the program) are counted (``num_sandbox_errors``) and warned about.
"""

from __future__ import annotations

import ast
import functools
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zoo.cruxeval.prompts import Mode
from zoo.errors import ZooError
from zoo.rundir import check_output_file
from zoo.sandbox import Sandbox, Verdict, parse_value

Compat = Literal["strict", "official"]

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
    ``[ANSWER]`` (when present; officially in CoT mode only); for input prediction keep what precedes ``==``
    and start it at ``f(`` of ``assert f``; for output prediction keep what follows ``==``. A CoT completion without the tag is
    rejected (the official code would score the whole thought)."""
    # Two differences from inference/tasks/*_prediction.py, on purpose: the official code splits on [ANSWER] only
    # for CoT (a direct completion that repeats the tag keeps it, and e.g. "[ANSWER]\n3" then fails to compile), and
    # it strips the prompt from prompt+completion texts (its *_raw.json files) itself: ``completion`` here is the
    # text generated after the prompt only.
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
    """The official check program ``{code}\nassert {output} == {answer}`` (answer pasted unparenthesised, as in
    evaluation/utils_general.py), or (None, reason) when the official rules reject the answer."""
    if mode == "input" and "f(" not in answer:
        return None, "input answer does not call f"
    if mode == "output" and f"f({row['input']})" in answer:
        return None, "output answer calls f on the input instead of giving a literal"
    return f"{row['code']}\nassert {row['output']} == {answer}", ""


# -- how a candidate is decided ---------------------------------------------------------------------------
#
# Only trusted code may decide a verdict in the process where it runs. "Trusted" = the benchmark's own code
# plus answer expressions from a small subset of Python that can only do builtin data operations (literals,
# operators, comprehensions, lambdas over those, calls of pure builtins and of the benchmark's functions,
# public methods of builtin data types): nothing in it can reach a file descriptor, a module, a frame or
# `exit`, so such a program cannot write or fake its own result. Any other answer is evaluated in a sandbox
# of its own and only its *value* (plain data, parsed by the parent) comes back; the comparison with the
# expected output, or the call of f on those arguments, then happens in the parent or in a trusted program.

SAFE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex", "dict",
    "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "iter",
    "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "range", "repr", "reversed", "round", "set",
    "slice", "sorted", "str", "sum", "tuple", "zip"})
_SAFE_NODES = (ast.Expression, ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Starred, ast.Name,
               ast.Load, ast.Store, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Subscript,
               ast.Slice, ast.Attribute, ast.Call, ast.keyword, ast.Lambda, ast.arguments, ast.arg, ast.ListComp,
               ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.JoinedStr, ast.FormattedValue,
               ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


@functools.cache
def _safe_attributes() -> frozenset[str]:
    """Public attributes of the builtin data types: their methods run builtin code only. (Not frame, code
    or generator attributes such as ``gi_frame.f_globals``, which lead back to ``__builtins__``.)"""
    types = (str, bytes, bytearray, int, float, complex, bool, list, tuple, dict, set, frozenset, range, slice)
    return frozenset(a for t in types for a in dir(t) if not a.startswith("_"))


def _trusted(node: ast.AST, names: frozenset[str], bound: frozenset[str] = frozenset()) -> bool:
    """Whether evaluating ``node`` can only run builtin data operations and code behind ``names``."""
    if not isinstance(node, _SAFE_NODES):
        return False
    if isinstance(node, ast.Name):
        return node.id in bound or node.id in names or node.id in SAFE_BUILTINS
    if isinstance(node, ast.Attribute) and node.attr not in _safe_attributes():
        return False
    if isinstance(node, ast.Lambda):
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                  *([a.kwarg] if a.kwarg else [])]
        defaults = [*a.defaults, *(d for d in a.kw_defaults if d is not None)]
        return (all(_trusted(d, names, bound) for d in defaults)
                and _trusted(node.body, names, bound | {p.arg for p in params}))
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        inner = bound
        for gen in node.generators:  # each generator sees the targets of the ones before it
            if gen.is_async or not _trusted(gen.iter, names, inner):
                return False
            targets = [gen.target] if isinstance(gen.target, ast.Name) else getattr(gen.target, "elts", None)
            if targets is None or not all(isinstance(t, ast.Name) for t in targets):
                return False
            inner = inner | {t.id for t in targets}
            if not all(_trusted(c, names, inner) for c in gen.ifs):
                return False
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return all(_trusted(p, names, inner) for p in parts)
    return all(_trusted(child, names, bound) for child in ast.iter_child_nodes(node))


_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _is_trusted(node: ast.AST, names: frozenset[str]) -> bool:
    try:
        nodes = list(ast.walk(node))
        if any(isinstance(n, _SCOPES) for n in nodes):  # names bound inside: the scoped walk
            return _trusted(node, names)
        attributes = _safe_attributes()
        return all(isinstance(n, _SAFE_NODES)
                   and (not isinstance(n, ast.Name) or n.id in names or n.id in SAFE_BUILTINS)
                   and (not isinstance(n, ast.Attribute) or n.attr in attributes) for n in nodes)
    except RecursionError:
        return False


@functools.lru_cache(maxsize=4096)
def _code_names(code: str) -> frozenset[str]:
    """Top-level names the benchmark's code defines (functions, classes, assigned globals; not imports)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return frozenset()
    names = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return frozenset(names)


def _expression(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _official_comparison(output: str, answer: str) -> ast.expr | None:
    """X when the official ``assert {output} == {answer}`` means exactly ``output == (X)``; None when the
    answer's text changes what the assert tests (precedence, an assert message, further statements)."""
    x, out = _expression(answer), _expression(output)
    if x is None or out is None:
        return None
    try:
        tail = ast.parse(f"assert {output} == {answer}").body
        test = tail[0].test if len(tail) == 1 and isinstance(tail[0], ast.Assert) and tail[0].msg is None else None
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                and ast.dump(test.left) == ast.dump(out) and ast.dump(test.comparators[0]) == ast.dump(x)):
            return x
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        pass
    return None


@dataclass(frozen=True)
class Check:
    """How one candidate is decided.

    ``kind``: ``trusted`` (``code`` + ``expr`` run in the sandbox; both are trusted, so their value decides:
    passes iff it is True), ``value`` (``expr`` is untrusted; its value, plain data, is compared with the
    expected output in the parent), ``arguments`` (untrusted: the value of f's arguments, plain data, then
    a trusted program calls f on them) or ``in_process`` (compat="official" only: the official program,
    judged by running to its end inside the sample's own process, as the official harness does; such a
    verdict can be gamed there too, and is counted).
    """

    kind: Literal["trusted", "value", "arguments", "in_process"]
    code: str
    expr: str | None = None


_CAPTURE = "\ndef __zoo_arguments__(*args, **kwargs):\n    return args, kwargs\n"


def plan_check(row: Mapping[str, str], answer: str, mode: Mode, compat: Compat = "strict") -> tuple[Check | None, str]:
    """How ``answer`` is checked against ``row``, or (None, reason) when it is rejected.

    ``compat="strict"``: the answer must be one Python expression and is compared as a whole,
    ``output == (answer)``; in input prediction it must be a call ``f(...)``; in output prediction it may not
    use the benchmark's functions. ``compat="official"``: the official rules and the official
    unparenthesised ``assert output == answer`` (whatever that means for the answer's text)."""
    return _plan(row["code"], row["input"], row["output"], answer, mode, compat)


@functools.lru_cache(maxsize=1 << 16)  # sampled generations repeat answers often
def _plan(code: str, inp: str, output: str, answer: str, mode: Mode, compat: Compat) -> tuple[Check | None, str]:
    program, reason = make_check({"code": code, "input": inp, "output": output}, answer, mode)
    if program is None:  # the official textual rules hold in both modes
        return None, reason
    if compat == "official":
        x = _official_comparison(output, answer)
        if x is None:
            try:  # a check that cannot even be compiled fails without running (e.g. a truncated string)
                ast.parse(f"assert {output} == {answer}")
            except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
                return None, f"the official check program does not compile ({type(e).__name__}: {e})"
            return Check("in_process", program), ""
        names = _code_names(code)
    else:
        x = _expression(answer)
        if x is None:
            return None, "answer is not a single Python expression"
        if mode == "input" and not (isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "f"):
            return None, "input answer is not a call f(...)"
        names = _code_names(code) if mode == "input" else frozenset()
    if _is_trusted(x, names):
        return Check("trusted", code, f"({output}) == ({answer}\n)"), ""
    if isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "f" and mode == "input":
        capture = ast.unparse(ast.Call(ast.Name("__zoo_arguments__", ast.Load()), x.args, x.keywords))
        return Check("arguments", code + _CAPTURE, capture), ""
    return Check("value", code if compat == "official" or mode == "input" else "", f"({answer}\n)"), ""


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


def _verdict_dict(v: Verdict, kind: str, passed: bool | None = None, wrong: str = "") -> dict[str, Any]:
    """A sandbox verdict as a candidate's record; ``passed`` overrides when the value decided."""
    if passed is None or v.status != "passed":
        return {"passed": False if passed is not None else v.passed, "status": v.status, "reason": v.reason,
                "check": kind}
    return {"passed": passed, "status": "passed" if passed else "failed", "reason": "" if passed else wrong,
            "check": kind}


def extract_answers(completions: Sequence[str], mode: Mode, cot: bool = False) -> tuple[list, list[str]]:
    """``extract_answer`` of every completion of one row: (answers, reasons)."""
    parsed = [extract_answer(c, mode, cot) for c in completions]
    return [a for a, _ in parsed], [r for _, r in parsed]


_WRONG = {"output": "the answer does not equal the expected output",
          "input": "f(answer) does not equal the expected output"}


def _decide(checks: Mapping[tuple[int, int], tuple[Check, dict]], rows: Sequence[Mapping[str, Any]], mode: Mode,
            sandbox: Sandbox) -> dict[tuple[int, int], dict[str, Any]]:
    """Run every check (identical jobs once) and return each candidate's verdict record."""
    first: dict[tuple[str, str | None], list[tuple[int, int]]] = {}
    for key, (check, _) in checks.items():
        first.setdefault((check.code, check.expr), []).append(key)
    jobs = list(first)
    verdicts = dict(zip(jobs, sandbox.map([c for c, _ in jobs], result=[e for _, e in jobs])))
    out: dict[tuple[int, int], dict[str, Any]] = {}
    second: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for key, (check, _) in checks.items():
        v = verdicts[(check.code, check.expr)]
        if check.kind == "in_process":
            out[key] = _verdict_dict(v, check.kind)
        elif check.kind == "trusted":
            out[key] = _verdict_dict(v, check.kind, v.value is True, _WRONG[mode])
        elif v.status != "passed":
            out[key] = _verdict_dict(v, check.kind)
        elif check.kind == "value":
            expected, why = parse_value(rows[key[0]]["output"])
            out[key] = _verdict_dict(v, check.kind, not why and _equal(v.value, expected), _WRONG[mode])
        elif (isinstance(v.value, tuple) and len(v.value) == 2 and isinstance(v.value[0], tuple)
              and isinstance(v.value[1], dict)):  # arguments: call f on them in a trusted program
            expr = f"({rows[key[0]]['output']}) == f(*{v.value[0]!r}, **{v.value[1]!r})"
            second.setdefault((rows[key[0]]["code"], expr), []).append(key)
        else:
            out[key] = {"passed": False, "status": "error", "reason": "the arguments are not plain data",
                        "check": check.kind}
    jobs2 = list(second)
    for job, v in zip(jobs2, sandbox.map([c for c, _ in jobs2], result=[e for _, e in jobs2])):
        for key in second[job]:
            out[key] = _verdict_dict(v, "arguments", v.value is True, _WRONG[mode])
    return out


def _equal(a: Any, b: Any) -> bool:
    try:  # plain data on both sides; only depth (bounded by the parser) could make this fail
        return bool(a == b)
    except (RecursionError, MemoryError):
        return False


def score_answers(rows: Sequence[Mapping[str, Any]], answers: Mapping[str, Sequence[str | None]] | Sequence[
        Sequence[str | None]], mode: Mode, sandbox: Sandbox, ks: Iterable[int] = (1, 5),
        reasons: Mapping[str, Sequence[str]] | Sequence[Sequence[str]] | None = None,
        compat: Compat = "strict") -> list[SampleResult]:
    """Check every (row, answer) in the sandbox; ``answers`` (and ``reasons``) by row id or in row order.

    ``None`` answers count as failed; ``reasons`` (same shape) says why they are None. ``compat``: see
    :func:`plan_check` (``strict``, the default, evaluates each answer as one expression; ``official``
    reproduces the official harness, operator precedence included). Warns when a candidate ended in a
    sandbox error (the harness failed, not the program) or, in official mode, was judged in-process."""
    if mode not in ("output", "input"):
        raise ZooError(f"mode must be 'output' or 'input', got {mode!r}")
    if compat not in ("strict", "official"):
        raise ZooError(f"compat must be 'strict' or 'official', got {compat!r}")
    ks = sorted(set(ks))
    results: list[SampleResult] = []
    checks: dict[tuple[int, int], tuple[Check, dict]] = {}
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
            res.passed.append(False)
            if not isinstance(a, str):
                res.verdicts.append(_rejected(why[j] if j < len(why) and why[j] else "no answer"))
                continue
            check, reason = plan_check(row, a, mode, compat)
            res.verdicts.append(_rejected(reason))
            if check is not None:
                checks[(len(results), j)] = (check, row)
        results.append(res)
    for (i, j), verdict in _decide(checks, [r for r in rows], mode, sandbox).items():
        results[i].verdicts[j] = verdict
        results[i].passed[j] = verdict["passed"]
    for res in results:
        res.pass_at = {f"pass@{k}": pass_at_k(res.n, res.c, k) for k in ks if k <= res.n}
    counts = _counts(results)
    if counts["num_sandbox_errors"]:
        warnings.warn(f"{counts['num_sandbox_errors']:.0f} CRUXEval candidate(s) ended in a sandbox error (the "
                      "harness failed twice, not the program): their verdicts say nothing about the answers",
                      RuntimeWarning, stacklevel=2)
    if counts["num_in_process_verdicts"]:
        warnings.warn(f"{counts['num_in_process_verdicts']:.0f} CRUXEval candidate(s) changed the meaning of the "
                      "official assert and were judged inside their own process (compat='official', as the "
                      "official harness does); such verdicts can be gamed", RuntimeWarning, stacklevel=2)
    return results


def _counts(results: Sequence[SampleResult]) -> dict[str, float]:
    verdicts = [v for r in results for v in r.verdicts]
    return {"num_candidates": float(len(verdicts)),
            "num_sandbox_errors": float(sum(v.get("status") == "worker_error" for v in verdicts)),
            "num_in_process_verdicts": float(sum(v.get("check") == "in_process" for v in verdicts))}


def summarize(results: Sequence[SampleResult], ks: Iterable[int] = (1, 5)) -> dict[str, float]:
    """Benchmark-level pass@k in percent (mean over rows), as the paper reports it, plus counts: problems,
    failed rows, candidates, candidates that ended in a sandbox error, candidates judged in-process."""
    out: dict[str, float] = {}
    for k in sorted(set(ks)):
        vals = [r.pass_at[f"pass@{k}"] for r in results if f"pass@{k}" in r.pass_at]
        if vals and len(vals) == len(results):
            out[f"pass@{k}"] = 100.0 * float(np.mean(vals))
    out["num_problems"] = float(len(results))
    out["num_failed_rows"] = float(sum(1 for r in results if r.error))
    out.update(_counts(results))
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


def read_generations(generations: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    """A generations file (or its dict): a JSON object mapping row id -> list of candidates, the official format
    (``{"sample_0": ["f('abc')", ...], ...}``)."""
    if isinstance(generations, (str, Path)):
        p = Path(generations)
        if not p.is_file():
            raise ZooError(f"generations file {p} not found (the official ones are samples/model_generations/<run>/"
                           "generations.json of github.com/facebookresearch/cruxeval)")
        try:  # zoo.data.reading's wording, without importing torch for a scoring run
            generations = json.loads(p.read_bytes())
        except (OSError, ValueError) as e:
            raise ZooError(f"{p} is not a readable generations JSON ({type(e).__name__}: {e})") from e
        if not isinstance(generations, Mapping):
            raise ZooError(f"generations file {p} holds a JSON {type(generations).__name__}, not an object row id -> "
                           "list of candidates")
    if not isinstance(generations, Mapping):
        raise ZooError("generations must map row id -> list of candidates (e.g. {'sample_0': [...]})")
    return generations


def generation_answers(generations: Mapping[str, Any], mode: Mode, raw: bool = False,
                       cot: bool = False) -> tuple[Mapping[str, Any], dict[str, list[str]] | None]:
    """Answers by row id, and with ``raw`` (raw completions) the reasons for those that could not be extracted."""
    if not raw:
        return generations, None
    answers, reasons = {}, {}
    for rid, cands in generations.items():
        # an entry that is not a list stays what it is: score_answers fails its row ("no list of generations")
        answers[rid], reasons[rid] = extract_answers(cands, mode, cot) if isinstance(cands, list) else (cands, [])
    return answers, reasons


def score_generations(generations: str | Path | dict[str, list[str]], mode: Mode,
                      data: str | Path | None = None, raw: bool = False, cot: bool = False,
                      ks: list[int] = [1, 5], out: str | Path | None = None, workers: int = 2,
                      cpu_seconds: float = 3.0, wall_timeout: float = 5.0,
                      memory_mb: int = 1024, compat: Compat = "strict") -> dict[str, float]:
    """Score a generations file without a model; prints pass@k and the counts, returns them.

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
        workers: sandbox worker processes that run candidates in parallel.
        cpu_seconds: CPU time a candidate may use in the sandbox (the official timeout: 3 s).
        wall_timeout: wall-clock seconds a candidate may take before the sandbox kills it.
        memory_mb: address space a candidate may use in the sandbox (RLIMIT_AS, interpreter included), in MiB.
        compat: ``strict`` (each answer is one expression, verdicts only from trusted code) or ``official``
            (the official harness's unparenthesised check, operator precedence included); see
            :func:`plan_check`. Both agree on answers that do not rely on precedence.

    Returns:
        ``{"pass@1": ..., "pass@5": ..., "num_problems": ..., "num_failed_rows": ..., "num_candidates": ...,
        "num_sandbox_errors": ..., "num_in_process_verdicts": ...}``, pass@k in percent.
    """
    if out is not None:  # before the scoring, which it would otherwise lose
        check_output_file(out, "--out", make_parents=True)  # write_results makes its folder
        check_output_file(Path(out).with_suffix(".metrics.json"), "--out", make_parents=True)
    answers, reasons = generation_answers(read_generations(generations), mode, raw, cot)
    rows = load_rows(data) if data is not None else hub_rows()
    with Sandbox(workers=workers, cpu_seconds=cpu_seconds, wall_timeout=wall_timeout, memory_mb=memory_mb) as sb:
        results = score_answers(rows, answers, mode, sb, ks, reasons, compat)
    metrics = summarize(results, ks)
    if out is not None:
        write_results(results, metrics, Path(out))
    print(format_metrics(metrics, mode, compat))
    return metrics


def format_metrics(metrics: Mapping[str, float], mode: Mode, compat: Compat = "strict") -> str:
    """One line: ``CRUXEval-O (compat=strict): pass@1 = 34.21  pass@5 = 40.29 | 800 problems, ...``."""
    passes = "  ".join(f"{k} = {v:.2f}" for k, v in metrics.items() if k.startswith("pass@"))
    counts = (f"{metrics['num_problems']:.0f} problems, {metrics['num_candidates']:.0f} candidates, "
              f"{metrics['num_failed_rows']:.0f} failed rows, {metrics['num_sandbox_errors']:.0f} sandbox errors, "
              f"{metrics['num_in_process_verdicts']:.0f} in-process verdicts")
    return f"CRUXEval-{'O' if mode == 'output' else 'I'} (compat={compat}): {passes or 'no pass@k'} | {counts}"


def write_results(results: Sequence[SampleResult], metrics: Mapping[str, float], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for r in results:
            fh.write(json.dumps(r.to_dict()) + "\n")
    path.with_suffix(".metrics.json").write_text(json.dumps(dict(metrics), indent=2))
