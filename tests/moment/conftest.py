"""Shared pieces of the MOMENT tests: a tiny T5 config, and momentfm (the official package) when it imports."""

from __future__ import annotations

import pytest

TINY_T5 = dict(d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2, vocab_size=16, feed_forward_proj="gated-gelu",
               relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.1,
               layer_norm_epsilon=1e-6, is_encoder_decoder=False)


@pytest.fixture
def tiny_t5() -> dict:
    return dict(TINY_T5)


@pytest.fixture(scope="session")
def momentfm():
    """momentfm 0.1.4, installed with `pip install --no-deps momentfm==0.1.4` (its wheel pins transformers 4.33.3,
    numpy 1.25.2 and huggingface-hub 0.24.0, so it cannot be a dependency); the test skips where it does not import."""
    return pytest.importorskip("momentfm", reason="momentfm is not installed or does not import with this "
                                                  "transformers (pip install --no-deps momentfm==0.1.4)")


def peer_pipeline(momentfm, task: str, t5: dict, **kwargs):
    """A momentfm MOMENTPipeline with random weights from an inline t5_config (no network)."""
    cfg = dict(task_name="reconstruction", model_name="MOMENT", transformer_type="encoder_only", d_model=None,
               seq_len=512, patch_len=8, patch_stride_len=8, device="cpu", transformer_backbone="google/flan-t5-large",
               model_kwargs={}, t5_config=dict(t5))
    model = momentfm.MOMENTPipeline(cfg, model_kwargs={"task_name": task, "enable_gradient_checkpointing": False,
                                                       **kwargs})
    model.init()
    return model.eval()
