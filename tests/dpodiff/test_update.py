"""Oracle (d): GPO's clip → RMSprop → clamp update against hand-computed values; the t schedule; the spherical
distance identity d = θ²/2."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.dpodiff.loss import spherical_dist
from zoo.dpodiff.optim import GPOUpdate, t_schedule
from zoo.errors import ZooError


def _hand(alpha, grads, lr=0.1, mom=0.5, clip=0.025, lo=0.0, hi=3.0, rho=0.99, eps=1e-8):
    """Official RMSprop.get_update, then p -= update, then clamp; element by element in Python floats."""
    a, v, b = list(alpha), [0.0] * len(alpha), [0.0] * len(alpha)
    for g in grads:
        for i, gi in enumerate(g):
            gi = max(-clip, min(clip, gi))
            v[i] = rho * v[i] + (1 - rho) * gi * gi
            b[i] = mom * b[i] + gi / (math.sqrt(v[i]) + eps)
            a[i] = max(lo, min(hi, a[i] - lr * b[i]))
    return a


def test_clip_rmsprop_clamp_matches_hand_computed_values():
    alpha = torch.tensor([1.0, 0.0, 0.02, 2.95], dtype=torch.float64, requires_grad=True)
    start = alpha.detach().tolist()
    grads = [[0.3, -0.01, 0.001, -0.5], [-0.02, 0.2, 0.0, -0.5], [0.01, 0.01, -0.04, 0.0]]
    up = GPOUpdate([alpha])
    for g in grads:
        alpha.grad = torch.tensor(g, dtype=torch.float64)
        up.step()
        assert alpha.grad is None  # zeroed for the next iteration
    assert alpha.detach().tolist() == pytest.approx(_hand(start, grads), abs=1e-12)
    # first step by hand: clipped g=0.025 -> v=1e-2·g², b=g/√v = 10, Δ=-lr·10=-1 -> 1.0 - 1.0 = 0
    a = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    a.grad = torch.tensor([7.0], dtype=torch.float64)
    GPOUpdate([a]).step()
    assert a.item() == pytest.approx(1.0 - 0.1 * 0.025 / (math.sqrt(0.01 * 0.025 ** 2) + 1e-8), abs=1e-12)
    # clamp: α stays in [0, 3]
    assert 0.0 <= min(alpha.tolist()) and max(alpha.tolist()) <= 3.0


def test_t_schedule_is_official_step_15_2():
    assert t_schedule() == [15 + i // 2 for i in range(20)]
    assert t_schedule()[:4] == [15, 15, 16, 16] and t_schedule()[-1] == 24
    with pytest.raises(ZooError):
        t_schedule(20, 15, 0)


def test_spherical_distance_is_half_the_squared_angle():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g, dtype=torch.float64), torch.randn(64, 8, generator=g, dtype=torch.float64)
    theta = torch.arccos((torch.nn.functional.normalize(x, dim=-1) * torch.nn.functional.normalize(y, dim=-1)).sum(-1))
    torch.testing.assert_close(spherical_dist(x, y), theta ** 2 / 2, rtol=1e-12, atol=1e-12)
    assert spherical_dist(x, 3 * x).abs().max() < 1e-7  # scale-free
    assert spherical_dist(x[:1], -x[:1]).item() == pytest.approx(math.pi ** 2 / 2)
