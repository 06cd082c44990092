"""MemorizationDataModule: real CSV format round trip, the memorize stage's training mix, bad input."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from callbacks.unlearning_metrics import UnlearningMetrics
from datamodules.memorization import (GradedMixSampler, MemorizationDataModule, read_extraction_csv,
                                      write_extraction_csv)
from zoo.errors import ZooError
from zoo.unlearning import MemorizeModule, UnlearningModule
from zoo.unlearning.metrics import score_sequences
from zoo.unlearning.module import load_lm_weights

SMALL = dict(seed=0, seq_len=24, num_forget=4, num_unseen=4, num_heldout=2, num_background=8, batch_size=4)


def test_local_csv_round_trip(tmp_path):
    emb = MemorizationDataModule(source="embedded", **SMALL)
    paths = emb.export_csv(tmp_path)
    rows = read_extraction_csv(paths["forget"])
    assert list(rows[0]) == ["doc_id", "corpus", "text"] and len(rows) == 4
    assert (tmp_path / "forget.csv").read_text().splitlines()[0] == "doc_id,corpus,text"  # the released header
    loc = MemorizationDataModule(source="local", forget_path=str(paths["forget"]), unseen_path=str(paths["unseen"]),
                                 heldout_path=str(paths["heldout"]), background_path=str(paths["background"]),
                                 seq_len=24)
    loc.setup()
    assert torch.equal(loc.forget_set.input_ids, emb.forget_set.input_ids)
    assert loc.forget_set.doc_ids == emb.forget_set.doc_ids
    assert torch.equal(loc.unseen_set.attention_mask, emb.unseen_set.attention_mask)
    assert loc.background_set.texts == emb.background_set.texts


def test_the_card_names_the_pile_only_for_pile_sequences(tmp_path):
    """The released CSVs say which of the Pile's components each sequence came from (`corpus`); a run's card names
    the Pile only when every row does, and a file of one's own text in the same format is named by its path."""
    def sets(forget_corpus: list[str]) -> dict:
        forget = [{"doc_id": str(i), "corpus": c, "text": f"sequence number {i} of the forget set " * 2}
                  for i, c in enumerate(forget_corpus)]
        unseen = [{"doc_id": "u", "corpus": "Pile-CC", "text": "an unseen sequence of text " * 2}]
        write_extraction_csv(tmp_path / "f.csv", forget)
        write_extraction_csv(tmp_path / "u.csv", unseen)
        dm = MemorizationDataModule(source="local", forget_path=str(tmp_path / "f.csv"),
                                    unseen_path=str(tmp_path / "u.csv"), seq_len=40)
        return dm.card_metadata()

    # as lm_extraction_8_0.csv of joeljang/knowledge-unlearning spells them, and the names of the Pile's paper
    assert sets(["github", "pile-cc", "openwebtext2", "enron_emails", "Gutenberg (PG-19)"])["datasets"] == [
        "EleutherAI/pile"]
    meta = sets(["github", "my-notes"])
    assert "datasets" not in meta and "f.csv" in meta["data_source"] and "not Pile sequences" in meta["data_source"]


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
    dm = MemorizationDataModule(source="embedded", **{**SMALL, "seq_len": 8})
    m = UnlearningModule(model=tiny_config, method="ga", el_n=10)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, max_epochs=1,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[UnlearningMetrics()])
    with pytest.raises(ZooError, match="shorter than the EL_10 window"):
        trainer.fit(m, dm)


def test_seed_none_follows_seed_everything():
    """The data seed defaults to the run's seed, so that a sweep's seed axis draws a new language and new sets."""
    L.seed_everything(3, verbose=False)
    follows, fixed = MemorizationDataModule(**{**SMALL, "seed": None}), MemorizationDataModule(**{**SMALL, "seed": 3})
    follows.setup()
    fixed.setup()
    assert follows.seed == 3 and follows.forget_set.texts == fixed.forget_set.texts
    other = MemorizationDataModule(**{**SMALL, "seed": 4})
    other.setup()
    assert other.forget_set.texts != fixed.forget_set.texts


def test_mix_draws_forget_rows_at_graded_rates_and_background_uniformly():
    s = GradedMixSampler(num_forget=4, num_background=6, k_forget=3, k_background=5, num_batches=4000, max_repeat=8.0,
                         seed=0)
    assert sorted(s.rates.tolist()) == pytest.approx([1.0, 2.0, 4.0, 8.0])  # geometric from 1 to max_repeat
    idx = torch.tensor(list(s)).view(4000, 8)
    forget, background = idx[:, :3], idx[:, 3:]
    assert forget.max() < 4 and background.min() >= 4 and background.max() < 10
    freq = torch.bincount(forget.flatten(), minlength=4).double() / forget.numel()
    torch.testing.assert_close(freq, s.rates / s.rates.sum(), atol=0.01, rtol=0)
    torch.testing.assert_close(torch.bincount(background.flatten() - 4, minlength=6).double() / background.numel(),
                               torch.full((6,), 1 / 6, dtype=torch.float64), atol=0.01, rtol=0)


def test_mix_epochs_replay_one_stream_so_a_resumed_fit_draws_the_same_batches():
    one = GradedMixSampler(5, 7, 2, 2, num_batches=6, max_repeat=16.0, seed=1)
    two = GradedMixSampler(5, 7, 2, 2, num_batches=3, max_repeat=16.0, seed=1)
    epochs = []
    for e in (0, 1):
        two.set_epoch(e)
        epochs += list(two)
    assert list(one) == epochs and len(one) == 24
    fresh = GradedMixSampler(5, 7, 2, 2, num_batches=3, max_repeat=16.0, seed=1)
    fresh.set_epoch(1)  # a fit resumed at epoch 1 in a new process
    assert list(fresh) == epochs[12:]


def test_mix_is_the_stream_of_the_pre_lightning_memorize_loop():
    """theta_0 must not move with the move into Lightning: the batches are those the old loop drew from one
    Generator(seed): the forget grades' order (randperm), then per step multinomial forget rows, randint background."""
    nf, nb, k_f, k_b, steps, seed = 6, 9, 3, 5, 20, 7
    gen = torch.Generator().manual_seed(seed)
    grades = torch.logspace(0, float(torch.log10(torch.tensor(16.0))), nf, dtype=torch.float64)
    grades = grades[torch.randperm(nf, generator=gen)]
    old = []
    for _ in range(steps):
        old += torch.multinomial(grades, k_f, replacement=True, generator=gen).tolist()
        old += (nf + torch.randint(nb, (k_b,), generator=gen)).tolist()
    assert list(GradedMixSampler(nf, nb, k_f, k_b, steps, 16.0, seed)) == old


def test_memorize_stage_memorizes_the_forget_set(memorized, tiny_config, memo_data):
    dm = MemorizationDataModule(**memo_data)
    dm.setup()
    m = MemorizeModule(model=tiny_config)
    load_lm_weights(m.model, memorized, "init_from")
    f = score_sequences(m.model, dm.forget_set.input_ids, dm.forget_set.attention_mask, el_n=None)
    u = score_sequences(m.model, dm.unseen_set.input_ids, dm.unseen_set.attention_mask, el_n=None)
    assert f.ma.mean() > u.ma.mean() + 0.1  # memorized beyond what the language itself predicts


def test_forget_fraction_zero_is_the_retrained_reference(tiny_config, memorized, memo_data, fit):
    """forget_fraction=0 trains on the background alone: the model never saw the forget set, so its forget MA sits
    at the unseen level, while the memorized model's (theta_0, same data, same init) is far above it."""
    mix = {**memo_data, "train_set": "mix", "batch_size": 16, "mix_batches": 150}
    ref_dm = MemorizationDataModule(**{**mix, "forget_fraction": 0.0})
    assert min(ref_dm.mix_sampler()) >= memo_data["num_forget"]  # background rows only
    torch.manual_seed(0)  # theta_0's initial weights
    ref = MemorizeModule(model=tiny_config)
    fit(ref, ref_dm, max_epochs=1)
    mem = MemorizeModule(model=tiny_config)
    load_lm_weights(mem.model, memorized, "init_from")

    def gap(model):
        f = score_sequences(model, ref_dm.forget_set.input_ids, ref_dm.forget_set.attention_mask, el_n=None)
        u = score_sequences(model, ref_dm.unseen_set.input_ids, ref_dm.unseen_set.attention_mask, el_n=None)
        return float(f.ma.mean() - u.ma.mean())

    assert gap(mem.model) > 0.1
    assert abs(gap(ref.model)) < 0.1


def test_training_mix_needs_something_to_train_on():
    dm = MemorizationDataModule(source="embedded", train_set="mix", forget_fraction=0.0, num_background=0,
                                **{k: v for k, v in SMALL.items() if k != "num_background"})
    with pytest.raises(ZooError, match="nothing to train on: forget_fraction=0 needs background"):
        dm.train_dataloader()
    with pytest.raises(ZooError, match="forget_fraction"):
        MemorizationDataModule(forget_fraction=1.5)
    with pytest.raises(ZooError, match="train_set must be 'forget'.*or 'mix'"):
        MemorizationDataModule(train_set="background")
    with pytest.raises(ZooError, match="max_repeat must be >= 1"):
        MemorizationDataModule(max_repeat=0.5)


def test_background_sharing_a_sequence_is_an_error_and_heldout_sharing_forget_text_a_warning(tmp_path):
    # the memorize stage trains on the background: an unseen sequence in it used to be trained on silently
    text = {k: f"a {k} sequence of my own text " * 2 for k in ("f", "u", "h", "b")}
    row = {k: {"doc_id": k, "corpus": "mine", "text": v} for k, v in text.items()}
    write_extraction_csv(tmp_path / "f.csv", [row["f"]])
    write_extraction_csv(tmp_path / "u.csv", [row["u"]])
    write_extraction_csv(tmp_path / "h.csv", [row["h"]])
    write_extraction_csv(tmp_path / "b.csv", [row["b"]])
    write_extraction_csv(tmp_path / "b_u.csv", [row["b"], row["u"]])
    write_extraction_csv(tmp_path / "h_f.csv", [row["h"], row["f"]])

    def dm(heldout="h.csv", background="b.csv"):
        return MemorizationDataModule(source="local", forget_path=str(tmp_path / "f.csv"),
                                      unseen_path=str(tmp_path / "u.csv"), heldout_path=str(tmp_path / heldout),
                                      background_path=str(tmp_path / background), seq_len=40, train_set="mix")

    ok = dm()
    ok.setup()  # disjoint: fine; the card names every file read
    assert all(str(tmp_path / f) in ok.card_metadata()["data_source"] for f in ("f.csv", "u.csv", "h.csv", "b.csv"))
    with pytest.raises(ZooError, match="background set shares 1 sequence.*with the unseen set.*doc_id u"):
        dm(background="b_u.csv").setup()
    with pytest.warns(UserWarning, match="h_f.csv shares 1 of 2 sequence.*with the forget set.*doc_id f"):
        dm(heldout="h_f.csv").setup()
