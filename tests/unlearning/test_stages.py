"""The stages of the embedded setting: memorize -> unlearn through `init_from`, the reference read against theta_0's
levels (`levels_from`), every number of the reproduction table logged as a test metric, and the sweep that chains
them."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from callbacks.unlearning_metrics import UnlearningMetrics
from datamodules.memorization import MemorizationDataModule
from zoo.errors import ZooError
from zoo.registry import ROOT
from zoo.unlearning import MemorizeModule, UnlearningModule
from zoo.unlearning.metrics import score_sequences, unseen_thresholds
from zoo.unlearning.module import load_lm_weights

# the columns of the reproduction table (cards/unlearning.md), each a logged test metric
TABLE_METRICS = {"test/epochs", "test/outliers", "test/outliers_high", "test/outliers_low", "test/forget_ma",
                 "test/forget_el10", "test/unseen_ma", "test/attack_auc", "test/attack_auc_perturb",
                 "test/utility_ppl"}


def metrics_callback():
    return UnlearningMetrics(el_n=10, perturbation_attack=True, n_perturbations=4, save_table=False,
                             perturber_kw={"span_length": 1, "ceil_pct": True})


def test_reference_is_read_against_the_levels_of_theta_0(tmp_path, tiny_config, memorized, memo_data):
    """levels_from: the reference's levels are theta_0's unseen levels, exactly, not the reference's own."""
    dm = MemorizationDataModule(**memo_data)
    theta0 = MemorizeModule(model=tiny_config)
    load_lm_weights(theta0.model, memorized, "init_from")
    ref = MemorizeModule(model=tiny_config, levels_from=memorized)  # a random model stands in for the reference
    levels = {}
    for name, m in (("theta0", theta0), ("ref", ref)):
        trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                            default_root_dir=str(tmp_path), callbacks=[metrics_callback()])
        out = trainer.test(m, dm, verbose=False)[0]
        levels[name] = (out["test/ma_threshold"], out["test/el_threshold"], out["test/outlier_low"],
                        out["test/outlier_high"])
        assert TABLE_METRICS - {"test/epochs"} <= set(out)  # no unlearning epochs in a memorize-stage run
    assert levels["ref"] == levels["theta0"]  # the same weights, the same computation: exactly
    own_ma = score_sequences(ref.model, dm.unseen_set.input_ids, dm.unseen_set.attention_mask, el_n=None).ma
    assert abs(float(own_ma.mean()) - levels["ref"][0]) > 0.1  # the reference's own level would be another one


def test_unlearning_starts_from_theta_0_and_logs_every_table_metric(tmp_path, tiny_config, memorized, memo_data):
    dm = MemorizationDataModule(batch_size=8, **memo_data)
    dm.setup()
    theta0 = MemorizeModule(model=tiny_config)
    load_lm_weights(theta0.model, memorized, "init_from")
    expected = unseen_thresholds(score_sequences(theta0.model, dm.unseen_set.input_ids, dm.unseen_set.attention_mask,
                                                 el_n=10))
    m = UnlearningModule(model=tiny_config, method="ga", lr=3e-4, init_from=memorized)
    trainer = L.Trainer(accelerator="cpu", max_epochs=3, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=[metrics_callback()])
    trainer.fit(m, dm)
    # the levels were measured on theta_0 (loaded before fitting started), not on the module's random init
    assert m.unlearning_thresholds() == expected
    ckpt = tmp_path / "unlearned.ckpt"
    trainer.save_checkpoint(ckpt)
    # a fresh module tested from the checkpoint (as `zoo test --ckpt_path` does): the epochs and theta_0's levels
    # come with it
    fresh = UnlearningModule(model=tiny_config, method="ga")
    tester = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                       default_root_dir=str(tmp_path), callbacks=[metrics_callback()])
    out = tester.test(fresh, dm, ckpt_path=str(ckpt), verbose=False)[0]
    assert TABLE_METRICS <= set(out)
    assert out["test/epochs"] == trainer.current_epoch == m.epochs_done
    assert out["test/ma_threshold"] == pytest.approx(expected["ma"], abs=1e-7)  # logged as float32
    assert out["test/outlier_high"] == pytest.approx(expected["high"], abs=1e-7)


def test_init_from_that_does_not_exist_or_does_not_fit_is_a_one_line_error(tmp_path, tiny_config, memorized,
                                                                             memo_data, fit):
    dm = MemorizationDataModule(batch_size=8, **memo_data)
    with pytest.raises(ZooError, match=r"init_from '.*nope.ckpt' does not exist; run the memorize stage first"):
        fit(UnlearningModule(model=tiny_config, init_from=str(tmp_path / "nope.ckpt")), dm, max_epochs=1)
    with pytest.raises(ZooError, match=r"init_from .* matches nothing; run the memorize stage first"):
        fit(UnlearningModule(model=tiny_config, init_from=str(tmp_path / "runs" / "*" / "last.ckpt")), dm,
            max_epochs=1)
    wider = {**tiny_config, "hidden_size": 64}
    with pytest.raises(ZooError, match="does not fit this model: .* differently shaped weights"):
        fit(UnlearningModule(model=wider, init_from=memorized), dm, max_epochs=1)
    with pytest.raises(ZooError, match="levels_from .* does not exist"):
        fit(MemorizeModule(model=tiny_config, levels_from=str(tmp_path / "nope.ckpt")),
            MemorizationDataModule(train_set="mix", **memo_data), max_epochs=1)


def test_each_stage_refuses_the_other_stages_training_set(tiny_config, memo_data, fit):
    with pytest.raises(ZooError, match="UnlearningModule trains on the datamodule's train_set 'forget'.*'mix'"):
        fit(UnlearningModule(model=tiny_config), MemorizationDataModule(train_set="mix", **memo_data), max_epochs=1)
    with pytest.raises(ZooError, match="MemorizeModule trains on .* 'mix'.*serves 'forget'"):
        fit(MemorizeModule(model=tiny_config), MemorizationDataModule(**memo_data), max_epochs=1)


def test_the_sweep_chains_memorize_reference_and_unlearn_per_seed(tmp_path):
    from zoo.sweep import expand, load_sweep

    tasks = expand(load_sweep(ROOT / "configs" / "sweeps" / "unlearning_markov.yaml"), tmp_path)
    by_stage = {}
    for t in tasks:
        by_stage.setdefault(t.stage, []).append(t)
        assert t.verbs == ["fit", "test"]
    assert {t.axes["seed"] for t in by_stage["memorize"]} == {0, 1, 2} and len(by_stage["reference"]) == 3
    assert sorted((t.axes["variant"], t.axes["seed"]) for t in by_stage["unlearn"]) == \
        sorted((v, s) for v in ("ga", "sga", "ta", "tau") for s in (0, 1, 2))
    memorize = {t.axes["seed"]: t.id for t in by_stage["memorize"]}
    for t in by_stage["reference"]:
        assert t.deps == {"memorize": memorize[t.axes["seed"]]}
        assert t.overrides["data.init_args.forget_fraction"] == 0.0
        assert t.overrides["model.init_args.levels_from"] == "${memorize}/checkpoints/last.ckpt"
    for t in by_stage["unlearn"]:
        assert t.deps == {"memorize": memorize[t.axes["seed"]]}
        assert t.overrides["model.init_args.init_from"] == "${memorize}/checkpoints/last.ckpt"
        assert t.overrides["model.init_args.method"] == t.axes["variant"]


def test_stopping_rule_is_strict_on_ma_and_inclusive_on_el(tiny_config, monkeypatch):
    # the official `ma < ma_threshold`: a forget set exactly at the unseen MA level is not yet unlearned; EL_n at its
    # level counts as reached (a small model's unseen EL_n is often exactly 0)
    m = UnlearningModule(model=tiny_config, method="ga", stop_on_el=True)
    el = {"value": 0.0}
    monkeypatch.setattr(m, "unlearning_thresholds", lambda: {"ma": 0.25, "el": 0.0, "low": 0.1, "high": 0.6})
    monkeypatch.setattr(m, "_dm", lambda: type("DM", (), {"forget_set": None})())
    monkeypatch.setattr(m, "evaluate_memorization",
                        lambda name, data: type("S", (), {"el": torch.tensor([el["value"]] * 2)})())
    for ma, el["value"], met in ((0.25, 0.0, False), (0.2499, 0.0, True), (0.2499, 0.01, False)):
        monkeypatch.setattr(m, "_forget_ma", lambda ma=ma: torch.tensor([ma, ma]))
        assert m._target_met() is met, (ma, el["value"])
