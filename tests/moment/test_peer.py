"""Oracle: the official momentfm 0.1.4 (random weights from an inline T5 config) against ours, same weights through
the key table, same inputs and masks. Skipped, with the reason, where momentfm does not import."""

import numpy as np
import pytest
import torch

from zoo.moment import MOMENT, MomentConfig, convert_momentfm_state_dict
from zoo.moment.checkpoints import load_converted
from zoo.moment.masking import random_patch_mask
from zoo.moment.metrics import adjusted_best_f1
from zoo.moment.revin import revin_denormalize, revin_normalize, revin_statistics
from zoo.moment.svm import fit_svm

from .conftest import peer_pipeline

CASES = [  # task, momentfm kwargs, input shape, output shape (the notes' checked shapes)
    ("reconstruction", {}, (4, 1, 512), (4, 1, 512)),
    ("forecasting", {"forecast_horizon": 96}, (2, 7, 512), (2, 7, 96)),
    ("classification", {"n_channels": 3, "num_class": 5}, (2, 3, 512), (2, 5)),
    ("embedding", {}, (3, 2, 512), (3, 32)),
]


def _pair(momentfm, tiny_t5, task, kw):
    torch.manual_seed(0)
    peer = peer_pipeline(momentfm, task, tiny_t5, **kw).double()
    ours = MOMENT(MomentConfig(t5_config=tiny_t5, task_name=task, **kw)).eval()
    state = peer.state_dict()
    converted = convert_momentfm_state_dict(state, ours, source_task=task)
    load_converted(ours, converted, "momentfm pipeline")  # strict: raises on anything missing or unexpected
    own = ours.state_dict()
    assert set(converted) == set(own)  # nothing missing, nothing unexpected, head included
    assert len(state) == len(own) + 1  # + the positional table, checked and recomputed
    return peer, ours.double()


@pytest.mark.parametrize("task, kw, shape, out_shape", CASES, ids=[c[0] for c in CASES])
def test_every_task_matches_momentfm(momentfm, tiny_t5, task, kw, shape, out_shape):
    peer, ours = _pair(momentfm, tiny_t5, task, kw)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 1
    im = torch.ones(shape[0], 512, dtype=torch.float64)
    im[0, :100] = 0  # a left-padded series: neither attended to nor in the RevIN statistics
    with torch.no_grad():
        if task == "reconstruction":
            mask = random_patch_mask(im, 0.3, 8, g)
            a = peer(x_enc=x, input_mask=im, mask=mask).reconstruction
            b = ours.reconstruct(x, im, mask)[0]
        elif task == "forecasting":
            a, b = peer(x_enc=x, input_mask=im).forecast, ours.forecast(x, im)
        elif task == "classification":
            a, b = peer(x_enc=x, input_mask=im).logits, ours.classify(x, im)
        else:
            a, b = peer(x_enc=x, input_mask=im).embeddings, ours.embed(x, im)
    assert tuple(b.shape) == out_shape == tuple(a.shape)
    torch.testing.assert_close(b, a, rtol=0, atol=1e-6)


def test_pretraining_mask_is_momentfm_draw(momentfm):
    from momentfm.utils.masking import Masking

    im = torch.ones(6, 512)
    im[1, :200] = 0
    im[2, :509] = 0  # one partial patch only: no observed patch... except the last full one? none: 3 steps left
    im[2, -8:] = 1
    torch.manual_seed(3)
    ref = Masking(mask_ratio=0.3).generate_mask(x=torch.zeros(6, 1, 512), input_mask=im)
    torch.manual_seed(3)
    ours = random_patch_mask(im, 0.3, 8)
    assert torch.equal(ours, ref)


def test_revin_matches_momentfm(momentfm):
    from momentfm.models.layers.revin import RevIN

    x = torch.randn(3, 4, 512, dtype=torch.float64) * 5 + 2
    m = (torch.rand(3, 512) > 0.3).double()
    peer = RevIN(num_features=1)
    z_ref = peer(x, mode="norm", mask=m)
    stats = revin_statistics(x, m)
    torch.testing.assert_close(revin_normalize(x, stats), z_ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(revin_denormalize(z_ref, stats), peer(z_ref, mode="denorm"), rtol=0, atol=1e-10)


def test_adjusted_best_f1_matches_momentfm(momentfm):
    from momentfm.utils.anomaly_detection_metrics import adjbestf1

    rng = np.random.default_rng(0)
    for _ in range(5):
        labels = np.zeros(3000, dtype=int)
        for s in rng.choice(np.arange(50, 2900), 3, replace=False):
            labels[s:s + rng.integers(5, 60)] = 1
        scores = rng.random(3000) + labels * rng.random() * 0.8
        assert adjusted_best_f1(labels, scores) == pytest.approx(adjbestf1(labels, scores), abs=1e-12)


def test_svm_protocol_matches_momentfm(momentfm, monkeypatch):
    import momentfm.models.statistical_classifiers as peer_module
    from sklearn.model_selection import GridSearchCV

    # the official grid search asks for 10 worker processes; one is enough for the same answer here
    monkeypatch.setattr(peer_module, "GridSearchCV", lambda *a, **kw: GridSearchCV(*a, **{**kw, "n_jobs": 1}))
    peer_fit = peer_module.fit_svm

    rng = np.random.default_rng(0)
    for n in (30, 90):  # below and above the grid-search threshold
        y = rng.integers(0, 3, n)
        x = rng.normal(size=(n, 8)) + y[:, None] * 0.7
        xt = rng.normal(size=(50, 8)) + rng.integers(0, 3, 50)[:, None] * 0.7
        ref = peer_fit(x, y)
        ours, _, _ = fit_svm(x, y)
        assert ours.C == ref.C
        np.testing.assert_array_equal(ours.predict(xt), ref.predict(xt))
