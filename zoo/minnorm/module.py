"""`MinNormExperiment`: evaluation only. `zoo test` solves every problem instance of the test set at every p of the
grid and logs bias, variance and risk per p with standard errors over instances (`test/<metric>_p<p>`,
`test/<metric>_se_p<p>`); the per-instance table goes to ``<run dir>/instances_test.csv`` (read by
``python -m zoo.minnorm.plot``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Optional

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from zoo.attached import attached_trainer
from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.minnorm.experiment import METRICS, run_instance, summarize

TABLE_COLUMNS = ("instance", "law", "n", "d", "sigma", "p", *METRICS, "norm_p", "support", "iterations", "seconds")


def p_label(p: float) -> str:
    return f"p{p:g}"


class MinNormExperiment(HubMixin, L.LightningModule):
    """Minimum-ℓ_p-norm interpolation over a grid of p (Kur, Abdalla, Bizeul & Yang, ICML 2024).

    Batches are lists of problem instances ``{"X": (n, d), "y": (K, n), "w_star": (d,) or None, "index",
    "law", "sigma"}`` (datamodules.linear_designs). The module has no weights: it is an estimator, not a model.

    Args:
        ps: the p grid, each in [1, 2] (issue #20: 1, 1.05, 1.1, 1.25, 1.5, 2). p = 1 is solved as the LP,
            p = 2 in closed form, the rest by dual Newton warm-started along the grid from p = 2 down.
        rtol: dual Newton's stopping rule on the relative residual ‖y − Xŵ‖/‖y‖.
        max_iter: Newton iterations before a run counts as stalled (a one-line error naming p and the residual).
    """

    def __init__(self, ps: Optional[list[float]] = None, rtol: float = 1e-12, max_iter: int = 100):
        super().__init__()
        self.save_hyperparameters()
        self.ps = sorted(float(p) for p in (ps if ps is not None else [1.0, 1.05, 1.1, 1.25, 1.5, 2.0]))
        if not self.ps:
            raise ZooError("ps must name at least one p in [1, 2]")
        bad = [p for p in self.ps if not (math.isfinite(p) and 1.0 <= p <= 2.0)]
        if bad:
            raise ZooError(f"every p must lie in [1, 2]; got {bad} in ps={self.ps}")
        if not 0 < rtol < 1e-6:
            raise ZooError(f"rtol must be in (0, 1e-6) (issue #20: interpolation to 1e-10), got {rtol}")
        if max_iter < 1:
            raise ZooError(f"max_iter must be >= 1, got {max_iter}")
        self.rows: list[dict[str, Any]] = []

    def evaluate(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per-instance rows (one per p) for a batch of problem instances; usable without a Trainer."""
        out = []
        for inst in batch:
            X, Y = inst["X"].double().cpu(), inst["y"].double().cpu()  # HiGHS and the float64 claims live on CPU
            w_star = inst.get("w_star")
            w_star = None if w_star is None else w_star.double().cpu()
            meta = {"instance": int(inst.get("index", len(self.rows))), "law": inst.get("law", "unknown"),
                    "n": X.shape[-2], "d": X.shape[-1], "sigma": inst.get("sigma", math.nan)}
            for row in run_instance(X, Y, self.ps, w_star, rtol=self.hparams.rtol, max_iter=self.hparams.max_iter):
                out.append({**meta, **row})
        return out

    def test_step(self, batch: list[dict[str, Any]], batch_idx: int) -> None:
        self.rows.extend(self.evaluate(batch))

    def on_test_epoch_start(self) -> None:
        self.rows = []

    def on_test_epoch_end(self) -> None:
        if not self.rows:
            return
        stats = summarize(self.rows)
        for p, by_metric in stats.items():
            for m, (mean, se, count) in by_metric.items():
                self.log(f"test/{m}_{p_label(p)}", mean, batch_size=count)
                if not math.isnan(se):
                    self.log(f"test/{m}_se_{p_label(p)}", se, batch_size=count)
            norms = [r["norm_p"] for r in self.rows if r["p"] == p]
            self.log(f"test/norm_{p_label(p)}", sum(norms) / len(norms), batch_size=len(norms))
        self.log("test/instances", float(len({r["instance"] for r in self.rows})))
        self._write_table()

    def _write_table(self) -> None:
        if attached_trainer(self) is None:
            return
        run = Path(self.trainer.default_root_dir)
        run.mkdir(parents=True, exist_ok=True)
        suffix = f"_rank{self.global_rank}" if self.trainer.world_size > 1 else ""
        path = run / f"instances_test{suffix}.csv"
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=TABLE_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self.rows)
        rank_zero_info(f"[minnorm] per-instance table: {path} ({len(self.rows)} rows)")

    def configure_optimizers(self):
        return None  # evaluation only

    def card_metadata(self) -> dict:
        return {"tags": ["minnorm", "minimum-norm-interpolation", "basis-pursuit", "overparameterized-regression"],
                "base_model": None, "model_source": "no learned model: the minimum-ℓ_p-norm interpolators, p in "
                f"{self.ps}, solved for each design"}
