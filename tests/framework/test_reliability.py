"""Resume after SIGKILL gives the weights of an uninterrupted run; DDP on 2 CPU processes matches 1 process."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from zoo.cli import main


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(in_tmp, toy_config):
    common = ["--config", str(toy_config), "--trainer.max_epochs", "2", "--checkpoint_every_n_steps", "3",
              "--wandb_mode", "disabled"]
    assert main(["fit", *common, "--run_name", "straight"]) == 0
    straight = next(Path("runs/straight").iterdir())

    # Slow steps so the kill lands inside epoch 0 (8 steps), after a step-3 or step-6 checkpoint.
    proc = subprocess.Popen(["zoo", "fit", *common, "--run_name", "killed", "--model.init_args.sleep", "0.4"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 90
    last = None
    while time.time() < deadline:
        found = list(Path("runs/killed").glob("*/checkpoints/last.ckpt"))
        if found and found[0].stat().st_size > 0:
            last = found[0]
            time.sleep(0.1)  # let the atomic write finish
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert last is not None, "the killed run never wrote last.ckpt"
    step = torch.load(last, weights_only=True)["global_step"]
    assert 0 < step < 8, f"kill was not mid-epoch (step {step})"

    assert main(["fit", *common, "--ckpt_path", str(last)]) == 0
    resumed = _weights(last)  # the resumed run continues in the same run dir
    reference = _weights(straight / "checkpoints" / "last.ckpt")
    assert torch.load(last, weights_only=True)["global_step"] == 16
    for k in reference:
        torch.testing.assert_close(resumed[k], reference[k], rtol=0, atol=1e-6)


@pytest.mark.timeout(300)
def test_ddp_two_cpu_processes_match_single_process(in_tmp, toy_config):
    # Global batch 8 both ways: 2 processes x 4 with DistributedSampler (no shuffle) vs 1 process x 8.
    base = ["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]
    single = subprocess.run(["zoo", *base, "--run_name", "single"], capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr[-2000:]
    ddp = subprocess.run(["zoo", *base, "--run_name", "ddp", "--trainer.strategy", "ddp",
                          "--trainer.devices", "2", "--data.init_args.batch_size", "4",
                          "--trainer.use_distributed_sampler", "false"],
                         capture_output=True, text=True, timeout=280)
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    assert len(list(Path("runs/ddp").iterdir())) == 1, "all ranks share rank 0's run dir"
    w1 = _weights(next(Path("runs/single").glob("*/checkpoints/last.ckpt")))
    w2 = _weights(next(Path("runs/ddp").glob("*/checkpoints/last.ckpt")))
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-5, atol=1e-6)
