"""ReGAL (Stengel-Eskin, Prasad, Bansal; ICML 2024): refactor programs into a verified helper codebank, then
synthesise new programs with it.

Reads top-down: the domains and what runs in the sandbox (`logo_runtime`, `logo`, `textcraft_runtime`,
`domains`, `executor`), the LLM answers (`parsing`, `prompts`, `llm`), the codebank (`retrieval`, `codebank`),
training tuples (`cluster`), the loop (`refactor`), test time (`synthesis`), the LightningModule (`module`).
"""

from zoo.regal.codebank import CodeBank, Helper, TestCase, helper_score, keep_at_test_time
from zoo.regal.cluster import make_tuples
from zoo.regal.domains import (DateDomain, LogoDomain, Outcome, TextCraftDomain, extract_gold_answer, get_domain,
                               is_correct)
from zoo.regal.examples import normalize, read_jsonl
from zoo.regal.executor import Executor
from zoo.regal.logo import render, vis_compare
from zoo.regal.parsing import AnswerFormatError, called_names, extract_completion, parse_refactor_answer
from zoo.regal.refactor import Refactorer
from zoo.regal.synthesis import Synthesizer


def __getattr__(name: str):
    if name == "ReGALModule":  # Lightning and torch only when the module is wanted
        from zoo.regal.module import ReGALModule

        return ReGALModule
    raise AttributeError(f"module 'zoo.regal' has no attribute {name!r}")


__all__ = ["ReGALModule", "CodeBank", "Helper", "TestCase", "helper_score", "keep_at_test_time", "make_tuples",
           "DateDomain", "LogoDomain", "TextCraftDomain", "Outcome", "extract_gold_answer", "get_domain",
           "is_correct", "normalize", "read_jsonl", "Executor", "render", "vis_compare", "AnswerFormatError",
           "called_names", "extract_completion", "parse_refactor_answer", "Refactorer", "Synthesizer"]
