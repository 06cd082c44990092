"""IMLDataModule: explicit sources, clear errors, batches of strings."""

from __future__ import annotations

import pytest

from datamodules.iml import IMLDataModule
from zoo.errors import ZooError
from zoo.iml.data import fictional_cvdb


def test_local_source_reads_the_cvdb_schema(tmp_path):
    path = tmp_path / "cross-verified-database.csv"
    df = fictional_cvdb(120, seed=4)
    df["birth_place"] = "Somewhere"  # the real file carries many more columns
    df.to_csv(path, index=False, encoding="ISO-8859-1")
    local = IMLDataModule(source="local", path=str(path), num_ents=100, seed=1, batch_size=4)
    local.setup("fit")
    emb = IMLDataModule(source="embedded", num_ents=100, seed=1)
    emb.setup("fit")
    assert sum(len(v) for v in local.dataset.subsets.values()) == 100
    batch = next(iter(local.train_dataloader()))
    assert set(batch) >= {"text", "source", "subset", "question", "answer"} and len(batch["text"]) == 4
    assert all(isinstance(t, str) for t in batch["text"])
    assert {r["subset"] for r in local.eval_records()} >= {"d1consis", "d2consis", "qd1consis"}


def test_stage2_eval_sets_and_cap():
    dm = IMLDataModule(source="embedded", stage="stage2", num_ents=100, seed=1, max_eval_per_subset=3)
    dm.setup("fit")
    assert set(dm.eval_sets) == {"d1consis", "d2consis", "d3consis", "no_qd_baseline", "d2incons"}
    assert all(len(v) == 3 for v in dm.eval_sets.values())
    assert all(r["kind"] == "definition" for r in dm.train_documents)


def test_bad_sources(tmp_path):
    with pytest.raises(ZooError, match="needs `path`"):
        IMLDataModule(source="local").setup("fit")
    with pytest.raises(ZooError, match="not found.*cross-verified-database"):
        IMLDataModule(source="local", path=str(tmp_path / "missing.csv")).setup("fit")
    path = tmp_path / "cvdb.csv"
    fictional_cvdb(20).drop(columns=["level3_main_occ"]).to_csv(path, index=False)
    with pytest.raises(ZooError, match="lacks column.*level3_main_occ"):
        IMLDataModule(source="local", path=str(path), num_ents=20).setup("fit")
    with pytest.raises(ZooError, match="too few entities"):
        IMLDataModule(source="embedded", num_ents=12).setup("fit")


def test_out_of_range_sizes_are_refused():
    # a cap of 0 read as "no cap" and evaluated every question; a block of 0 tokens failed inside the attention
    with pytest.raises(ZooError, match="max_eval_per_subset must be >= 1 .or null: every question., got 0"):
        IMLDataModule(source="embedded", max_eval_per_subset=0)
    from zoo.iml import IMLModule

    with pytest.raises(ZooError, match="block_size must be >= 1, got 0"):
        IMLModule(block_size=0)
