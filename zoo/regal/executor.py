"""Runs programs for a domain in `zoo.sandbox` and turns the verdicts into domain outcomes in the parent."""

from __future__ import annotations

from typing import Any, Optional

from zoo.regal.domains import Domain, Outcome
from zoo.sandbox import Sandbox


class Executor:
    """A lazily started sandbox pool for one domain.

    Each program runs in its own contained child with the codebank's source in front of it (samples cannot see
    the project's files, so nothing is imported from a codebank file)."""

    def __init__(self, domain: Domain, workers: int = 2, cpu_seconds: float = 5.0, wall_timeout: float = 10.0,
                 memory_mb: int = 1024):
        self.domain = domain
        self.limits = dict(workers=workers, cpu_seconds=cpu_seconds, wall_timeout=wall_timeout, memory_mb=memory_mb)
        self._sandbox: Optional[Sandbox] = None
        self.programs_run = 0

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(preload=self.domain.sandbox_preload(), **self.limits)
        return self._sandbox

    def run(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Outcome]:
        """``items``: (program, codebank source, example) triples; outcomes in the same order."""
        out: list[Optional[Outcome]] = [None] * len(items)
        codes, exprs, where = [], [], []
        for i, (program, bank, example) in enumerate(items):
            job = self.domain.job(program or "", bank, example)
            if isinstance(job, str):
                out[i] = Outcome(None, "error", job)
            else:
                codes.append(job[0])
                exprs.append(job[1])
                where.append(i)
        if codes:
            self.programs_run += len(codes)
            for i, verdict in zip(where, self.sandbox.map(codes, result=exprs)):
                out[i] = self.domain.outcome(verdict, items[i][2])
        return out  # type: ignore[return-value]

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
