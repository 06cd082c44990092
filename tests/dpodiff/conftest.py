"""Shared fixtures: one tiny float64 SD stack and one WordNet reader per session (building them dominates)."""

from __future__ import annotations

import pytest
import torch

from zoo.dpodiff.wordnet import DEBIAN_DIR, REQUIRED

TINY = dict(seed=0, unet_channels=(8, 16), vae_channels=(8, 8), latent_size=8, hidden=16, layers=1, heads=2,
            clip_image_size=16, clip_patch=8)


@pytest.fixture(scope="session")
def stack64():
    from zoo.dpodiff.stack import tiny_stack

    return tiny_stack(**TINY, dtype="float64")


@pytest.fixture(scope="session")
def tokenizer():
    from zoo.dpodiff.stack import clip_tokenizer_from_open_clip

    return clip_tokenizer_from_open_clip()


def debian_wordnet() -> bool:
    return all((DEBIAN_DIR / f).is_file() for f in REQUIRED if f != "lexnames")


@pytest.fixture(scope="session")
def nltk_root(tmp_path_factory):
    if not debian_wordnet():
        pytest.skip("Debian wordnet-base + wordnet-sense-index not installed (/usr/share/wordnet)")
    from zoo.dpodiff.wordnet import prepare_wordnet

    return prepare_wordnet(tmp_path_factory.mktemp("nltk_data"))


@pytest.fixture(scope="session")
def wordnet(nltk_root):
    from zoo.dpodiff.wordnet import open_wordnet

    with open_wordnet(nltk_root, prepare=False) as wn:
        yield wn


@pytest.fixture(autouse=True)
def _f64_gumbel():
    torch.manual_seed(0)
    yield
