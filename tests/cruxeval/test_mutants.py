"""Oracles added by mutation testing: the paper's static filters at their edges (code of 75 to 300 characters,
both ends included; an argument that is only overwritten is not used) and the official output post-processing
(``generation.split("==")[1]`` in inference/tasks/output_prediction.py)."""

import pytest

from zoo.cruxeval.construct import static_problems
from zoo.cruxeval.scoring import extract_answer


def _code_of_length(n: int) -> str:
    code = "def f(text, k):\n    return text * k\n#"
    assert len(code) <= n
    return code + "x" * (n - len(code))


@pytest.mark.parametrize("n, ok", [(74, False), (75, True), (300, True), (301, False)])
def test_length_bounds_are_75_to_300_inclusive(n, ok):
    code = _code_of_length(n)
    assert len(code) == n
    assert static_problems(code, "'a', 2") == ([] if ok else [f"LENGTH ({n} chars, need 75-300)"])


def test_an_argument_that_is_only_overwritten_is_unused():
    code = _code_of_length(60).replace("return text * k", "k = 2\n    return text")
    code += "x" * (80 - len(code))
    assert static_problems(code, "'a', 2") == ["UNUSED_ARGUMENT k"]


def test_output_answer_is_the_text_between_the_first_two_equals_signs():
    assert extract_answer("assert f(1) == 2 == 3", "output") == ("2", "")
    assert extract_answer("assert f(1) == [1, 2] == x\n[/ANSWER]", "output") == ("[1, 2]", "")
