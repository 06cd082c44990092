"""A run on CPU uses PyTorch's deterministic kernels unless its config says otherwise, and only while it lasts."""

from __future__ import annotations

import pytest
import torch

from zoo.cli import main

PROBE = ["--trainer.callbacks+=zoo_toy.DeterminismProbe", "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]


@pytest.fixture
def mode_off():
    torch.use_deterministic_algorithms(False)  # torch's default, whatever an earlier test in this process left
    yield
    torch.use_deterministic_algorithms(False)


def test_a_cpu_run_adds_in_one_order_and_leaves_the_mode_as_it_found_it(in_tmp, toy_config, mode_off):
    from zoo_toy import DeterminismProbe

    assert main(["fit", "--config", str(toy_config), *PROBE]) == 0
    assert DeterminismProbe.seen == {"mode": True, "repeats": True}
    assert not torch.are_deterministic_algorithms_enabled()  # set back when the run ended
    assert torch.utils.deterministic.fill_uninitialized_memory  # torch's default, also set back


def test_a_run_that_fails_also_sets_the_mode_back(in_tmp, toy_config, mode_off, monkeypatch):
    monkeypatch.setenv("ZOO_TOY_INTERRUPT_AT", "1")  # Ctrl-C at step 1
    assert main(["fit", "--config", str(toy_config), *PROBE]) != 0
    assert not torch.are_deterministic_algorithms_enabled()
    assert main(["fit", "--config", str(toy_config), *PROBE, "--model.init_args.hidden", "0"]) != 0  # bad config
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("value, mode", [("false", False), ("true", True)])
def test_a_config_that_chooses_is_obeyed(in_tmp, toy_config, mode_off, value, mode):
    # Lightning applies the choice for the process, not the run (the fixture sets it back)
    assert main(["fit", "--config", str(toy_config), *PROBE, "--trainer.deterministic", value]) == 0
    from zoo_toy import DeterminismProbe

    assert DeterminismProbe.seen["mode"] is mode
