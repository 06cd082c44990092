"""WD and KS per covariate equal POT's 1-D Wasserstein distance, the sorted-sample closed form and the ECDF sup."""

import numpy as np
import pytest

from zoo.gentle.metrics import conditional_scores

ot = pytest.importorskip("ot", reason="POT (pip install pot) is the peer for 1-D Wasserstein distances")


def ecdf_sup(a, b):
    pts = np.concatenate([a, b])
    fa = (a[None, :] <= pts[:, None]).mean(1)
    fb = (b[None, :] <= pts[:, None]).mean(1)
    return np.abs(fa - fb).max()


def test_wd_and_ks_against_peers_and_closed_forms():
    rng = np.random.default_rng(0)
    gen = [rng.normal(0, 1, 300), rng.exponential(2, 50), rng.normal(3, 1, 40)]
    obs = [rng.normal(0.5, 2, 300), rng.exponential(1, 35), rng.normal(3, 1, 40)]
    s = conditional_scores(gen, obs)
    for i, (g, o) in enumerate(zip(gen, obs)):
        w_g, w_o = np.full(len(g), 1 / len(g)), np.full(len(o), 1 / len(o))
        assert s["wd"][i] == pytest.approx(ot.wasserstein_1d(g, o, w_g, w_o, p=1), rel=1e-10)
        assert s["ks"][i] == pytest.approx(ecdf_sup(g, o), abs=1e-12)
        assert s["spread_ratio"][i] == pytest.approx(g.std() / o.std(), rel=1e-12)
    # equal sizes: W1 is the mean gap between order statistics
    assert s["wd"][0] == pytest.approx(np.abs(np.sort(gen[0]) - np.sort(obs[0])).mean(), rel=1e-12)


def test_identical_samples_score_zero():
    x = np.arange(10.0)
    s = conditional_scores([x], [x.copy()])
    assert s["wd"][0] == 0 and s["ks"][0] == 0


def test_mismatched_lists():
    with pytest.raises(ValueError, match="2 generated vs 1 observed"):
        conditional_scores([np.zeros(2), np.zeros(2)], [np.zeros(2)])
