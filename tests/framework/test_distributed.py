"""Which commands run in one process, and how: evaluation always, a module's training where it says so; "auto"
devices resolve to one there, explicit ones give a note (evaluation) or a one-line error (training)."""

from __future__ import annotations

import types

import pytest
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher
from zoo_toy import ToyRegressor

from callbacks.distributed import DistributedSettings
from zoo.checks import one_process_reason, requested_processes
from zoo.cli import main
from zoo.errors import ZooError


@pytest.mark.parametrize("devices, nodes, expected", [
    (2, 1, 2), ("2", 1, 2), ("0,1", 1, 2), ([0, 1, 2], 1, 3), (1, 2, 2), (1, None, 1),
    ("auto", 1, None), (-1, 1, None), ("-1", 4, None), (None, 1, None),
])
def test_requested_processes_reads_lightnings_forms(devices, nodes, expected):
    assert requested_processes(devices, nodes) == expected


@pytest.fixture
def world_seen(monkeypatch):
    """A CPU that Lightning sees as two devices ("auto" would start DDP on both); records the world size each
    command's trainer ends up with. A launch of processes fails the test instead of re-running pytest."""
    seen: list[int] = []
    monkeypatch.setattr(CPUAccelerator, "auto_device_count", staticmethod(lambda: 2))

    def no_launch(self, function, *args, **kwargs):
        raise AssertionError("a second process was launched")

    monkeypatch.setattr(_SubprocessScriptLauncher, "launch", no_launch)
    real_setup = DistributedSettings.setup
    monkeypatch.setattr(DistributedSettings, "setup",
                        lambda self, trainer, module, stage: (seen.append(trainer.world_size),
                                                              real_setup(self, trainer, module, stage))[1])
    return seen


def test_auto_devices_evaluate_in_one_process(in_tmp, toy_config, world_seen, capsys):
    assert main(["test", "--config", str(toy_config), "--trainer.devices", "auto", "--wandb_mode", "disabled"]) == 0
    assert world_seen == [1]
    assert "instead of" not in capsys.readouterr().err  # "auto" is no request: no note


def test_explicit_devices_evaluate_in_one_process_with_a_note(in_tmp, toy_config, world_seen, capsys):
    assert main(["test", "--config", str(toy_config), "--trainer.devices", "2", "--trainer.strategy", "ddp",
                 "--wandb_mode", "disabled"]) == 0
    assert world_seen == [1]
    err = capsys.readouterr().err
    assert "evaluation (test) runs in one process" in err and "instead of 2" in err


def test_single_process_module_trains_in_one_process(in_tmp, toy_config, world_seen, monkeypatch, capsys):
    monkeypatch.setattr(ToyRegressor, "single_process", "a reason of the toy's", raising=False)
    fit = ["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]
    assert main([*fit, "--trainer.devices", "auto"]) == 0
    assert world_seen == [1]
    assert main([*fit, "--trainer.devices", "2"]) == 2  # asked for explicitly: refused before anything is built
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("zoo: error:")]
    assert len(err) == 1 and "ToyRegressor trains in one process: a reason of the toy's" in err[0]
    assert world_seen == [1]


def test_a_module_that_may_be_split_keeps_auto_devices(in_tmp, toy_config, world_seen):
    # the toy has no `single_process`: "auto" stays Lightning's (here: two processes, which the guard stops)
    with pytest.raises(AssertionError, match="a second process was launched"):
        main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--trainer.devices", "auto",
              "--wandb_mode", "disabled"])


def test_a_launcher_that_forces_several_processes_is_stopped_at_setup():
    # e.g. an evaluation started under torchrun or srun with a world size the config did not name
    trainer = types.SimpleNamespace(world_size=4, strategy=object())
    with pytest.raises(ZooError, match=r"evaluation \(test\) runs in one process.*has 4 processes"):
        DistributedSettings().setup(trainer, ToyRegressor(), "test")
    DistributedSettings().setup(types.SimpleNamespace(world_size=4, strategy=object()), ToyRegressor(), "fit")


def test_one_process_reason_reads_the_class_or_its_path():
    assert one_process_reason("zoo.gfnpg.GFNPGModule", "fit").startswith("GFNPGModule trains in one process")
    assert one_process_reason("zoo.diffoas.NeuralOperatorModule", "fit") is None
    assert one_process_reason(ToyRegressor, "validate").startswith("evaluation (validate)")
