"""`UnlearningModule` (GA, SGA, TA, TAU on any HF causal LM) and `MemorizeModule` (the stage that makes theta_0 of
the embedded setting), wired to Lightning.

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

Where theta_0 comes from: with the paper's GPT-Neo it is the pretrained model itself (it memorized the Pile). In the
embedded CPU setting it is a stage of its own, each an ordinary `zoo fit` run (`configs/sweeps/unlearning_markov.yaml`
chains them):
  memorize   MemorizeModule trained (+NLL) on the datamodule's training mix (`train_set: mix`): theta_0.
  reference  the same on the background alone (`forget_fraction: 0`), never seeing D_f, read against theta_0's levels
             (`levels_from`): what an ideal unlearner would reach.
  unlearn    UnlearningModule starting from theta_0 (`init_from: <memorize run>/checkpoints/last.ckpt`).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal, Optional, Union

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from zoo.errors import ZooError
from zoo.hub import HubMixin, check_state_fits, load_weights, resolve_weights
from zoo.lm import DType, build_causal_lm
from zoo.unlearning.algorithms import gradient_ascent_loss, lm_loss, select_for_ascent, snapshot, task_arithmetic
from zoo.unlearning.metrics import (SequenceScores, check_disjoint, check_el_n, check_window, outlier_band,
                                    score_sequences, unseen_threshold, unseen_thresholds)

METHODS = ("ga", "sga", "ta", "tau")
# The paper's TAU already is SGA followed by task arithmetic (official run name "sga+ta"); "sgatau" names it too.
ALIASES = {"sgatau": "tau"}
TA_LAMBDA = {"ta": 3.0, "tau": 1.0}  # official first_coef -3 (TA) and -1 (TAU)
TA_SWITCH = {"ta": 0.9}  # official first_threshold of TA; TAU's 0.5 is relative here (see `switch_level`)

TINY_GPT_NEO = {"model_type": "gpt_neo", "vocab_size": 384, "hidden_size": 64, "num_layers": 2, "num_heads": 4,
                "attention_types": [[["global", "local"], 1]], "window_size": 64, "max_position_embeddings": 256,
                "intermediate_size": 256, "resid_dropout": 0.0, "embed_dropout": 0.0, "attention_dropout": 0.0,
                "bos_token_id": 1, "eos_token_id": 1, "pad_token_id": 0}


MEMORIZE_FIRST = "run the memorize stage first (configs/unlearning_memorize_markov.yaml)"


def load_lm_weights(lm: torch.nn.Module, path: str, what: str) -> Path:
    """Load into `lm` the causal LM (`model.*`) of a MemorizeModule / UnlearningModule checkpoint or Hub directory,
    only if it fits exactly (same architecture: every weight present, same shapes)."""
    p = resolve_weights(path, what, MEMORIZE_FIRST)
    state = load_weights(p)
    prefix = "model."
    weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    check_state_fits(lm.state_dict(), weights, f"{what} {path!r}", "give the same `model` as that run")
    lm.load_state_dict(weights)
    return p


class _CausalLMStage(HubMixin, L.LightningModule):
    """What both stages share: the causal LM `self.model`, its per-sequence scores on the datamodule's sets (memoized
    per weight version and shared with `callbacks.unlearning_metrics.UnlearningMetrics`), the forget-set NLL at
    test and the card metadata. Subclasses give `unlearning_thresholds()`."""

    def _build_lm(self, model, torch_dtype, model_kwargs) -> None:
        kw = dict(model_kwargs or {})
        self.model = build_causal_lm({**model, **kw} if isinstance(model, dict) else model, torch_dtype,
                                     **({} if isinstance(model, dict) else kw))
        self._memo: dict = {}
        self._version = 0  # bumped whenever weights change outside an optimizer step (task arithmetic)

    def _dm(self):
        try:
            dm = self.trainer.datamodule
        except RuntimeError:  # not attached to a Trainer
            dm = None
        if dm is None or getattr(dm, "forget_set", None) is None:
            raise ZooError(f"{type(self).__name__} needs a datamodule with forget_set / unseen_set "
                           "(e.g. datamodules.memorization.MemorizationDataModule)")
        return dm

    def _check_train_set(self, wanted: str) -> None:
        """The datamodule must serve what this stage trains on (`train_set` of MemorizationDataModule)."""
        got = getattr(self._dm(), "hparams", {}).get("train_set", wanted)
        if got != wanted:
            raise ZooError(f"{type(self).__name__} trains on the datamodule's train_set {wanted!r}, but it serves "
                           f"{got!r}; set data.init_args.train_set: {wanted}")

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

    def _check_sets(self) -> None:
        dm = self._dm()
        f, u = dm.forget_set, dm.unseen_set
        check_window(f.lengths, self.hparams.el_n, f.doc_ids, "forget")
        check_window(u.lengths, self.hparams.el_n, u.doc_ids, "unseen")
        check_disjoint(f.sequences(), u.sequences(), f.doc_ids)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        loss, ma, _ = lm_loss(self.model(input_ids=ids, attention_mask=mask).logits, ids, mask)
        self.log("test/forget_nll", loss, batch_size=ids.shape[0])

    def _card_tags(self) -> list[str]:
        return ["unlearning", "memorization"]

    def card_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tags": self._card_tags()}
        meta["base_model"] = self.hparams.model if isinstance(self.hparams.model, str) else None
        return meta


class MemorizeModule(_CausalLMStage):
    """The memorize stage of the embedded setting: a causal LM trained (+NLL, AdamW) on the datamodule's training mix
    (`train_set: mix`: background text with the forget sequences repeated at graded rates), so that it memorizes them
    to graded degrees. Its checkpoint is theta_0 of the unlearning stage (`UnlearningModule(init_from=...)`).

    With `forget_fraction: 0` in the datamodule the same stage is the reference: the model retrained without D_f.
    Its metrics must be read against theta_0's levels, so `levels_from` points at the memorize run; without it the
    levels are this model's own (for the memorize run itself: theta_0's)."""

    def __init__(
        self,
        model: Union[str, dict[str, Any]] = TINY_GPT_NEO,
        lr: float = 3e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        el_n: int = 10,
        threshold_std: float = 0.0,
        outlier_std: float = 2.0,
        levels_from: Optional[str] = None,
        eval_batch_size: int = 32,
        torch_dtype: Optional[DType] = None,
        model_kwargs: Optional[dict[str, Any]] = None,
    ):
        """
        Args:
            model: Hub name / local path of a causal LM or a config dict (random init from a seeded
                `seed_everything`; the embedded setting's tiny GPT-Neo).
            lr, betas, weight_decay: AdamW on the training mix (torch defaults but lr 3e-3: a tiny model that must
                memorize within a few hundred steps).
            el_n: n of the extraction likelihood EL_n (10), for the levels.
            threshold_std / outlier_std: levels = unseen mean + threshold_std std; band = mean -/+ outlier_std std
                (as UnlearningModule).
            levels_from: theta_0 whose unseen-set scores give the levels (a checkpoint, run dir or glob; the
                reference run points at the memorize run); None: this model's own.
            eval_batch_size: batch for scoring sequences (MA/EL).
            torch_dtype: model dtype (float32 default).
            model_kwargs: extra config values.
        """
        super().__init__()
        self.save_hyperparameters()
        if not all(0 <= b < 1 for b in betas):
            raise ZooError(f"Adam betas must lie in [0, 1), got {tuple(betas)}")
        if lr <= 0:
            raise ZooError(f"lr must be > 0, got {lr}")
        if outlier_std < 0:  # the band mean -/+ outlier_std std turned inside out
            raise ZooError(f"outlier_std must be >= 0, got {outlier_std}")
        check_el_n(el_n)
        self._build_lm(model, torch_dtype, model_kwargs)
        self._levels: tuple[Any, dict[str, float]] | None = None

    def setup(self, stage: str) -> None:
        if self.hparams.levels_from:
            # fail before training, not at its end
            resolve_weights(self.hparams.levels_from, "levels_from", MEMORIZE_FIRST)
        try:
            self._dm()
        except ZooError:
            if stage == "fit":  # plain loaders (e.g. a benchmark): nothing to check, no metrics callback
                return
            raise
        if stage == "fit":
            self._check_train_set("mix")
        self._check_sets()

    def training_step(self, batch: dict, batch_idx: int):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        loss = self.model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=ids.shape[0])
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                 weight_decay=self.hparams.weight_decay)

    @torch.no_grad()
    def unlearning_thresholds(self) -> dict[str, float]:
        """gamma_MA, gamma_EL and the outlier band of theta_0 on the unseen set: theta_0 = the `levels_from` model
        (measured once), else this model as it is now (re-measured when its weights change)."""
        h = self.hparams
        key = "levels_from" if h.levels_from else (self.global_step, self._version)
        if self._levels is None or self._levels[0] != key:
            unseen = self._dm().unseen_set
            if h.levels_from:
                theta0 = copy.deepcopy(self.model)
                path = load_lm_weights(theta0, h.levels_from, "levels_from")
                s = score_sequences(theta0, unseen.input_ids, unseen.attention_mask, h.el_n,
                                    batch_size=h.eval_batch_size)
                del theta0
                src = f"theta_0 of {path}"
            else:
                s = self.evaluate_memorization("unseen", unseen, with_el=True)
                src = "this model"
            self._levels = (key, unseen_thresholds(s, h.threshold_std, h.outlier_std))
            t = self._levels[1]
            rank_zero_info(f"unlearning levels ({src}, unseen set): MA {t['ma']:.4f} EL_{h.el_n} {t['el']:.4f}, "
                           f"outlier band [{t['low']:.4f}, {t['high']:.4f}]")
        return dict(self._levels[1])

    def _card_tags(self) -> list[str]:
        return ["unlearning", "memorization", "memorize"]


class UnlearningModule(_CausalLMStage):
    single_process = ("it ascends only on the sequences a batch selects, so DDP's processes would disagree on "
                      "whether to step at all, and its stopping rule reads the whole forget set")

    def __init__(
        self,
        model: Union[str, dict[str, Any]] = TINY_GPT_NEO,
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
        torch_dtype: Optional[DType] = None,
        model_kwargs: Optional[dict[str, Any]] = None,
        init_from: Optional[str] = None,
    ):
        """
        Args:
            model: Hub name / local path of a causal LM (e.g. EleutherAI/gpt-neo-125m: theta_0 is the pretrained
                model) or a config dict (random init; `init_from` then gives theta_0).
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
            init_from: theta_0 = the weights of a memorize run (`MemorizeModule`): a .ckpt, a run dir (its
                checkpoints/last.ckpt), a Hub-format directory, or a glob (newest match); loaded when fitting starts
                (resuming with --ckpt_path overrides it). The model config must be that run's.
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
        if outlier_std < 0:
            raise ZooError(f"outlier_std must be >= 0, got {outlier_std}")
        check_el_n(el_n)
        if lr <= 0:  # the run went through and unlearned nothing
            raise ZooError(f"lr must be > 0, got {lr}")
        if not all(0 <= b < 1 for b in betas):
            raise ZooError(f"Adam betas must lie in [0, 1), got {tuple(betas)}")
        self._build_lm(model, torch_dtype, model_kwargs)
        nan = float("nan")
        fixed = (ma_threshold, el_threshold, outlier_low, outlier_high)
        self.register_buffer("thresholds", torch.tensor([nan if v is None else v for v in fixed], dtype=torch.float64))
        self.phase = "ascend"
        self.lambdas: list[float] = []
        self._base: dict[str, torch.Tensor] | None = None  # theta_s of task arithmetic
        self._theta: dict[str, torch.Tensor] | None = None  # fine-tuned weights while the model holds the edit
        self._updates = 0
        self.epochs_done = 0  # unlearning epochs that trained (the old repro's "epochs"; logged as test/epochs)

    # ------------------------------------------------------------------------------------------------ levels
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
        self._check_train_set("forget")
        if self.hparams.init_from:
            path = load_lm_weights(self.model, self.hparams.init_from, "init_from")
            self._version += 1
            rank_zero_info(f"UnlearningModule: theta_0 from {path}")
        self._check_sets()

    def on_fit_start(self) -> None:
        self.unlearning_thresholds()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                 weight_decay=self.hparams.weight_decay)

    # ---------------------------------------------------------------------------------------------- phases
    def _forget_ma(self) -> torch.Tensor:
        return self.evaluate_memorization("forget", self._dm().forget_set, with_el=False).ma

    def _target_met(self) -> bool:
        """The stopping rule (Jang et al.; the paper's code keeps it): mean MA of D_f below gamma_MA (strictly, as
        the official `ma < ma_threshold`) and, with `stop_on_el`, mean EL_n at most gamma_EL: there "below" is read
        as "<=" (the official `<`), since a small model's unseen EL_n is often exactly 0 and could never be beaten.
        The cheap MA test first: EL_n needs generation."""
        thr = self.unlearning_thresholds()
        if not float(self._forget_ma().mean()) < thr["ma"]:
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
            # Official: selection and token-mean loss per micro-batch (per GPU there, 8 rows), gradients averaged
            # over the micro-batches of the one step per epoch; here the same with accumulate_grad_batches.
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
        self.epochs_done += 1
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
    def on_test_epoch_end(self) -> None:
        self.log("test/epochs", float(self.epochs_done))  # of the checkpoint under test

    # ------------------------------------------------------------------------------------------ checkpoint
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["unlearning_state"] = {"phase": self.phase, "lambdas": list(self.lambdas), "base": self._base,
                                          "theta": self._theta, "epochs_done": self.epochs_done}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        st = checkpoint.get("unlearning_state")
        if st:
            self.phase, self.lambdas, self._base, self._theta = st["phase"], st["lambdas"], st["base"], st["theta"]
            self.epochs_done = int(st.get("epochs_done", 0))

    def _card_tags(self) -> list[str]:
        return ["unlearning", "memorization", self.method]
