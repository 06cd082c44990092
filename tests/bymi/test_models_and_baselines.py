"""Closed-form gradients vs autograd, the stratified split, the attacks' formulas, Zeno and RMDP-BH."""

import math

import pytest
import torch
import torch.nn.functional as F

from zoo.bymi import rmdp_bh, zeno
from zoo.bymi.attacks import choose_byzantine, ipm, ood_features, ood_half_means, random_gradient
from zoo.bymi.baselines import krum
from zoo.bymi.models import (flatten_theta, location_loss, logistic_gradient, logistic_loss, logistic_per_sample,
                             stratified_halves, unflatten_theta)
from zoo.errors import ZooError


def _data(n=30, p=4, K=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, p, generator=g, dtype=torch.float64), torch.randint(0, K, (n,), generator=g),
            torch.randn(p + 1, K, generator=g, dtype=torch.float64))


def test_logistic_gradient_is_autograd_of_the_mean_cross_entropy():
    x, y, theta = _data()
    t = theta.clone().requires_grad_(True)
    F.cross_entropy(F.pad(x, (0, 1), value=1.0) @ t, y).backward()
    assert logistic_loss(theta, x, y).item() == pytest.approx(F.cross_entropy(F.pad(x, (0, 1), value=1.0) @ theta, y).item())
    torch.testing.assert_close(logistic_gradient(theta, x, y, 3), flatten_theta(t.grad), rtol=1e-12, atol=1e-14)
    per = logistic_per_sample(theta, x, y, 3)
    torch.testing.assert_close(per.mean(0), logistic_gradient(theta, x, y, 3), rtol=1e-12, atol=1e-14)
    one = logistic_gradient(theta, x[4:5], y[4:5], 3)
    torch.testing.assert_close(per[4], one, rtol=1e-12, atol=1e-14)
    # R's as.numeric: column-major, class by class
    assert torch.equal(flatten_theta(theta)[: theta.shape[0]], theta[:, 0])
    assert torch.equal(unflatten_theta(flatten_theta(theta), theta.shape[0]), theta)


def test_location_loss_closed_form():
    x = torch.randn(50, 3, dtype=torch.float64)
    theta = torch.randn(4, 3, dtype=torch.float64)
    direct = torch.stack([0.5 * ((x - t) ** 2).sum(-1).mean() for t in theta])
    torch.testing.assert_close(location_loss(theta, x), direct, rtol=1e-12, atol=0)


def test_stratified_halves_follow_the_official_rule():
    y = torch.tensor([[0] * 4 + [1] * 3 + [2] * 5 + [3] * 2, [0] * 2 + [1] * 6 + [2] * 3 + [3] * 3])
    gen = torch.Generator().manual_seed(0)
    first, second = stratified_halves(y, gen, 4)
    assert first.shape == second.shape == (2, 7)
    for j in range(2):
        assert sorted(first[j].tolist() + second[j].tolist()) == list(range(14))
        c1 = torch.bincount(y[j][first[j]], minlength=4)
        c2 = torch.bincount(y[j][second[j]], minlength=4)
        counts = torch.bincount(y[j], minlength=4)
        odd = (counts % 2 == 1).nonzero().flatten().tolist()
        # even classes split evenly; odd classes alternately give the extra sample to the first, then the second
        # half (the second half gets floor(n_c/2) + id_sign, id_sign = 0, 1, 0, ...)
        for c in range(4):
            extra = odd.index(c) % 2 if c in odd else 0
            assert c2[c] == counts[c] // 2 + extra and c1[c] + c2[c] == counts[c]
    with pytest.raises(ZooError, match="single sample of class 2"):
        stratified_halves(torch.tensor([[0, 0, 1, 1, 2, 3, 3, 3]]), gen, 4)


def test_attack_formulas():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    v = torch.randn(3, dtype=torch.float64)
    out = ood_features(x, v, torch.Generator().manual_seed(7))
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    torch.testing.assert_close(out, 0.7 * x + v + 0.2 * noise)
    xbar = x.mean(1)
    torch.testing.assert_close(ood_half_means(xbar, v, 100, torch.Generator().manual_seed(3)),
                               0.7 * xbar + v + 0.2 * torch.randn(xbar.shape, generator=torch.Generator().manual_seed(3),
                                                                  dtype=torch.float64) / 10)
    byz = choose_byzantine((4,), 21, 0.2, g)
    assert (byz.sum(-1) == 4).all() and not byz[:, 0].any()
    g1, g2 = torch.randn(4, 21, 5, dtype=torch.float64), torch.randn(4, 21, 5, dtype=torch.float64)
    full = (g1 + g2) / 2
    a1, a2, a = ipm(g1, g2, full, byz)
    normal = ~byz
    normal[:, 0] = False
    for r in range(4):
        target = -0.2 * full[r][normal[r]].mean(0)
        assert torch.allclose(a1[r][byz[r]], target.expand(4, 5)) and torch.equal(a2[r], a1[r] * byz[r, :, None]
                                                                                   + g2[r] * ~byz[r, :, None])
    r1, r2, r = random_gradient(g1, g2, full, byz, 400, torch.Generator().manual_seed(5))
    assert torch.equal(r1[~byz], g1[~byz]) and torch.allclose(r[byz], (r1[byz] + r2[byz]) / 2)
    # the Byzantine halves share the mean + 0.8 v part: their difference is pure noise of sd 0.7 sd / sqrt(200)
    sd = full.std(dim=-2)
    diff = (r1 - r2)[byz].reshape(4, 4, 5) / (0.7 * sd[:, None] / math.sqrt(200))
    assert 0.5 < diff.std() / math.sqrt(2) < 1.6


def test_zeno_scores_the_loss_decrease():
    x = torch.randn(40, 3, dtype=torch.float64)
    theta0 = torch.zeros(3, dtype=torch.float64)
    g = torch.randn(10, 3, dtype=torch.float64)
    g[2] = -g[2] * 5  # a step that raises the master's loss the most
    removed = zeno(g, lambda t: location_loss(t, x), theta0, lr=0.1, rho=0.01, b=3)
    score = [location_loss(theta0, x) - location_loss(theta0 - 0.1 * gj, x) - 0.01 * gj @ gj for gj in g]
    lowest = sorted(range(10), key=lambda j: float(score[j]))[:3]
    assert sorted(removed.nonzero().flatten().tolist()) == sorted(lowest) and removed[2]
    with pytest.raises(ZooError, match="cannot remove 10 of 10"):
        zeno(g, lambda t: location_loss(t, x), theta0, 0.1, 0.01, 10)


def test_rmdp_bh_flags_gross_outliers_and_little_else():
    gen = torch.Generator().manual_seed(0)
    n, d, m = 100, 6, 80
    S0 = torch.eye(d, dtype=torch.float64)
    g = torch.randn(m, d, generator=gen, dtype=torch.float64) / math.sqrt(n)
    g[:8] += 1.0  # 10 standard errors per coordinate
    flagged = rmdp_bh(g, S0, n, 0.1, generator=torch.Generator().manual_seed(1))
    assert flagged[:8].all() and flagged[8:].sum() <= 4
    clean = rmdp_bh(g[8:], S0, n, 0.1, generator=torch.Generator().manual_seed(1))
    assert clean.sum() <= 4
    batched = rmdp_bh(torch.stack([g, g]), S0, n, 0.1, generator=torch.Generator().manual_seed(1))
    assert batched.shape == (2, m) and batched[:, :8].all()


def test_krum_needs_enough_workers():
    with pytest.raises(ZooError, match="m - f - 2 >= 1"):
        krum(torch.randn(5, 2), 3)
