"""The refactoring loop with a scripted LLM (tests only): equal-behaviour rewrites are accepted, a wrong one is
rejected, the feedback retry runs once, exactly the used helpers join the codebank and log their uses; a helper
that loops forever or shells out fails verification while the loop carries on; the codebank pass rewrites a
failing helper only when more of its cases pass and drops what nothing calls."""

from __future__ import annotations

import pytest

from zoo.regal.codebank import CodeBank, TestCase
from zoo.regal.domains import get_domain
from zoo.regal.executor import Executor
from zoo.regal.refactor import Refactorer

HEAD = "from datetime import date\nfrom dateutil.relativedelta import relativedelta\n"


def original(delta: str) -> str:
    return HEAD + f"d = date(2020, 1, 31)\nanswer = (d + relativedelta({delta})).strftime('%m/%d/%Y')\nprint(answer)"


EXAMPLES = [{"id": f"date_{k}", "query": f"Today is Jan 31, 2020. What is the date {q} in MM/DD/YYYY?",
             "program": original(delta), "answer": None, "metadata": None}
            for k, (q, delta) in enumerate([("3 days later", "days=3"), ("2 weeks later", "weeks=2"),
                                            ("1 month later", "months=1")])]
SHIFT = ("def shift_date(y, m, d, **delta):\n"
         "    return (date(y, m, d) + relativedelta(**delta)).strftime('%m/%d/%Y')")


def rewrite(call: str) -> str:
    return f"answer = {call}\nprint(answer)"


@pytest.fixture(scope="module")
def date_executor():
    ex = Executor(get_domain("date"), workers=2, cpu_seconds=1, wall_timeout=3, memory_mb=512)
    yield ex
    ex.close()


def make(executor, answers, scripted, **kw):
    llm = scripted(answers)
    bank = CodeBank(executor.domain.header_imports)
    examples = [dict(e) for e in EXAMPLES]
    return Refactorer(executor.domain, executor, llm, bank, {e["id"]: e for e in examples}, **kw), llm, examples


def test_accepts_equal_rewrites_rejects_a_wrong_one_and_keeps_only_used_helpers(date_executor, scripted):
    answer = ("NEW PROGRAM 1:\n# Thoughts: 1. shift a date\n" + SHIFT + "\n\ndef never_called(x):\n    return x\n\n"
              + rewrite("shift_date(2020, 1, 31, days=3)")
              + "\nNEW PROGRAM 2:\n" + rewrite("shift_date(2020, 1, 31, weeks=2)")
              + "\nNEW PROGRAM 3:\ndef add_a_month(y, m, d):\n    return shift_date(y, m, d, months=2)\n"
              + rewrite("add_a_month(2020, 1, 31)"))  # wrong: two months
    loop, llm, examples = make(date_executor, [answer], scripted, do_retry=False)
    report = loop.refactor_tuple(examples, round_idx=0)
    assert (report.verified_first, report.verified, report.retried) == (2, 2, 0)
    assert report.helpers_added == ["shift_date"] and list(loop.bank.helpers) == ["shift_date"]
    h = loop.bank.helpers["shift_date"]
    # three programs called it; the wrong one called two helpers (add_a_month -> shift_date), so it logs 2
    assert h.was_success == [True, True, False] and h.num_helpers == [1, 1, 2]
    assert [c.example_id for c in h.test_cases] == ["date_0", "date_1", "date_2"]
    assert len(llm.prompts) == 1 and "MUST execute to the same result" in llm.prompts[0]


def test_one_feedback_retry_fixes_the_wrong_program(date_executor, scripted):
    first = ("NEW PROGRAM 1:\n" + SHIFT + "\n" + rewrite("shift_date(2020, 1, 31, days=3)")
             + "\nNEW PROGRAM 2:\n" + rewrite("shift_date(2020, 1, 31, weeks=2)")
             + "\nNEW PROGRAM 3:\n" + rewrite("shift_date(2020, 1, 31, months=2)"))
    retry = "NEW PROGRAM 3:\n# Thought: 1. The results differ because of the month count.\n" + \
        rewrite("shift_date(2020, 1, 31, months=1)")
    loop, llm, examples = make(date_executor, [first, retry, "never asked"], scripted, do_retry=True)
    report = loop.refactor_tuple(examples, round_idx=0)
    assert (report.verified_first, report.retried, report.verified) == (2, 1, 3)
    assert len(llm.prompts) == 2  # one retry, no more
    assert "02/29/2020" in llm.prompts[1] and "03/31/2020" in llm.prompts[1]  # the results, before and after
    assert loop.bank.helpers["shift_date"].was_success == [True, True, True]


@pytest.mark.parametrize("evil, status", [
    ("    while True:\n        pass\n", ("cpu_limit", "timeout")),
    # no process can start in the sandbox, so the answer file never appears
    ("    import os\n    os.system('echo 02/03/2020 > /tmp/answer')\n    return open('/tmp/answer').read().strip()\n",
     ("error",))])
def test_a_helper_that_hangs_or_shells_out_fails_and_the_loop_carries_on(date_executor, scripted, evil, status):
    bad = "NEW PROGRAM 1:\ndef shift_date(y, m, d, **delta):\n" + evil + rewrite("shift_date(2020, 1, 31, days=3)")
    good = "NEW PROGRAM 1:\n" + SHIFT + "\n" + rewrite("shift_date(2020, 1, 31, weeks=2)")
    loop, llm, examples = make(date_executor, [bad, good], scripted, do_retry=False)
    first = loop.refactor_tuple(examples[:1], round_idx=0)
    assert first.verified == 0 and first.helpers_added == [] and len(loop.bank) == 0
    assert first.statuses[0] in status, first.statuses
    second = loop.refactor_tuple(examples[1:2], round_idx=1)
    assert second.verified == 1 and second.helpers_added == ["shift_date"]


def test_answer_without_sections_is_a_recorded_failure(date_executor, scripted):
    loop, llm, examples = make(date_executor, ["Sure! Here is a better version of your code."], scripted)
    report = loop.refactor_tuple(examples, round_idx=0)
    assert report.format_error and report.verified == 0 and len(loop.bank) == 0 and len(llm.prompts) == 1


def test_codebank_pass_keeps_a_better_rewrite_and_drops_what_nothing_calls(date_executor, scripted):
    off_by_one = ("def shift_days(y, m, d, n):\n"
                  "    return (date(y, m, d) + relativedelta(days=n + 1)).strftime('%m/%d/%Y')")
    loop, llm, examples = make(date_executor, [], scripted)
    loop.bank.add(off_by_one, 0)
    prog = rewrite("shift_days(2020, 1, 31, 3)")
    loop.bank.helpers["shift_days"].log_use(False, 1, TestCase("date_0", examples[0]["query"], prog, False))
    # the rewrite renames the helper, so the caller is rewritten too; the old name is then called by nothing
    fixed = off_by_one.replace("shift_days", "add_days").replace("n + 1", "n")
    llm.answers += ["Thoughts: 1. off by one.\nNEW PROGRAM:\n```python\n" + fixed + "\n```",
                    rewrite("add_days(2020, 1, 31, 3)")]
    report = loop.refactor_codebank(round_idx=5)
    assert report.tried == 1 and report.rewritten == ["shift_days"]
    assert list(loop.bank.helpers) == ["add_days"] and report.dropped == ["shift_days"]
    case = loop.bank.helpers["add_days"].test_cases[0]
    assert case.success and "add_days" in case.program

    # a rewrite that passes no more cases than before is not kept
    loop2, llm2, _ = make(date_executor, [], scripted)
    loop2.bank.add(off_by_one, 0)
    loop2.bank.helpers["shift_days"].log_use(False, 1, TestCase("date_0", examples[0]["query"], prog, False))
    llm2.answers += ["NEW PROGRAM:\n" + off_by_one.replace("n + 1", "n + 2")]
    report = loop2.refactor_codebank(round_idx=5)
    assert report.rewritten == [] and "n + 1" in loop2.bank.helpers["shift_days"].source
