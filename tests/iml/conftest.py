"""Shared fixtures for the IML tests: small fictional datasets and a tiny model config."""

from __future__ import annotations

import pytest

from zoo.iml.data import build_iml_dataset, cvdb_entities, fictional_cvdb

TINY = {"model_type": "gpt_neox", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 128, "rotary_pct": 0.25}


@pytest.fixture(scope="session")
def paper_dataset():
    """The paper's 4000-entity construction on fictional people."""
    return build_iml_dataset(cvdb_entities(fictional_cvdb(4000, seed=1), 4000), seed=600)


@pytest.fixture(scope="session")
def tiny_model_config():
    return dict(TINY)
