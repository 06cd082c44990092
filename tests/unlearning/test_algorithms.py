"""Oracles for the unlearning updates: task arithmetic identities, GA = -fine-tuning step, SGA no-op."""

from __future__ import annotations

from collections import defaultdict

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


def test_adam_state_is_reset_when_task_arithmetic_starts_after_ascent(tmp_path, tiny_config):
    """TA ascends for one epoch (one AdamW step), then switches: the optimizer state is empty right after the
    switch (it held the ascent's moments just before), so fine-tuning's first step is a fresh Adam step from
    theta_s (cards/unlearning.md: "Adam's state is reset when fine-tuning starts")."""
    lr = 1e-3
    torch.manual_seed(0)
    m = UnlearningModule(model=tiny_config, method="ta", lr=lr, torch_dtype="float64", ma_threshold=-1.0,
                         el_threshold=-1.0)
    theta0 = _params(m)
    ref = UnlearningModule(model=tiny_config, torch_dtype="float64").model
    # the switch test reads mean MA < switch_level: never before the first ascent epoch has ended, always after
    m.switch_level = lambda: float("inf") if m.epochs_done >= 1 else float("-inf")
    seen = []
    start = m._start_task_arithmetic

    def spy():
        opts = m.trainer.optimizers
        seen.append(("before", m.global_step, [len(o.state) for o in opts],
                     [int(s["step"]) for o in opts for s in o.state.values()]))
        start()
        seen.append(("after", m.global_step, [len(o.state) for o in opts], [type(o.state) for o in opts]))

    m._start_task_arithmetic = spy
    dm = _dm(tmp_path)
    _fit(m, dm, max_epochs=2)  # epoch 1: gradient ascent (one step), switch; epoch 2: fine-tuning (one step)
    n_params = len(theta0)
    assert [s[:3] for s in seen] == [("before", 1, [n_params]), ("after", 1, [0])]
    assert seen[0][3] == [1] * n_params  # the ascent's single Adam step
    assert seen[1][3] == [defaultdict]  # torch's optimizers create state entries on access
    assert m.phase == "finetune" and m._base is not None and m._theta is not None
    base, theta = m._base, m._theta
    assert max(float((base[k] - theta0[k]).abs().max()) for k in base) > 1e-4  # the ascent moved theta_s
    # the fine-tuned weights are one fresh AdamW step from theta_s (the kept ascent moments would give another)
    ref.load_state_dict(base, strict=False)
    f = dm.forget_set
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    opt.zero_grad()
    lm_loss(ref(input_ids=f.input_ids, attention_mask=f.attention_mask).logits, f.input_ids,
            f.attention_mask)[0].backward()
    opt.step()
    for k, p in ref.named_parameters():
        torch.testing.assert_close(theta[k], p.detach(), rtol=0, atol=1e-12)


def _forget_ma(model, f) -> float:
    """Mean teacher-forced memorization accuracy of the forget set (greedy next token == the true one), by hand."""
    with torch.no_grad():
        logits = model(input_ids=f.input_ids, attention_mask=f.attention_mask).logits
    valid = f.attention_mask[:, 1:].bool()
    correct = (logits[:, :-1].argmax(-1) == f.input_ids[:, 1:]) & valid
    return float((correct.sum(1).double() / valid.sum(1)).mean())


def test_ta_lambda_grid_picks_the_smallest_lambda_meeting_the_rule(tmp_path, tiny_config):
    """theta_0 memorizes D_f; TA fine-tunes one epoch from it (switch at once) and edits with each lambda of the
    grid in increasing order: the first that meets the rule (mean forget MA < gamma_MA; stop_on_el off) is kept.
    The grid's MA curve is computed here by hand: the smaller lambdas miss gamma_MA, several larger meet it."""
    lr, gamma, grid = 1e-3, 0.5, [32.0, 8.0, 1.0, 16.0, 4.0, 2.0]  # unsorted: "smallest", not "first listed"
    dm = _dm(tmp_path)
    dm.prepare_data()
    dm.setup("fit")
    f = dm.forget_set
    torch.manual_seed(0)
    m = UnlearningModule(model=tiny_config, method="ta", lr=lr, torch_dtype="float64", ma_threshold=gamma,
                         el_threshold=-1.0, stop_on_el=False, switch_ma=2.0, ta_lambda_grid=grid)
    memo = torch.optim.AdamW(m.model.parameters(), lr=1e-2)
    for _ in range(60):  # theta_0: D_f memorized
        memo.zero_grad()
        lm_loss(m.model(input_ids=f.input_ids, attention_mask=f.attention_mask).logits, f.input_ids,
                f.attention_mask)[0].backward()
        memo.step()
    theta0 = _params(m)
    # independently: theta = one AdamW fine-tuning step from theta_0, the edit theta_0 - lam (theta - theta_0)
    ref = UnlearningModule(model=tiny_config, torch_dtype="float64").model
    ref.load_state_dict(m.model.state_dict())
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    opt.zero_grad()
    lm_loss(ref(input_ids=f.input_ids, attention_mask=f.attention_mask).logits, f.input_ids,
            f.attention_mask)[0].backward()
    opt.step()
    theta = {k: v.detach().clone() for k, v in ref.named_parameters()}
    edits = {lam: {k: theta0[k] - lam * (theta[k] - theta0[k]) for k in theta0} for lam in grid}
    mas = {}
    for lam in sorted(grid):
        ref.load_state_dict(edits[lam], strict=False)
        mas[lam] = _forget_ma(ref, f)
    meets = [lam for lam in sorted(grid) if mas[lam] < gamma]
    expected = min(meets)
    assert _forget_ma(m.model, f) >= gamma  # theta_0 itself is above the level: no stop before the first step
    assert len(meets) >= 2 and any(lam < expected for lam in grid), mas  # a non-trivial grid
    assert min(abs(v - gamma) for v in mas.values()) > 0.02, mas  # no near-tie at gamma

    trainer = _fit(m, dm, max_epochs=3)
    assert m.phase == "done" and m.lambdas == [expected] and m.epochs_done == 1, (m.lambdas, mas)
    assert float(trainer.callback_metrics["train/ta_lambda"]) == expected
    for k, v in _params(m).items():  # the model keeps the edit with that lambda
        torch.testing.assert_close(v, edits[expected][k], rtol=0, atol=1e-12)


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
