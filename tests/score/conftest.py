"""Shared SCoRe test data."""

import numpy as np
import pytest


@pytest.fixture
def flat_colour_dermamnist(tmp_path):
    """``tmp_path/dermamnist.npz``, RGB MedMNIST layout, each image one flat colour of its own: a crop or a flip
    leaves it unchanged, colour jitter or greyscale does not. Returns (root, the arrays written)."""
    rng = np.random.default_rng(0)
    data = {}
    for split, k in zip(("train", "val", "test"), (48, 6, 6)):
        colours = rng.integers(20, 236, (k, 1, 1, 3), dtype=np.uint8)
        data[f"{split}_images"] = np.ascontiguousarray(np.broadcast_to(colours, (k, 28, 28, 3)))
        data[f"{split}_labels"] = (np.arange(k) % 3).reshape(-1, 1).astype(np.uint8)
    np.savez_compressed(tmp_path / "dermamnist.npz", **data)
    return tmp_path, data
