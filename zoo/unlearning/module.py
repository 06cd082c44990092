"""`UnlearningModule`: GA, SGA, TA and TAU on any HF causal LM, wired to Lightning.

Follows the paper's official code (github.com/GeorgeOctavian/selective_unlearning; read for reference, nothing
copied). One training epoch = one pass over the forget set D_f. Levels, all from the unseen set scored with the
*initial* model theta_0 unless fixed in the config (the official configs fix them for GPT-Neo on the Pile):
  gamma_MA, gamma_EL   the unseen mean MA / EL_n: the stopping rule's target (official ma_threshold).
  low, high            the MA outlier band (mean -/+ `outlier_std` std; official analysis 0.15 / 0.60): c(D_f).
  sga_threshold        SGA selects x with MA(x) >= it (default: high; official mem_threshold 0.70).
  switch_ma            TA / TAU leave the ascent phase once mean MA < it (official first_threshold 0.9 / 0.5).

Phases (a small state machine, saved in checkpoints):
  ascend   -- ga: -NLL on every x of the batch.  sga, tau: -NLL only on the selected x (MA from the same forward
              pass).  ta: as ga.  Every method stops as soon as the stopping rule holds (mean MA <= gamma_MA and,
              with `stop_on_el`, mean EL_n <= gamma_EL), checked before the first step and after every epoch;
              ta / tau switch to `finetune` once mean MA < switch_ma.
  finetune -- (ta, tau) +NLL on all of D_f from theta_s (the weights at the switch); after every epoch the model
              holds the edit theta_s - lambda (theta - theta_s) (so the metrics callback and checkpoints see it);
              if it meets the stopping rule fitting ends there, otherwise theta is restored and fine-tuning goes on.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal, Optional, Union

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.lm import build_causal_lm
from zoo.unlearning.algorithms import gradient_ascent_loss, lm_loss, select_for_ascent, snapshot, task_arithmetic
from zoo.unlearning.metrics import (SequenceScores, check_disjoint, check_window, outlier_band, score_sequences,
                                    unseen_threshold)

METHODS = ("ga", "sga", "ta", "tau")
# The paper's TAU already is SGA followed by task arithmetic (official run name "sga+ta"); "sgatau" names it too.
ALIASES = {"sgatau": "tau"}
TA_LAMBDA = {"ta": 3.0, "tau": 1.0}  # official first_coef -3 (TA) and -1 (TAU)
TA_SWITCH = {"ta": 0.9}  # official first_threshold of TA; TAU's 0.5 is relative here (see `switch_level`)

TINY_GPT_NEO = {"model_type": "gpt_neo", "vocab_size": 384, "hidden_size": 64, "num_layers": 2, "num_heads": 4,
                "attention_types": [[["global", "local"], 1]], "window_size": 64, "max_position_embeddings": 256,
                "intermediate_size": 256, "resid_dropout": 0.0, "embed_dropout": 0.0, "attention_dropout": 0.0,
                "bos_token_id": 1, "eos_token_id": 1, "pad_token_id": 0}


class UnlearningModule(HubMixin, L.LightningModule):
    def __init__(
        self,
        model: Union[str, dict] = TINY_GPT_NEO,
        method: Literal["ga", "sga", "ta", "tau", "sgatau"] = "ga",
        lr: float = 5e-5,
        betas: tuple[float, float] = (0.9, 0.98),
        weight_decay: float = 0.0,
        el_n: int = 10,
        ma_threshold: Optional[float] = None,
        el_threshold: Optional[float] = None,
        threshold_std: float = 0.0,
        outlier_low: Optional[float] = None,
        outlier_high: Optional[float] = None,
        outlier_std: float = 2.0,
        sga_threshold: Optional[float] = None,
        ascend_on_top: bool = True,
        switch_ma: Optional[float] = None,
        ta_lambda: Optional[float] = None,
        ta_lambda_grid: Optional[list[float]] = None,
        stop_on_el: bool = True,
        eval_batch_size: int = 32,
        torch_dtype: Optional[str] = None,
        model_kwargs: Optional[dict] = None,
    ):
        """
        Args:
            model: Hub name / local path of a causal LM (e.g. EleutherAI/gpt-neo-125m) or a config dict
                (random init; the embedded datamodule then memorizes its forget set into it).
            method: ga | sga | ta | tau ("sgatau" = tau: the paper's TAU is SGA followed by TA).
            lr, betas: Adam (official: lr 5e-5, betas (0.9, 0.98)).
            weight_decay: AdamW decoupled weight decay (0 keeps a GA step exactly minus a fine-tuning step).
            el_n: n of the extraction likelihood EL_n (10).
            ma_threshold / el_threshold: fixed stopping levels gamma; None = unseen mean (+ threshold_std std).
            outlier_low / outlier_high: the MA band outside which a forget sequence is an outlier; None = unseen
                mean -/+ outlier_std std (official analysis for GPT-Neo: 0.15 / 0.60).
            sga_threshold: SGA / TAU ascend on x with MA(x) >= it; None = the band's high edge (official 0.70).
            ascend_on_top: also ascend on each batch's most memorized x (official); False leaves a batch with no
                x above sga_threshold untouched (and fitting ends after an epoch without any update).
            switch_ma: TA / TAU go from gradient ascent to task arithmetic once mean MA < it. None: 0.9 for TA
                (official) and, for TAU, midway between gamma_MA and sga_threshold (official 0.5 with GPT-Neo's
                0.33 and 0.70).
            ta_lambda: task-arithmetic scaling (None: 3 for TA, 1 for TAU, the official coefficients).
            ta_lambda_grid: if set, each check uses the smallest lambda of the grid that meets the stopping rule.
            stop_on_el: Jang et al.'s rule also needs mean EL_n <= gamma_EL (the official code of the paper tests MA
                alone: set False to match it).
            eval_batch_size: batch for scoring sequences (MA/EL).
            torch_dtype: model dtype (float32 default; bfloat16 for large models).
            model_kwargs: extra config values, e.g. dropout 0 as in Jang et al.
        """
        super().__init__()
        self.save_hyperparameters()
        method = ALIASES.get(method, method)
        if method not in METHODS:
            raise ZooError(f"unknown unlearning method {self.hparams.method!r}; use one of {METHODS} "
                           f"(or {tuple(ALIASES)})")
        self.method = method
        lams = list(ta_lambda_grid or []) + ([] if ta_lambda is None else [ta_lambda])
        if any(v <= 0 for v in lams):
            raise ZooError(f"task-arithmetic lambda must be > 0 (it scales the subtracted task vector), got {lams}")
        if outlier_low is not None and outlier_high is not None and outlier_low > outlier_high:
            raise ZooError(f"outlier_low {outlier_low} is above outlier_high {outlier_high}")
        if not all(0 <= b < 1 for b in betas):
            raise ZooError(f"Adam betas must lie in [0, 1), got {tuple(betas)}")
        kw = dict(model_kwargs or {})
        self.model = build_causal_lm({**model, **kw} if isinstance(model, dict) else model, torch_dtype,
                                     **({} if isinstance(model, dict) else kw))
        nan = float("nan")
        fixed = (ma_threshold, el_threshold, outlier_low, outlier_high)
        self.register_buffer("thresholds", torch.tensor([nan if v is None else v for v in fixed], dtype=torch.float64))
        self.phase = "ascend"
        self.lambdas: list[float] = []
        self._base: dict[str, torch.Tensor] | None = None  # theta_s of task arithmetic
        self._theta: dict[str, torch.Tensor] | None = None  # fine-tuned weights while the model holds the edit
        self._updates = 0
        self._memo: dict = {}
        self._version = 0  # bumped whenever weights change outside an optimizer step (task arithmetic)

    # ------------------------------------------------------------------------------------------ data access
    def _dm(self):
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or getattr(dm, "forget_set", None) is None:
            raise ZooError("UnlearningModule needs a datamodule with forget_set / unseen_set "
                           "(e.g. datamodules.memorization.MemorizationDataModule)")
        return dm

    def evaluate_memorization(self, name: str, data, with_el: bool = True) -> SequenceScores:
        """Per-sequence MA / NLL / EL_n of a MemorizationSet with the current weights, memoized per weight
        version so that the metrics callback and the stopping rule share one (costly) EL evaluation."""
        key = (name, with_el, self.global_step, self._version)
        hit = self._memo.get(key) or (self._memo.get((name, True, self.global_step, self._version))
                                      if not with_el else None)
        if hit is not None:
            return hit
        s = score_sequences(self.model, data.input_ids, data.attention_mask, self.hparams.el_n if with_el else None,
                            batch_size=self.hparams.eval_batch_size)
        self._memo = {k: v for k, v in self._memo.items() if k[2:] == key[2:]}
        self._memo[key] = s
        return s

    def unlearning_thresholds(self) -> dict[str, float]:
        """gamma_MA, gamma_EL (`ma`, `el`) and the outlier band (`low`, `high`): fixed by the config or measured
        once on the unseen set with the initial model."""
        if torch.isnan(self.thresholds).any():
            unseen = self._dm().unseen_set
            s = self.evaluate_memorization("unseen", unseen, with_el=bool(torch.isnan(self.thresholds[1])))
            measured = (unseen_threshold(s.ma, self.hparams.threshold_std),
                        unseen_threshold(s.el, self.hparams.threshold_std) if s.el is not None else None,
                        *outlier_band(s.ma, self.hparams.outlier_std))
            for i, v in enumerate(measured):
                if torch.isnan(self.thresholds[i]):
                    self.thresholds[i] = v
            t = self.thresholds.tolist()
            rank_zero_info(f"unlearning levels (unseen set): MA {t[0]:.4f} EL_{self.hparams.el_n} {t[1]:.4f}, "
                           f"outlier band [{t[2]:.4f}, {t[3]:.4f}]")
        ma, el, low, high = self.thresholds.tolist()
        return {"ma": ma, "el": el, "low": low, "high": high}

    def sga_level(self) -> float:
        t = self.hparams.sga_threshold
        return self.unlearning_thresholds()["high"] if t is None else float(t)

    def switch_level(self) -> float:
        if self.hparams.switch_ma is not None:
            return float(self.hparams.switch_ma)
        if self.method == "ta":
            return TA_SWITCH["ta"]
        return 0.5 * (self.unlearning_thresholds()["ma"] + self.sga_level())

    # ------------------------------------------------------------------------------------------------ setup
    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        dm = self._dm()
        if hasattr(dm, "memorize"):
            dm.memorize(self.model)  # embedded source: theta_0 = the memorized tiny LM
        f, u = dm.forget_set, dm.unseen_set
        check_window(f.lengths, self.hparams.el_n, f.doc_ids, "forget")
        check_window(u.lengths, self.hparams.el_n, u.doc_ids, "unseen")
        check_disjoint(f.sequences(), u.sequences(), f.doc_ids)

    def on_fit_start(self) -> None:
        self.unlearning_thresholds()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                 weight_decay=self.hparams.weight_decay)

    # ---------------------------------------------------------------------------------------------- phases
    def _forget_ma(self) -> torch.Tensor:
        return self.evaluate_memorization("forget", self._dm().forget_set, with_el=False).ma

    def _target_met(self) -> bool:
        """The stopping rule (Jang et al.; the paper's code keeps it): mean MA of D_f at most gamma_MA and, with
        `stop_on_el`, mean EL_n at most gamma_EL. "Below" is read as "<=": a small model's unseen EL_n is often
        exactly 0. The cheap MA test first: EL_n needs generation."""
        thr = self.unlearning_thresholds()
        if float(self._forget_ma().mean()) > thr["ma"]:
            return False
        if not self.hparams.stop_on_el:
            return True
        return float(self.evaluate_memorization("forget", self._dm().forget_set).el.mean()) <= thr["el"]

    def _stop(self, why: str) -> None:
        self.phase = "done"
        self.trainer.should_stop = True
        rank_zero_info(f"{self.method}: {why}; stopping after epoch {self.current_epoch}")

    def _start_task_arithmetic(self) -> None:
        self.phase = "finetune"
        self._base = snapshot(self.model.named_parameters())  # theta_s
        for opt in self.trainer.optimizers:  # the task vector is a fine-tuning run of its own
            opt.state = defaultdict(dict)
        rank_zero_info(f"{self.method}: task arithmetic from epoch {self.current_epoch} (mean MA "
                       f"{float(self._forget_ma().mean()):.4f} < {self.switch_level():.4f})")

    def _check_ascent(self, started: bool) -> None:
        """Before the first step (`started` False) and after each ascent epoch: stop on the rule (before any step:
        nothing to unlearn, no update at all), on an epoch without any update, or switch TA / TAU to task
        arithmetic."""
        if self._target_met():
            self._stop("mean memorization at the unseen level" if started else
                       "the forget set is already at the unseen level")
        elif started and self._updates == 0:
            self._stop(f"no forget sequence at or above the SGA threshold {self.sga_level():.4f}")
        elif self.method in ("ta", "tau") and float(self._forget_ma().mean()) < self.switch_level():
            self._start_task_arithmetic()

    def on_train_start(self) -> None:
        if self.phase == "ascend":
            self._check_ascent(started=False)

    def on_train_epoch_start(self) -> None:
        self._updates = 0
        if self.phase == "finetune" and self._theta is not None:  # back from the edit to the fine-tuned weights
            with torch.no_grad():
                for n, p in self.model.named_parameters():
                    p.copy_(self._theta[n])
            self._theta = None
            self._version += 1

    def training_step(self, batch: dict, batch_idx: int):
        if self.phase == "done":
            return None
        ids, mask = batch["input_ids"], batch["attention_mask"]
        logits = self.model(input_ids=ids, attention_mask=mask).logits
        if self.phase == "finetune":
            loss, ma, k = lm_loss(logits, ids, mask)
        else:
            select = None
            if self.method in ("sga", "tau"):  # score g(x) = MA in this forward pass, ascend on the selected x
                thr, top = self.sga_level(), self.hparams.ascend_on_top
                select = lambda ma: select_for_ascent(ma, thr, top)  # noqa: E731
            loss, ma, k = gradient_ascent_loss(logits, ids, mask, select)
        self.log("train/selected", float(k), on_step=True, on_epoch=True, batch_size=ids.shape[0])
        if loss is None:  # nothing selected: no update at all (Lightning skips the optimizer step)
            return None
        self._updates += 1
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=ids.shape[0])
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        # at the end of the epoch's last batch, so that checkpoints and the metrics callback see the final weights
        if not self.trainer.is_last_batch or self.phase == "done":
            return
        if self.phase == "finetune":
            self._edit()
        else:
            self._check_ascent(started=True)

    def _lambdas(self) -> list[float]:
        lam = self.hparams.ta_lambda
        return sorted(self.hparams.ta_lambda_grid or [TA_LAMBDA[self.method] if lam is None else lam])

    @torch.no_grad()
    def _edit(self) -> None:
        """theta_u = theta_s - lambda (theta - theta_s) into the model; kept (and fitting ends) when it meets the
        stopping rule, else theta comes back at the next epoch's start (the official code edits before each
        validation and restores after it)."""
        params = {n: p.detach() for n, p in self.model.named_parameters()}  # written in place below
        self._theta = snapshot(self.model.named_parameters())
        for lam in self._lambdas():
            task_arithmetic(self._base, self._theta, lam, out=params)
            self._version += 1
            if self._target_met():
                self.lambdas.append(lam)
                self.log("train/ta_lambda", float(lam))
                self._base = self._theta = None
                self._stop(f"task arithmetic with lambda {lam} reaches the unseen level")
                return
        self.log("train/ta_lambda", float(lam))

    def on_train_end(self) -> None:
        if self.phase == "finetune":
            rank_zero_warn(f"{self.method}: fitting ended before the task-arithmetic edit met the stopping "
                           f"rule; the model keeps the edit with lambda {self._lambdas()[-1]}")

    # ------------------------------------------------------------------------------------------------ test
    def test_step(self, batch: dict, batch_idx: int) -> None:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        loss, ma, _ = lm_loss(self.model(input_ids=ids, attention_mask=mask).logits, ids, mask)
        self.log("test/forget_nll", loss, batch_size=ids.shape[0])

    # ------------------------------------------------------------------------------------------ checkpoint
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["unlearning_state"] = {"phase": self.phase, "lambdas": list(self.lambdas), "base": self._base,
                                          "theta": self._theta}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        st = checkpoint.get("unlearning_state")
        if st:
            self.phase, self.lambdas, self._base, self._theta = st["phase"], st["lambdas"], st["base"], st["theta"]

    def card_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tags": ["unlearning", "memorization", self.method]}
        if isinstance(self.hparams.model, str):
            meta["base_model"] = self.hparams.model
        return meta
