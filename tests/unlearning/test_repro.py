"""The CPU reproduction script runs end to end on a miniature setting and writes its tables."""

from __future__ import annotations

import csv

import zoo.unlearning.repro as repro


def test_repro_rows_include_the_retrained_reference(tmp_path, monkeypatch, memo_cache):
    monkeypatch.setattr(repro, "DATA", dict(tokenizer="byt5", seq_len=24, num_forget=4, num_unseen=4, num_heldout=2,
                                            num_background=8, batch_size=4, memorize_steps=20))
    repro.main(["--seeds", "0", "--methods", "ga", "sga", "--max-epochs", "2", "--cache-dir", memo_cache,
                "--out", str(tmp_path)])
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["method"] for r in rows] == ["none (memorized)", repro.REFERENCE, "ga", "sga"]
    assert all(0 <= int(r["outliers"]) <= 4 and float(r["ppl"]) > 1 for r in rows)
    table = (tmp_path / "results.md").read_text()
    assert repro.REFERENCE in table and len(table.strip().splitlines()) == 6  # header, rule, four rows
