"""Oracles added by mutation testing: the dual optimum `dual_newton` returns is the multiplier of the given y
(stationarity sign(ŵ)|ŵ|^{p−1} = Xᵀλ for min (1/p)‖w‖_p^p s.t. Xw = y, at any scale of y); `summarize` reports the
standard error of the mean, std/√m."""

import math

import numpy as np
import pytest
import torch

from zoo.minnorm import dual_newton
from zoo.minnorm.experiment import summarize


@pytest.mark.parametrize("p", [1.3, 1.7])
@pytest.mark.parametrize("y_scale", [0.05, 7.0])
def test_returned_dual_is_the_multiplier_of_the_given_response(p, y_scale):
    rng = np.random.default_rng(0)
    X = torch.from_numpy(rng.standard_normal((10, 40)))
    y = y_scale * torch.from_numpy(rng.standard_normal(10))
    out = dual_newton(X, y, p)
    torch.testing.assert_close(X @ out.w, y, rtol=0, atol=1e-10 * float(y.norm()))
    grad = torch.sign(out.w) * out.w.abs() ** (p - 1)  # ∇(1/p)‖w‖_p^p at ŵ
    torch.testing.assert_close(X.T @ out.lam, grad, rtol=1e-8, atol=1e-10 * float(grad.abs().max()))


def test_summary_is_the_mean_and_its_standard_error():
    vals = [1.0, 2.0, 4.0, 7.0]
    rows = [{"p": 1.5, "risk": v} for v in vals]
    mean, se, m = summarize(rows, metrics=("risk",))[1.5]["risk"]
    sd = math.sqrt(sum((v - 3.5) ** 2 for v in vals) / 3)  # sample standard deviation (m − 1)
    assert (mean, m) == (3.5, 4)
    assert se == pytest.approx(sd / 2, rel=1e-12)
