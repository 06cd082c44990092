"""`CRUXEvalGenerationsModule`: score a model's released generations with `zoo test`, no model run.

The official repository publishes what its models generated (``samples/model_generations/<run>/generations.json``:
row id -> list of answers). Scoring such a file through the same `zoo test` as a model run gives it a run dir, a
card and a place in a `zoo sweep`, so the paper's numbers are reproduced as runs (configs/sweeps/cruxeval_*.yaml).
`zoo cruxeval-score` scores the same files from the command line, without a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from zoo.cruxeval.module import CRUXEvalScorer
from zoo.cruxeval.scoring import generation_answers, read_generations

# The project's generations for the embedded sample (datamodules/cruxeval_sample.jsonl): each problem's right answer
# and a wrong one, so pass@1 = 50 and pass@2 = 100. `generations: embedded` reads the file of the module's mode.
EMBEDDED = "embedded"
SAMPLE_GENERATIONS = Path(__file__).with_name("sample_generations_{mode}.json")


class CRUXEvalGenerationsModule(CRUXEvalScorer):
    """CRUXEval input or output prediction scored from a generations file instead of a model.

    Args:
        generations: the JSON file, row id -> list of candidates (official format); ``embedded``: the project's
            generations for the embedded sample (datamodules/cruxeval_sample.jsonl), for smoke runs.
        mode: ``output`` (CRUXEval-O) or ``input`` (CRUXEval-I); never guessed from the file name.
        raw: the candidates are raw completions: extract each answer first (official post-processing).
        cot: the completions come from the chain-of-thought prompts (an ``[ANSWER]`` tag is then required).
        generated_by: the model that wrote the file, for the record (e.g. ``codellama/CodeLlama-7b-hf``).
        ks: pass@k values to report (at most the candidates per row).
        sandbox_workers / cpu_seconds / wall_timeout / memory_mb / compat: as `CRUXEvalModule`.
    """

    hub_strict = False

    def __init__(self, generations: str, mode: Literal["output", "input"] = "output", raw: bool = False,
                 cot: bool = False, generated_by: str | None = None, ks: list[int] | None = None,
                 sandbox_workers: int = 2, cpu_seconds: float = 3.0, wall_timeout: float = 5.0, memory_mb: int = 1024,
                 compat: Literal["strict", "official"] = "strict"):
        super().__init__()
        self.save_hyperparameters()
        self.generations = read_generations(SAMPLE_GENERATIONS.with_name(SAMPLE_GENERATIONS.name.format(mode=mode))
                                            if generations == EMBEDDED else generations)
        sizes = [len(c) for c in self.generations.values() if isinstance(c, list)]
        # pass@k needs k candidates in every row: a smaller row would count as 0, not as unknown
        self.setup_scoring(mode, ks, min(sizes, default=0), compat)
        self.answers, self.reasons = generation_answers(self.generations, mode, raw, cot)  # once, as scored

    def candidates(self, rows: list[dict[str, Any]]) -> tuple[Any, Any, list]:
        """The file's answers by row id, which score_answers looks up (a row the file lacks has none: a failed row,
        as officially), and the raw completions where the file holds them."""
        completions = [self.generations.get(str(r.get("id"))) if self.hparams.raw else None for r in rows]
        return self.answers, self.reasons, completions

    def hub_state_dict(self):
        return {}  # no weights: the card records the file scored and the results

    def card_metadata(self) -> dict[str, Any]:
        hp = self.hparams
        by = f"by {hp.generated_by}" if hp.generated_by else "by an unnamed model"
        source = "the project's generations for the embedded sample" if hp.generations == EMBEDDED else \
            f"generations {by} from {hp.generations}"
        return {"tags": ["cruxeval", "code-reasoning", "generations"],
                "model_source": f"no model was run: {source} ({'raw completions' if hp.raw else 'answers'}), scored"}
