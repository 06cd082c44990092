"""Oracles added by mutation testing: the spectral filter runs R's ``1:(ep*m)`` rounds, i.e. ⌊ep·m⌋ of them, when
ep·m is not an integer (the official loop; its early stop does not end it first here)."""

import math

import numpy as np
import torch

from zoo.bymi.robust import filtering_mean

from .test_robust import _filtering_refine_loop


def test_filter_runs_floor_of_ep_m_rounds():
    """m = 10, ep = 0.25: R's ``for (i in 1:(ep*m))`` is ``1:2.5`` = 1, 2, so two rounds. Two outliers in different
    directions are removed one per round while the inliers keep almost all their weight, so the official early stop
    (Σw / (m·max w) ≤ 1 − ep) has not fired after two rounds: a third round would also down-weight an inlier."""
    rng = np.random.default_rng(0)
    d = 3
    X = rng.standard_normal((10, d)) * 0.1
    X[0] = [8.0, 0.0, 0.0]
    X[1] = [0.0, -6.0, 0.0]
    S0 = np.eye(d) * 0.01
    ep = 0.25
    mu_ref, w_ref = _filtering_refine_loop(X, ep, S0)
    mu, w = filtering_mean(torch.tensor(X), ep, torch.tensor(S0))
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(mu.numpy(), mu_ref, rtol=0, atol=1e-9)
    assert w_ref[:2].sum() == 0 and (w_ref[2:] > 0).all()  # both outliers gone, every inlier kept
    # the case is informative: the official stop has not fired, so ⌈ep·m⌉ = 3 rounds would differ
    assert (w_ref / (w_ref.max() * 10)).sum() > 1 - ep
    assert math.floor(ep * 10) == 2 and math.ceil(ep * 10) == 3
