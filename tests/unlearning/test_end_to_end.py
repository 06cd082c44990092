"""End to end: memorize (embedded) -> unlearn with the metrics callback -> forget set at the unseen level."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest

from callbacks.unlearning_metrics import TABLE, UnlearningMetrics
from datamodules.memorization import MemorizationDataModule
from zoo.unlearning import UnlearningModule
from zoo.unlearning.metrics import score_sequences

# same data settings as test_data.test_memorize_phase_grades_and_caches: the memorized weights come from the cache
DATA = dict(seq_len=32, num_forget=8, num_unseen=8, num_heldout=2, num_background=8, batch_size=8,
            memorize_steps=150)


def unlearn(dm, module, tmp_path, max_epochs: int) -> tuple[dict, dict]:
    """Fit `module` on `dm` with the metrics callback (evaluated at the start and the end only); (init, final)."""
    cb = UnlearningMetrics(el_n=10, every_n_epochs=1000)
    trainer = L.Trainer(accelerator="cpu", max_epochs=max_epochs, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb],
                        default_root_dir=str(tmp_path))
    trainer.fit(module, dm)
    return cb.history[0], cb.history[-1]


@pytest.mark.parametrize("method", ["sga"])
def test_memorize_then_unlearn(tmp_path, tiny_config, memo_cache, method):
    dm = MemorizationDataModule(source="embedded", cache_dir=memo_cache, **DATA)
    init, final = unlearn(dm, UnlearningModule(model=tiny_config, method=method, lr=3e-4, el_n=10), tmp_path, 40)
    print(init, final, sep="\n")
    assert init["outliers_ma"] >= 4 and init["forget_ma"] > init["ma_threshold"] + 0.1  # something to unlearn
    assert final["outliers_ma"] == 0  # SGA: no forget sequence left above the unseen MA level
    assert final["forget_ma"] <= final["ma_threshold"]
    assert final["forget_el10"] <= max(final["el_threshold"], 0.02)
    assert final["attack_auc"] < init["attack_auc"]
    # utility: a 30k-parameter LM whose text is mostly the forget set loses a good part of it (see the card), but
    # stays far closer to the memorized model than to an untrained one
    fresh = UnlearningModule(model=tiny_config).model
    h = dm.heldout_set
    ppl_untrained = score_sequences(fresh, h.input_ids, h.attention_mask, el_n=None).perplexity
    assert final["utility_ppl"] < 5.0 * init["utility_ppl"]
    assert final["utility_ppl"] < 0.25 * ppl_untrained
    rows = list(csv.DictReader((Path(tmp_path) / TABLE).open()))
    assert {r["stage"] for r in rows} == {"init", "fit"} and {r["set"] for r in rows} == {"forget", "unseen"}


# a model that knows much more than its forget set: 1,024 background sequences (as in `zoo.unlearning.repro`)
RICH = dict(seq_len=32, num_forget=8, num_unseen=8, num_heldout=8, num_background=1024, batch_size=8,
            memorize_steps=900)


@pytest.mark.timeout(300)
def test_sga_keeps_utility_near_when_the_model_knows_more_than_its_forget_set(tmp_path, tiny_config, memo_cache):
    cfg = {**tiny_config, "hidden_size": 64, "intermediate_size": 128}
    dm = MemorizationDataModule(source="embedded", cache_dir=memo_cache, **RICH)
    init, final = unlearn(dm, UnlearningModule(model=cfg, method="sga", lr=1e-4, el_n=10), tmp_path, 100)
    assert init["outliers_ma"] == 8 and final["outliers_ma"] == 0
    assert final["forget_el10"] <= max(final["el_threshold"], 0.05)
    assert final["attack_auc"] < init["attack_auc"]
    # measured 1.51 -> 2.66 (1.77x) held-out perplexity; the memorized-only tiny setting above loses far more
    assert final["utility_ppl"] < 2.0 * init["utility_ppl"]
