"""Oracles added by mutation testing: the documented phase switches and task-arithmetic coefficients of TA and TAU
(official first_threshold 0.9 for TA; TAU switches midway between gamma_MA and the SGA threshold, 0.5 for GPT-Neo's
0.3 and 0.7; official first_coef 3 for TA and 1 for TAU), and the SGA threshold defaulting to the band's high edge."""

from __future__ import annotations

import pytest

from zoo.unlearning import UnlearningModule

LEVELS = {"ma": 0.3, "el": 0.1, "low": 0.15, "high": 0.7}


def _module(tiny_config, monkeypatch, **kw):
    m = UnlearningModule(model=tiny_config, **kw)
    monkeypatch.setattr(m, "unlearning_thresholds", lambda: dict(LEVELS))
    return m


def test_ta_switches_at_the_official_0_9_and_subtracts_three_task_vectors(tiny_config, monkeypatch):
    m = _module(tiny_config, monkeypatch, method="ta")
    assert m.switch_level() == 0.9 and m._lambdas() == [3.0]


def test_tau_switches_midway_between_the_unseen_level_and_the_sga_threshold(tiny_config, monkeypatch):
    m = _module(tiny_config, monkeypatch, method="tau")
    assert m.sga_level() == LEVELS["high"]
    assert m.switch_level() == pytest.approx(0.5)  # (0.3 + 0.7) / 2: the official 0.5 for GPT-Neo
    assert m._lambdas() == [1.0]
    m = _module(tiny_config, monkeypatch, method="tau", sga_threshold=0.9)
    assert m.switch_level() == pytest.approx(0.6)


def test_explicit_settings_win(tiny_config, monkeypatch):
    m = _module(tiny_config, monkeypatch, method="tau", switch_ma=0.42, ta_lambda=2.0)
    assert m.switch_level() == 0.42 and m._lambdas() == [2.0]
