"""pass@k against brute force; answer parsing; gold answers pass and perturbed ones fail; bad input."""

import ast
import hashlib
import itertools
import json
from fractions import Fraction
from math import comb

import pytest

from zoo.cruxeval import extract_answer, make_check, make_prompt, pass_at_k, score_answers, score_generations, summarize
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


def test_score_generations_file(tmp_path):
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
    assert m["num_problems"] == 3 and m["num_failed_rows"] == 1
    assert m["pass@1"] == pytest.approx(100 * (0.5 + 0 + 0) / 3)
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored[0]["verdicts"][1]["reason"] == "no [ANSWER] tag in the completion"
    assert "calls f on the input" in scored[1]["verdicts"][1]["reason"]
    assert "not valid JSON" in scored[2]["error"]
    with pytest.raises(ZooError, match="not found"):
        score_generations(tmp_path / "missing.json", "output", data=data)
    with pytest.raises(ZooError, match="could not load"):  # no local data: the Hub, which is offline in tests
        score_generations(gens, "output")
