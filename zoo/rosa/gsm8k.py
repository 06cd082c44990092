"""The GSM8K evaluation protocol RoSA reports (lm-eval-harness `gsm8k.py` at 2c18e367, 0-shot).

Context ``"Question: {q}\\nAnswer:"``, greedy decoding until one of ``[":", "Question:", "Question"]``, answer = first
match of ``#### (\\-?[0-9\\.\\,]+)`` with commas removed, exact string match with the reference's answer. The module
scores with it and `datamodules.gsm8k` builds prompts with it (the datamodule imports from here, not the reverse).
"""

from __future__ import annotations

import re

import torch
from torchmetrics import Metric

from zoo.errors import ZooError

EVAL_TEMPLATE = "Question: {question}\nAnswer:"
STOP_STRINGS = (":", "Question:", "Question")
ANS_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
INVALID = "[invalid]"


def extract_answer(text: str) -> str:
    """The harness's `extract_answer`: first `#### N`, stripped, commas removed; `[invalid]` when absent."""
    m = ANS_RE.search(text)
    if not m:
        return INVALID
    return m.group(1).strip().replace(",", "")


def is_correct(completion: str, reference_answer: str) -> bool:
    gold = extract_answer(reference_answer)
    if gold == INVALID:
        raise ZooError(f"reference answer has no '#### N' line: {reference_answer[-60:]!r}")
    return extract_answer(completion) == gold


class GSM8KExactMatch(Metric):
    """Exact match of the extracted `#### N` answers (lm-eval-harness gsm8k `acc`), summed across processes."""

    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, completions: list[str], references: list[str]) -> None:
        if len(completions) != len(references):
            raise ZooError(f"{len(completions)} completions for {len(references)} references")
        self.correct += sum(is_correct(c, r) for c, r in zip(completions, references))
        self.total += len(references)

    def compute(self) -> torch.Tensor:
        return self.correct.float() / self.total.clamp(min=1)
