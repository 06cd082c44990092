"""ClusterDeletionEval through Lightning's test loop: logged metrics, the per-graph table, ILP limits, Hub round trip."""

from __future__ import annotations

import csv
import json

import lightning as L
import pytest

from datamodules.graphs import GraphDataModule, gnp_graph
from zoo.clusterdel import ClusterDeletionEval, as_graph, cd_ilp
from zoo.errors import ZooError


def _trainer(tmp_path):
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     default_root_dir=str(tmp_path))


def test_test_loop_logs_and_writes_the_table(tmp_path):
    dm = GraphDataModule(source="networkx", names=["karate", "florentine"], batch_size=2)
    module = ClusterDeletionEval(algorithms=["lp_pivot", "mfp", "degmfp", "ratmfp", "ilp"], pivtimes=3)
    metrics = _trainer(tmp_path).test(module, datamodule=dm)[0]
    # karate: OPT 53, DegMFP 71, |W| 36; florentine: OPT 10, DegMFP 15, |W| 8 (LP 39 and 10)
    assert metrics["test/degmfp/cost"] == pytest.approx((71 + 15) / 2)
    assert metrics["test/opt"] == pytest.approx((53 + 10) / 2)
    assert metrics["test/lp"] == pytest.approx((39 + 10) / 2)
    assert metrics["test/degmfp/ratio_max"] == pytest.approx(max(71 / 36, 15 / 8))
    rows = list(csv.DictReader((tmp_path / "clusterdel_test.csv").open()))
    # the paper's RanMFP-Avg: the mean over graphs of (mean cost of the 1 + pivtimes runs) / |W|
    mfp = [r for r in rows if r["algorithm"] == "mfp"]
    avg = [float(r["mean_cost"]) / float(r["bound"]) for r in mfp]
    assert [float(r["mean_ratio"]) for r in mfp] == pytest.approx(avg)
    assert metrics["test/mfp/mean_ratio"] == pytest.approx(sum(avg) / 2)
    karate = {r["algorithm"]: r for r in rows if r["graph"] == "karate"}
    assert karate["degmfp"]["cost"] == "71" and karate["ilp"]["cost"] == "53" and karate["degmfp"]["bound"] == "36.0"
    assert json.loads((tmp_path / "clusterdel_test.json").read_text())["ilp_notes"] == {}


def test_ilp_beyond_the_limits_is_a_clear_error(tmp_path):
    g = as_graph(gnp_graph(60, 0.3, seed=0), "gnp60")
    with pytest.raises(ZooError, match=r"gnp60.*\d+ edges, \d+ open wedges, \d+ triangles.*max_edges=100"):
        cd_ilp(g, max_edges=100)
    with pytest.raises(ZooError, match=r"not solved to optimality within ilp time_limit=0.001s \(\d+ edges, \d+ open"):
        cd_ilp(g, time_limit=1e-3)
    # through the module: 'error' stops the run, 'skip' records the reason and reports no OPT
    dm = GraphDataModule(source="embedded", generators=[{"kind": "gnp", "n": 60, "p": 0.3, "seed": 0}])
    with pytest.raises(ZooError, match="max_edges=10"):
        _trainer(tmp_path).test(ClusterDeletionEval(algorithms=["ilp"], ilp_max_edges=10, ilp_on_limit="error"), dm)
    skip = ClusterDeletionEval(algorithms=["degmfp", "ilp"], ilp_max_edges=10)
    metrics = _trainer(tmp_path).test(skip, datamodule=dm)[0]
    assert "test/opt" not in metrics and "test/degmfp/cost" in metrics
    notes = json.loads((tmp_path / "clusterdel_test.json").read_text())["ilp_notes"]
    assert "max_edges=10" in notes["gnp_n60_p0.3_seed0"]


@pytest.mark.parametrize("kwargs, words", [
    ({"algorithms": ["degmfp", "kwikcluster"]}, "unknown cluster-deletion algorithm"),
    ({"pivtimes": -1}, "pivtimes"),
    ({"lp_solver": "gurobi"}, "lp_solver"),
    ({"ilp_time_limit": 0}, "ilp_time_limit"),
])
def test_bad_settings(kwargs, words):
    with pytest.raises(ZooError, match=words):
        ClusterDeletionEval(**kwargs)


def test_hub_round_trip(tmp_path):
    module = ClusterDeletionEval(algorithms=["degmfp", "ratmfp"], pivtimes=7, lp_solver="highs")
    back = ClusterDeletionEval.from_pretrained(module.save_pretrained(tmp_path / "hub"))
    assert back.algorithms == ["degmfp", "ratmfp"] and back.hparams.pivtimes == 7
    assert back.hparams.lp_solver == "highs"
