"""Oracles added by mutation testing: the official thresholds and counts that the other tests leave free: LOGO's
"same image" is vis_compare > 0.98, a tuple shows retrieve_total // |tuple| helpers per query (official
``get_relevant(query, k=20 // len(tuple))``), and the training-time filter keeps a rarely used helper up to and
including max_round_delta rounds after it was added (official ``CodeBank.filter``: removed iff round_delta > 40)."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.regal.codebank import CodeBank, TestCase
from zoo.regal.domains import get_domain
from zoo.regal.executor import Executor
from zoo.regal.logo import same_image, vis_compare
from zoo.regal.refactor import Refactorer

from .test_loop import EXAMPLES


def _pair(equal: int, inked: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Two images with ``inked`` non-white pixels in either, ``equal`` of them equal."""
    a = np.full((20, 20), 255, dtype=np.uint8)
    b = a.copy()
    a.flat[:inked] = 0
    b.flat[:equal] = 0
    b.flat[equal:inked] = 128
    return a, b


@pytest.mark.parametrize("equal, same", [(100, True), (99, True), (98, False), (95, False), (90, False)])
def test_same_image_is_vis_compare_above_0_98(equal, same):
    a, b = _pair(equal)
    assert vis_compare(a, b) == pytest.approx(equal / 100)
    assert same_image(a, b) is same


@pytest.fixture(scope="module")
def date_executor():
    ex = Executor(get_domain("date"), workers=1, cpu_seconds=1, wall_timeout=3, memory_mb=512)
    yield ex
    ex.close()


def test_a_tuple_shows_retrieve_total_over_tuple_size_helpers_per_query(date_executor, scripted):
    bank = CodeBank(date_executor.domain.header_imports)
    for i in range(8):
        bank.add(f"def helper_{i}(x):\n    # add {i} days to a date\n    return x + {i}")
    examples = [dict(e) for e in EXAMPLES]  # three queries
    llm = scripted(["no sections here"])
    loop = Refactorer(date_executor.domain, date_executor, llm, bank, {e["id"]: e for e in examples},
                      do_retry=False, retrieve_total=4)
    loop.refactor_tuple(examples, round_idx=0)
    shown = llm.prompts[0].count("# Success rate:")
    assert 1 <= shown <= len(examples) * (4 // len(examples))  # k = 4 // 3 = 1 helper per query


def test_training_filter_keeps_a_rarely_used_helper_for_max_round_delta_rounds():
    def bank_at() -> CodeBank:
        bank = CodeBank()
        bank.add("def rare(x):\n    return x", round_added=0)
        bank.helpers["rare"].log_use(True, 1, TestCase("e0", "q", "rare(1)", True))  # 1 use < min_uses 4
        bank.add("def unused(x):\n    return x", round_added=0)
        return bank

    bank = bank_at()
    assert bank.filter_during_training(round_idx=40) == ["unused"] and "rare" in bank  # delta 40: kept
    bank = bank_at()
    assert sorted(bank.filter_during_training(round_idx=41)) == ["rare", "unused"]  # delta 41 > 40: removed
