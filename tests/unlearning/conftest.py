"""Shared fixtures for the unlearning tests: a copy model (an LM that reproduces its training sequences), tiny
GPT-Neo configs and a memorized theta_0 (the memorize stage, fitted by Lightning once per session)."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
import torch

TINY = {"model_type": "gpt_neo", "vocab_size": 384, "hidden_size": 32, "num_layers": 2, "num_heads": 2,
        "attention_types": [[["global", "local"], 1]], "window_size": 32, "max_position_embeddings": 64,
        "intermediate_size": 64, "resid_dropout": 0.0, "embed_dropout": 0.0, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 1, "pad_token_id": 0}


class CopyModel(torch.nn.Module):
    """Predicts, after any prefix of one of `sequences`, that sequence's next token (left padding ignored): a model
    that has memorized its inputs perfectly. After anything else it predicts token 0."""

    def __init__(self, sequences: list[list[int]], vocab: int):
        super().__init__()
        self.vocab = vocab
        self.next = {}
        for s in sequences:
            for j in range(1, len(s)):
                self.next[tuple(s[:j])] = s[j]
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, **_):
        B, T = input_ids.shape
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        logits = torch.zeros(B, T, self.vocab)
        for b in range(B):
            real = [int(x) for x, m in zip(input_ids[b], mask[b]) if m]
            offset = T - len(real) if mask[b, 0] == 0 else 0  # left padding
            for j in range(len(real)):
                logits[b, offset + j, self.next.get(tuple(real[:j + 1]), 0)] = 10.0
        return SimpleNamespace(logits=logits, past_key_values=None)


@pytest.fixture
def copy_model_cls():
    return CopyModel


@pytest.fixture
def tiny_config():
    return dict(TINY)


# theta_0 of the end-to-end tests: the embedded setting of the old memorize phase (8 forget sequences of 32 bytes,
# 8 background sequences, mix batches of 16 rows, 150 AdamW steps at lr 3e-3)
MEMO_DATA = dict(source="embedded", seed=0, seq_len=32, num_forget=8, num_unseen=8, num_heldout=2, num_background=8)


def fit_quietly(module, dm, **trainer_kw):
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, **trainer_kw)
    trainer.fit(module, dm)
    return trainer


@pytest.fixture
def memo_data():
    return dict(MEMO_DATA)


@pytest.fixture
def fit():
    """fit(module, datamodule, **trainer kwargs) -> the trainer: CPU, no logger, no checkpoints, quiet."""
    return fit_quietly


@pytest.fixture(scope="session")
def memorized(tmp_path_factory):
    """The memorize stage run once through Lightning: the path of its checkpoint (theta_0)."""
    from datamodules.memorization import MemorizationDataModule
    from zoo.unlearning import MemorizeModule

    torch.manual_seed(0)
    module = MemorizeModule(model=dict(TINY))
    dm = MemorizationDataModule(train_set="mix", batch_size=16, mix_batches=150, **MEMO_DATA)
    trainer = fit_quietly(module, dm, max_epochs=1)
    path = tmp_path_factory.mktemp("memorize") / "last.ckpt"
    trainer.save_checkpoint(path)
    return str(path)
