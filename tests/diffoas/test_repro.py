"""The CPU reproduction of Table 1 runs end to end on a miniature grid and writes its results."""

from __future__ import annotations

import json

from zoo.diffoas import repro


def test_repro_trains_on_gmres_diffoas_and_10x_diffoas(tmp_path):
    repro.main(["--grid", "8", "--n-train", "12", "--n-test", "4", "--n-basis", "3", "--epochs", "1", "--modes", "2",
                "--diffoas-factor", "2", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "results.json").read_text())
    assert [(r["method"], r["n_train"]) for r in res["rows"]] == [("GMRES", 12), ("DiffOAS", 12), ("DiffOAS", 24)]
    assert all(r["fno_test_rel_l2"] > 0 for r in res["rows"])
    assert max(r["max_residual"] for r in res["rows"][1:]) < 1e-12  # DiffOAS pairs are exact
    assert res["test_max_residual"] < 2e-5  # the test set is GMRES at rtol 1e-5
