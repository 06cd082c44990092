"""Exact match and F1 after SQuAD normalisation, max over ';'-separated correct answers.

Normalisation is SQuAD v1.1's (lower-case, drop punctuation, drop the articles a/an/the, squeeze whitespace).
F1 follows the paper's `src/metrics.py`: token *sets* (SQuAD v1.1 counts tokens with multiplicity; the two differ
only when a token repeats) and 1.0 when both sides normalise to nothing. ``multiset=True`` gives SQuAD's count.
"""

from __future__ import annotations

import re
import string
from collections import Counter

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1(prediction: str, truth: str, multiset: bool = False) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values()) if multiset else len(set(pred) & set(gold))
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def best_over_answers(metric, prediction: str, answers: str, **kw) -> float:
    """The paper scores against every ';'-separated correct answer and keeps the best."""
    return max(metric(prediction, a, **kw) for a in answers.split(";"))


def em_f1(predictions: list[str], answers: list[str], multiset: bool = False) -> tuple[list[float], list[float]]:
    """Per-example EM and F1 (max over ';'-separated answers)."""
    if len(predictions) != len(answers):
        raise ValueError(f"{len(predictions)} predictions for {len(answers)} answers")
    ems = [best_over_answers(exact_match, p, a) for p, a in zip(predictions, answers)]
    f1s = [best_over_answers(f1, p, a, multiset=multiset) for p, a in zip(predictions, answers)]
    return ems, f1s
