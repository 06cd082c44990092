"""`ClusterDeletionEval`: runs the paper's cluster-deletion algorithms on batches of graphs (evaluation only).

``zoo test`` logs, per algorithm, the mean over the graphs of the cost, the a-posteriori ratio (cost / lower
bound: the STC-LP for ``lp_*``, |W| for the MFP family), its maximum, the ratio to OPT where the ILP proved one,
the seconds, and for ``mfp`` the paper's RanMFP-Avg (``mean_ratio``: the mean cost of all random runs / |W|);
plus the shared LP value, |W|, OPT and their times. The per-graph table goes to the run dir as
``clusterdel_<stage>.csv`` and ``.json``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from zoo.attached import attached_trainer
from zoo.clusterdel.algorithms import ALGORITHMS, GraphReport, check_algorithms, run_algorithms
from zoo.clusterdel.graph import Graph
from zoo.errors import ZooError
from zoo.hub import HubMixin

COLUMNS = ("graph", "n", "m", "open_wedges", "triangles", "lp", "wedge_bound", "opt", "algorithm", "cost", "bound",
           "ratio", "ratio_opt", "seconds", "components", "mean_cost", "mean_ratio")


class ClusterDeletionEval(HubMixin, L.LightningModule):
    """Cluster deletion by the combinatorial 3-approximations of Balmaseda et al. (ICML 2024).

    Args:
        algorithms: any of ``lp_pivot`` (STC-LP + best random pivot, components first), ``lp_degree`` (STC-LP +
            max-degree pivot), ``mfp`` (MatchFlipPivot, best random pivot), ``degmfp``, ``ratmfp``, ``ilp``
            (exact CD-ILP, for small graphs).
        pivtimes: extra random pivot runs; the best of 1 + pivtimes is kept (official: 100).
        lp_solver: ``mincut`` (the paper's max-flow solver) or ``highs`` (the LP through HiGHS).
        wedge_order: ``scan`` (the official greedy order: exactly its wedge set) or ``random`` (seeded).
        ilp_time_limit: seconds HiGHS may take to prove OPT (the official runs allowed 172,800 s).
        ilp_max_edges: graphs with more edges get no ILP.
        ilp_on_limit: ``skip`` (record why, report no OPT) or ``error`` (stop the run) when the ILP is refused
            or not proven within the time limit.
        seed: random seed before each method (official ``Random.seed!(123456)``).
    """

    def __init__(self, algorithms: list[str] | None = None, pivtimes: int = 100,
                 lp_solver: Literal["mincut", "highs"] = "mincut", wedge_order: Literal["scan", "random"] = "scan",
                 ilp_time_limit: float = 60.0, ilp_max_edges: int = 5000,
                 ilp_on_limit: Literal["skip", "error"] = "skip", seed: int = 123456):
        super().__init__()
        self.save_hyperparameters()
        self.algorithms = list(algorithms) if algorithms is not None else [a for a in ALGORITHMS if a != "ilp"]
        check_algorithms(self.algorithms)
        if pivtimes < 0:
            raise ZooError(f"pivtimes must be >= 0, got {pivtimes}")
        if lp_solver not in ("mincut", "highs"):
            raise ZooError(f"lp_solver must be 'mincut' or 'highs', got {lp_solver!r}")
        if wedge_order not in ("scan", "random"):
            raise ZooError(f"wedge_order must be 'scan' or 'random', got {wedge_order!r}")
        if ilp_on_limit not in ("skip", "error"):
            raise ZooError(f"ilp_on_limit must be 'skip' or 'error', got {ilp_on_limit!r}")
        if ilp_time_limit <= 0 or ilp_max_edges < 1:
            raise ZooError(f"need ilp_time_limit > 0 and ilp_max_edges >= 1, got {ilp_time_limit}, {ilp_max_edges}")
        self._reports: list[GraphReport] = []

    def evaluate(self, graph: Graph) -> GraphReport:
        hp = self.hparams
        return run_algorithms(graph, self.algorithms, pivtimes=hp.pivtimes, lp_solver=hp.lp_solver,
                              wedge_order=hp.wedge_order, ilp_time_limit=hp.ilp_time_limit,
                              ilp_max_edges=hp.ilp_max_edges, ilp_on_limit=hp.ilp_on_limit, seed=hp.seed)

    # -- Lightning --------------------------------------------------------------------------------
    def _log_mean(self, key: str, values: list[float], reduce: str = "mean") -> None:
        values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if values:
            agg = max(values) if reduce == "max" else sum(values) / len(values)
            self.log(key, float(agg), on_step=False, on_epoch=True, batch_size=len(values),
                     reduce_fx="max" if reduce == "max" else "mean")

    def _eval_step(self, batch: list[Graph], stage: str) -> None:
        reports = [self.evaluate(g) for g in batch]
        self._reports.extend(reports)
        for r in reports:
            rank_zero_info(f"clusterdel: {r.name} done (n={r.n}, m={r.m}, {r.n_wedges} open wedges, "
                           f"OPT {r.opt if r.opt is not None else 'not proven'})")
        # the table so far goes to the run dir after every batch, so a run stopped midway keeps its finished graphs
        self._save(stage)
        self._log_mean(f"{stage}/lp", [r.lp for r in reports])
        self._log_mean(f"{stage}/lp_seconds", [r.lp_seconds for r in reports])
        self._log_mean(f"{stage}/wedge_bound", [r.wedge_bound for r in reports])
        self._log_mean(f"{stage}/opt", [r.opt for r in reports])
        for a in self.algorithms:
            rows = [r.rows[a] for r in reports if a in r.rows]
            if not rows:
                continue
            self._log_mean(f"{stage}/{a}/cost", [x["cost"] for x in rows])
            self._log_mean(f"{stage}/{a}/seconds", [x["seconds"] for x in rows])
            if a != "ilp":
                self._log_mean(f"{stage}/{a}/ratio", [x["ratio"] for x in rows])
                self._log_mean(f"{stage}/{a}/ratio_max", [x["ratio"] for x in rows], reduce="max")
                self._log_mean(f"{stage}/{a}/ratio_opt", [x.get("ratio_opt") for x in rows])
            if a == "mfp":  # the paper's RanMFP-Avg (mean over the 1 + pivtimes random runs)
                self._log_mean(f"{stage}/{a}/mean_ratio", [x["mean_ratio"] for x in rows])

    def test_step(self, batch: list[Graph], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def validation_step(self, batch: list[Graph], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def on_test_epoch_start(self) -> None:
        self._reports = []

    on_validation_epoch_start = on_test_epoch_start

    def table(self) -> list[dict[str, Any]]:
        return [row for r in self._reports for row in r.table()]

    def _save(self, stage: str) -> None:
        if attached_trainer(self) is None or not self._reports:
            return
        run = Path(self.trainer.default_root_dir)
        run.mkdir(parents=True, exist_ok=True)
        suffix = f"_rank{self.global_rank}" if self.trainer.world_size > 1 else ""
        rows = self.table()
        with (run / f"clusterdel_{stage}{suffix}.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        notes = {r.name: r.ilp_note for r in self._reports if r.ilp_note}
        (run / f"clusterdel_{stage}{suffix}.json").write_text(json.dumps({"rows": rows, "ilp_notes": notes}, indent=1))

    def on_test_epoch_end(self) -> None:
        self._save("test")

    def on_validation_epoch_end(self) -> None:
        self._save("val")

    def configure_optimizers(self):
        return None

    def card_metadata(self) -> dict[str, Any]:
        return {"tags": ["clusterdel", "cluster-deletion", "graph-clustering", "approximation-algorithms"],
                "base_model": None, "model_source": "no learned model: the cluster-deletion algorithms "
                f"{', '.join(self.algorithms)} run on each graph"}
