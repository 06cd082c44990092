"""EM/F1 against the official SQuAD rules: torchmetrics' SQuAD metric (a maintained port of the official
evaluation script) on tricky strings, plus hand-checked cases of the paper's set-based F1 and ';' answers."""

from __future__ import annotations

import pytest
from torchmetrics.functional.text import squad

from zoo.iml.metrics import em_f1, exact_match, f1, normalize_answer

TRICKY = [
    ("The Beatles", "beatles"),
    ("an apple a day", "Apple day"),
    ("  1950s. ", "1950s"),
    ("19 century", "19th century"),
    ("Théâtre", "theatre"),
    ("U.S.A.", "USA"),
    ("rock-'n'-roll", "rocknroll"),
    ("The theatre of the absurd", "theatre absurd"),
    ("A", "an"),
    ("anthem", "the anthem"),
    ("Western   Europe", "western europe!"),
    ("Northern Europe", "Western Europe"),
    ("painter", "Painter and sculptor"),
    ("the the the", "the"),
    ("cat cat dog", "cat dog dog"),
    ("Q: x\nA: y", "x y"),
    ("théâtre", "Théâtre"),
]


def _squad(pred: str, truth: str) -> tuple[float, float]:
    out = squad([{"prediction_text": pred, "id": "0"}],
                [{"answers": {"answer_start": [0], "text": [truth]}, "id": "0"}])
    return float(out["exact_match"]) / 100, float(out["f1"]) / 100


@pytest.mark.parametrize("pred,truth", TRICKY)
def test_against_official_squad_rules(pred, truth):
    em_ref, f1_ref = _squad(pred, truth)
    assert exact_match(pred, truth) == em_ref
    assert f1(pred, truth, multiset=True) == pytest.approx(f1_ref, abs=1e-6)
    p, t = normalize_answer(pred).split(), normalize_answer(truth).split()
    if len(set(p)) == len(p) and len(set(t)) == len(t):  # without repeated tokens sets and multisets agree
        assert f1(pred, truth) == pytest.approx(f1_ref, abs=1e-6)


def test_hand_checked_cases():
    assert normalize_answer("The  Cat, an apple!") == "cat apple"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    # the paper's F1 (src/metrics.py) counts a token set: "cat cat" vs "cat cat" -> 1 common token, P = R = 1/2;
    # SQuAD v1.1 counts multiplicity: 2 common tokens -> 1.0
    assert f1("cat cat", "cat cat") == 0.5
    assert f1("cat cat", "cat cat", multiset=True) == 1.0
    assert f1("cat cat dog", "cat dog dog") == f1("cat cat dog", "cat dog dog", multiset=True) == pytest.approx(2 / 3)
    assert f1("painter", "painter and sculptor") == pytest.approx(2 * (1 * 1 / 3) / (1 + 1 / 3))
    assert f1("", "") == 1.0 and f1("the", "a") == 1.0 and f1("x", "") == 0.0


def test_max_over_semicolon_answers():
    ems, f1s = em_f1(["France", "Germany", "the Italy", "Spanish"],
                     ["United Kingdom;France", "France", "Italy;Spain", "Portugal;Spanish Empire"])
    assert ems == [1.0, 0.0, 1.0, 0.0]
    assert f1s[:3] == [1.0, 0.0, 1.0] and f1s[3] == pytest.approx(2 * 0.5 / 1.5)  # P = 1, R = 1/2
    with pytest.raises(ValueError):
        em_f1(["a"], [])
