"""VPDMModule: frozen backbone, gradients of the one objective, the two conditions, strength 0, refusals."""

import pytest
import torch

from zoo.errors import ZooError
from zoo.vpdm import VPDMModule

TINY = dict(backbone="test_efficientnet", pretrained=False, out_indices=(0, 1, 2), feature_size=4, num_prototypes=4,
            num_train_timesteps=50, block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8,
            num_inference_steps=2, map_sigma=0)


def _batch():
    torch.manual_seed(0)
    return {"image": torch.randn(2, 3, 16, 16), "mask": torch.zeros(2, 1, 16, 16), "label": torch.zeros(2).long(),
            "class_id": torch.zeros(2).long()}


def test_training_step_gradients():
    m = VPDMModule(**TINY)
    m.train()
    assert not m.features.training
    loss = m.training_step(_batch(), 0)
    loss.backward()
    assert m.prototypes.grad is not None and m.prototypes.grad.abs().sum() > 0
    assert all(p.grad is None for p in m.features.parameters())
    assert any(p.grad is not None for p in m.denoiser.parameters())


def test_conditions():
    m = VPDMModule(**TINY)
    x = m.features(_batch()["image"])
    c, l_ot = m.condition_of(x)
    assert c.shape == x.shape and l_ot is not None and float(l_ot) > 0
    # every condition token is a convex combination of prototypes: inside their bounding box
    tokens = c.flatten(2).transpose(1, 2)
    assert (tokens <= m.prototypes.max(0).values + 1e-5).all() and (tokens >= m.prototypes.min(0).values - 1e-5).all()
    m_in = VPDMModule(**{**TINY, "condition": "input"})
    x = m_in.features(_batch()["image"])
    c, l_ot = m_in.condition_of(x)
    assert torch.equal(c, x) and l_ot is None


def test_strength_zero_gives_zero_map():
    m = VPDMModule(**{**TINY, "strength": 0.0})
    assert m._maps(_batch(), 0).abs().max() == 0


def test_refusals():
    with pytest.raises(ZooError, match="num_prototypes must be >= 1"):
        VPDMModule(**{**TINY, "num_prototypes": 0})
    with pytest.raises(ZooError, match="condition 'raw'"):
        VPDMModule(**{**TINY, "condition": "raw"})
