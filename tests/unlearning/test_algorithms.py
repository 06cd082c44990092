"""Oracles for the unlearning updates: task arithmetic identities, GA = -fine-tuning step, SGA no-op."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from datamodules.memorization import MemorizationDataModule
from zoo.errors import ZooError
from zoo.unlearning import UnlearningModule
from zoo.unlearning.algorithms import gradient_ascent_loss, lm_loss, select_for_ascent, task_arithmetic


def test_task_arithmetic_identities():
    g = torch.Generator().manual_seed(0)
    theta0 = {"w": torch.randn(4, 3, generator=g, dtype=torch.float64), "b": torch.randn(3, generator=g,
                                                                                          dtype=torch.float64)}
    delta = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in theta0.items()}
    theta_ft = {k: theta0[k] + delta[k] for k in theta0}
    for k, v in task_arithmetic(theta0, theta_ft, 0.0).items():
        assert torch.equal(v, theta0[k])  # lambda = 0 returns theta_0
    for k, v in task_arithmetic(theta0, theta_ft, 1.0).items():
        torch.testing.assert_close(v, theta0[k] - delta[k], rtol=0, atol=1e-15)  # theta_0 - Delta


def test_selective_losses_mask_sequences():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64)
    ids = torch.randint(0, 7, (3, 5))
    mask = torch.ones_like(ids)
    full, _, k = lm_loss(logits, ids, mask)
    only0, _, k0 = lm_loss(logits, ids, mask, torch.tensor([True, False, False]))
    assert k == 3 and k0 == 1
    torch.testing.assert_close(only0, lm_loss(logits[:1], ids[:1], mask[:1])[0])
    torch.testing.assert_close(gradient_ascent_loss(logits, ids, mask)[0], -full)
    assert gradient_ascent_loss(logits, ids, mask, torch.zeros(3, dtype=torch.bool))[0] is None


def _dm(tmp_path, **kw):
    return MemorizationDataModule(source="embedded", seed=0, seq_len=24, num_forget=4, num_unseen=4, num_heldout=2,
                                  num_background=4, batch_size=4, **kw)


def _fit(module, dm, **trainer_kw):
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, **trainer_kw)
    trainer.fit(module, dm)
    return trainer


def _params(m):
    return {k: v.detach().clone() for k, v in m.model.named_parameters()}


def test_one_ga_step_is_minus_one_finetuning_step(tmp_path, tiny_config):
    # same theta_0 (seeded init), same batch, Adam's first step: GA moves by exactly minus the fine-tuning move
    moves = {}
    for method in ("ga", "ta"):  # "ta" with switch_ma 2 fine-tunes on the forget set from the first step
        torch.manual_seed(0)
        m = UnlearningModule(model=tiny_config, method=method, lr=1e-3, torch_dtype="float64", ma_threshold=-1.0,
                             el_threshold=-1.0, switch_ma=2.0)
        theta0 = _params(m)
        _fit(m, _dm(tmp_path), max_steps=1)
        after = _params(m) if method == "ga" else m._theta  # ta: the fine-tuned weights (the model holds the edit)
        moves[method] = {k: v - theta0[k] for k, v in after.items()}
    assert max(v.abs().max() for v in moves["ga"].values()) > 0
    for k in moves["ga"]:
        torch.testing.assert_close(moves["ga"][k], -moves["ta"][k], rtol=0, atol=1e-15)


def test_sga_leaves_parameters_untouched_below_threshold(tmp_path, tiny_config):
    # every sequence below the unseen level: the stopping rule holds before the first step
    torch.manual_seed(0)
    m = UnlearningModule(model=tiny_config, method="sga", lr=1e-2, ma_threshold=1.0, el_threshold=1.0)
    theta0 = _params(m)
    trainer = _fit(m, _dm(tmp_path), max_epochs=3)
    for k, v in _params(m).items():
        assert torch.equal(v, theta0[k])
    assert trainer.current_epoch == 0 and m.phase == "done"


def test_sga_without_top_rule_skips_batches_with_no_sequence_above_its_threshold(tmp_path, tiny_config):
    # mean MA above the (impossible) unseen level, but no sequence at the SGA threshold: no update, then stop
    torch.manual_seed(0)
    m = UnlearningModule(model=tiny_config, method="sga", lr=1e-2, ma_threshold=-1.0, el_threshold=-1.0,
                         sga_threshold=1.01, ascend_on_top=False)
    theta0 = _params(m)
    trainer = _fit(m, _dm(tmp_path), max_epochs=3)
    for k, v in _params(m).items():
        assert torch.equal(v, theta0[k])
    assert trainer.current_epoch == 1 and m.phase == "done"


def test_sga_selection_threshold_and_top_rule():
    ma = torch.tensor([0.2, 0.7, 0.69, 0.9, 0.1], dtype=torch.float64)
    assert select_for_ascent(ma, 0.7).tolist() == [False, True, False, True, False]  # >= as the official code
    assert select_for_ascent(ma, 0.95, top=False).tolist() == [False] * 5
    assert select_for_ascent(ma, 0.95).tolist() == [False, False, False, True, False]  # the batch's most memorized


def test_task_arithmetic_phase_holds_the_edit_of_the_finetuned_weights(tmp_path, tiny_config):
    """TA from theta_0 (switch at once), target never met: after each epoch the model holds theta_0 - lambda
    (theta - theta_0), and fine-tuning resumes from theta (restored), not from the edit: theta after two epochs
    equals two plain Adam fine-tuning steps on the forget set (one batch = the whole forget set)."""
    lam, lr = 3.0, 1e-3
    torch.manual_seed(0)
    m = UnlearningModule(model=tiny_config, method="ta", lr=lr, torch_dtype="float64", ma_threshold=-1.0,
                         el_threshold=-1.0, switch_ma=2.0)
    theta0 = _params(m)
    ref = UnlearningModule(model=tiny_config, torch_dtype="float64").model
    ref.load_state_dict(m.model.state_dict())
    dm = _dm(tmp_path)
    _fit(m, dm, max_epochs=2)
    assert m.phase == "finetune" and m._theta is not None
    theta = m._theta
    for k, v in _params(m).items():
        torch.testing.assert_close(v, theta0[k] - lam * (theta[k] - theta0[k]), rtol=0, atol=1e-12)
    f = dm.forget_set
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    for _ in range(2):
        opt.zero_grad()
        lm_loss(ref(input_ids=f.input_ids, attention_mask=f.attention_mask).logits, f.input_ids,
                f.attention_mask)[0].backward()
        opt.step()
    moved = max(float((theta[k] - theta0[k]).abs().max()) for k in theta)
    assert moved > 1e-4
    for k, p in ref.named_parameters():
        torch.testing.assert_close(theta[k], p.detach(), rtol=0, atol=1e-12)


def test_sgatau_names_the_papers_tau(tiny_config):
    assert UnlearningModule(model=tiny_config, method="sgatau").method == "tau"


def test_unknown_method_is_an_error(tiny_config):
    with pytest.raises(ZooError, match="unknown unlearning method 'foo'"):
        UnlearningModule(model=tiny_config, method="foo")


@pytest.mark.parametrize("kw, match", [
    ({"ta_lambda": 0.0}, "lambda must be > 0"),
    ({"ta_lambda_grid": [1.0, -2.0]}, "lambda must be > 0"),
    ({"outlier_low": 0.6, "outlier_high": 0.15}, "outlier_low 0.6 is above outlier_high 0.15"),
    ({"betas": (0.9, 1.0)}, "betas must lie in"),
    ({"lr": 0.0}, "lr must be > 0, got 0.0"),  # ran and unlearned nothing
    ({"outlier_std": -1.0}, "outlier_std must be >= 0, got -1.0"),  # an inside-out outlier band
])
def test_bad_settings_are_refused(tiny_config, kw, match):
    with pytest.raises(ZooError, match=match):
        UnlearningModule(model=tiny_config, method="tau", **kw)


def test_el_n_below_1_is_refused_where_it_is_set(tiny_config):
    """A 0 reached the scoring of `zoo test` (a TypeError there); each place el_n is set refuses it."""
    from callbacks.unlearning_metrics import UnlearningMetrics
    from zoo.unlearning import MemorizeModule

    for build in (lambda: UnlearningModule(model=tiny_config, el_n=0),
                  lambda: MemorizeModule(model=tiny_config, el_n=0), lambda: UnlearningMetrics(el_n=0)):
        with pytest.raises(ZooError, match="el_n must be >= 1, got 0"):
            build()


def test_task_arithmetic_in_place_matches_the_returned_dict():
    g = torch.Generator().manual_seed(0)
    base = {"a": torch.randn(3, 4, generator=g), "b": torch.randn(5, generator=g)}
    ft = {k: torch.randn(v.shape, generator=g) for k, v in base.items()}
    out = {k: torch.empty_like(v) for k, v in base.items()}
    assert task_arithmetic(base, ft, 0.7, out=out) is out
    for k, v in task_arithmetic(base, ft, 0.7).items():
        torch.testing.assert_close(out[k], v)
