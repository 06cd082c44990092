"""Oracles added by mutation testing: anchor-by-anchor loops of the formulas the objectives state (paper Sec. 3:
the Submod-* variants take the log-sum-exp over V \\ A_k only; OPL as Ranasinghe et al.'s Eq., with |d|;
Submod-Triplet as cards/score.md documents it)."""

import math

import torch
import torch.nn.functional as F

from zoo.score import losses as L


def _batch(seed=0, n=10, d=6, classes=3):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=torch.float64)
    labels = torch.arange(n) % classes
    return z, labels


def _loop(z, labels, anchor_term):
    zn = F.normalize(z, dim=1)
    S = (zn @ zn.T).tolist()
    y = labels.tolist()
    n = len(y)
    terms = []
    for i in range(n):
        pos = [j for j in range(n) if y[j] == y[i] and j != i]
        neg = [j for j in range(n) if y[j] != y[i]]
        terms.append(anchor_term(S[i], i, pos, neg))
    return sum(terms) / n


def test_submod_supcon_log_sum_exp_runs_over_the_other_classes_only():
    z, y = _batch(seed=1)
    t = 0.3

    def term(s, i, pos, neg):
        return math.log(sum(math.exp(s[j] / t) for j in neg)) - sum(s[p] / t for p in pos) / len(pos)

    ours = L.score_loss(z, y, "submod_supcon", temperature=t).item()
    assert abs(ours - _loop(z, y, term)) < 1e-10


def test_submod_triplet_is_mean_positive_minus_mean_negative_squared_distance():
    z, y = _batch(seed=2, n=11)  # classes of 4, 4 and 3 members: unequal positive and negative counts

    def term(s, i, pos, neg):
        return sum(2 - 2 * s[p] for p in pos) / len(pos) - sum(2 - 2 * s[j] for j in neg) / len(neg)

    ours = L.score_loss(z, y, "submod_triplet").item()
    assert abs(ours - _loop(z, y, term)) < 1e-10


def test_opl_takes_the_absolute_value_of_the_negative_pair_mean():
    # two classes pointing in opposite directions: the negative-pair mean cosine is clearly negative
    g = torch.Generator().manual_seed(3)
    base = torch.randn(1, 5, generator=g, dtype=torch.float64)
    noise = 0.1 * torch.randn(8, 5, generator=g, dtype=torch.float64)
    z = torch.cat([base.expand(4, 5), -base.expand(4, 5)]) + noise
    y = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    zn = F.normalize(z, dim=1)
    S = zn @ zn.T
    same = y[:, None] == y[None, :]
    off = ~torch.eye(8, dtype=torch.bool)
    s_pos = S[same & off].mean()  # mean over ordered pairs i != j of a class
    d_neg = S[~same].mean()
    assert d_neg < -0.5
    gamma = 0.5
    expected = (1 - s_pos) + gamma * d_neg.abs()
    torch.testing.assert_close(L.score_loss(z, y, "opl", gamma=gamma), expected, rtol=0, atol=1e-12)
