"""Oracles added by mutation testing: each pins a convention of MOMENT that, before, only the comparison with the
momentfm package (``test_peer.py``, skipped where momentfm is not installed, as in CI) would have caught.

They do not use momentfm. Each is a brute force on a small case, a definition, or an identity that the official
code (github.com/moment-timeseries-foundation-model/moment, ``momentfm/``) implies; the comments say which line.
"""

import math

import numpy as np
import pytest
import torch

from zoo.moment import MOMENT, MomentConfig
from zoo.moment.embedding import sinusoidal_positions
from zoo.moment.masking import patch_view, random_patch_mask
from zoo.moment.metrics import adjusted_f1_curve


def test_patch_view_is_one_only_for_fully_observed_patches():
    """``Masking.convert_seq_to_patch_view``: ``(mask.unfold(...).sum(-1) == patch_len).long()``; a loop here."""
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(5, 48, generator=g) > 0.15).long()
    mask[0] = 1
    mask[1, :6] = 0  # one patch fully padded, one partly
    got = patch_view(mask, 4)
    want = torch.tensor([[int(all(mask[b, p * 4 + i] == 1 for i in range(4))) for p in range(12)] for b in range(5)])
    assert torch.equal(got, want)
    assert 0 < int(want.sum()) < want.numel()  # both kinds present, partly observed patches included
    assert bool(((mask.unflatten(-1, (12, 4)).sum(-1) > 0) & (want == 0)).any())


def test_positional_table_is_the_sinusoidal_definition():
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)) (Vaswani et al.; the official
    ``PositionalEmbedding`` fills ``pe[:, 0::2]`` with sin and ``pe[:, 1::2]`` with cos)."""
    n, d = 64, 16
    want = torch.tensor([[math.sin(p / 10000 ** (j / d)) if j % 2 == 0 else math.cos(p / 10000 ** ((j - 1) / d))
                          for j in range(d)] for p in range(n)], dtype=torch.float64)
    torch.testing.assert_close(sinusoidal_positions(n, d).double(), want, rtol=0, atol=2e-5)


def _adjusted_f1_loop(labels: np.ndarray, scores: np.ndarray, thr: float) -> float:
    """Official ``adjbestf1`` at one threshold: ``y_pred = y_scores >= threshold``, point adjustment (a segment with a
    flagged point is flagged whole), then ``f1_score`` with its 1e-5 terms; by loops over points."""
    pred = [bool(s >= thr) for s in scores]
    n = len(labels)
    i = 0
    while i < n:
        if labels[i]:
            j = i
            while j < n and labels[j]:
                j += 1
            if any(pred[i:j]):
                pred[i:j] = [True] * (j - i)
            i = j
        else:
            i += 1
    tp = sum(1 for p, a in zip(pred, labels) if p and a)
    fp = sum(1 for p, a in zip(pred, labels) if p and not a)
    fn = sum(1 for p, a in zip(pred, labels) if not p and a)
    prec, rec = tp / (tp + fp + 1e-5), tp / (tp + fn + 1e-5)
    return 2 * prec * rec / (prec + rec + 1e-5)


def test_adjusted_f1_flags_normal_points_whose_score_equals_the_threshold():
    """Integer scores 0..9 and 10 splits: every threshold equals some normal points' score (ties), which count as
    flagged (``>=``), i.e. as false positives."""
    rng = np.random.default_rng(3)
    labels = np.zeros(120, dtype=bool)
    labels[20:30] = labels[70:75] = True
    scores = rng.integers(0, 10, 120).astype(np.float64)
    scores[0], scores[1] = 0.0, 9.0  # the range is exactly [0, 9], both ends normal points
    thresholds, f1 = adjusted_f1_curve(labels.astype(int), scores, 10)
    np.testing.assert_array_equal(thresholds, np.arange(10.0))
    np.testing.assert_allclose(f1, [_adjusted_f1_loop(labels, scores, t) for t in thresholds], rtol=0, atol=1e-12)


def _input_mask(b: int, padded: dict[int, int]) -> torch.Tensor:
    im = torch.ones(b, 512, dtype=torch.long)
    for row, n in padded.items():
        im[row, :n] = 0  # left padding, as MOMENT expects
    return im


def test_reconstruction_never_sees_hidden_or_padded_values(tiny_t5):
    """Masked pre-training must not leak what it hides: the official ``reconstruct`` normalises with
    ``mask=mask * input_mask`` and embeds hidden patches as [MASK], so changing x where ``mask * input_mask`` is 0
    changes nothing at all."""
    torch.manual_seed(0)
    m = MOMENT(MomentConfig(t5_config=tiny_t5, task_name="reconstruction")).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 512, generator=g)
    im = _input_mask(2, {1: 37})
    mask = random_patch_mask(im, 0.3, 8, g)
    hidden = (mask * im == 0)[:, None, :].expand_as(x)
    assert bool((hidden & (im == 1)[:, None, :]).any())  # some observed steps are hidden
    x2 = torch.where(hidden, 30 * torch.randn(x.shape, generator=g) + 10, x)
    with torch.no_grad():
        r1, _ = m.reconstruct(x, im, mask=mask)
        r2, _ = m.reconstruct(x2, im, mask=mask)
    torch.testing.assert_close(r1, r2, rtol=1e-5, atol=1e-5)


def _randomise_mask_embedding(m: MOMENT, seed: int) -> None:
    with torch.no_grad():
        m.patch_embedding.mask_embedding.copy_(
            5 * torch.randn(m.patch_embedding.mask_embedding.shape, generator=torch.Generator().manual_seed(seed)))


def _assert_unchanged_by_the_mask_vector(run, m, x, im):
    with torch.no_grad():
        before = run(x, im)
        _randomise_mask_embedding(m, 2)
        after = run(x, im)
    torch.testing.assert_close(before, after, rtol=1e-5, atol=1e-5)


def test_embedding_is_the_mean_over_observed_patches_only(tiny_t5):
    """Official ``embed``: ``(input_mask_patch_view * enc_out).sum(1) / input_mask_patch_view.sum(1)``. Padded
    patches are embedded as [MASK] and are not attended to, so with the mean over observed patches only the
    embedding cannot depend on the [MASK] vector; a mean over all patches would."""
    torch.manual_seed(0)
    m = MOMENT(MomentConfig(t5_config=tiny_t5, task_name="embedding")).eval()
    x = torch.randn(3, 2, 512, generator=torch.Generator().manual_seed(1))
    im = _input_mask(3, {0: 100, 2: 256})
    _assert_unchanged_by_the_mask_vector(m.embed, m, x, im)


def test_forecast_embeds_every_patch_and_never_uses_the_mask_vector(tiny_t5):
    """Official ``forecast``: ``self.patch_embedding(x_enc, mask=torch.ones_like(input_mask))``: padded patches are
    embedded from their (normalised) values, never replaced by [MASK], so the forecast does not depend on the
    [MASK] vector even with padding (the forecasting head reads every patch)."""
    torch.manual_seed(0)
    m = MOMENT(MomentConfig(t5_config=tiny_t5, task_name="forecasting", forecast_horizon=12)).eval()
    x = torch.randn(2, 3, 512, generator=torch.Generator().manual_seed(1))
    im = _input_mask(2, {0: 128, 1: 8})
    _assert_unchanged_by_the_mask_vector(m.forecast, m, x, im)


@pytest.mark.parametrize("n_channels", [2, 3])
def test_concat_classification_feature_index_is_d_times_channels_plus_c(tiny_t5, n_channels):
    """Official ``classify`` with reduction 'concat': ``enc_out.permute(0, 2, 3, 1).reshape(B, N, D * C)``, so the
    head's input feature d * C + c is channel c, dimension d (then the mean over patches and the linear map).
    Written out here with explicit indices."""
    torch.manual_seed(0)
    m = MOMENT(MomentConfig(t5_config=tiny_t5, task_name="classification", n_channels=n_channels,
                            num_class=4)).eval()
    x = torch.randn(2, n_channels, 512, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        h, _ = m._features(x, None)  # [B, C, N, D]
        pooled = h.double().mean(2)  # [B, C, D]
        w, bias = m.head.linear.weight.double(), m.head.linear.bias.double()
        d_model = h.shape[-1]
        want = torch.empty(2, 4, dtype=torch.float64)
        for b in range(2):
            feats = torch.empty(d_model * n_channels, dtype=torch.float64)
            for d in range(d_model):
                for c in range(n_channels):
                    feats[d * n_channels + c] = pooled[b, c, d]
            want[b] = w @ feats + bias
        got = m.classify(x).double()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
