"""ReGAL's training loop, one tuple at a time (official `BiggerTree.recursive_resolve`, `*Tuple.merge`,
`CodeBank.refactor`): refactor a tuple's programs with shared helpers, verify every rewrite by execution, retry
once with feedback, keep the helpers of verified programs and log every helper's use; periodically rewrite the
helpers that fail some of their test cases and drop the helpers nothing calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from zoo.regal import prompts
from zoo.regal.codebank import CodeBank, TestCase
from zoo.regal.domains import Domain, Outcome
from zoo.regal.executor import Executor
from zoo.regal.parsing import (AnswerFormatError, called_names, clean_code, function_name, parse_functions,
                               parse_refactor_answer)


@dataclass
class Attempt:
    program: Optional[str]
    outcome: Outcome
    success: bool
    used: list[str]                 # helpers the program calls (closure), names in the candidate codebank
    new_helpers: dict[str, str]     # the used helpers that the answer defined and the codebank lacks
    imports: list[str] = field(default_factory=list)


@dataclass
class TupleReport:
    size: int
    verified: int = 0               # programs whose rewrite executes to the original's result
    verified_first: int = 0         # ... at the first try
    retried: int = 0                # programs sent to the feedback retry
    format_error: str = ""          # the refactoring answer had no NEW PROGRAM sections
    helpers_added: list[str] = field(default_factory=list)
    comments_kept: int = 0
    statuses: list[str] = field(default_factory=list)  # sandbox status of each program's last attempt


@dataclass
class BankReport:
    rewritten: list[str] = field(default_factory=list)
    tried: int = 0
    dropped: list[str] = field(default_factory=list)


def strip_comments(program: str) -> str:
    """Code without comments and blank lines (official `add_tuple_comments.strip_comments`)."""
    text = re.sub(r"#.*$", "", program, flags=re.MULTILINE)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


class Refactorer:
    """Holds the codebank and everything the loop needs between tuples.

    Args:
        domain / executor / llm: what programs are, where they run, who rewrites them.
        codebank: the codebank that grows.
        examples: id -> training example (with its original program): the test cases' gold programs.
        helpers_first: put ``NEW HELPERS`` before the programs in the answer format (official
            ``--helpers_second`` unset).
        do_retry: one feedback retry for the programs that did not verify (``--do_retry``).
        retrieve_total: helpers shown per tuple, ``retrieve_total // len(tuple)`` retrieved per query (20).
        craft_retrieve: TextCraft: retrieve helpers with the crafting commands in front of the query.
    """

    def __init__(self, domain: Domain, executor: Executor, llm, codebank: CodeBank,
                 examples: dict[str, dict[str, Any]], helpers_first: bool = False, do_retry: bool = True,
                 retrieve_total: int = 20, craft_retrieve: bool = False):
        self.domain, self.executor, self.llm, self.bank = domain, executor, llm, codebank
        self.examples = examples
        self.helpers_first, self.do_retry = helpers_first, do_retry
        self.retrieve_total, self.craft_retrieve = retrieve_total, craft_retrieve
        self._gold: dict[str, Outcome] = {}

    # -- executing ----------------------------------------------------------------------------------------
    def gold(self, examples: list[dict[str, Any]]) -> list[Outcome]:
        """The original programs' results (cached per example)."""
        todo = [e for e in examples if e["id"] not in self._gold]
        for e, out in zip(todo, self.executor.run([(e["program"], "", e) for e in todo])):
            self._gold[e["id"]] = out
        return [self._gold[e["id"]] for e in examples]

    def _test(self, examples: list[dict[str, Any]], programs: dict[int, str], helpers: list[str],
              imports: list[str], base: Optional[CodeBank] = None) -> dict[int, Attempt]:
        """Run the rewritten programs against the codebank plus the answer's helpers (official `test_programs`:
        a name that is already in the codebank keeps its codebank version)."""
        cand = (base or self.bank).clone()
        new: dict[str, str] = {}
        for src in helpers:
            try:
                name = function_name(src)
            except (SyntaxError, IndexError, AttributeError):
                continue
            if name not in cand:
                cand.add(src)
                new[name] = src
        cand.add_imports(imports)
        source = cand.source()
        before = self.gold(examples)
        idxs = [i for i in range(1, len(examples) + 1) if i in programs]
        outs = self.executor.run([(programs[i], source, examples[i - 1]) for i in idxs])
        attempts = {i: Attempt(None, Outcome(None, "missing", "the answer has no program for it"), False, [], {})
                    for i in range(1, len(examples) + 1)}
        for i, out in zip(idxs, outs):
            used = cand.used_by(programs[i])
            attempts[i] = Attempt(programs[i], out, self.domain.same(before[i - 1], out), used,
                                  {n: new[n] for n in used if n in new}, imports)
        return attempts

    # -- LOGO comments ------------------------------------------------------------------------------------
    def add_comments(self, examples: list[dict[str, Any]]) -> int:
        """LOGO only (official ``--add_comments``): the LLM comments each program with the parts of its query;
        the commented version replaces the program iff it is the same code, or draws the identical image."""
        kept = 0
        for e in examples:
            parts = self.llm(prompts.decompose_prompt(e["query"]))
            text = self.llm(prompts.comment_prompt(self.domain, e["query"], e["program"], parts))
            text = re.sub(r"Comment(ed|s)( code| program)?:", "", text).split("Explanation:")[0]
            commented = clean_code(text)
            if not commented.strip():
                continue
            same = strip_comments(commented) == strip_comments(e["program"])
            if not same:
                before = self.gold([e])[0]
                after = self.executor.run([(commented, "", e)])[0]
                same = before.ok and after.ok and self.domain.similarity(before, after) == 1.0  # type: ignore[attr-defined]
            if same:
                e["program"] = commented
                kept += 1
        return kept

    # -- one tuple ----------------------------------------------------------------------------------------
    def retrieval_query(self, e: dict[str, Any]) -> str:
        return (e.get("metadata") or "") + "Goal: " + e["query"] if self.craft_retrieve else e["query"]

    def refactor_tuple(self, examples: list[dict[str, Any]], round_idx: int) -> TupleReport:
        report = TupleReport(size=len(examples))
        k = self.retrieve_total // max(1, len(examples))
        shown: list[str] = []
        for e in examples:
            shown += [n for n in self.bank.get_relevant(self.retrieval_query(e), k) if n not in shown]
        prompt = prompts.tuple_refactor_prompt(self.domain, examples,
                                               [self.bank.helpers[n].summarize() for n in shown], self.helpers_first)
        try:
            answer = parse_refactor_answer(self.llm(prompt))
        except AnswerFormatError as err:  # officially: nothing is verified, logged or retried
            report.format_error = str(err)
            return report
        attempts = self._test(examples, answer.programs, answer.helpers, answer.imports)
        report.verified_first = sum(a.success for a in attempts.values())
        failed = [i for i, a in attempts.items() if not a.success and a.program is not None]
        if self.do_retry and failed:
            report.retried = len(failed)
            self._retry(examples, attempts, failed, answer)
        report.verified = sum(a.success for a in attempts.values())
        report.statuses = [attempts[i].outcome.status for i in sorted(attempts)]
        for i, a in attempts.items():  # helpers of verified programs join the codebank
            if a.success:
                for name, src in a.new_helpers.items():
                    if name not in self.bank:
                        self.bank.add(src, round_idx)
                        report.helpers_added.append(name)
                self.bank.add_imports(a.imports)
        # every helper in the codebank that a rewrite called logs that use; the blame count is the number of
        # codebank helpers called (officially len(get_func_names(program)), which for Date also counts builtins,
        # library calls and method receivers, and for LOGO only statement-level calls: see cards/regal.md)
        for i, a in attempts.items():
            if a.program is None:
                continue
            case = TestCase(examples[i - 1]["id"], examples[i - 1]["query"], a.program, a.success)
            for name in a.used:
                if name in self.bank:
                    self.bank.helpers[name].log_use(a.success, len(a.used), case)
        return report

    def _retry(self, examples, attempts: dict[int, Attempt], failed: list[int], answer) -> None:
        """One feedback round for the failed programs, all in one prompt (the official Date loop asks once per
        program). Retries run against the codebank plus the first answer's helpers, overridden by the new ones
        (officially the first answer's helpers are dropped, so a retry that keeps calling them fails)."""
        before = self.gold(examples)
        rows = [(i, examples[i - 1], attempts[i].program or "", before[i - 1].summary(), attempts[i].outcome.summary())
                for i in failed]
        called = sorted({n for i in failed for n in attempts[i].used})
        text = self.llm(prompts.retry_prompt(self.domain, rows, "\n\n".join(answer.helpers), called))
        try:
            second = parse_refactor_answer(text)
        except AnswerFormatError:
            return
        programs = {i: p for i, p in second.programs.items() if i in failed}
        if not programs:
            return
        first_names = {}
        for src in answer.helpers:
            try:
                first_names[function_name(src)] = src
            except (SyntaxError, IndexError, AttributeError):
                pass
        retry_names = {}
        for src in second.helpers:
            try:
                retry_names[function_name(src)] = src
            except (SyntaxError, IndexError, AttributeError):
                pass
        helpers = list({**first_names, **retry_names}.values())
        for i, a in self._test(examples, programs, helpers, answer.imports + second.imports).items():
            if i in programs and a.success:
                attempts[i] = a

    # -- the codebank every `refactor_every` tuples -------------------------------------------------------
    def refactor_codebank(self, round_idx: int) -> BankReport:
        """Each helper with failing test cases gets one single-helper rewrite, kept iff more of its test cases
        pass with it (we count the stored successes before and the re-executed ones after, over all its test
        cases; officially the deduplicated passing ones before). Then helpers that no test case and no other
        helper calls are dropped (official `CodeBank.refactor(do_filter=False)`)."""
        report = BankReport()
        called: set[str] = set()
        updated: set[str] = set()
        for name in list(self.bank.helpers):
            helper = self.bank.helpers.get(name)
            if helper is None:
                continue
            passing, failing, seen_q, seen_p = [], [], set(), set()
            for c in helper.test_cases:  # official dedup: a case is new iff its query and program both are
                if c.query in seen_q or c.program in seen_p:
                    continue
                seen_q.add(c.query)
                seen_p.add(c.program)
                (passing if c.success else failing).append((c.query, c.program))
            if not failing:
                called |= {n for q, p in passing for n in called_names(p)} | {name}
                continue
            report.tried += 1
            shown = [self.bank.helpers[n].summarize() for n in self.bank.get_relevant(helper.description, 10)]
            block = prompts.pass_fail_block(name, passing, failing)
            mapping = parse_functions(self.llm(prompts.single_refactor_prompt(self.domain, helper.source, shown,
                                                                               block)))
            old_calls = {n for c in helper.test_cases for n in called_names(c.program)}
            if not mapping:
                called |= old_calls
                continue
            programs = [c.program for c in helper.test_cases]
            changed = name not in mapping or any(
                n in self.bank and self.bank.helpers[n].args != _args(src) or n not in self.bank
                for n, src in mapping.items())
            if changed:  # the callers are rewritten for the new signature(s)
                old = helper.source
                new = "\n\n".join(mapping.values())
                programs = [clean_code(self.llm(prompts.test_case_refactor_prompt(old, new, c.query, c.program)))
                            for c in helper.test_cases]
            source = self.bank.source(overrides=mapping)
            runnable = [(c, p, self.examples[c.example_id]) for c, p in zip(helper.test_cases, programs)
                        if c.example_id in self.examples]
            outs = self.executor.run([(p, source, e) for _, p, e in runnable])
            golds = self.gold([e for _, _, e in runnable])
            after = [self.domain.same(g, o) for g, o in zip(golds, outs)]
            if sum(after) > sum(c.success for c in helper.test_cases):
                for n, src in mapping.items():
                    self.bank.add(src, round_idx, replace=True)
                    updated.add(n)
                # the success log stays as it was (official: "the function has changed, so old success is not
                # as informative"); the test cases now hold the updated callers and their new outcome
                for (c, p, _), ok in zip(runnable, after):
                    c.program, c.success = p, ok
                # a renamed helper takes the log and the test cases of the one it replaces (officially a rewrite
                # without the old name is never accepted: `refactor_one_function` skips it on a KeyError)
                for n in mapping:
                    successor = self.bank.helpers[n]
                    if n != name and not successor.test_cases:
                        for c, ok_before, k in zip(helper.test_cases, helper.was_success, helper.num_helpers):
                            if n in called_names(c.program):
                                successor.log_use(ok_before, k, c)
                report.rewritten.append(name)
                called |= {n for p in programs for n in called_names(p)}
            else:
                called |= old_calls
        in_bank = {n for h in self.bank.helpers.values() for n in called_names(h.source) if n != h.name}
        for name in list(self.bank.helpers):
            if name not in updated and name not in called and name not in in_bank:
                del self.bank.helpers[name]
                self.bank.removed.append(name)
                report.dropped.append(name)
        return report


def _args(source: str) -> list[str]:
    import ast

    fn = ast.parse(source).body[0]
    return [a.arg for a in fn.args.args]  # type: ignore[attr-defined]
