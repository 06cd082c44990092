"""Shared fixtures for the RoSA tests: a tiny Llama config and token batches (the root conftest already
pins torch to one thread)."""

from __future__ import annotations

import string
import sys
from pathlib import Path

import pytest
import torch

TINY_LLAMA = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 384, "max_position_embeddings": 256}


@pytest.fixture
def tiny_llama() -> dict:
    return dict(TINY_LLAMA)


@pytest.fixture
def token_batches():
    """A few micro-batches of random byte tokens (input_ids, attention_mask, labels)."""

    def make(n: int, batch: int = 2, seq: int = 12, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(n):
            ids = torch.randint(3, 384, (batch, seq), generator=g)
            out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
        return out

    return make


# The test oracles in tests/rosa/rosa_reference.py (pytest runs with --import-mode=importlib, which does not put
# test directories on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))


TINY_GPT2 = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 384, "n_positions": 64,
             "bos_token_id": 0, "eos_token_id": 1, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


@pytest.fixture
def tiny_gpt2() -> dict:
    """A tiny GPT-2 (Conv1D projections: weights stored (in, out))."""
    return dict(TINY_GPT2)


def llama_style_tokenizer():
    """A tiny Llama tokenizer built offline: a BPE over the printable characters with a few merges, <s>/</s>, BOS
    added and EOS not (Llama-2's add_bos_token=True, add_eos_token=False); pad = EOS as `zoo.lm.load_tokenizer`
    and llm-foundry's dataloader set it for Llama-2, which has none."""
    from tokenizers import Tokenizer, models
    from transformers import LlamaTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    merges = [("#", "#"), ("##", "##"), ("t", "h"), ("th", "e"), ("<", "<"), (">", ">")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok = LlamaTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                             add_bos_token=True, add_eos_token=False)
    tok.pad_token = tok.eos_token
    return tok
