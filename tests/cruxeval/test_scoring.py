"""pass@k against brute force; answer parsing; gold answers pass and perturbed ones fail; strict and official
checks agree on honest generations and with the official program; the trusted subset; bad input."""

import ast
import hashlib
import itertools
import json
from fractions import Fraction
from math import comb

import pytest

from zoo.cruxeval import (extract_answer, make_check, make_prompt, pass_at_k, plan_check, score_answers,
                          score_generations, summarize)
from zoo.cruxeval.scoring import _safe_attributes, extract_answers
from zoo.errors import ZooError


@pytest.mark.parametrize("n,c,k", [(n, c, k) for n in range(1, 9) for c in range(n + 1) for k in range(1, n + 1)])
def test_pass_at_k_matches_subset_enumeration(n, c, k):
    # P(at least one correct among k drawn without replacement), by enumerating all k-subsets
    subsets = list(itertools.combinations(range(n), k))
    exact = Fraction(sum(1 for s in subsets if any(i < c for i in s)), len(subsets))
    assert exact == 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)


def test_pass_at_k_large_n_closed_form():
    assert pass_at_k(200, 13, 10) == pytest.approx(1 - comb(187, 10) / comb(200, 10), rel=1e-12)
    with pytest.raises(ZooError, match="at least 5 samples"):
        pass_at_k(3, 1, 5)
    with pytest.raises(ZooError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)


# sha256 of the official prompts (facebookresearch/cruxeval @190faf16 prompts.py) for this function/value
OFFICIAL_PROMPT_SHA256 = {
    ("output", False): "6ee04591c4498ec414ad965de09bffa5b529a68429381e64f802ceef834cf352",
    ("output", True): "3359eb34d1025d7f90b5045d4ecc7129f237a7258b981586e2dd75821dc2553d",
    ("input", False): "96fe6e220b566b5783ac44364e9a928c74d2030d95762640355f2f8c23d47bd9",
    ("input", True): "3f5f8fd81a007b2492f88a5379df18efbd941333c5e7edd8d68660d297ff474a",
}


@pytest.mark.parametrize("mode,cot", sorted(OFFICIAL_PROMPT_SHA256))
def test_prompts_identical_to_official(mode, cot):
    code = "def f(d):\n    return {k: v for k, v in d.items()}"
    prompt = make_prompt(code, "{'a': 1}", mode, cot)
    assert hashlib.sha256(prompt.encode()).hexdigest() == OFFICIAL_PROMPT_SHA256[(mode, cot)]
    assert prompt.endswith("[ANSWER]\n" if not cot else "[THOUGHT]\n")


def test_extract_answer():
    assert extract_answer("assert f(17) == 17\n", "output") == ("17", "")
    assert extract_answer("assert f('a') == 'b'\n[/ANSWER]junk", "output") == ("'b'", "")
    assert extract_answer("assert f([1, 2]) == 3", "input") == ("f([1, 2])", "")
    assert extract_answer("x = 1; assert f(2) == 3", "input") == ("f(2)", "")
    cot = "Let's think.\n[/THOUGHT]\n[ANSWER]\nassert f('hi') == 'bhihia'\n"
    assert extract_answer(cot, "output", cot=True) == ("'bhihia'", "")
    assert extract_answer("I think it's 5", "output", cot=True) == (None, "no [ANSWER] tag in the completion")
    assert extract_answer("   \n", "output") == (None, "empty answer")
    assert extract_answer(None, "input")[0] is None


def test_make_check_rejections():
    row = {"code": "def f(x):\n    return x", "input": "1", "output": "1", "id": "t"}
    assert make_check(row, "1", "input") == (None, "input answer does not call f")
    assert make_check(row, "f(1)", "output")[0] is None
    assert make_check(row, "f(1)", "input")[0] == "def f(x):\n    return x\nassert 1 == f(1)"


def _gold(rows, mode):
    return {r["id"]: [r["output"] if mode == "output" else f"f({r['input']})"] for r in rows}


@pytest.mark.parametrize("mode", ["output", "input"])
def test_all_gold_answers_pass(crux_rows, sandbox, mode):
    assert len(crux_rows) == 800
    results = score_answers(crux_rows, _gold(crux_rows, mode), mode, sandbox, ks=[1])
    failed = [(r.id, r.verdicts) for r in results if not all(r.passed)]
    assert not failed
    assert summarize(results, [1])["pass@1"] == 100.0


def test_perturbed_answers_fail(crux_rows, sandbox):
    rows = crux_rows[:100]
    # output mode: another row's output, where it is a different value
    out_ans, expect_fail = {}, []
    for i, r in enumerate(rows):
        other = rows[(i + 1) % len(rows)]["output"]
        out_ans[r["id"]] = [other]
        expect_fail.append(ast.literal_eval(other) != ast.literal_eval(r["output"]))
    res = score_answers(rows, out_ans, "output", sandbox, ks=[1])
    assert all(not r.passed[0] for r, e in zip(res, expect_fail) if e)
    # input mode: the gold call with the output slightly changed is impossible to hit; instead call f
    # on the gold input with one more positional argument, which no 1..5-ary f accepts
    in_ans = {r["id"]: [f"f({r['input']}, 'zz')"] for r in rows}
    res = score_answers(rows, in_ans, "input", sandbox, ks=[1])
    assert sum(r.passed[0] for r in res) == 0
    assert all("Error" in r.verdicts[0]["reason"] for r in res)


def test_bad_input_is_a_recorded_failure(sandbox):
    rows = [
        {"code": "def f(x):\n    return x + 1", "input": "1", "output": "2", "id": "good"},
        {"code": "def f(x):\n    return x", "id": "no_fields"},
        "not a row",
        {"code": "def f(x:\n    return x", "input": "1", "output": "1", "id": "bad_code"},
        {"code": "def f(x):\n    return x", "input": "1", "output": "1", "id": "no_generations"},
    ]
    gens = {"good": ["2", "3"], "no_fields": ["1"], "bad_code": ["1", "1"]}
    res = {r.id: r for r in score_answers(rows, gens, "output", sandbox, ks=[1])}
    assert res["good"].passed == [True, False]
    assert "malformed row" in res["no_fields"].error
    assert "malformed row" in res["row_2"].error
    assert not any(res["bad_code"].passed) and "SyntaxError" in res["bad_code"].verdicts[0]["reason"]
    assert "no list of generations" in res["no_generations"].error


def test_score_generations_file(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    rows = [{"code": "def f(s):\n    return s * 2", "input": "'ab'", "output": "'abab'", "id": f"sample_{i}"}
            for i in range(2)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken json\n")
    gens = tmp_path / "gens.json"
    gens.write_text(json.dumps({
        "sample_0": ["[THOUGHT]..[/THOUGHT]\n[ANSWER]\nassert f('ab') == 'abab'\n[/ANSWER]", "no tag here"],
        "sample_1": ["[ANSWER]assert f('ab') == 'ab'[/ANSWER]", "[ANSWER]assert f('ab') == f('ab')[/ANSWER]"],
    }))
    out = tmp_path / "scored.jsonl"
    m = score_generations(gens, "output", data=data, raw=True, cot=True, ks=[1, 2], out=out, workers=1)
    printed = capsys.readouterr().out  # `zoo cruxeval-score` shows what the function prints
    # (no pass@2: the malformed row has one candidate)
    assert "CRUXEval-O (compat=strict): pass@1 = 16.67 | 3 problems, 5 candidates, 1 failed rows, " \
           "0 sandbox errors, 0 in-process verdicts" in printed
    assert m["num_problems"] == 3 and m["num_failed_rows"] == 1 and m["num_sandbox_errors"] == 0
    assert m["pass@1"] == pytest.approx(100 * (0.5 + 0 + 0) / 3)
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored[0]["verdicts"][1]["reason"] == "no [ANSWER] tag in the completion"
    assert "calls f on the input" in scored[1]["verdicts"][1]["reason"]
    assert "not valid JSON" in scored[2]["error"]
    with pytest.raises(ZooError, match="not found"):
        score_generations(tmp_path / "missing.json", "output", data=data)
    with pytest.raises(ZooError, match="could not load"):  # no local data: the Hub, which is offline in tests
        score_generations(gens, "output")
    # an --out it could not write was found after the scoring, which was lost with a traceback; a missing folder
    # is made, as before
    (tmp_path / "taken").mkdir()
    with pytest.raises(ZooError, match="--out .*taken is a folder; give the path of a file"):
        score_generations(gens, "output", data=data, raw=True, out=tmp_path / "taken", workers=1)
    with pytest.raises(ZooError, match="--out .*scored.jsonl/x.jsonl: .*scored.jsonl is a file, not a folder"):
        score_generations(gens, "output", data=data, raw=True, out=out / "x.jsonl", workers=1)
    assert capsys.readouterr().out == ""  # refused before scoring
    score_generations(gens, "output", data=data, raw=True, out=tmp_path / "new" / "s.jsonl", workers=1)
    assert (tmp_path / "new" / "s.metrics.json").is_file()


@pytest.mark.parametrize("compat", ["strict", "official"])
@pytest.mark.parametrize("mode", ["output", "input"])
def test_rejected_candidate_counts_in_n_next_to_a_passing_one(sandbox, mode, compat):
    # cards/cruxeval.md: a candidate the official format rules reject is a failed sample here. The official
    # scorer drops it from n when another candidate of the row passes: this row would score pass@1 = 1/1 = 1.0
    # there; here n = 2, c = 1, pass@1 = 0.5. (A row without a passing candidate gives 0 under both rules.)
    row = {"code": "def f(s):\n    return s * 2", "input": "'ab'", "output": "'abab'", "id": "mixed"}
    completions = {"output": ["assert f('ab') == 'abab'\n",
                              "assert f('ab') == f('ab')\n"],  # calls f on the input (true, but rejected)
                   "input": ["assert f('ab') == 'abab'\n",
                             "assert 'ab' == 'abab'\n"]}[mode]  # does not contain f(
    answers, reasons = extract_answers(completions, mode)
    assert reasons == ["", ""]
    [res] = score_answers([row], {"mixed": answers}, mode, sandbox, ks=[1, 2], compat=compat)
    assert res.passed == [True, False]
    assert res.verdicts[1]["status"] == "rejected"
    assert res.verdicts[1]["reason"] == {"output": "output answer calls f on the input instead of giving a literal",
                                         "input": "input answer does not call f"}[mode]
    assert (res.n, res.c) == (2, 1)
    assert res.pass_at["pass@1"] == 0.5  # the official rule: 1.0
    assert res.pass_at["pass@2"] == 1.0
    assert summarize([res], [1])["pass@1"] == 50.0


def _honest_candidates(row, mode, other):
    """Real-format completions (direct prompt: ``assert f(...) == ...``) a model might honestly write: right,
    wrong, spelled differently, computed by an expression, using code outside the trusted subset, truncated."""
    out, inp = row["output"], row["input"]
    if mode == "output":
        answers = [out, other["output"], f"{out}  # the result", f"(\n{out}\n)",
                   f"__import__('copy').deepcopy({out})", f"{out}[:1]" if out.startswith(("'", "[")) else f"-{out}",
                   f"{out[:-1]}" if len(out) > 2 else "'"]
        return [f"assert f({inp}) == {a}\n" for a in answers]
    answers = [f"f({inp})", f"f({other['input']})", f"f(*[{inp}])" if inp else "f()",
               f"f(*__import__('copy').deepcopy([{inp}]))", f"f({inp}, 'extra')", f"f({inp[:-1]}"]
    return [f"assert {a} == {out}\n" for a in answers]


@pytest.mark.parametrize("mode", ["output", "input"])
def test_strict_and_official_agree_on_honest_generations(crux_rows, sandbox, mode):
    # The official program (pass = it runs to its end) is the oracle; both modes must give its verdicts.
    rows = crux_rows[::64]
    completions = {r["id"]: _honest_candidates(r, mode, crux_rows[(i * 64 + 7) % len(crux_rows)])
                   for i, r in enumerate(rows)}
    answers = {rid: extract_answers(c, mode)[0] for rid, c in completions.items()}
    by_compat = {c: score_answers(rows, answers, mode, sandbox, ks=[1], compat=c) for c in ("strict", "official")}
    programs = [make_check(r, a, mode)[0] for r in rows for a in answers[r["id"]]]
    oracle = iter([v.passed for v in sandbox.map([p for p in programs if p is not None])])
    expected = [next(oracle) if p is not None else False for p in programs]
    for compat, results in by_compat.items():
        assert [p for r in results for p in r.passed] == expected, compat
    assert {v["check"] for r in by_compat["strict"] for v in r.verdicts if "check" in v} == \
        {"trusted", "value" if mode == "output" else "arguments"}  # both ways of deciding were used
    assert all(r.passed[0] for r in by_compat["strict"])  # the right answer passes
    assert 0 < sum(expected) < len(expected)


def test_check_plans():
    row = {"code": "def f(x, g=None):\n    return x", "input": "1", "output": "1", "id": "t"}

    def kind(answer, mode, compat="strict"):
        check, reason = plan_check(row, answer, mode, compat)
        return check.kind if check is not None else reason

    assert kind("1\nprint(2)", "output") == "answer is not a single Python expression"
    assert kind("[f(0)][0]", "input") == "input answer is not a call f(...)"
    assert kind("[f(0)][0]", "input", "official") == "trusted"  # the official rules accept any text with f(
    assert kind("[f(0), print][0]", "input", "official") == "value"
    assert kind("None or True", "output", "official") == "in_process"  # changes what the official assert tests
    assert kind("1, 2", "output", "official") == "in_process"  # an assert message
    assert kind("'abc", "output", "official").startswith("the official check program does not compile")
    # honest expressions stay in the trusted subset (only builtin data operations and the benchmark's f)
    for answer in ["f(lambda x: x < 2)", "f(dict(a=1), range(3))", "f(''.join(['a'] * 3).upper())",
                   "f([i * 2 for i in range(3)], g={k: v for k, v in [(1, 2)]})", "f(*'ab', **{'g': sorted([3, 1])})",
                   "f(f(1))", "f(f'{1!r:>3}')", "f(-1 if 2 > 1 else +1)"]:
        assert kind(answer, "input") == "trusted", answer
    assert kind("len('abc') + 1", "output") == "trusted"
    assert kind("f(2)", "output") == "value"  # strict output: the answer may not run the benchmark's code
    assert kind("f(2)", "output", "official") == "trusted"


@pytest.mark.parametrize("answer", [
    "f((x for x in ()).gi_frame.f_globals['__builtins__']['__import__']('os'))",  # frame -> builtins, no "_" attr
    "f(().__class__.__base__.__subclasses__())", "f(__import__('os').getpid())", "f(print)", "f(type(1))",
    "f(getattr(1, 'real'))", "f((f := len))", "f(lambda: open('/etc/passwd'))", "f(eval('1'))", "f(globals())",
    "f((lambda g: g.gi_code)(i for i in [1]))", "f(vars())", "f(exit)", "f(breakpoint)", "f([x for x in os])",
])
def test_trusted_subset_has_no_way_to_the_runner(answer):
    # anything that could reach a frame, a module, builtins by name, a file or exit is evaluated in a separate
    # sandbox whose value only comes back as data
    row = {"code": "def f(x):\n    return x", "input": "1", "output": "1", "id": "t"}
    assert plan_check(row, answer, "input")[0].kind == "arguments"
    assert plan_check(row, answer, "input", "official")[0].kind == "arguments"
    assert not any(a.startswith(("f_", "gi_", "cr_", "ag_", "tb_", "co_", "func_")) for a in _safe_attributes())
