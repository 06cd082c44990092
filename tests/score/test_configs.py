"""The paper-scale SCoRe configs against the official scripts' settings (train_stage1.py, trainval_stage2.py,
trainval_ce.py of github.com/amajee11us/SCoRe): the transforms each stage trains on, MedMNIST's channels and flips,
CIFAR-10-LT's imbalance ratio."""

from pathlib import Path

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TWO_STAGE = ["score_cifar10lt", "score_cifar10lt_supcon", "score_cifar100lt", "score_organamnist"]


def _load(stem):
    cfg = yaml.safe_load((CONFIGS / f"{stem}.yaml").read_text())
    return cfg["model"]["init_args"], cfg["data"]["init_args"]


@pytest.mark.parametrize("stem", TWO_STAGE)
def test_two_stage_configs_probe_on_the_official_probe_transform(stem):
    model, data = _load(stem)
    assert model["training"] == "two_stage"
    assert data.get("probe_augment", "crop") == "crop"  # trainval_ce.set_loader: crop 0.2-1 + flip, no colour


def test_ce_baseline_trains_on_trainval_ce_transform():
    model, data = _load("score_cifar10lt_ce")
    assert model["objective"] == "ce" and data["augment"] == "crop" and data["probe_augment"] is None


def test_organamnist_is_loaded_and_augmented_as_the_official_code_does():
    model, data = _load("score_organamnist")
    # as_rgb=True into a 3-channel ResNet; stage 1 crop + flip without colour ops (train_stage1.py's OrganAMNIST
    # branch); flips in both stages
    assert data["as_rgb"] is True and model["in_chans"] == 3
    assert data["augment"] == "crop" and data.get("hflip", True) is True


@pytest.mark.parametrize("stem", ["score_cifar10lt", "score_cifar10lt_supcon", "score_cifar10lt_ce"])
def test_cifar10_lt_configs_use_the_imbalance_ratio_of_the_readme_numbers(stem):
    # the README's CIFAR-10-LT CE 86.44 / FL 91.80 are the IF = 10 column of SCoRe_GLMC/README.md's table
    assert _load(stem)[1]["imbalance_ratio"] == 10


def test_cifar_lt_datamodule_defaults_to_the_official_imbalance_ratio():
    # train_stage1.py / trainval_ce.py: --imbalance_ratio defaults to 10
    from datamodules.cifar_lt import CIFARLTDataModule

    assert CIFARLTDataModule().imbalance_ratio == 10
