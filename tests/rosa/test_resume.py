"""A RoSA fit that makes its mask resumes exactly from a step checkpoint inside or at the end of the Fisher
collection (README: `zoo fit --ckpt_path`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from resume_check import differences, fit_keeping_every_checkpoint, training_state

from zoo.cli import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "rosa_gsm8k.yaml"
# 2 LoRA-only steps, then the Fisher over the micro-batches of steps 3 and 4, the mask, and step 5 with it;
# last.ckpt after every step
ARGS = ["--config", str(CONFIG), "--wandb_mode", "disabled", "--trainer.max_steps", "5",
        "--model.init_args.mask_grad_steps", "2", "--checkpoint_every_n_steps", "1"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    try:
        d = tmp_path_factory.mktemp("straight")
        return fit_keeping_every_checkpoint(ARGS, d, monkeypatch)
    finally:
        monkeypatch.undo()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("step", [3, 4], ids=["inside-the-collection", "at-its-last-step"])
def test_a_fit_resumed_during_the_mask_collection_ends_as_the_uninterrupted_one(in_tmp, straight, step):
    """At step 3 the checkpoint holds the Fisher sums of step 3's micro-batches, at step 4 the mask (both were lost:
    the resumed fit collected again over later micro-batches and made another mask)."""
    assert sorted(straight) == [1, 2, 3, 4, 5]
    assert main(["fit", *ARGS, "--run_dir", str(in_tmp / "resumed"), "--ckpt_path", str(straight[step])]) == 0
    want, got = training_state(straight[5]), training_state(in_tmp / "resumed" / "checkpoints" / "last.ckpt")
    assert bool(want["state_dict"]["model.model.layers.0.self_attn.q_proj.sparse_ready"])
    assert not differences(want, got)


@pytest.mark.timeout(300)
def test_a_mask_stage_resumed_from_its_last_step_stops_there(in_tmp, monkeypatch):
    """`stop_after_mask`: the step that makes the mask ends the fit; a fit resumed from that step's checkpoint
    (a run killed before it ended) made no further step (it used to train one step more)."""
    args = ["--config", str(CONFIG.with_name("rosa_gsm8k_mask.yaml")), "--wandb_mode", "disabled",
            "--checkpoint_every_n_steps", "1"]
    saved = fit_keeping_every_checkpoint(args, in_tmp / "straight", monkeypatch)
    assert max(saved) == 3
    assert main(["fit", *args, "--run_dir", str(in_tmp / "resumed"), "--ckpt_path", str(saved[3])]) == 0
    assert not differences(training_state(saved[3]), training_state(in_tmp / "resumed" / "checkpoints" / "last.ckpt"))
