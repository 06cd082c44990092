"""`ReGALModule`: the refactoring loop as a Lightning fit (one tuple per training step) and test-time synthesis
with and without the codebank as a Lightning test.

Nothing is trained by gradients: the "weights" are the codebank (helpers, their usage logs and test cases) and
the training programs the loop has seen, kept in a uint8 buffer ``regal_state`` (JSON) so that checkpoints,
resume and ``save_pretrained``/``from_pretrained`` carry them. Each training step calls a no-op optimizer step
so that Lightning's step counter counts tuples (``max_steps``, ``checkpoint_every_n_steps``, logging cadence).

Files written to the run directory: ``codebank/`` (``codebank.py``, ``success_info.json``,
``test_cases.jsonl``, as the official checkpoints), ``refactor_log.jsonl`` (one report per tuple),
``llm_cache.jsonl`` (every LLM answer; a rerun or ``zoo test`` replays them), ``test_records.jsonl``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, Optional

import lightning as L
import torch

from zoo.attached import attached_trainer
from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.regal.codebank import CodeBank
from zoo.regal.domains import get_domain
from zoo.regal.executor import Executor
from zoo.regal.llm import CachedLLM, ResponseCache, check_spec
from zoo.regal.refactor import Refactorer
from zoo.regal.synthesis import CONDITIONS, Synthesizer


class ReGALModule(HubMixin, L.LightningModule):
    """ReGAL (Stengel-Eskin, Prasad, Bansal; ICML 2024).

    Args:
        domain: ``logo``, ``date`` or ``textcraft``.
        refactorer: LLM that refactors during fit (see `zoo.regal.llm`; paper: gpt-3.5-turbo, temperature 0.2).
        synthesizer: LLM that writes test programs (paper: CodeLlama-13B-Instruct in 4-bit, temperature 0.2,
            top_p 0.9, 500 new tokens); defaults to ``refactorer``.
        helpers_first: ``NEW HELPERS`` before the programs in the answer format (official ``--helpers_second``
            makes it False for LOGO and Date).
        do_retry: one feedback retry per tuple for programs that do not verify (``--do_retry``).
        add_comments: LOGO only: comment programs before refactoring (``--add_comments``).
        refactor_every: rewrite failing helpers and drop uncalled ones before every n-th tuple (5).
        filter_every: prune by score before every n-th tuple; officially equal to ``refactor_every``, which
            turns pruning off during training (`recursive_resolve`), so ``filter_every == refactor_every`` or
            None prunes nothing during fit.
        retrieve_helpers: helpers shown per tuple (``20 // |tuple|`` per query).
        craft_retrieve: TextCraft: retrieve helpers with the task's crafting commands in the query.
        prune / prune_threshold / prune_min_uses: test-time pruning (keep iff score > 0 and uses >= 4).
        max_budget / budget_split: in-context examples and the refactored share (official defaults 5 / 0.6).
        top_helpers: helpers in the test prompt (20).
        use_success / use_thought: ``# Success rate`` lines and ``# Thought`` lines (``--use_success
            --use_thought``).
        conditions: which test conditions to run: ``baseline`` (no codebank) and/or ``regal``.
        textcraft_env: TextCraft environment (required for that domain): ``crafting_commands``.
        llm_cache: response cache file (default ``<run dir>/llm_cache.jsonl``).
        replay_only: fail instead of calling an LLM on a cache miss.
        sandbox_workers / cpu_seconds / wall_timeout / memory_mb: limits for each program.
        render_dpi: LOGO rendering resolution (official 100 dpi on a 20-inch figure = 2000 px).
    """

    single_process = "its codebank grows from every tuple it refactors; DDP's processes would each grow their own"

    def __init__(self, domain: Literal["logo", "date", "textcraft"] = "logo",
                 refactorer: Optional[dict[str, Any]] = None, synthesizer: Optional[dict[str, Any]] = None,
                 helpers_first: bool = False, do_retry: bool = True, add_comments: bool = False,
                 refactor_every: Optional[int] = 5, filter_every: Optional[int] = 5, retrieve_helpers: int = 20,
                 craft_retrieve: bool = False, prune: bool = True, prune_threshold: float = 0.0,
                 prune_min_uses: int = 4, max_budget: int = 5, budget_split: float = 0.6, top_helpers: int = 20,
                 use_success: bool = True, use_thought: bool = True, conditions: Optional[list[str]] = None,
                 textcraft_env: Optional[str] = None, llm_cache: Optional[str] = None, replay_only: bool = False,
                 sandbox_workers: int = 2, cpu_seconds: float = 5.0, wall_timeout: float = 10.0,
                 memory_mb: int = 1024, render_dpi: int = 100):
        super().__init__()
        self.save_hyperparameters()
        self.domain = get_domain(domain, textcraft_env, **({"dpi": render_dpi} if domain == "logo" else {}))
        if refactorer is None and synthesizer is None:
            raise ZooError("ReGAL needs an LLM: set model.init_args.refactorer (and optionally synthesizer)")
        self.refactorer_spec = check_spec(refactorer, "refactorer") if refactorer is not None else None
        self.synthesizer_spec = check_spec(synthesizer if synthesizer is not None else refactorer, "synthesizer")
        self.conditions = list(conditions) if conditions is not None else list(CONDITIONS)
        bad = [c for c in self.conditions if c not in CONDITIONS]
        if bad or not self.conditions:
            raise ZooError(f"conditions must be a non-empty subset of {list(CONDITIONS)}, got {conditions!r}")
        for name, v in (("refactor_every", refactor_every), ("filter_every", filter_every)):
            if v is not None and v < 1:
                raise ZooError(f"{name} must be >= 1 or null, got {v}")
        if not 0 <= budget_split <= 1 or max_budget < 0 or top_helpers < 0 or retrieve_helpers < 0:
            raise ZooError(f"need 0 <= budget_split <= 1 and max_budget, top_helpers, retrieve_helpers >= 0, got "
                           f"{budget_split}, {max_budget}, {top_helpers}, {retrieve_helpers}")
        if add_comments and domain != "logo":
            raise ZooError("add_comments is the LOGO step of the paper; set it only with domain: logo")
        self.automatic_optimization = False
        self.bank = CodeBank(self.domain.header_imports)
        self.examples: dict[str, dict[str, Any]] = {}  # training examples seen by the loop (original programs)
        self.reports: list[dict[str, Any]] = []
        self.register_buffer("regal_state", torch.zeros(0, dtype=torch.uint8))
        self.tick = torch.nn.Parameter(torch.zeros(1))  # the no-op optimizer's parameter (never changes)
        self._executor: Optional[Executor] = None
        self._cache: Optional[ResponseCache] = None
        self._llms: dict[str, CachedLLM] = {}
        self._refactorer: Optional[Refactorer] = None
        self._synth: Optional[Synthesizer] = None
        self._records: list[dict[str, Any]] = []

    # -- pieces usable without a Trainer ------------------------------------------------------------------
    @property
    def run_dir(self) -> Path:
        return Path(getattr(attached_trainer(self), "default_root_dir", "."))

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            hp = self.hparams
            self._executor = Executor(self.domain, hp.sandbox_workers, hp.cpu_seconds, hp.wall_timeout, hp.memory_mb)
        return self._executor

    def llm(self, role: str) -> CachedLLM:
        if role not in self._llms:
            if self._cache is None:
                self._cache = ResponseCache(self.hparams.llm_cache or self.run_dir / "llm_cache.jsonl")
            spec = self.refactorer_spec if role == "refactorer" else self.synthesizer_spec
            if spec is None:
                raise ZooError("fit needs model.init_args.refactorer (the LLM that refactors)")
            self._llms[role] = CachedLLM(spec, self._cache, role, self.hparams.replay_only)
        return self._llms[role]

    @property
    def refactorer(self) -> Refactorer:
        if self._refactorer is None:
            hp = self.hparams
            self._refactorer = Refactorer(self.domain, self.executor, self.llm("refactorer"), self.bank,
                                          self.examples, hp.helpers_first, hp.do_retry, hp.retrieve_helpers,
                                          hp.craft_retrieve)
        return self._refactorer

    def refactor_step(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        """One tuple: the periodic codebank pass when due, LOGO comments, then the tuple itself."""
        hp, r = self.hparams, len(self.reports)
        examples = [dict(e) for e in batch]
        for e in examples:
            self.examples.setdefault(e["id"], dict(e))
        out: dict[str, Any] = {"round": r, "ids": [e["id"] for e in examples]}
        if hp.filter_every and hp.filter_every != hp.refactor_every and (r + 1) % hp.filter_every == 0:
            out["filtered"] = self.bank.filter_during_training(r)
        if hp.refactor_every and (r + 1) % hp.refactor_every == 0:
            out["codebank_refactor"] = asdict(self.refactorer.refactor_codebank(r))
        kept = self.refactorer.add_comments(examples) if hp.add_comments else 0
        report = self.refactorer.refactor_tuple(examples, r)
        report.comments_kept = kept
        out.update(asdict(report), codebank_size=len(self.bank))
        self.reports.append(out)
        return out

    # -- Lightning: fit ---------------------------------------------------------------------------------
    def configure_optimizers(self):
        return torch.optim.SGD([self.tick], lr=0.0)

    def training_step(self, batch: list[dict[str, Any]], batch_idx: int) -> None:
        report = self.refactor_step(batch)
        self.optimizers().step()  # no gradient, no change: advances global_step by one tuple
        n = max(1, report["size"])
        for key, value, reduce in (("verified", report["verified"] / n, "mean"),
                                   ("verified_first_try", report["verified_first"] / n, "mean"),
                                   ("format_errors", float(bool(report["format_error"])), "sum"),
                                   ("helpers_added", float(len(report["helpers_added"])), "sum"),
                                   ("codebank_size", float(len(self.bank)), "max"),
                                   ("tuples", 1.0, "sum")):
            self.log(f"train/{key}", value, on_step=False, on_epoch=True, reduce_fx=reduce, batch_size=1)
        self._write_run_files(report)

    def _write_run_files(self, report: dict[str, Any]) -> None:
        if attached_trainer(self) is None or self.global_rank != 0:
            return
        self.bank.save(self.run_dir / "codebank", header=f"# ReGAL codebank ({self.domain.name})")
        with (self.run_dir / "refactor_log.jsonl").open("a") as fh:
            fh.write(json.dumps(report) + "\n")

    # -- Lightning: test ----------------------------------------------------------------------------------
    def on_test_start(self) -> None:
        hp = self.hparams
        dm = getattr(self.trainer, "datamodule", None)
        primitive = dm.train_examples() if dm is not None and hasattr(dm, "train_examples") else []
        primitive = primitive or list(self.examples.values())
        if not primitive:
            raise ZooError("no training programs for the in-context examples: use a ReGAL datamodule or fit first")
        bank = None
        self._pruned: list[str] = []
        if "regal" in self.conditions:
            bank = CodeBank.from_json(self.bank.to_json())
            if hp.prune:
                self._pruned = bank.prune(hp.prune_threshold, hp.prune_min_uses)
        self._synth = Synthesizer(self.domain, self.executor, self.llm("synthesizer"), hp.max_budget,
                                  hp.budget_split, hp.top_helpers, hp.use_success, hp.use_thought)
        # refactored examples come from the unpruned codebank's test cases (official: the saved test_cases.jsonl)
        self._synth.prepare(primitive, bank, self.bank if bank is not None else None)
        self._records = []

    def test_step(self, batch: list[dict[str, Any]], batch_idx: int) -> None:
        golds = self._synth.gold(batch)
        for cond in self.conditions:
            records = self._synth.run(batch, cond, golds)
            self._records += records
            self.log(f"test/acc_{cond}", 100.0 * sum(r["correct"] for r in records) / len(records),
                     on_step=False, on_epoch=True, batch_size=len(records))

    def on_test_epoch_end(self) -> None:
        acc = {c: [r["correct"] for r in self._records if r["condition"] == c] for c in self.conditions}
        if len(self.conditions) == 2 and all(acc.values()):
            gain = 100.0 * (sum(acc["regal"]) / len(acc["regal"]) - sum(acc["baseline"]) / len(acc["baseline"]))
            self.log("test/gain", gain)
        if "regal" in self.conditions:
            self.log("test/codebank_size", float(len(self._synth.bank) if self._synth.bank is not None else 0))
            self.log("test/helpers_pruned", float(len(self._pruned)))
        if self.global_rank == 0:
            with (self.run_dir / "test_records.jsonl").open("w") as fh:
                for r in self._records:
                    fh.write(json.dumps(r) + "\n")

    def teardown(self, stage: str) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    # -- state: checkpoints and the Hub -------------------------------------------------------------------
    def _state_tensor(self) -> torch.Tensor:
        state = {"codebank": self.bank.to_json(), "examples": list(self.examples.values()), "reports": self.reports}
        return torch.frombuffer(bytearray(json.dumps(state).encode()), dtype=torch.uint8).clone()

    def load_state(self, blob: torch.Tensor) -> None:
        try:
            state = json.loads(bytes(blob.cpu().numpy().tobytes()).decode())
            bank = CodeBank.from_json(state["codebank"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise ZooError(f"the checkpoint's regal_state is not a ReGAL state ({type(e).__name__})") from e
        self.bank.helpers, self.bank.imports, self.bank.removed = bank.helpers, bank.imports, bank.removed
        self.examples.clear()
        self.examples.update({e["id"]: e for e in state.get("examples", [])})
        self.reports[:] = state.get("reports", [])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["state_dict"]["regal_state"] = self._state_tensor()

    def hub_state_dict(self) -> dict[str, torch.Tensor]:
        return {"regal_state": self._state_tensor(), "tick": self.tick.detach().clone()}

    def prepare_state_dict_load(self, state_dict: dict[str, torch.Tensor]) -> None:
        blob = state_dict.get("regal_state")
        if blob is not None and blob.numel():
            self.load_state(blob)
            self.regal_state = torch.zeros_like(blob)  # matching shape, so the strict load goes through

    def card_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tags": ["regal", "program-synthesis", "refactoring", self.domain.name]}
        s = self.synthesizer_spec
        meta["base_model"] = s["model"] if s["backend"] == "hf" and isinstance(s["model"], str) else None
        return meta
