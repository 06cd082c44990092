"""Pure pieces: the helper score and test-time pruning on hand-made logs, tuples partition the training set, the
answer parser on well-formed and malformed answers, the LLM response cache and an unreachable endpoint."""

from __future__ import annotations

import json
import random

import pytest

from zoo.errors import ZooError
from zoo.regal.cluster import make_tuples
from zoo.regal.codebank import CodeBank, Helper, TestCase, helper_score, keep_at_test_time
from zoo.regal.llm import CachedLLM, ResponseCache, check_spec
from zoo.regal.parsing import AnswerFormatError, called_names, extract_completion, parse_refactor_answer


def helper(successes, counts):
    h = Helper("f", "def f(x):\n    return x")
    for ok, n in zip(successes, counts):
        h.log_use(ok, n, TestCase("e", "q", "f(1)", ok))
    return h


def test_score_is_the_mean_of_plus_one_or_minus_one_over_helpers():
    assert helper_score([True, True, False, False], [1, 2, 2, 4]) == (pytest.approx((2 - 1 / 2 - 1 / 4) / 4), 4)
    assert helper_score([], []) == (-1.0, 0)
    rng = random.Random(0)  # brute force: the definition, term by term
    for _ in range(50):
        n = rng.randint(1, 9)
        ok = [rng.random() < 0.5 for _ in range(n)]
        k = [rng.randint(1, 5) for _ in range(n)]
        expect = sum(1.0 if o else -1.0 / c for o, c in zip(ok, k)) / n
        assert helper_score(ok, k)[0] == pytest.approx(expect, abs=1e-15)


@pytest.mark.parametrize("successes, counts, kept", [
    ([True] * 4, [1] * 4, True),                            # score 1, 4 uses
    ([True] * 3, [1] * 3, False),                           # score 1 but only 3 uses
    ([True, False, False, False], [1, 1, 1, 1], False),     # (1 - 3) / 4 < 0
    ([True, False, False, False], [1, 4, 4, 4], True),      # (1 - 3/4) / 4 > 0: blame shared by 4 helpers
    ([True, True, False, False], [1, 1, 1, 1], False),      # exactly 0 is not > 0
])
def test_test_time_pruning_rule(successes, counts, kept):
    assert keep_at_test_time(helper(successes, counts)) is kept
    bank = CodeBank()
    bank.helpers["f"] = helper(successes, counts)
    assert bank.prune() == ([] if kept else ["f"]) and len(bank) == int(kept)


def test_codebank_round_trips_through_json_and_its_files(tmp_path):
    bank = CodeBank("from datetime import *")
    bank.add("def g(x):\n    # doubles x\n    return 2 * x", 3)
    bank.add("def h(x):\n    return g(x) + 1", 4)
    bank.helpers["g"].log_use(True, 2, TestCase("e1", "double it", "h(1)", True))
    again = CodeBank.from_json(json.loads(json.dumps(bank.to_json())))
    assert again.to_json() == bank.to_json()
    assert bank.used_by("print(h(3))") == ["g", "h"]  # h calls g: the closure
    assert "doubles" in bank.helpers["g"].description
    assert "# Success rate: 1/1" in bank.helpers["g"].summarize()
    bank.save(tmp_path)
    ns: dict = {}
    exec((tmp_path / "codebank.py").read_text(), ns)  # our own trusted helpers
    assert ns["h"](3) == 7
    assert [r["name"] for r in json.loads((tmp_path / "success_info.json").read_text())] == ["g", "h"]


@pytest.mark.parametrize("size", [1, 3, 5])
def test_tuples_partition_the_training_set(size):
    rng = random.Random(size)
    words = ["square", "triangle", "circle", "snowflake", "row", "small", "big", "5 gon", "spiral", "star"]
    examples = [{"id": str(i), "query": " ".join(rng.sample(words, 3)) + f" {i}"} for i in range(23)]
    tuples = make_tuples(examples, size)
    ids = [e["id"] for t in tuples for e in t]
    assert sorted(ids) == sorted(e["id"] for e in examples) and len(ids) == len(set(ids))
    assert all(1 <= len(t) <= size for t in tuples)
    assert sum(len(t) < size for t in tuples) <= 1  # only the walk's last tuple may be short
    lengths = [len(" ".join(e["query"] for e in t)) for t in tuples]
    assert lengths == sorted(lengths)  # curriculum: by total query length


def test_tuples_group_near_duplicate_queries():
    examples = [{"id": str(i), "query": q} for i, q in enumerate(
        ["a small square", "a big square", "a small triangle", "a big triangle",
         "7 sided snowflake with a short line", "8 sided snowflake with a short line"])]
    tuples = make_tuples(examples, 2)
    assert {"4", "5"} in [{e["id"] for e in t} for t in tuples]  # the two snowflakes: first merge of the tree


def test_parser_on_well_formed_answers():
    text = ("Here you go.\nNEW PROGRAM 1:\n```python\n# Thoughts: 1. a square\ndef sq(n):\n    for i in range(4):\n"
            "        forward(n)\n        left(90)\nsq(2)\n```\nNEW PROGRAM 2:\nsq(4)\nNEW HELPERS:\n"
            "import math\ndef tri(n):\n    for i in range(3):\n        forward(n)\n        left(120)\n")
    ans = parse_refactor_answer(text)
    assert sorted(ans.programs) == [1, 2] and ans.programs[2] == "sq(4)"
    assert "def sq" not in ans.programs[1] and "sq(2)" in ans.programs[1]
    assert [h.split("(")[0] for h in ans.helpers] == ["def sq", "def tri"] and ans.imports == ["import math"]
    assert called_names('embed("""sq(3)\\nleft(1)""", locals())') == {"embed", "sq", "left", "locals"}
    done = extract_completion(" I will use sq.\nsq(5)\n[/PYTHON]\n# Query: another")
    assert done == "# Thought: I will use sq.\nsq(5)"


@pytest.mark.parametrize("text", ["", "NEW HELPERS:\ndef f():\n    pass\n", "no sections at all", None])
def test_parser_refuses_answers_without_program_sections(text):
    with pytest.raises(AnswerFormatError):
        parse_refactor_answer(text)


def test_parser_keeps_an_unparsable_program_as_a_failing_one():
    ans = parse_refactor_answer("NEW PROGRAM 1:\nforward(3\nNEW PROGRAM 2:\nforward(2)")
    assert 1 in ans.unparsable and ans.programs[2] == "forward(2)" and ans.programs[1] == "forward(3"


def test_cache_replays_in_order_and_resumes(tmp_path):
    path = tmp_path / "llm_cache.jsonl"
    cache = ResponseCache(path)
    key = ResponseCache.key("client", "prompt")
    assert cache.next(key) is None
    cache.put(key, "first")
    assert cache.next(key) is None  # second time this prompt is asked in the run: a new answer
    cache.put(key, "second")
    replay = ResponseCache(path)
    assert [replay.next(key), replay.next(key), replay.next(key)] == ["first", "second", None]
    path.write_text("not json\n")
    with pytest.raises(ZooError, match="not a cache record"):
        ResponseCache(path)


def test_unreachable_endpoint_is_a_clear_error_and_the_cache_is_kept(tmp_path):
    pytest.importorskip("openai", reason="backend openai needs the openai package")
    spec = check_spec({"backend": "openai", "model": "gpt-3.5-turbo", "base_url": "http://127.0.0.1:9/v1",
                       "max_retries": 0, "timeout": 2}, "refactorer")
    cache = ResponseCache(tmp_path / "llm_cache.jsonl")
    llm = CachedLLM(spec, cache, "refactorer")
    cache.put(ResponseCache.key(llm.client_id, "cached prompt"), "cached answer")
    assert llm("cached prompt") == "cached answer"
    with pytest.raises(ZooError, match="unreachable.*1 cached responses are kept"):
        llm("a new prompt")
    assert len(ResponseCache(tmp_path / "llm_cache.jsonl")) == 1
    with pytest.raises(ZooError, match="no cached response"):
        CachedLLM(spec, ResponseCache(tmp_path / "llm_cache.jsonl"), "synthesizer", replay_only=True)("x")


@pytest.mark.parametrize("spec, match", [
    (None, "must be a mapping"), ({"backend": "vllm", "model": "m"}, "backend must be"),
    ({"backend": "hf"}, "model is required"), ({"backend": "hf", "model": "m", "temp": 1}, "unknown key"),
    ({"backend": "hf", "model": {"model_type": "llama"}}, "explicit tokenizer"),
    ({"backend": "hf", "model": "m", "top_p": 0}, "top_p")])
def test_bad_llm_specs(spec, match):
    with pytest.raises(ZooError, match=match):
        check_spec(spec, "refactorer")
