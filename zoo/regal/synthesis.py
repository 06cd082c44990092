"""Test time (official `agent/agent.py`, `agent_main.py`): write a program for each test query with in-context
examples and, for ReGAL, the (pruned) codebank; execute it in the sandbox and score it.

Two conditions, one prompt layout (CodeLlama's completion prompt):
* ``baseline``: ``max_budget`` primitive training programs retrieved by query similarity, no helpers, no
  thoughts (official ``scripts/*/test_cl13b_baseline.sh``).
* ``regal``: the top ``top_helpers`` helpers for the query (with ``# Success rate: s/t``), then
  ``int(budget_split * max_budget)`` refactored training programs (verified rewrites logged as test cases) and
  the rest primitive ones, each with ``# Thought: ... I will use the helper functions: ...`` (``--use_success
  --use_thought``); the program runs with the codebank in front of it.
"""

from __future__ import annotations

from typing import Any, Optional

from zoo.regal import prompts
from zoo.regal.codebank import CodeBank
from zoo.regal.domains import Domain, Outcome
from zoo.regal.executor import Executor
from zoo.regal.parsing import extract_completion
from zoo.regal.retrieval import top_k

CONDITIONS = ("baseline", "regal")


def refactored_pool(bank: CodeBank, filter_removed: bool, log: CodeBank | None = None) -> list[dict[str, Any]]:
    """Verified rewrites from the helpers' test cases (official `read_data_from_logdir`), one per query; with
    ``filter_removed`` (official: LOGO and TextCraft) only those whose helpers all survived pruning.

    ``log`` is the codebank as training left it, before test-time pruning (default ``bank``): officially the
    rewrites come from the saved ``test_cases.jsonl``, so for Date (no filter) a rewrite whose helpers were all
    pruned is still an in-context example."""
    pool, seen = [], set()
    for h in (log if log is not None else bank).helpers.values():
        for c in h.test_cases:
            if not c.success or c.query in seen:
                continue
            if filter_removed and any(n in bank.removed and n not in bank for n in _calls(c.program)):
                continue
            seen.add(c.query)
            pool.append({"id": c.example_id, "query": c.query, "program": c.program})
    return pool


def _calls(program: str) -> set[str]:
    from zoo.regal.parsing import called_names

    return called_names(program)


class Synthesizer:
    def __init__(self, domain: Domain, executor: Executor, llm, max_budget: int = 5, budget_split: float = 0.6,
                 top_helpers: int = 20, use_success: bool = True, use_thought: bool = True):
        self.domain, self.executor, self.llm = domain, executor, llm
        self.max_budget, self.budget_split, self.top_helpers = max_budget, budget_split, top_helpers
        self.use_success, self.use_thought = use_success, use_thought
        self.primitive: list[dict[str, Any]] = []
        self.refactored: list[dict[str, Any]] = []
        self.bank: Optional[CodeBank] = None

    def prepare(self, primitive: list[dict[str, Any]], bank: Optional[CodeBank],
                log: CodeBank | None = None) -> None:
        """``bank``: the (pruned) codebank the programs may call; ``log``: the unpruned one whose test cases
        supply the refactored examples (default ``bank``)."""
        seen, self.primitive = set(), []
        for e in primitive:  # official get_docs_ids: one example per id and per query
            if e.get("program") and e["id"] not in seen and e["query"] not in seen:
                seen |= {e["id"], e["query"]}
                self.primitive.append(e)
        self.bank = bank
        self.refactored = refactored_pool(bank, self.domain.name != "date", log) if bank is not None else []

    @staticmethod
    def retrieve(pool: list[dict[str, Any]], example: dict[str, Any], k: int) -> list[dict[str, Any]]:
        # Officially the top k are retrieved and then any with the test example's id dropped; train and test ids
        # are both "<dataset>_<row>" there, so a same-row training example could be lost. Our ids are per split.
        exclude = {i for i, e in enumerate(pool) if e["id"] == example["id"]}
        return [pool[i] for i in top_k(example["query"], [e["query"] for e in pool], k, exclude)]

    def examples_for(self, example: dict[str, Any], condition: str) -> list[dict[str, Any]]:
        if condition == "baseline" or self.bank is None:
            return self.retrieve(self.primitive, example, self.max_budget)
        n_ref = int(self.budget_split * self.max_budget)
        return (self.retrieve(self.refactored, example, n_ref)
                + self.retrieve(self.primitive, example, self.max_budget - n_ref))

    def prompt(self, example: dict[str, Any], condition: str) -> str:
        regal = condition == "regal" and self.bank is not None
        icl = ""
        for ex in self.examples_for(example, condition):
            # the thought names the codebank helpers the example calls; officially it names every call that
            # `get_func_names` finds (for Date/TextCraft also builtins and library calls), see cards/regal.md
            used = self.bank.used_by(ex["program"]) if regal else []
            if self.domain.name == "logo" and "embed" in ex["program"]:
                used = used + ["embed"]
            icl += prompts.icl_block(ex["query"], ex["program"], used, regal and self.use_thought,
                                     repeat_query=self.domain.name == "logo")
        helpers = []
        if regal:
            helpers = [self.bank.helpers[n].summarize(self.use_success)
                       for n in self.bank.get_relevant(example["query"], self.top_helpers)]
        commands = example.get("metadata") if self.domain.name == "textcraft" else None
        return prompts.agent_prompt(self.domain, example["query"], icl, helpers, commands)

    def gold(self, examples: list[dict[str, Any]]) -> list[Optional[Outcome]]:
        with_program = [e for e in examples if e.get("program")]
        outs = iter(self.executor.run([(e["program"], "", e) for e in with_program]))
        return [next(outs) if e.get("program") else None for e in examples]

    def run(self, examples: list[dict[str, Any]], condition: str,
            golds: Optional[list[Optional[Outcome]]] = None) -> list[dict[str, Any]]:
        """One record per example: the prompt's completion, the program, its verdict, whether it is correct."""
        regal = condition == "regal" and self.bank is not None
        golds = golds if golds is not None else self.gold(examples)
        completions = [self.llm(self.prompt(e, condition)) for e in examples]
        programs = [extract_completion(c) for c in completions]
        source = self.bank.source() if regal else ""
        outs = self.executor.run([(p, source, e) for p, e in zip(programs, examples)])
        return [{"id": e["id"], "query": e["query"], "condition": condition, "completion": c, "program": p,
                 "status": o.status, "reason": o.reason[:300], "correct": bool(self.domain.correct(o, e, g))}
                for e, c, p, o, g in zip(examples, completions, programs, outs, golds)]
