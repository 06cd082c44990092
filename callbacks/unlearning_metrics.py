"""`UnlearningMetrics`: memorization / unlearning metrics of any causal LM, per epoch and at test.

Works with any LightningModule whose causal LM is `pl_module.model` (or the module itself) and a datamodule that
exposes `forget_set`, `unseen_set` and (optionally) `heldout_set` as right-padded token tensors
(`input_ids`, `attention_mask`, `doc_ids`), e.g. `datamodules.memorization.MemorizationDataModule`.

Logged (prefix `val/` after each training epoch, `test/` at the end of `zoo test`, `init/` for theta_0; with
`fit_evaluation: false` only `test/`):
  forget_ma, forget_el{n}, unseen_ma, unseen_el{n}        mean MA / EL_n
  ma_threshold, el_threshold                               unseen-data levels gamma (of theta_0 while fitting)
  outlier_low, outlier_high                                the unseen MA band (of theta_0 while fitting)
  outliers = outliers_high + outliers_low                  c(D_f): forget sequences with MA >= high (still
                                                           memorized) or <= low (unlearned too far)
  utility_ppl                                              perplexity on held-out text
  attack_auc (score: MA), attack_auc_loss (score: -NLL)    membership inference, forget vs unseen
  attack_auc_perturb (with `perturbation_attack`)          the paper's attack: DetectGPT perturbation discrepancy
Per-sequence rows (stage, epoch, set, doc_id, ma, el, nll, outlier = high / low / empty) go to
`<run dir>/unlearning_metrics.csv`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl

from zoo.errors import ZooError
from zoo.unlearning.metrics import (SequenceScores, attack_auc, check_disjoint, check_el_n, check_window,
                                    outlier_counts, outlier_sides, score_sequences, unseen_thresholds)

TABLE = "unlearning_metrics.csv"


class UnlearningMetrics(pl.Callback):
    def __init__(self, el_n: int = 10, threshold_std: float = 0.0, outlier_std: float = 2.0,
                 every_n_epochs: int = 1, unseen_el_every_epoch: bool = False, eval_batch_size: int = 32,
                 save_table: bool = True, table_name: str = TABLE, perturbation_attack: bool = False,
                 n_perturbations: int = 25, mask_model: Optional[str] = None,
                 perturber_kw: Optional[dict[str, Any]] = None, fit_evaluation: bool = True):
        """
        Args:
            el_n: n of EL_n.
            threshold_std: thresholds = unseen mean + threshold_std * std (used unless the module supplies its own
                through `unlearning_thresholds()`).
            outlier_std: outlier band = unseen mean MA -/+ outlier_std * std (idem).
            every_n_epochs: evaluate after every n-th training epoch (and always at the last one).
            unseen_el_every_epoch: also regenerate EL_n on the unseen set each epoch (costly; MA is always done).
            eval_batch_size: sequences per scoring batch.
            save_table: write the per-sequence table to the run directory.
            perturbation_attack: also run the paper's membership attack (`zoo.unlearning.attack`) on the texts
                decoded with the datamodule's tokenizer, `n_perturbations` per text (official 25).
            mask_model: the T5 mask filler of that attack (official: t5-large, from the Hub or a local path);
                None = random word spans drawn from the unseen texts (offline stand-in).
            perturber_kw: span masking arguments (official: span_length 2, pct 0.3, ceil_pct false).
            fit_evaluation: evaluate while fitting (`init/` at the start, `val/` per epoch and at the end); False:
                at test only (the memorize stage, which starts from a random model and is scored by `zoo test`).
        """
        check_el_n(el_n)
        if every_n_epochs < 1:  # was read as 1 without a word
            raise ZooError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.el_n, self.threshold_std, self.every = el_n, threshold_std, every_n_epochs
        self.outlier_std = outlier_std
        self.unseen_el_every_epoch, self.batch_size = unseen_el_every_epoch, eval_batch_size
        self.save_table, self.table_name = save_table, table_name
        self.perturbation_attack, self.n_perturbations, self.mask_model = (perturbation_attack, n_perturbations,
                                                                           mask_model)
        self.perturber_kw = dict(perturber_kw or {})
        self.fit_evaluation = fit_evaluation
        self._evaluated = None  # weights last evaluated while fitting
        self._perturber = None
        self._thr: Optional[dict[str, float]] = None
        self.history: list[dict[str, float]] = []

    # ----------------------------------------------------------------------------------------------- helpers
    @staticmethod
    def _sets(trainer: pl.Trainer):
        dm = trainer.datamodule
        f, u = getattr(dm, "forget_set", None), getattr(dm, "unseen_set", None)
        if f is None or u is None:
            raise ZooError("UnlearningMetrics needs a datamodule with forget_set and unseen_set")
        return f, u, getattr(dm, "heldout_set", None)

    def _score(self, pl_module, name, data, with_el: bool) -> SequenceScores:
        if hasattr(pl_module, "evaluate_memorization"):  # shares the module's memoized evaluation
            s = pl_module.evaluate_memorization(name, data, with_el=with_el)
            if not with_el or s.el is not None:
                return s
        model = getattr(pl_module, "model", pl_module)
        return score_sequences(model, data.input_ids, data.attention_mask, self.el_n if with_el else None,
                               batch_size=self.batch_size)

    def _thresholds(self, pl_module, unseen_scores: SequenceScores | None) -> dict[str, float]:
        if hasattr(pl_module, "unlearning_thresholds"):
            return pl_module.unlearning_thresholds()
        if self._thr is None:
            if unseen_scores is None:
                raise ZooError("thresholds need the unseen set scored with EL")
            self._thr = unseen_thresholds(unseen_scores, self.threshold_std, self.outlier_std)
        return self._thr

    def evaluate(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str, unseen_el: bool):
        forget, unseen, heldout = self._sets(trainer)
        sf = self._score(pl_module, "forget", forget, with_el=True)
        su = self._score(pl_module, "unseen", unseen, with_el=unseen_el)
        thr = self._thresholds(pl_module, su)
        n = self.el_n
        high, low = outlier_counts(sf.ma, thr["high"], thr["low"])
        m = {"forget_ma": float(sf.ma.mean()), f"forget_el{n}": float(sf.el.mean()),
             "unseen_ma": float(su.ma.mean()), "ma_threshold": thr["ma"], "el_threshold": thr["el"],
             "outlier_low": thr["low"], "outlier_high": thr["high"],
             "outliers": float(high + low), "outliers_high": float(high), "outliers_low": float(low),
             "attack_auc": attack_auc(sf.ma, su.ma), "attack_auc_loss": attack_auc(-sf.nll, -su.nll)}
        if su.el is not None:
            m[f"unseen_el{n}"] = float(su.el.mean())
        if self.perturbation_attack:
            m["attack_auc_perturb"] = self._perturbation_auc(trainer, pl_module, forget, unseen)
        if heldout is not None and len(heldout):
            m["utility_ppl"] = self._score(pl_module, "heldout", heldout, with_el=False).perplexity
        if self.save_table:
            self._write_rows(trainer, stage, pl_module.current_epoch, forget, sf, unseen, su, thr)
        return m

    def _perturbation_auc(self, trainer, pl_module, forget, unseen) -> float:
        from zoo.unlearning.attack import MaskFillPerturber, memorization_attack_auc

        tok = getattr(trainer.datamodule, "tokenizer", None)
        if tok is None:
            raise ZooError("the perturbation attack needs the datamodule's `tokenizer` to decode the sequences")
        if self._perturber is None and self.mask_model:  # loaded once
            self._perturber = MaskFillPerturber.from_pretrained(self.mask_model, **self.perturber_kw)
        return memorization_attack_auc(getattr(pl_module, "model", pl_module), tok, forget, unseen, self._perturber,
                                       self.n_perturbations, self.batch_size, **self.perturber_kw)

    def _write_rows(self, trainer, stage, epoch, forget, sf, unseen, su, thr) -> None:
        path = Path(trainer.default_root_dir) / self.table_name
        if trainer.global_rank != 0:
            return
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", newline="") as fh:
            w = csv.writer(fh)
            if new:
                w.writerow(["stage", "epoch", "set", "doc_id", "ma", "el", "nll", "outlier"])
            for name, data, s in (("forget", forget, sf), ("unseen", unseen, su)):
                sides = outlier_sides(s.ma, thr["high"], thr["low"]) if name == "forget" else [""] * len(s.ma)
                for i, d in enumerate(data.doc_ids):
                    el = "" if s.el is None else f"{float(s.el[i]):.6f}"
                    w.writerow([stage, epoch, name, d, f"{float(s.ma[i]):.6f}", el, f"{float(s.nll[i]):.6f}",
                                sides[i]])

    @staticmethod
    def _weights_key(trainer, pl_module):
        return trainer.global_step, getattr(pl_module, "_version", None)

    # ------------------------------------------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        forget, unseen, _ = self._sets(trainer)
        check_window(forget.lengths, self.el_n, forget.doc_ids, "forget")
        check_disjoint(forget.sequences(), unseen.sequences(), forget.doc_ids)
        if getattr(getattr(pl_module, "hparams", {}), "get", lambda *_: None)("el_n") not in (None, self.el_n):
            raise ZooError(f"UnlearningMetrics el_n={self.el_n} differs from the module's el_n="
                           f"{pl_module.hparams.el_n}")
        if not self.fit_evaluation:
            return
        m = self.evaluate(trainer, pl_module, "init", unseen_el=True)  # theta_0: fixes the thresholds
        self.history.append({"epoch": -1, **m})
        for lg in trainer.loggers:
            lg.log_metrics({f"init/{k}": v for k, v in m.items()}, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.fit_evaluation or (pl_module.current_epoch + 1) % self.every:
            return
        m = self.evaluate(trainer, pl_module, "fit", unseen_el=self.unseen_el_every_epoch)
        self.history.append({"epoch": pl_module.current_epoch, **m})
        self._evaluated = self._weights_key(trainer, pl_module)
        for k, v in m.items():
            pl_module.log(f"val/{k}", v, on_epoch=True, prog_bar=k in ("forget_ma", "outliers"))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the final weights are always evaluated (the stopping rule may end fitting between two evaluations)
        if not self.fit_evaluation or self._evaluated == self._weights_key(trainer, pl_module):
            return
        m = self.evaluate(trainer, pl_module, "fit", unseen_el=self.unseen_el_every_epoch)
        self.history.append({"epoch": pl_module.current_epoch, **m})
        for lg in trainer.loggers:
            lg.log_metrics({f"val/{k}": v for k, v in m.items()}, step=trainer.global_step)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        m = self.evaluate(trainer, pl_module, "test", unseen_el=True)
        self.history.append({"epoch": "test", **m})
        for k, v in m.items():
            pl_module.log(f"test/{k}", v)
