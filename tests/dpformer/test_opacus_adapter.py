"""zoo.dp.opacus_samplers names Opacus' public per-layer functions; this fails loudly if Opacus' own registry
(what GradSampleModule uses) ever maps one of those layer types to another function."""

from __future__ import annotations

import pytest

from zoo.dp.opacus_samplers import grad_samplers

pytest.importorskip("opacus")


def test_adapter_matches_what_opacus_registers():
    from opacus import GradSampleModule

    registered = GradSampleModule.GRAD_SAMPLERS
    for layer, fn in grad_samplers().items():
        assert registered.get(layer) is fn, f"Opacus now computes {layer.__name__} per-sample grads differently"
        assert GradSampleModule.is_supported(_instance(layer))


def _instance(layer):
    name = layer.__name__
    if name.startswith("Conv"):
        return layer(2, 2, 3)
    if name in ("Linear", "Embedding", "GroupNorm"):
        return layer(2, 4)
    return layer(4)
