"""Resume after SIGKILL gives the weights of an uninterrupted run; DDP on 2 CPU processes matches 1 process."""

from __future__ import annotations

import os
import signal
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from zoo.cli import main


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


TOY = Path(__file__).resolve().parents[1] / "support" / "toy.yaml"


def _state(ckpt: Path) -> tuple[dict, dict, int]:
    payload = torch.load(ckpt, map_location="cpu", weights_only=True)
    return payload["state_dict"], payload["optimizer_states"][0], payload["global_step"]


# 8 batches of 8 per epoch (shuffled), 2 micro-batches per optimizer step: 4 steps per epoch, 12 in all; each step
# draws input noise from the global RNGs (torch, NumPy, Python), and the rate halves as each epoch ends (the
# module's hook, which runs after callbacks' hooks: an epoch-end last.ckpt written before it lost the decay);
# last.ckpt every `every` optimizer steps (the case's) and at every epoch end.
RESUME = ["--trainer.max_epochs", "3", "--trainer.accumulate_grad_batches", "2", "--data.init_args.shuffle", "true",
          "--model.init_args.optimizer", "adam", "--model.init_args.noise", "0.1",
          "--model.init_args.epoch_decay", "0.5", "--wandb_mode", "disabled"]


def _fit_killed_at(args: list[str], kill_at: list[int]) -> None:
    """A real `zoo fit` process that SIGKILLs itself at optimizer step kill_at[0], micro-batch kill_at[1]."""
    proc = subprocess.run(["zoo", "fit", *args], capture_output=True, text=True, check=False,
                          env={**os.environ, "ZOO_TOY_KILL_AT": ",".join(map(str, kill_at))})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("straight")
    subprocess.run(["zoo", "fit", "--config", str(TOY), *RESUME, "--run_dir", str(d)], check=True,
                   capture_output=True)
    return _state(d / "checkpoints" / "last.ckpt")


@pytest.mark.timeout(300)  # subprocesses: slow only on a busy machine (about 15 s each when idle)
@pytest.mark.parametrize("kill_at, saved_at, every, extra", [
    ([6, 0], 6, 3, []),  # right after the step-6 checkpoint, mid-epoch 1
    ([7, 1], 6, 3, []),  # mid-accumulation: one micro-batch of step 7 done
    ([4, 0], 4, 3, []),  # at an epoch boundary (the epoch-end checkpoint)
    ([10, 1], 9, 3, []),  # mid-accumulation in the last epoch, after the step-9 checkpoint
    ([4, 0], 4, 2, []),  # a step checkpoint due on an epoch's last batch (a resume from there used to skip an epoch)
    # at an epoch boundary under max_steps, where Lightning tells the sampler the wrong epoch (same 12 steps)
    ([4, 0], 4, 3, ["--trainer.max_epochs", "-1", "--trainer.max_steps", "12"]),
])
def test_sigkill_then_resume_is_bit_exact_with_shuffled_data(in_tmp, toy_config, straight_run, kill_at, saved_at,
                                                             every, extra):
    """A real `zoo fit` process SIGKILLs itself at a chosen point; resuming from its last.ckpt ends with the
    weights and the optimizer state of the uninterrupted run, bit for bit (the shuffled order and the random
    draws continue)."""
    run = in_tmp / "killed"
    common = ["--config", str(toy_config), *RESUME, *extra, "--checkpoint_every_n_steps", str(every),
              "--run_dir", str(run)]
    _fit_killed_at(common, kill_at)
    last = run / "checkpoints" / "last.ckpt"
    assert _state(last)[2] == saved_at
    assert main(["fit", *common, "--ckpt_path", str(last)]) == 0
    weights, optim, step = _state(last)
    ref_weights, ref_optim, ref_step = straight_run
    assert step == ref_step == 12
    for k in ref_weights:
        assert torch.equal(weights[k], ref_weights[k]), k
    for pid, st in ref_optim["state"].items():
        for k, v in st.items():
            assert torch.equal(optim["state"][pid][k], v), (pid, k)


@pytest.mark.timeout(300)
def test_a_fit_bounded_by_steps_and_epochs_resumed_at_an_epoch_end_says_how_to_keep_its_length(in_tmp, toy_config,
                                                                                                straight_run):
    """Lightning counts the epoch such a fit resumes at twice and stops it by that count one epoch early: the
    resume says so and names the max_epochs that keeps the uninterrupted run's length, which then ends exact."""
    run = in_tmp / "killed"
    common = ["--config", str(toy_config), *RESUME, "--trainer.max_steps", "12", "--checkpoint_every_n_steps", "3"]
    _fit_killed_at([*common, "--run_dir", str(run)], [4, 0])
    killed = in_tmp / "killed.ckpt"
    killed.write_bytes((run / "checkpoints" / "last.ckpt").read_bytes())
    with pytest.warns(UserWarning, match="counts that epoch twice.*--trainer.max_epochs 4"):
        assert main(["fit", *common, "--run_dir", str(in_tmp / "same"), "--ckpt_path", str(killed)]) == 0
    assert _state(in_tmp / "same" / "checkpoints" / "last.ckpt")[2] == 8  # one epoch short of 12
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["fit", *common, "--trainer.max_epochs", "4", "--run_dir", str(in_tmp / "more"),
                     "--ckpt_path", str(killed)]) == 0
    assert not [w for w in seen if "counts that epoch twice" in str(w.message)]
    weights, _, step = _state(in_tmp / "more" / "checkpoints" / "last.ckpt")
    assert step == 12 and all(torch.equal(weights[k], v) for k, v in straight_run[0].items())


@pytest.mark.timeout(900)  # hang guard: two subprocess trainings, slow only on a busy machine
def test_ddp_two_cpu_processes_match_single_process(in_tmp, toy_config):
    # Global batch 8 both ways: 2 processes x 4 with DistributedSampler (no shuffle) vs 1 process x 8.
    base = ["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]
    single = subprocess.run(["zoo", *base, "--run_name", "single"], capture_output=True, text=True, timeout=400)
    assert single.returncode == 0, single.stderr[-2000:]
    ddp = subprocess.run(["zoo", *base, "--run_name", "ddp", "--trainer.strategy", "ddp",
                          "--trainer.devices", "2", "--data.init_args.batch_size", "4",
                          "--trainer.use_distributed_sampler", "false"],
                         capture_output=True, text=True, timeout=480)
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    assert len(list(Path("runs/ddp").iterdir())) == 1, "all ranks share rank 0's run dir"
    w1 = _weights(next(Path("runs/single").glob("*/checkpoints/last.ckpt")))
    w2 = _weights(next(Path("runs/ddp").glob("*/checkpoints/last.ckpt")))
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-5, atol=1e-6)
