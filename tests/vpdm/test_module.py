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
    assert not m.features.net.training  # frozen backbone in eval mode
    loss = m.training_step(_batch(), 0)
    loss.backward()
    assert m.prototypes.grad is not None and m.prototypes.grad.abs().sum() > 0
    assert all(p.grad is None for p in m.features.parameters())
    assert any(p.grad is not None for p in m.denoiser.parameters())


def test_a_lightning_fit_leaves_the_frozen_backbone_in_eval_mode(tmp_path):
    """Lightning (2.2 on) keeps each submodule's mode and no longer calls model.train() when a fit starts: the
    backbone was left in train mode, its batch norms normalised with batch statistics and moved their running
    statistics away from the pretrained ones (and a batch of one image raised)."""
    import lightning as L
    from torch.utils.data import DataLoader

    m = VPDMModule(**TINY)
    before = {k: v.clone() for k, v in m.features.net.state_dict().items()}
    L.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, default_root_dir=tmp_path).fit(m, DataLoader([_batch()], batch_size=None))
    assert not m.features.net.training
    for k, v in m.features.net.state_dict().items():
        assert torch.equal(v, before[k]), k


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


def test_channel_norm_uses_training_statistics():
    """feature_norm=channel: after training steps the features are standardised with the average of the training
    batches' channel means/variances (frozen at test), and the backbone's own batch norms never move."""
    m = VPDMModule(**{**TINY, "feature_norm": "channel"})
    m.train()
    assert m.features.standardize.training and not m.features.net.training
    bn_before = {k: v.clone() for k, v in m.features.net.state_dict().items()}
    batches = [torch.randn(2, 3, 16, 16) * (i + 1) for i in range(3)]
    raws = []
    for im in batches:
        s = (4, 4)
        raws.append(torch.cat([torch.nn.functional.interpolate(f, size=s, mode="bilinear", align_corners=False)
                               for f in m.features.net(im)], 1))
        m.features(im)
    mean = torch.stack([r.mean((0, 2, 3)) for r in raws]).mean(0)
    torch.testing.assert_close(m.features.standardize.running_mean, mean, rtol=1e-5, atol=1e-6)
    m.eval()
    x = m.features(batches[0])
    var = m.features.standardize.running_var
    torch.testing.assert_close(x, (raws[0] - mean[:, None, None]) / (var[:, None, None] + 1e-5).sqrt(),
                               rtol=1e-4, atol=1e-5)
    for k, v in m.features.net.state_dict().items():
        assert torch.equal(v, bn_before[k]), k


def test_num_samples_averages_independent_draws():
    """num_samples = 3 is the mean of three partial denoisings drawn one after the other from the same generator."""
    m = VPDMModule(**{**TINY, "num_samples": 3})
    images = _batch()["image"]
    x, x_hat = m.reconstruct(images, torch.Generator().manual_seed(5))
    one = VPDMModule(**{**TINY, "num_samples": 1})
    one.load_state_dict(m.state_dict())
    g = torch.Generator().manual_seed(5)
    draws = [one.reconstruct(images, g)[1] for _ in range(3)]
    torch.testing.assert_close(x_hat, sum(draws) / 3)
    assert not torch.allclose(draws[0], draws[1])


def test_refusals():
    with pytest.raises(ZooError, match="feature_norm 'batch'"):
        VPDMModule(**{**TINY, "feature_norm": "batch"})
    with pytest.raises(ZooError, match="num_samples must be >= 1"):
        VPDMModule(**{**TINY, "num_samples": 0})
    with pytest.raises(ZooError, match=r"strength must be in \[0, 1\], got -0.5"):
        VPDMModule(**{**TINY, "strength": -0.5})
    with pytest.raises(ZooError, match="num_prototypes must be >= 1"):
        VPDMModule(**{**TINY, "num_prototypes": 0})
    with pytest.raises(ZooError, match="condition 'raw'"):
        VPDMModule(**{**TINY, "condition": "raw"})
    for empty in ("out_indices", "block_out_channels"):  # torch.cat of no features; a UNet with no block
        with pytest.raises(ZooError, match="out_indices and block_out_channels must not be empty"):
            VPDMModule(**{**TINY, empty: []})
    # were a ZeroDivisionError in the scheduler at test time, and timm's IndexError wrapped by jsonargparse
    with pytest.raises(ZooError, match="num_inference_steps and num_train_timesteps must be >= 1, got 0"):
        VPDMModule(**{**TINY, "num_inference_steps": 0})
    with pytest.raises(ZooError, match=r"has no feature stage for some of out_indices \[0, 1, 7\]"):
        VPDMModule(**{**TINY, "out_indices": [0, 1, 7]})
