"""Pretrained backbones missing on an offline machine end in one line naming the weights and how to get them (they
used to reach the user as jsonargparse's "Does not validate against any of the Union subtypes" traceback)."""

from __future__ import annotations

from urllib.error import URLError

import pytest
from huggingface_hub import constants

from zoo.backbones import timm_model, torchvision_model
from zoo.errors import ZooError


@pytest.fixture
def empty_caches(monkeypatch, tmp_path):
    """Offline (tests/conftest.py), with empty HF and torch caches, whatever this machine has downloaded."""
    import torchvision.models._api as api

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))

    def offline(url, *args, **kwargs):  # what torchvision meets without a network
        raise URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(api, "load_state_dict_from_url", offline)
    return tmp_path


def test_timm_weights_missing_offline_name_the_hub_repo(empty_caches):
    with pytest.raises(ZooError, match=r"pretrained weights of timm model 'resnet18' are not in the HF cache "
                                       r"\(LocalEntryNotFoundError\); fetch them once with `huggingface-cli download "
                                       r"timm/resnet18.a1_in1k` or set pretrained: false$"):
        timm_model("resnet18", True, fallback="set pretrained: false")
    assert timm_model("resnet18", False, num_classes=0).num_features == 512  # no weights needed


def test_unknown_timm_model_is_one_line(empty_caches):
    with pytest.raises(ZooError, match=r"timm model 'resnet_nineteen' could not be built \(Unknown model"):
        timm_model("resnet_nineteen", False)


def test_torchvision_weights_missing_offline_name_the_file_and_cache(empty_caches):
    import torchvision

    weights = torchvision.models.ResNet18_Weights.IMAGENET1K_V1
    with pytest.raises(ZooError, match=r"resnet18 weights ResNet18_Weights.IMAGENET1K_V1 are not in torch's cache "
                                       r"\(URLError\); fetch https://download.pytorch.org/models/resnet18-f37072fd.pth "
                                       r"once into .*/torch/hub/checkpoints/ or use none$"):
        torchvision_model("resnet18", weights, fallback="use none")
    assert torchvision_model("resnet18", None).fc.in_features == 512


def test_paper_modules_use_them(empty_caches):
    from datamodules.byzantine import resnet18_features
    from zoo.bggn import BiasClassifierModule
    from zoo.vpdm.module import FeatureExtractor

    with pytest.raises(ZooError, match="set model.init_args.pretrained_backbone: false$"):
        BiasClassifierModule(backbone="resnet18", pretrained_backbone=True)
    with pytest.raises(ZooError, match="download timm/efficientnet_b4.ra2_in1k` or set model.init_args.pretrained: "
                                       "false$"):
        FeatureExtractor("efficientnet_b4", True, out_indices=[1, 2], feature_size=14)
    import torch

    with pytest.raises(ZooError, match="download timm/resnet18.tv_in1k` or use source=rdata/npz$"):
        resnet18_features(torch.zeros(1, 1, 8, 8, dtype=torch.uint8), "resnet18.tv_in1k", 32, 1)
