"""Benchmark-construction filters: each accepts and rejects the right examples; the embedded sample and
the real benchmark pass them."""

import json

import pytest

from datamodules.cruxeval import SAMPLE_CANDIDATES, SAMPLE_PATH
from zoo.cruxeval.construct import build_benchmark, is_literal, runtime_problems, static_problems

PAD = "\n    # padding to reach the 75-character minimum of the paper"
GOOD = "def f(text, n):\n    out = text.upper()\n    for i in range(n):\n        out = out + '!'\n    return out"


def test_static_accepts_a_good_candidate():
    assert static_problems(GOOD, "'ab', 2") == []


@pytest.mark.parametrize("code,inp,problem", [
    ("def f(x):\n    return x", "1", "LENGTH"),
    (GOOD + "\n" + "    # " + "x" * 300, "'a', 1", "LENGTH"),
    ("import os\n" + GOOD, "'a', 1", "FORBIDDEN 'import'"),
    (GOOD.replace("out = text.upper()", "out = eval('text').upper()"), "'a', 1", "FORBIDDEN 'eval('"),
    (GOOD.replace("out = text.upper()", "out = str(set(text))"), "'a', 1", "FORBIDDEN 'set('"),
    (GOOD.replace("out = text.upper()", "out = str(hash(text))"), "'a', 1", "FORBIDDEN 'hash('"),
    (GOOD.replace("out = text.upper()", "out = open(text).read()"), "'a', 1", "FORBIDDEN 'open('"),
    (GOOD.replace("out = text.upper()", "out = str(globals())"), "'a', 1", "FORBIDDEN 'globals()'"),
    (GOOD.replace("out = text.upper()", "out = __builtins__"), "'a', 1", "FORBIDDEN '__builtins__'"),
    (GOOD.replace("range(n)", "range(2)"), "'a', 1", "UNUSED_ARGUMENT n"),
    ("def f(text, n, *rest):\n    out = text * n" + PAD + "\n    return out", "'a', 1", "UNUSED_ARGUMENT rest"),
    ("def g(text, n):\n    out = text * n" + PAD + "\n    return out", "'a', 1", "NO_FUNCTION_F"),
    (GOOD.replace("def f(text, n):", "def f(text, n)"), "'a', 1", "SYNTAX_ERROR"),
    (GOOD.replace("out = text.upper()", "out = text.upper()\x07"), "'a', 1", "NOT_PRINTABLE"),
    (GOOD, "f('a', 1), 2", "INPUT_CALLS_F"),
    (GOOD, "'a', 1)(", "BAD_INPUT"),
])
def test_static_rejects(code, inp, problem):
    problems = static_problems(code, inp)
    assert any(p.startswith(problem) for p in problems), problems


def test_runtime_accepts_and_computes_output(sandbox):
    problems, out = runtime_problems([(GOOD, "'ab', 2")], sandbox)[0]
    assert problems == [] and out == "'AB!!'"
    # in-place semantics survive the instrumentation: list += mutates the caller's list
    code = "def f(a, b):\n    c = a\n    c += b\n    c.append(len(b))" + PAD + "\n    return a"
    assert runtime_problems([(code, "[1], [2]")], sandbox)[0] == ([], "[1, 2, 1]")
    code = "def f(d, k):\n    for c in k:\n        d[c] = d.get(c, 0)\n        d[c] += 1" + PAD + "\n    return d"
    assert runtime_problems([(code, "{}, 'abca'")], sandbox)[0] == ([], "{'a': 2, 'b': 1, 'c': 1}")


BODY = "def f(a, b):\n    r = {expr}" + PAD + "\n    return r"


@pytest.mark.parametrize("expr,inp,expected", [
    ("a + b", "2, 300", []),                            # one small operand: fine
    ("a + b", "200, 300", ["OPS_BIG"]),                 # |x| > 3 on both sides
    ("a * b", "-5, 7", ["OPS_BIG"]),
    ("a // b", "9, 5", ["OPS_BIG"]),
    ("a // b", "9, 2", []),
    ("a / b", "2, 1", ["TRUE_DIVIDE"]),
    ("a + b", "0.5, 1", ["FLOAT_OPS"]),
    ("a ** b", "2, 3", ["POWER_BIG"]),
    ("a ** b", "1, 30", []),
    ("a + b", "'abcd', 'efgh'", ["OPS_LONG"]),          # two long strings
    ("a + b", "[1, 2, 3, 4], [5, 6, 7, 8]", ["OPS_LONG"]),
    ("a + b", "'abc', 'defghijk'", []),                 # one short operand: fine
    ("a % b", "'ab%sxy', 'abcd'", ["OPS_LONG"]),
])
def test_runtime_operand_rules(sandbox, expr, inp, expected):
    problems, _ = runtime_problems([(BODY.format(expr=expr), inp)], sandbox)[0]
    assert problems == expected


def test_runtime_rejects_exceptions_steps_time_and_non_literals(sandbox):
    boom = "def f(a, b):\n    r = a[b]" + PAD + "\n    return r"
    assert runtime_problems([(boom, "[1], 5")], sandbox)[0][0] == ["UNCAUGHT_EXCEPTION"]
    steps = "def f(a, b):\n    while a < b:\n        a = a + 1" + PAD + "\n    return a"
    assert runtime_problems([(steps, "0, 10 ** 6")], sandbox)[0][0] == ["MAX_STEPS"]
    assert runtime_problems([(steps, "0, 50")], sandbox, max_steps=100)[0][0] == ["MAX_STEPS"]
    assert runtime_problems([(steps, "0, 50")], sandbox)[0][0] == []
    slow = "def f(a, b):\n    while True:\n        a, b = b, a" + PAD + "\n    return a"
    assert runtime_problems([(slow, "0, 1")], sandbox, max_steps=10 ** 12)[0][0] == ["TIMED_OUT"]
    obj = "def f(a, b):\n    r = lambda: a + b" + PAD + "\n    return r"
    assert runtime_problems([(obj, "0, 1")], sandbox)[0][0] == ["OUTPUT_NOT_LITERAL"]
    assert is_literal("{'a': [1, -2, (3,)]}") and not is_literal("f(1)") and not is_literal("x")


def test_build_benchmark_rebuilds_the_embedded_sample(sandbox):
    rows, rejected = build_benchmark(SAMPLE_CANDIDATES, sandbox=sandbox)
    shipped = [json.loads(line) for line in SAMPLE_PATH.read_text().splitlines()]
    assert rows == shipped and not rejected and len(rows) == 24


def test_build_benchmark_counts_rejections_and_samples(sandbox):
    cands = [{"code": GOOD, "inputs": ["'ab', 2", "'ab', 2.5", "f('a'), 1"]}, {"code": 3}, "junk"]
    rows, rejected = build_benchmark(cands, sandbox=sandbox)
    assert [r["output"] for r in rows] == ["'AB!!'"]
    assert rejected["MALFORMED_CANDIDATE"] == 2 and rejected["INPUT_CALLS_F"] == 1
    assert rejected["UNCAUGHT_EXCEPTION"] == 1  # range(2.5)
    rows, _ = build_benchmark(SAMPLE_CANDIDATES, size=5, seed=1, sandbox=sandbox)
    assert len(rows) == 5 and [r["id"] for r in rows] == [f"sample_{i}" for i in range(5)]


def test_real_benchmark_passes_runtime_filters(crux_rows, sandbox):
    # Our re-implementation agrees with the official filter on the 800 rows it kept, and execution
    # reproduces every released output.
    res = runtime_problems([(r["code"], r["input"]) for r in crux_rows], sandbox)
    assert [r["id"] for r, (p, _) in zip(crux_rows, res) if p] == []
    assert all(eval(out) == eval(r["output"]) for r, (_, out) in zip(crux_rows, res))
