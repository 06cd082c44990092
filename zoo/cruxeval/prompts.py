"""The four CRUXEval prompts: direct (2-shot) and chain-of-thought (1-shot), for output and input prediction.

The wording, few-shot examples and layout follow the official harness (facebookresearch/cruxeval @190faf16,
`prompts.py`) character for character: the benchmark's numbers depend on the exact text. Every prompt
ends where the model should start writing; the answer goes in ``[ANSWER] ... [/ANSWER]`` and
``[/ANSWER]`` is the stop word. Direct prompts already end with the opening ``[ANSWER]`` tag; CoT prompts
end with ``[THOUGHT]`` and the model writes the tag itself.
"""

from __future__ import annotations

from typing import Literal

Mode = Literal["output", "input"]

# The official harness swaps in a fifth prompt for one model only (make_direct_output_prompt_phind, stop word
# "# done", for Phind-CodeLlama-34B-v2 output prediction); it is not reproduced here (cards/cruxeval.md).
STOP_WORDS = ("[/ANSWER]",)

_OUTPUT_TASK = (
    "You are given a Python function and an assertion containing an input to the function. Complete the "
    "assertion with a literal (no unsimplified expressions, no function calls) containing the output when "
    "executing the provided code on the given input, even if the function is incorrect or incomplete. Do NOT "
    "output any extra information."
)

DIRECT_OUTPUT = _OUTPUT_TASK + """ Provide the full assertion with the correct output in [ANSWER] and [/ANSWER] tags, following the examples.

[PYTHON]
def f(n):
    return n
assert f(17) == ??
[/PYTHON]
[ANSWER]
assert f(17) == 17
[/ANSWER]

[PYTHON]
def f(s):
    return s + "a"
assert f("x9j") == ??
[/PYTHON]
[ANSWER]
assert f("x9j") == "x9ja"
[/ANSWER]

[PYTHON]
{code}
assert f({input}) == ??
[/PYTHON]
[ANSWER]
"""

COT_OUTPUT = _OUTPUT_TASK + """ Execute the program step by step before arriving at an answer, and provide the full assertion with the correct output in [ANSWER] and [/ANSWER] tags, following the examples.

[PYTHON]
def f(s):
    s = s + s
    return "b" + s + "a"
assert f("hi") == ??
[/PYTHON]
[THOUGHT]
Let's execute the code step by step:

1. The function f is defined, which takes a single argument s.
2. The function is called with the argument "hi", so within the function, s is initially "hi".
3. Inside the function, s is concatenated with itself, so s becomes "hihi".
4. The function then returns a new string that starts with "b", followed by the value of s (which is now "hihi"), and ends with "a".
5. The return value of the function is therefore "bhihia".
[/THOUGHT]
[ANSWER]
assert f("hi") == "bhihia"
[/ANSWER]

[PYTHON]
{code}
assert f({input}) == ??
[/PYTHON]
[THOUGHT]
"""

DIRECT_INPUT = """You will be given a function f and an output in the form f(??) == output. Find any input such that executing f on the input leads to the given output. There may be multiple answers, but you should only output one. In [ANSWER] and [/ANSWER] tags, complete the assertion with one such input that will produce the output when executing the function.

[PYTHON]
def f(my_list):
    count = 0
    for i in my_list:
        if len(i) % 2 == 0:
            count += 1
    return count
assert f(??) == 3
[/PYTHON]
[ANSWER]
assert f(["mq", "px", "zy"]) == 3
[/ANSWER]

[PYTHON]
def f(s1, s2):
    return s1 + s2
assert f(??) == "banana"
[/PYTHON]
[ANSWER]
assert f("ba", "nana") == "banana"
[/ANSWER]

[PYTHON]
{code}
assert f(??) == {output}
[/PYTHON]
[ANSWER]
"""

# The trailing spaces after "17." and "16." are in the official prompt.
COT_INPUT = """You will be given a function f and an output in the form f(??) == output. Your task is to find any input such that executing f on the input leads to the given output. There may be multiple answers, but only output one. First, think step by step. You MUST surround the answer with [ANSWER] and [/ANSWER] tags. Express your answer as a passing assertion containing the input and the given output.

[PYTHON]
def f(x):
    return x + 1
assert f(??) == 17
[/PYTHON]
[THOUGHT]
To find an input such that executing f on the input leads to the given output, we can work backwards from the given assertion. We know that f(??) == 17. 

Since the function f(x) returns x + 1, for f(??) to be equal to 17, the value of ?? should be 16. 
[/THOUGHT]
[ANSWER]
assert f(16) == 17
[/ANSWER]

[PYTHON]
{code}
assert f(??) == {output}
[/PYTHON]
[THOUGHT]
"""

_TEMPLATES = {("output", False): DIRECT_OUTPUT, ("output", True): COT_OUTPUT,
              ("input", False): DIRECT_INPUT, ("input", True): COT_INPUT}


def make_prompt(code: str, given: str, mode: Mode, cot: bool = False) -> str:
    """``given`` is the row's ``input`` for output prediction and its ``output`` for input prediction."""
    if (mode, cot) not in _TEMPLATES:
        raise ValueError(f"mode must be 'output' or 'input', got {mode!r}")
    key = "input" if mode == "output" else "output"
    # str.replace, not str.format: the code may contain braces.
    return _TEMPLATES[(mode, cot)].replace("{code}", code).replace("{" + key + "}", given)
