"""The codebank: helper functions with their usage log, retrieval, scores, pruning, and the files it is saved as.

A helper's log has one entry per program that called it (official `Function.was_success`,
`num_programs_used`, `test_cases`): whether that program verified, how many helpers it called, and the test
case (query, rewritten program, the example it came from).
"""

from __future__ import annotations

import ast
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from zoo.regal.parsing import called_names, function_name


@dataclass
class TestCase:
    __test__ = False  # not a pytest class
    example_id: str
    query: str
    program: str          # the rewritten program that called the helper
    success: bool


@dataclass
class Helper:
    name: str
    source: str
    round_added: Optional[int] = None
    was_success: list[bool] = field(default_factory=list)
    num_helpers: list[int] = field(default_factory=list)
    test_cases: list[TestCase] = field(default_factory=list)

    @property
    def args(self) -> list[str]:
        fn = ast.parse(self.source).body[0]
        return [a.arg for a in fn.args.args]  # type: ignore[attr-defined]

    @property
    def description(self) -> str:
        """What retrieval indexes: the name in words plus the helper's leading comment or docstring (official
        `Function.from_str`: the comment/docstring lines after ``def``, else the name)."""
        fn = ast.parse(self.source).body[0]
        doc = ast.get_docstring(fn) or ""  # type: ignore[arg-type]
        lines = self.source.splitlines()[1:]
        comments = []
        for line in lines:
            if line.strip().startswith("#"):
                comments.append(line.strip().lstrip("#").strip())
            else:
                break
        return " ".join([self.name.replace("_", " "), doc, *comments]).strip()

    def log_use(self, success: bool, num_helpers: int, case: TestCase) -> None:
        self.was_success.append(bool(success))
        self.num_helpers.append(int(num_helpers))
        self.test_cases.append(case)

    def summarize(self, include_success: bool = True) -> str:
        """The helper as prompts show it: the ``def`` line, ``# Success rate: s/t``, then the body."""
        first, *rest = self.source.splitlines()
        out = [first]
        if include_success:
            out.append(f"    # Success rate: {sum(self.was_success)}/{len(self.was_success)}")
        return "\n".join(out + rest) + "\n"


def helper_score(was_success: list[bool], num_helpers: list[int]) -> tuple[float, int]:
    """Official `Function.compute_success`: the mean over uses of +1 for a verified program and -1/#helpers
    for a failed one (blame shared by the helpers it called); (-1, 0) for an unused helper."""
    if not was_success:
        return -1.0, 0
    total = sum(1.0 if ok else -1.0 / max(1, n) for ok, n in zip(was_success, num_helpers))
    return total / len(was_success), len(was_success)


def keep_at_test_time(helper: Helper, threshold: float = 0.0, min_uses: int = 4) -> bool:
    """Test-time pruning (official `agent_main.py --filter`: ``filter(success_thresh=0.0, min_usage=4,
    keep_low_usage=False)``): keep iff score > threshold and uses >= min_uses."""
    score, uses = helper_score(helper.was_success, helper.num_helpers)
    return score > threshold and uses >= min_uses


class CodeBank:
    def __init__(self, imports: str = ""):
        self.helpers: dict[str, Helper] = {}
        self.imports: list[str] = [line for line in imports.splitlines() if line.strip()]
        self.removed: list[str] = []

    def __len__(self) -> int:
        return len(self.helpers)

    def __contains__(self, name: str) -> bool:
        return name in self.helpers

    def clone(self) -> "CodeBank":
        """A candidate codebank for verification: same helpers (objects shared, their logs are not touched)."""
        new = CodeBank()
        new.helpers = dict(self.helpers)
        new.imports = list(self.imports)
        new.removed = list(self.removed)
        return new

    def add(self, source: str, round_added: Optional[int] = None, replace: bool = False) -> str:
        """Add one function; a name already in the codebank is kept as it is unless ``replace``."""
        name = function_name(source)
        if replace or name not in self.helpers:
            old = self.helpers.get(name)
            self.helpers[name] = Helper(name, source, round_added if old is None else old.round_added,
                                        *((old.was_success, old.num_helpers, old.test_cases) if old else ()))
        return name

    def add_imports(self, imports: list[str]) -> None:
        self.imports += [i for i in imports if i not in self.imports]

    def source(self, overrides: Optional[dict[str, str]] = None) -> str:
        """The codebank as one Python file (imports, then helpers); ``overrides`` replace or add functions."""
        funcs = {n: h.source for n, h in self.helpers.items()}
        funcs.update(overrides or {})
        return "\n".join(self.imports) + ("\n\n" if self.imports else "") + "\n\n".join(funcs.values()) + "\n"

    def used_by(self, program: str, extra: Optional[dict[str, str]] = None) -> list[str]:
        """Helpers a program calls, directly or through other helpers (sorted). ``extra``: more candidate
        functions (name -> source) that count as helpers. The official code counts only direct calls, so a
        helper that needs another new helper could be added without it; we keep the closure."""
        funcs = {n: h.source for n, h in self.helpers.items()}
        funcs.update(extra or {})
        seen: set[str] = set()
        todo = [n for n in called_names(program) if n in funcs]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += [m for m in called_names(funcs[n]) if m in funcs and m not in seen]
        return sorted(seen)

    def get_relevant(self, query: str, k: int) -> list[str]:
        """The k helpers whose descriptions are closest to ``query`` (TF-IDF cosine; the official code queries
        an ada-002 chromadb collection of the same descriptions)."""
        from zoo.regal.retrieval import top_k

        names = list(self.helpers)
        if not names or k <= 0:
            return []
        return [names[i] for i in top_k(query, [self.helpers[n].description for n in names], k)]

    def prune(self, threshold: float = 0.0, min_uses: int = 4) -> list[str]:
        """Drop the helpers that fail the test-time rule; returns their names."""
        gone = [n for n, h in self.helpers.items() if not keep_at_test_time(h, threshold, min_uses)]
        for n in gone:
            del self.helpers[n]
        self.removed += gone
        return gone

    def filter_during_training(self, round_idx: int, threshold: float = 0.0, min_uses: int = 4,
                               max_round_delta: int = 40) -> list[str]:
        """Official `CodeBank.filter` as called during training (keep_low_usage=True): rarely used helpers stay
        unless they have been in the codebank for more than ``max_round_delta`` rounds; never-used ones go."""
        gone = []
        for n, h in self.helpers.items():
            score, uses = helper_score(h.was_success, h.num_helpers)
            delta = round_idx - (h.round_added if h.round_added is not None else round_idx)
            if score > threshold and uses >= min_uses:
                continue
            if 0 < uses < min_uses and delta <= max_round_delta:
                continue
            gone.append(n)
        for n in gone:
            del self.helpers[n]
        self.removed += gone
        return gone

    # -- persistence --------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"imports": self.imports, "removed": self.removed,
                "helpers": [{**asdict(h), "test_cases": [asdict(t) for t in h.test_cases]}
                            for h in self.helpers.values()]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CodeBank":
        bank = cls()
        bank.imports = list(data.get("imports", []))
        bank.removed = list(data.get("removed", []))
        for h in data.get("helpers", []):
            cases = [TestCase(**t) for t in h.get("test_cases", [])]
            bank.helpers[h["name"]] = Helper(h["name"], h["source"], h.get("round_added"),
                                             list(h.get("was_success", [])), list(h.get("num_helpers", [])), cases)
        return bank

    def save(self, directory: str | Path, header: str = "") -> None:
        """Official checkpoint layout: ``codebank.py``, ``success_info.json``, ``test_cases.jsonl``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "codebank.py").write_text((header + "\n\n" if header else "") + self.source())
        info = [{"name": h.name, "was_success": h.was_success, "num_programs_used": h.num_helpers,
                 "round_added": h.round_added, "score": helper_score(h.was_success, h.num_helpers)[0]}
                for h in self.helpers.values()]
        (d / "success_info.json").write_text(json.dumps(info, indent=1))
        with (d / "test_cases.jsonl").open("w") as fh:
            for h in self.helpers.values():
                fh.write(json.dumps([asdict(t) for t in h.test_cases]) + "\n")
