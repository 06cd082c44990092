"""`CRUXEvalModule`: generate CRUXEval answers with any HF causal LM and score them in the sandbox.

Evaluation only: `zoo test` (metrics ``test/pass@k`` in percent) or `zoo predict` (per-row records). The
run directory receives, per stage, ``generations_<mode>.json`` (official format: id -> list of answers,
rescorable with :func:`zoo.cruxeval.score_generations`), ``completions_<mode>.json`` (raw model text) and
``verdicts_<mode>.jsonl`` (every candidate's sandbox verdict with its reason).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional, Union

import lightning as L

from zoo.cruxeval.prompts import STOP_WORDS, make_prompt
from zoo.cruxeval.scoring import extract_answers, row_problem, score_answers
from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.lm import DType, build_causal_lm, generate, load_tokenizer
from zoo.records import EvalRecords
from zoo.sandbox import Sandbox


class CRUXEvalScorer(EvalRecords, HubMixin, L.LightningModule):
    """What every CRUXEval evaluation shares: candidates scored in the sandbox, pass@k logged in percent, the
    stage's generations, completions and verdicts written to the run dir. A subclass says where the candidates come
    from (`candidates(rows)`: answers, the reasons for missing ones, the raw completions)."""

    def setup_scoring(self, mode: str, ks: list[int] | None, n_samples: int, compat: str) -> None:
        if mode not in ("output", "input"):
            raise ZooError(f"mode must be 'output' or 'input', got {mode!r}")
        self.ks = sorted(set(ks if ks is not None else [1, 5]))
        if not self.ks or n_samples < 1 or any(k < 1 or k > n_samples for k in self.ks):  # [] reported no pass@k
            raise ZooError(f"need 1 <= k <= n_samples for every k in ks={self.ks} (n_samples = {n_samples}, the "
                           "candidates per problem)")
        if compat not in ("strict", "official"):
            raise ZooError(f"compat must be 'strict' or 'official', got {compat!r}")
        self._sandbox: Sandbox | None = None
        self.records: list[dict[str, Any]] = []

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            hp = self.hparams
            self._sandbox = Sandbox(workers=hp.sandbox_workers, cpu_seconds=hp.cpu_seconds,
                                    wall_timeout=hp.wall_timeout, memory_mb=hp.memory_mb)
        return self._sandbox

    def candidates(self, rows: list[dict[str, Any]]) -> tuple[list, list | None, list]:
        raise NotImplementedError(f"{type(self).__name__} must define candidates(rows)")

    def evaluate(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Candidates, then execution: one record per row (id, completions, answers, verdicts, pass@k)."""
        hp = self.hparams
        answers, reasons, completions = self.candidates(rows)
        results = score_answers(rows, answers, hp.mode, self.sandbox, self.ks, reasons, hp.compat)
        return [{**res.to_dict(), "completions": comps} for res, comps in zip(results, completions)]

    # -- Lightning (hooks: zoo.records.EvalRecords) -------------------------------------------------
    def score_records(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.evaluate(batch)

    def log_records(self, records: list[dict[str, Any]], stage: str) -> None:
        for k in self.ks:
            vals = [r["pass_at"].get(f"pass@{k}", 0.0) for r in records]
            self.log(f"{stage}/pass@{k}", 100.0 * sum(vals) / len(vals), on_step=False, on_epoch=True,
                     batch_size=len(vals), sync_dist=True)
        # problems that could not be scored (a malformed row, no candidates) and checks the sandbox itself failed
        counts = {"failed_rows": sum(bool(r["error"]) for r in records),
                  "sandbox_errors": sum(v.get("status") == "worker_error" for r in records for v in r["verdicts"])}
        for name, n in counts.items():
            self.log(f"{stage}/{name}", float(n), on_step=False, on_epoch=True, reduce_fx="sum", sync_dist=True)

    def save_records(self, stage: str) -> None:
        if self.trainer is None or not self.records:
            return
        run = Path(self.trainer.default_root_dir)
        run.mkdir(parents=True, exist_ok=True)
        mode = self.hparams.mode
        suffix = f"_{stage}" + (f"_rank{self.global_rank}" if self.trainer.world_size > 1 else "")
        (run / f"generations_{mode}{suffix}.json").write_text(
            json.dumps({r["id"]: r["answers"] for r in self.records}, indent=1))
        (run / f"completions_{mode}{suffix}.json").write_text(
            json.dumps({r["id"]: r["completions"] for r in self.records}, indent=1))
        with (run / f"verdicts_{mode}{suffix}.jsonl").open("w") as fh:
            for r in self.records:
                fh.write(json.dumps({k: v for k, v in r.items() if k != "completions"}) + "\n")

    def teardown(self, stage: str) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def configure_optimizers(self):
        return None


class CRUXEvalModule(CRUXEvalScorer):
    """CRUXEval input or output prediction with a causal LM.

    Args:
        model: HF name / local path (pretrained) or a config dict (random init, for smoke tests).
        tokenizer: tokenizer name (defaults to ``model`` when that is a name; ``"byt5"`` needs no files).
        mode: ``output`` (CRUXEval-O: predict f(input)) or ``input`` (CRUXEval-I: find an input).
        cot: chain-of-thought prompts (1-shot) instead of direct (2-shot).
        n_samples: candidates per problem (paper: 10).
        temperature: 0 means greedy; paper: 0.2 for pass@1, 0.8 for pass@5.
        top_p: nucleus sampling (paper: 0.95).
        max_new_tokens: generation budget; the stop word ends answers early. (The official budget is a total
            length, prompt included: 1024 direct / 2048 CoT minus each prompt's tokens; cards/cruxeval.md.)
        stop: stop strings (official: ``[/ANSWER]``).
        ks: pass@k values to report (k <= n_samples).
        torch_dtype: e.g. ``bfloat16`` (paper) or None for the model's default.
        sandbox_workers / cpu_seconds / wall_timeout / memory_mb: execution limits per check
            (official timeout: 3 s).
        compat: ``strict`` (each answer is one expression; verdicts from trusted code only) or ``official``
            (the official harness's unparenthesised check, operator precedence included); see
            :func:`zoo.cruxeval.plan_check`.
    """

    def __init__(self, model: Union[str, dict[str, Any]] = "codellama/CodeLlama-7b-hf", tokenizer: Optional[str] = None,
                 mode: Literal["output", "input"] = "output", cot: bool = False, n_samples: int = 10,
                 temperature: float = 0.2, top_p: float = 0.95, max_new_tokens: int = 512,
                 stop: Optional[list[str]] = None, ks: Optional[list[int]] = None, torch_dtype: Optional[DType] = None,
                 sandbox_workers: int = 2, cpu_seconds: float = 3.0, wall_timeout: float = 5.0,
                 memory_mb: int = 1024, compat: Literal["strict", "official"] = "strict"):
        super().__init__()
        self.save_hyperparameters()
        self.setup_scoring(mode, ks, n_samples, compat)
        if temperature < 0 or not 0 < top_p <= 1:
            raise ZooError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
        if max_new_tokens < 1:  # else transformers' ValueError at the first batch
            raise ZooError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if tokenizer is None:
            if not isinstance(model, str):
                raise ZooError("a config-dict model needs an explicit tokenizer (e.g. 'byt5')")
            tokenizer = model
        self.lm = build_causal_lm(model, torch_dtype)
        self.tokenizer = load_tokenizer(tokenizer)
        self.stop = list(stop) if stop is not None else list(STOP_WORDS)

    # -- pieces usable without a Trainer ------------------------------------------------------------
    def prompt(self, row: dict[str, Any]) -> str:
        hp = self.hparams
        return make_prompt(row["code"], row["input"] if hp.mode == "output" else row["output"], hp.mode, hp.cot)

    def complete(self, rows: list[dict[str, Any]]) -> list[list[str] | None]:
        """n_samples completions per valid row (None for malformed rows, which get no prompt)."""
        hp = self.hparams
        valid = [i for i, r in enumerate(rows) if row_problem(r) is None]
        out: list[list[str] | None] = [None] * len(rows)
        if valid:
            sample = hp.temperature > 0  # greedy decoding is deterministic: decode once, repeat n times
            texts = generate(self.lm, self.tokenizer, [self.prompt(rows[i]) for i in valid], hp.max_new_tokens,
                             do_sample=sample, temperature=hp.temperature, top_p=hp.top_p,
                             # the official sampler is vLLM with top_k=-1 (inference/generation_arguments.py):
                             # nucleus sampling only, where transformers would apply its default top-k of 50
                             top_k=0, num_return_sequences=hp.n_samples if sample else 1, stop=self.stop)
            for i, t in zip(valid, texts):
                out[i] = t if sample else t * hp.n_samples
        return out

    def candidates(self, rows: list[dict[str, Any]]) -> tuple[list, list, list]:
        """Generate and parse: each row's answers and the reasons for the ones that could not be parsed."""
        hp = self.hparams
        completions = self.complete(rows)
        answers, reasons = [], []  # in row order, as score_answers takes them
        for comps in completions:
            a, r = extract_answers(comps or [], hp.mode, hp.cot)
            answers.append(a if comps is not None else None)
            reasons.append(r)
        return answers, reasons, completions

    # A pretrained base model is rebuilt from its name; only a random-init (config dict) model publishes weights.
    hub_strict = False

    def hub_state_dict(self):
        return {} if isinstance(self.hparams.model, str) else self.state_dict()

    def card_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tags": ["cruxeval", "code-reasoning"]}  # datasets: the datamodule's
        if isinstance(self.hparams.model, str):
            meta["base_model"] = self.hparams.model
        return meta
