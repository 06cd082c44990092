"""`UnlearningModule`: GA, SGA, TA, TAU and SGATAU on any HF causal LM, wired to Lightning.

One training epoch = one pass over the forget set D_f (Jang et al.: batch = |D_f|, so one step per epoch).
The unlearning target comes from the unseen set: thresholds gamma_MA, gamma_EL = mean MA / mean EL_n of the
*initial* model theta_0 over the unseen sequences (or fixed numbers given in the config, as Jang et al. do).

Phases (a small state machine, saved in checkpoints):
  ascend   -- ga: -NLL on every x in D_f; stop when mean MA <= gamma_MA and mean EL_n <= gamma_EL.
              sga: -NLL only on x with g(x) = MA(x) > gamma_MA (scored in the same forward pass); stop when
              no forget sequence is above gamma_MA.
  finetune -- ta: fine-tune on D_f for `ta_finetune_epochs`, then theta_u = theta_0 - lambda (theta_ft - theta_0).
              tau: the same on the outliers of D_f only, repeated (new theta_0 = theta_u) while outliers remain,
              up to `tau_max_rounds` rounds; lambda: the smallest (of the grid) that leaves no outlier.
              sgatau: one TAU round whose lambda only has to bring the *mean* MA / EL_n below the unseen levels
              (a gentle, average-based step), then SGA on the outliers left until there is none.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal, Optional, Union

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.lm import build_causal_lm
from zoo.unlearning.algorithms import (gradient_ascent_loss, lm_loss, select_outliers, snapshot,
                                       task_arithmetic, task_vector)
from zoo.unlearning.metrics import (SequenceScores, check_disjoint, check_window, count_outliers, score_sequences,
                                    unseen_threshold)

METHODS = ("ga", "sga", "ta", "tau", "sgatau")

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
        weight_decay: float = 0.0,
        el_n: int = 10,
        ma_threshold: Optional[float] = None,
        el_threshold: Optional[float] = None,
        threshold_std: float = 0.0,
        ta_lambda: float = 1.0,
        ta_lambda_grid: Optional[list[float]] = None,
        ta_finetune_epochs: int = 1,
        tau_max_rounds: int = 3,
        eval_batch_size: int = 32,
        torch_dtype: Optional[str] = None,
        model_kwargs: Optional[dict] = None,
    ):
        """
        Args:
            model: Hub name / local path of a causal LM (e.g. EleutherAI/gpt-neo-125m) or a config dict
                (random init; the embedded datamodule then memorizes its forget set into it).
            method: ga | sga | ta | tau | sgatau.
            lr: Adam learning rate (paper and Jang et al.: 5e-5).
            weight_decay: AdamW decoupled weight decay (0 keeps a GA step exactly minus a fine-tuning step).
            el_n: n of the extraction likelihood EL_n (10).
            ma_threshold / el_threshold: fixed unseen-data levels; None = measured on the unseen set with theta_0.
            threshold_std: measured thresholds are mean + threshold_std * std over the unseen set (0 = the mean).
            ta_lambda: task-arithmetic scaling lambda.
            ta_lambda_grid: if set, the smallest lambda of the grid meeting the method's target is used
                (TA and SGATAU: mean MA / EL_n at most the thresholds; TAU: no outlier left), else the largest.
            ta_finetune_epochs: epochs of fine-tuning on D_f (or its outliers) that build the task vector.
            tau_max_rounds: TAU subtraction rounds at most.
            eval_batch_size: batch for scoring sequences (MA/EL).
            torch_dtype: model dtype (float32 default; bfloat16 for large models).
            model_kwargs: extra config values, e.g. dropout 0 as in Jang et al.
        """
        super().__init__()
        self.save_hyperparameters()
        if method not in METHODS:
            raise ZooError(f"unknown unlearning method {method!r}; use one of {METHODS}")
        if ta_finetune_epochs < 1 or tau_max_rounds < 1:
            raise ZooError("ta_finetune_epochs and tau_max_rounds must be >= 1")
        kw = dict(model_kwargs or {})
        self.model = build_causal_lm({**model, **kw} if isinstance(model, dict) else model, torch_dtype,
                                     **({} if isinstance(model, dict) else kw))
        nan = float("nan")
        self.register_buffer("thresholds", torch.tensor([
            nan if ma_threshold is None else ma_threshold, nan if el_threshold is None else el_threshold],
            dtype=torch.float64))
        self.phase = "finetune" if method in ("ta", "tau", "sgatau") else "ascend"
        self.round, self.round_epoch, self.lambdas = 0, 0, []
        self._base: dict[str, torch.Tensor] | None = None
        self._selected: torch.Tensor | None = None
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
        """gamma_MA, gamma_EL: fixed by the config or measured once on the unseen set with the initial model."""
        if torch.isnan(self.thresholds).any():
            unseen = self._dm().unseen_set
            s = self.evaluate_memorization("unseen", unseen, with_el=bool(torch.isnan(self.thresholds[1])))
            k = self.hparams.threshold_std
            if torch.isnan(self.thresholds[0]):
                self.thresholds[0] = unseen_threshold(s.ma, k)
            if torch.isnan(self.thresholds[1]):
                self.thresholds[1] = unseen_threshold(s.el, k)
            rank_zero_info(f"unlearning thresholds from the unseen set: MA {self.thresholds[0]:.4f} "
                           f"EL_{self.hparams.el_n} {self.thresholds[1]:.4f}")
        return {"ma": float(self.thresholds[0]), "el": float(self.thresholds[1])}

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
        # Jang et al.: Adam, constant lr 5e-5
        return torch.optim.AdamW(self.model.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    # ---------------------------------------------------------------------------------------------- phases
    def _forget_ma(self) -> torch.Tensor:
        return self.evaluate_memorization("forget", self._dm().forget_set, with_el=False).ma

    def on_train_epoch_start(self) -> None:
        if self.phase != "finetune" or self.round_epoch:
            return
        # a new task-arithmetic round: theta_0 of this round, the sequences its task vector is fine-tuned on
        if self.hparams.method == "ta":
            self._selected = torch.ones(len(self._dm().forget_set), dtype=torch.bool)
        else:
            self._selected = select_outliers(self._forget_ma(), self.unlearning_thresholds()["ma"])
        if not self._selected.any():
            self.phase = "done" if self.hparams.method == "tau" else "ascend"
            return
        self._base = snapshot(self.model.named_parameters())
        for opt in self.trainer.optimizers:  # each task vector is a fresh fine-tuning run
            opt.state = defaultdict(dict)

    def training_step(self, batch: dict, batch_idx: int):
        if self.phase == "done":
            return None
        ids, mask = batch["input_ids"], batch["attention_mask"]
        logits = self.model(input_ids=ids, attention_mask=mask).logits
        if self.phase == "ascend":
            select = None
            if self.hparams.method != "ga":  # SGA: score g(x) = MA in this forward pass, ascend on outliers only
                thr = self.unlearning_thresholds()["ma"]
                select = lambda ma: select_outliers(ma, thr)  # noqa: E731
            loss, ma, k = gradient_ascent_loss(logits, ids, mask, select)
        else:
            select = self._selected[batch["index"].cpu()].to(ids.device)
            loss, ma, k = lm_loss(logits, ids, mask, select)
        self.log("train/selected", float(k), on_step=True, on_epoch=True, batch_size=ids.shape[0])
        if loss is None:  # nothing above the threshold: no update at all (Lightning skips the optimizer step)
            return None
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=ids.shape[0])
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self.phase == "finetune" and self.trainer.is_last_batch:
            self.round_epoch += 1
            if self.round_epoch >= self.hparams.ta_finetune_epochs:
                self._subtract_task_vector()

    @torch.no_grad()
    def _subtract_task_vector(self) -> None:
        base = self._base
        params = {n: p.detach() for n, p in self.model.named_parameters()}  # views: written in place below
        tau = task_vector(params, base)  # the only new copy of the model
        grid = self.hparams.ta_lambda_grid or [self.hparams.ta_lambda]
        for lam in sorted(grid):
            task_arithmetic(base, tau, lam, out=params)
            self._version += 1
            if self._target_met(final=False):
                break
        self.lambdas.append(lam)
        self.log("train/ta_lambda", float(lam))
        self.round += 1
        self.round_epoch = 0
        self._base = None
        m = self.hparams.method
        left = count_outliers(self._forget_ma(), self.unlearning_thresholds()["ma"])
        if m == "ta" or left == 0:
            self.phase = "done"
        elif m == "sgatau":
            self.phase = "ascend"
        elif self.round >= self.hparams.tau_max_rounds:
            self.phase = "done"
        rank_zero_info(f"{m}: round {self.round} lambda {lam} -> {left} outlier(s) left; next phase {self.phase}")

    def _target_met(self, final: bool = True) -> bool:
        """ga / ta, and the lambda of sgatau's task-arithmetic step: Jang et al.'s rule (mean MA and mean EL_n of
        D_f below the unseen levels); sga / tau / sgatau's SGA phase: c(D_f) = 0 (no forget sequence above the
        unseen MA level)."""
        thr = self.unlearning_thresholds()
        f = self._dm().forget_set
        if self.hparams.method in ("ga", "ta") or (self.hparams.method == "sgatau" and not final):
            # "below the unseen level" read as <=, the complement of c(D_f)'s strict ">" (an unseen EL level of
            # exactly 0 would otherwise never be reached); the cheap MA test first: EL_n needs generation
            if float(self._forget_ma().mean()) > thr["ma"]:
                return False
            s = self.evaluate_memorization("forget", f, with_el=True)
            return float(s.el.mean()) <= thr["el"]
        return count_outliers(self._forget_ma(), thr["ma"]) == 0

    def on_train_epoch_end(self) -> None:
        if self.phase == "done" or (self.phase == "ascend" and self._target_met()):
            self.trainer.should_stop = True
        if self.trainer.should_stop:
            rank_zero_info(f"{self.hparams.method}: stopping after epoch {self.current_epoch}")

    # ------------------------------------------------------------------------------------------------ test
    def test_step(self, batch: dict, batch_idx: int) -> None:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        loss, ma, _ = lm_loss(self.model(input_ids=ids, attention_mask=mask).logits, ids, mask)
        self.log("test/forget_nll", loss, batch_size=ids.shape[0])

    # ------------------------------------------------------------------------------------------ checkpoint
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["unlearning_state"] = {"phase": self.phase, "round": self.round, "round_epoch": self.round_epoch,
                                          "lambdas": list(self.lambdas), "base": self._base,
                                          "selected": self._selected}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        st = checkpoint.get("unlearning_state")
        if st:
            self.phase, self.round, self.round_epoch = st["phase"], st["round"], st["round_epoch"]
            self.lambdas, self._base, self._selected = st["lambdas"], st["base"], st["selected"]

    def card_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tags": ["unlearning", "memorization", self.hparams.method]}
        if isinstance(self.hparams.model, str):
            meta["base_model"] = self.hparams.model
        return meta
