"""Benchmark construction: the paper's filters as a reusable tool (Sec. 2 and data/README.md of the official repo).

A *candidate* is a function ``f`` (source text) and one input (the call arguments as Python source, e.g.
``"'abc', 2"``). :func:`build_benchmark` keeps the candidates that pass

* static filters (:func:`static_problems`): the code parses and defines ``f``; every argument of ``f`` is
  used; 75 <= len(code) <= 300; printable; no import and none of the forbidden constructs (``exec(``,
  ``eval(``, ``open(``, ``set(``, ``hash(``, ``globals()``, ``locals()``, ``input(``, ``__builtins__``);
  the input is plain call arguments that do not call ``f``;
* runtime filters (:func:`runtime_problems`, executed in the sandbox): no float operands and no true
  division, every arithmetic op on two ints has an operand with |x| <= 3, ``**`` has a base with |x| <= 1,
  every op on two str/list operands has one of length <= 3, at most 100k traced steps, at most 2 s, no
  uncaught exception, and an output that is a Python literal (``assert f(input) == <literal>`` must hold);

and returns rows in the benchmark schema ``{"code", "input", "output", "id"}``.

Deviation from the official ``analyze_ops.py``: it reads operands from the interpreter's value stack
through ctypes while tracing opcodes, which only works on Python 3.7-3.9. Here the candidate is
instrumented at the AST level instead (each ``BinOp``/``AugAssign`` goes through a checking helper), which
works on any Python 3 and checks the same operand rules; the step count is the number of line and opcode
trace events inside ``f``, like the official per-event count.
"""

from __future__ import annotations

import ast
import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zoo.sandbox import Sandbox

MIN_LEN, MAX_LEN = 75, 300
MAX_STEPS = 100_000
TIME_LIMIT_S = 2.0
FORBIDDEN = ("import ", "__builtins__", "__builtin__", "globals()", "open(", "exec(", "eval(",
             "input(", "hash(", "set(", "locals()")
LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Load, ast.UnaryOp, ast.USub)


def _function(tree: ast.Module) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "f":
            return node
    return None


def unused_arguments(fn: ast.FunctionDef) -> list[str]:
    """Parameters of ``fn`` never read in its body ("all arguments of the function must be used")."""
    a = fn.args
    params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    params += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    used = {n.id for stmt in fn.body for n in ast.walk(stmt) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}
    return [p for p in params if p not in used]


def is_literal(source: str) -> bool:
    """A Python literal (what may stand on the right of ``assert f(...) ==``)."""
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        return False
    return all(isinstance(n, (ast.Expression, *LITERAL_NODES)) for n in ast.walk(tree))


def static_problems(code: str, input: str, min_len: int = MIN_LEN, max_len: int = MAX_LEN) -> list[str]:
    """Reasons the candidate fails the compile-time filters (empty list: it passes).

    Note: the released 800 rows do not all satisfy the stated rules (133 functions are shorter than 75
    characters, 2 leave an argument unused; the official ``analyze_ops.py`` checks neither), so the length
    bounds are parameters."""
    problems = []
    if not (min_len <= len(code) <= max_len):
        problems.append(f"LENGTH ({len(code)} chars, need {min_len}-{max_len})")
    if not code.replace("\t", "").replace("\n", "").isprintable():
        problems.append("NOT_PRINTABLE")
    problems += [f"FORBIDDEN {s.strip()!r}" for s in FORBIDDEN if s in code]
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return problems + [f"SYNTAX_ERROR ({e.msg})"]
    if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)):
        problems.append("IMPORT")
    fn = _function(tree)
    if fn is None:
        problems.append("NO_FUNCTION_F")
    else:
        problems += [f"UNUSED_ARGUMENT {p}" for p in unused_arguments(fn)]
    try:
        call = ast.parse(f"f({input})", mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"):
            raise SyntaxError("not a call")
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "f"
               for arg in (*call.args, *call.keywords) for n in ast.walk(arg)):
            problems.append("INPUT_CALLS_F")
    except SyntaxError:
        problems.append("BAD_INPUT (not call arguments)")
    return problems


class _Instrument(ast.NodeTransformer):
    """Route every binary operation through ``__crux_op__`` so its operands can be checked at run time."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        return ast.copy_location(ast.Call(ast.Name("__crux_op__", ast.Load()),
                                          [ast.Constant(type(node.op).__name__), node.left, node.right], []), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        # x op= v  ->  x = __crux_iop__('Op', x, v): keeps in-place semantics (list += mutates the list).
        self.generic_visit(node)
        load = ast.parse(ast.unparse(node.target), mode="eval").body
        call = ast.Call(ast.Name("__crux_iop__", ast.Load()), [ast.Constant(type(node.op).__name__), load, node.value], [])
        return ast.copy_location(ast.Assign([node.target], call), node)


# Runs inside the sandbox; its report comes back as the run's ``result`` (plain data parsed by the parent).
# @PLACEHOLDERS@ are filled with JSON literals (valid Python for str/int). It imports nothing heavy: the
# zygote holds only a few modules, and importing ast/json in every sample would cost more than the check.
_HARNESS = r'''
import _operator as __operator, sys as __sys
__BAD = {}
__STEPS = [0]
__OPS = {"Add": "add", "Sub": "sub", "Mult": "mul", "Div": "truediv", "FloorDiv": "floordiv", "Mod": "mod",
         "Pow": "pow", "LShift": "lshift", "RShift": "rshift", "BitOr": "or_", "BitXor": "xor",
         "BitAnd": "and_", "MatMult": "matmul"}
def __check(op, a, b):
    ta, tb = type(a), type(b)
    if ta in (int, float) and tb in (int, float):
        if abs(a) > 3 and abs(b) > 3: __BAD["OPS_BIG"] = __BAD.get("OPS_BIG", 0) + 1
        if op == "Pow" and abs(a) > 1: __BAD["POWER_BIG"] = __BAD.get("POWER_BIG", 0) + 1
        if op == "Div": __BAD["TRUE_DIVIDE"] = __BAD.get("TRUE_DIVIDE", 0) + 1
        if ta is float or tb is float: __BAD["FLOAT_OPS"] = __BAD.get("FLOAT_OPS", 0) + 1
    if ta in (list, str) and tb in (list, str) and len(a) > 3 and len(b) > 3:
        __BAD["OPS_LONG"] = __BAD.get("OPS_LONG", 0) + 1
def __crux_op__(op, a, b):
    __check(op, a, b)
    return getattr(__operator, __OPS[op])(a, b)
def __crux_iop__(op, a, b):
    __check(op, a, b)
    return getattr(__operator, "i" + __OPS[op].rstrip("_"))(a, b)
class __Stop(BaseException): pass
def __trace(frame, event, arg):
    if frame.f_code.co_filename != "<candidate>": return None
    frame.f_trace_opcodes = True
    __STEPS[0] += 1
    if __STEPS[0] > @MAX_STEPS@:
        __sys.settrace(None); raise __Stop()
    return __trace
__ns = {"__crux_op__": __crux_op__, "__crux_iop__": __crux_iop__, "__name__": "__candidate__"}
__result = {"bad": __BAD}
try:
    exec(compile(@SOURCE@, "<candidate>", "exec"), __ns)
    __args = compile("f(" + @INPUT@ + ")", "<candidate>", "eval")
    __sys.settrace(__trace)
    try:
        __out = eval(__args, __ns)
    finally:
        __sys.settrace(None)
    __r = repr(__out)
    try:  # the repr must read back as the same value (no builtins: only literal syntax can evaluate)
        __same = eval(__r, {"__builtins__": {}, "set": set}) == __out
    except Exception:
        __same = False
    if not __same: __BAD["OUTPUT_NOT_LITERAL"] = 1
    __result["output"] = __r
except __Stop:
    __BAD["MAX_STEPS"] = 1
except Exception as __e:
    __BAD["UNCAUGHT_EXCEPTION"] = 1
    __result["error"] = type(__e).__name__ + ": " + str(__e)[:200]
__result["steps"] = __STEPS[0]
'''


def runtime_program(code: str, input: str, max_steps: int = MAX_STEPS) -> str:
    """The tracing program for one candidate call (run it in the sandbox with ``result="__result"``)."""
    tree = _Instrument().visit(ast.parse(code))
    source = ast.unparse(ast.fix_missing_locations(tree))
    return (_HARNESS.replace("@MAX_STEPS@", str(int(max_steps))).replace("@SOURCE@", json.dumps(source))
            .replace("@INPUT@", json.dumps(input)))


def _parse_report(verdict) -> tuple[list[str], str | None]:
    if verdict.status == "timeout" or verdict.status == "cpu_limit":
        return ["TIMED_OUT"], None
    report = verdict.value
    if verdict.status != "passed" or not isinstance(report, dict) or not isinstance(report.get("bad"), dict):
        return [f"CRASHED ({verdict.status}: {verdict.reason})"], None
    problems = sorted(report["bad"])
    out = report.get("output")
    if out is not None and "OUTPUT_NOT_LITERAL" not in problems and not is_literal(out):
        problems.append("OUTPUT_NOT_LITERAL")
    return problems, out


def runtime_problems(candidates: Sequence[tuple[str, str]], sandbox: Sandbox | None = None,
                     max_steps: int = MAX_STEPS) -> list[tuple[list[str], str | None]]:
    """(reasons, output repr) per (code, input), executing each traced call in the sandbox."""
    own = sandbox is None
    sandbox = sandbox or Sandbox(workers=2, cpu_seconds=TIME_LIMIT_S, wall_timeout=TIME_LIMIT_S, memory_mb=512)
    try:
        verdicts = sandbox.map([runtime_program(c, i, max_steps) for c, i in candidates], result="__result")
    finally:
        if own:
            sandbox.close()
    return [_parse_report(v) for v in verdicts]


def build_benchmark(candidates: Iterable[Mapping[str, Any]], size: int | None = None, seed: int = 0,
                    sandbox: Sandbox | None = None, min_len: int = MIN_LEN,
                    max_len: int = MAX_LEN) -> tuple[list[dict[str, str]], Counter]:
    """Filter candidates ``{"code": str, "inputs": [str, ...]}`` (or ``"input": str``) into benchmark rows.

    Returns the kept rows (``id`` = ``sample_<i>``; a random ``size`` of them when given, as the paper
    draws 800 survivors at random) and a Counter of rejection reasons."""
    rejected: Counter = Counter()
    pending: list[tuple[str, str]] = []
    for cand in candidates:
        code = cand.get("code") if isinstance(cand, Mapping) else None
        inputs = cand.get("inputs", [cand.get("input")]) if isinstance(cand, Mapping) else None
        if not isinstance(code, str) or not isinstance(inputs, list):
            rejected["MALFORMED_CANDIDATE"] += 1
            continue
        for inp in inputs:
            if not isinstance(inp, str):
                rejected["MALFORMED_CANDIDATE"] += 1
                continue
            problems = static_problems(code, inp, min_len, max_len)
            if problems:
                rejected.update(p.split(" ")[0] for p in problems)
            else:
                pending.append((code, inp))
    kept = []
    for (code, inp), (problems, out) in zip(pending, runtime_problems(pending, sandbox)):
        if problems:
            rejected.update(p.split(" ")[0] for p in problems)
        else:
            kept.append({"code": code, "input": inp, "output": out})
    if size is not None and size < len(kept):
        kept = random.Random(seed).sample(kept, size)
    rows = [{**r, "id": f"sample_{i}"} for i, r in enumerate(kept)]
    return rows, rejected
