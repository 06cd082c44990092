"""MemorizationDataModule: real CSV format round trip, memorize phase, bad input."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from callbacks.unlearning_metrics import UnlearningMetrics
from datamodules.memorization import MemorizationDataModule, read_extraction_csv, write_extraction_csv
from zoo.errors import ZooError
from zoo.unlearning import UnlearningModule

SMALL = dict(seq_len=24, num_forget=4, num_unseen=4, num_heldout=2, num_background=8, batch_size=4)


def test_local_csv_round_trip(tmp_path):
    emb = MemorizationDataModule(source="embedded", memorize=False, **SMALL)
    paths = emb.export_csv(tmp_path)
    rows = read_extraction_csv(paths["forget"])
    assert list(rows[0]) == ["doc_id", "corpus", "text"] and len(rows) == 4
    loc = MemorizationDataModule(source="local", forget_path=str(paths["forget"]), unseen_path=str(paths["unseen"]),
                                 heldout_path=str(paths["heldout"]), seq_len=24)
    loc.setup()
    assert torch.equal(loc.forget_set.input_ids, emb.forget_set.input_ids)
    assert loc.forget_set.doc_ids == emb.forget_set.doc_ids
    assert torch.equal(loc.unseen_set.attention_mask, emb.unseen_set.attention_mask)


def test_missing_local_file_says_how_to_get_it(tmp_path):
    dm = MemorizationDataModule(source="local", forget_path=str(tmp_path / "nope.csv"), unseen_path="x.csv")
    with pytest.raises(ZooError, match="nope.csv not found.*knowledge-unlearning"):
        dm.setup()


def test_forget_overlapping_unseen_is_an_error(tmp_path):
    rows = [{"doc_id": "a", "corpus": "pile", "text": "the same sequence of text " * 3},
            {"doc_id": "b", "corpus": "pile", "text": "another sequence entirely " * 3}]
    write_extraction_csv(tmp_path / "f.csv", rows)
    write_extraction_csv(tmp_path / "u.csv", rows[1:])
    dm = MemorizationDataModule(source="local", forget_path=str(tmp_path / "f.csv"),
                                unseen_path=str(tmp_path / "u.csv"), seq_len=40)
    with pytest.raises(ZooError, match="overlaps the unseen set.*doc_id b"):
        dm.setup()


def test_empty_unseen_set_is_an_error(tmp_path):
    write_extraction_csv(tmp_path / "f.csv", [{"doc_id": "a", "corpus": "pile", "text": "some text " * 5}])
    write_extraction_csv(tmp_path / "u.csv", [])
    dm = MemorizationDataModule(source="local", forget_path=str(tmp_path / "f.csv"),
                                unseen_path=str(tmp_path / "u.csv"))
    with pytest.raises(ZooError, match="unseen set is empty"):
        dm.setup()


def test_forget_shorter_than_window_is_an_error(tmp_path, tiny_config):
    dm = MemorizationDataModule(source="embedded", memorize=False, **{**SMALL, "seq_len": 8})
    m = UnlearningModule(model=tiny_config, method="ga", el_n=10)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, max_epochs=1,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[UnlearningMetrics()])
    with pytest.raises(ZooError, match="shorter than the EL_10 window"):
        trainer.fit(m, dm)


def test_memorize_phase_grades_and_caches(tmp_path, tiny_config, memo_cache):
    from zoo.unlearning.metrics import score_sequences

    dm = MemorizationDataModule(source="embedded", cache_dir=memo_cache, memorize_steps=150,
                                **{**SMALL, "seq_len": 32, "num_forget": 8, "num_unseen": 8})
    m = UnlearningModule(model=tiny_config)
    assert dm.memorize(m.model)
    f = score_sequences(m.model, dm.forget_set.input_ids, dm.forget_set.attention_mask, el_n=None)
    u = score_sequences(m.model, dm.unseen_set.input_ids, dm.unseen_set.attention_mask, el_n=None)
    assert f.ma.mean() > u.ma.mean() + 0.1  # memorized beyond what the language itself predicts
    m2 = UnlearningModule(model=tiny_config)
    assert dm.memorize(m2.model)  # second call: from the cache, identical weights
    for (k, a), (_, b) in zip(m.model.state_dict().items(), m2.model.state_dict().items()):
        assert torch.equal(a, b), k


def test_forget_fraction_zero_is_the_retrained_reference(tmp_path, tiny_config, memo_cache):
    """forget_fraction=0 trains on the background alone: the model never saw the forget set, so its forget MA sits
    at the unseen level, while the memorized model's is far above it."""
    from zoo.unlearning.metrics import score_sequences

    kw = {**SMALL, "seq_len": 32, "num_forget": 8, "num_unseen": 8, "num_background": 64, "memorize_steps": 150}
    ref_dm = MemorizationDataModule(source="embedded", cache_dir=memo_cache, forget_fraction=0.0, **kw)
    mem_dm = MemorizationDataModule(source="embedded", cache_dir=memo_cache, **kw)
    ref, mem = UnlearningModule(model=tiny_config), UnlearningModule(model=tiny_config)
    assert ref_dm.memorize(ref.model) and mem_dm.memorize(mem.model)
    assert ref_dm.forget_set.texts == mem_dm.forget_set.texts  # the same sequences, only the training differs

    def gap(model, dm):
        f = score_sequences(model, dm.forget_set.input_ids, dm.forget_set.attention_mask, el_n=None).ma.mean()
        u = score_sequences(model, dm.unseen_set.input_ids, dm.unseen_set.attention_mask, el_n=None).ma.mean()
        return float(f - u)

    assert gap(mem.model, mem_dm) > 0.1
    assert abs(gap(ref.model, ref_dm)) < 0.1


def test_memorize_phase_needs_something_to_train_on(memo_cache, tiny_config):
    dm = MemorizationDataModule(source="embedded", cache_dir=memo_cache, forget_fraction=0.0, num_background=0,
                                **{k: v for k, v in SMALL.items() if k != "num_background"})
    with pytest.raises(ZooError, match="nothing to train on"):
        dm.memorize(UnlearningModule(model=tiny_config).model)
    with pytest.raises(ZooError, match="forget_fraction"):
        MemorizationDataModule(forget_fraction=1.5)
