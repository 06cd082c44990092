"""CRUXEval (Gu et al., ICML 2024): input/output prediction scored by execution in `zoo.sandbox`.

Reads top-down: `prompts` (the official prompts), `scoring` (answer parsing, checks, pass@k, scoring a
generations file), `construct` (the benchmark-construction filters), `module` (the LightningModule),
`generations` (the LightningModule that scores a generations file).
"""

from zoo.cruxeval.prompts import STOP_WORDS, make_prompt
from zoo.cruxeval.scoring import (Check, extract_answer, load_rows, make_check, pass_at_k, plan_check,
                                  score_answers, score_generations, summarize)
from zoo.cruxeval.construct import build_benchmark, runtime_problems, static_problems


def __getattr__(name: str):
    # The LightningModule pulls in torch/lightning; scoring a generations file or filtering candidates
    # does not need them, so it is imported on first use.
    if name == "CRUXEvalModule":
        from zoo.cruxeval.module import CRUXEvalModule

        return CRUXEvalModule
    if name == "CRUXEvalGenerationsModule":
        from zoo.cruxeval.generations import CRUXEvalGenerationsModule

        return CRUXEvalGenerationsModule
    raise AttributeError(f"module 'zoo.cruxeval' has no attribute {name!r}")


__all__ = ["CRUXEvalModule", "CRUXEvalGenerationsModule", "STOP_WORDS", "make_prompt", "extract_answer", "load_rows", "make_check", "plan_check",
           "Check", "pass_at_k", "score_answers", "score_generations", "summarize", "build_benchmark",
           "runtime_problems", "static_problems"]
