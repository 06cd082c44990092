"""Identities and closed forms of MOMENT's pieces, in float64 where the claim is exact."""

import math

import numpy as np
import pytest
import torch

from zoo.errors import ZooError
from zoo.moment import MOMENT, MomentConfig
from zoo.moment.masking import patch_view, random_patch_mask
from zoo.moment.metrics import adjusted_best_f1, adjusted_f1_curve, pretraining_loss
from zoo.moment.module import warmup_cosine_factor
from zoo.moment.revin import revin_denormalize, revin_normalize, revin_statistics


def test_revin_round_trip_and_masked_statistics():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 512, dtype=torch.float64, generator=g) * 7 - 3
    m = (torch.rand(3, 512, generator=g) > 0.4).double()
    stats = revin_statistics(x, m)
    torch.testing.assert_close(revin_denormalize(revin_normalize(x, stats), stats), x, rtol=0, atol=1e-6)
    xs, ms = x[1, 2].numpy(), m[1].numpy().astype(bool)
    assert stats.mean[1, 2, 0].item() == pytest.approx(xs[ms].mean(), abs=1e-12)
    assert stats.std[1, 2, 0].item() == pytest.approx(xs[ms].std() + 1e-5, abs=1e-12)  # population std + eps


def test_revin_refuses_a_fully_masked_series():
    with pytest.raises(ZooError, match="fully masked"):
        revin_statistics(torch.randn(2, 1, 512), torch.cat([torch.ones(1, 512), torch.zeros(1, 512)]))


def test_pretraining_mask_keeps_ceil_of_seventy_percent_of_observed_patches():
    im = torch.ones(4, 512)
    im[1, :80] = 0  # 54 observed patches
    im[2, :3] = 0  # the first patch partly padded: 63 observed
    mask = random_patch_mask(im, 0.3, 8, torch.Generator().manual_seed(0))
    kept = patch_view(mask, 8).sum(-1).tolist()
    assert kept == [math.ceil(64 * 0.7 - 1e-9), math.ceil(54 * 0.7), math.ceil(63 * 0.7), 45]
    assert int((patch_view(mask, 8) * (1 - patch_view(im, 8))).sum()) == 0  # padded patches never kept


def test_pretraining_loss_covers_only_masked_observed_positions():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 2, 512, dtype=torch.float64, generator=g)
    recon = torch.randn(8, 2, 512, dtype=torch.float64, generator=g)
    im = torch.ones(8, 512, dtype=torch.float64)
    im[0, :64] = 0
    mask = random_patch_mask(im, 0.3, 8, g).double()
    w = im * (1 - mask)
    assert 0.25 < float(w.sum() / im.sum()) < 0.35  # about 30% of the observed positions
    loss = pretraining_loss(recon, x, im, mask)
    sel = w.bool().unsqueeze(1).expand_as(x)
    assert loss.item() == pytest.approx(((recon - x)[sel] ** 2).sum().item() / (sel.sum().item() + 1e-7), rel=1e-12)
    # targets at observed (unmasked) or padded positions do not matter
    x2 = torch.where(sel, x, x + 100 * torch.randn(x.shape, dtype=torch.float64, generator=g))
    assert pretraining_loss(recon, x2, im, mask).item() == loss.item()


def test_forecast_head_parameter_count(tiny_t5):
    for h in (24, 96):
        m = MOMENT(MomentConfig(t5_config=tiny_t5, task_name="forecasting", forecast_horizon=h))
        assert sum(p.numel() for p in m.head.parameters()) == 64 * 32 * h + h


def test_large_encoder_has_the_tutorials_parameter_count():
    """The imputation tutorial prints 341,231,104 encoder parameters for MOMENT-1-large (flan-t5-large shape)."""
    large = dict(d_model=1024, d_ff=2816, d_kv=64, num_heads=16, num_layers=24, vocab_size=32128,
                 feed_forward_proj="gated-gelu", relative_attention_num_buckets=32, is_encoder_decoder=False)
    with torch.device("meta"):
        m = MOMENT(MomentConfig(t5_config=large))
    assert sum(p.numel() for p in m.encoder.parameters()) == 341_231_104


def _adjusted_f1_reference(labels, scores, thr):
    """Brute force: flag, then flag every anomalous segment containing a flagged point; F1 with the 1e-5 terms."""
    pred = scores >= thr
    out = pred.copy()
    i = 0
    while i < len(labels):
        if labels[i]:
            j = i
            while j < len(labels) and labels[j]:
                j += 1
            if pred[i:j].any():
                out[i:j] = True
            i = j
        else:
            i += 1
    tp, fp, fn = (out & labels).sum(), (out & ~labels).sum(), (~out & labels).sum()
    p, r = tp / (tp + fp + 1e-5), tp / (tp + fn + 1e-5)
    return 2 * p * r / (p + r + 1e-5)


def test_adjusted_f1_matches_brute_force():
    rng = np.random.default_rng(1)
    labels = np.zeros(400, dtype=bool)
    labels[0:7] = labels[100:140] = labels[390:] = True  # segments at both ends too
    scores = rng.random(400) + 0.5 * labels * rng.random(400)
    thresholds, f1 = adjusted_f1_curve(labels.astype(int), scores, 30)
    np.testing.assert_allclose(f1, [_adjusted_f1_reference(labels, scores, t) for t in thresholds], atol=1e-12)
    assert adjusted_best_f1(labels, scores, 30) == pytest.approx(f1.max())


def test_warmup_cosine_schedule_closed_form():
    kw = dict(max_epochs=10, init_lr=1e-4, min_lr=1e-5, warmup_lr=1e-5, warmup_steps=1000)
    assert warmup_cosine_factor(0, 0, **kw) == pytest.approx(0.1)
    assert warmup_cosine_factor(500, 0, **kw) == pytest.approx(0.55)
    assert warmup_cosine_factor(5000, 0, **kw) == pytest.approx(1.0)
    assert warmup_cosine_factor(9999, 5, **kw) == pytest.approx(0.55)
    assert warmup_cosine_factor(0, 10, **kw) == pytest.approx(0.1)


@pytest.mark.parametrize("shape, mask, match", [
    ((1, 1, 600), None, "longer than MOMENT's 512"),
    ((1, 1, 300), None, "shorter than 512"),
    ((2, 1, 512), "empty", "no fully observed patch"),
])
def test_bad_series_give_one_line_errors(tiny_t5, shape, mask, match):
    m = MOMENT(MomentConfig(t5_config=tiny_t5, task_name="embedding"))
    im = None
    if mask == "empty":
        im = torch.ones(2, 512)
        im[1] = 0
    with pytest.raises(ZooError, match=match):
        m.embed(torch.randn(*shape), im)


def test_classification_head_refuses_another_channel_count(tiny_t5):
    m = MOMENT(MomentConfig(t5_config=tiny_t5, task_name="classification", n_channels=3, num_class=4))
    with pytest.raises(ZooError, match="built for 3 channel"):
        m.classify(torch.randn(2, 6, 512))
    assert m.classify(torch.randn(2, 3, 512)).shape == (2, 4)
