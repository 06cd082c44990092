"""Shared pieces of the ReGAL tests: a scripted LLM (tests only) and one sandbox pool per domain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.regal.domains import get_domain
from zoo.regal.executor import Executor


class ScriptedLLM:
    """Answers from a list (or a function of the prompt); records every prompt it was given."""

    def __init__(self, answers=None, fn=None):
        self.answers = list(answers or [])
        self.fn = fn
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if self.fn is not None:
            return self.fn(prompt)
        if not self.answers:
            raise AssertionError(f"the scripted LLM ran out of answers at prompt {len(self.prompts)}")
        return self.answers.pop(0)


@pytest.fixture(scope="session")
def executors():
    made: dict[str, Executor] = {}

    def get(name: str) -> Executor:
        if name not in made:
            made[name] = Executor(get_domain(name, "crafting_commands", **({"dpi": 20} if name == "logo" else {})),
                                  workers=2, cpu_seconds=2, wall_timeout=4, memory_mb=512)
        return made[name]

    yield get
    for e in made.values():
        e.close()


@pytest.fixture
def scripted():
    return ScriptedLLM


@pytest.fixture
def rows():
    def read(path: Path) -> list[dict]:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]

    return read
