"""The CPU reproduction of the two-stage IML experiment runs end to end on a miniature setting."""

from __future__ import annotations

import json

from zoo.iml import repro


def test_repro_writes_results(tmp_path):
    repro.main(["--seeds", "1", "--num-ents", "24", "--epochs1", "1", "--epochs2", "1", "--hidden", "16",
                "--out", str(tmp_path)])
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["results"]) == 1 and {"stage1", "stage2", "loss1", "loss2"} <= set(res["results"][0])
    assert (tmp_path / "results.md").read_text().startswith("`python -m zoo.iml.repro")
