"""QRoSA: RoSA on an NF4 (double-quantised) base equals RoSA on the dequantised weights (bitsandbytes on CPU)."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("bitsandbytes")

from zoo.errors import ZooError  # noqa: E402
from zoo.lm import build_causal_lm  # noqa: E402
from zoo.rosa.mask import apply_rosa  # noqa: E402
from zoo.rosa.quant import NF4Linear  # noqa: E402


def test_nf4_buffers_are_bitsandbytes_double_quant():
    import bitsandbytes.functional as bnbf

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    q = NF4Linear.from_linear(lin)
    packed, state = bnbf.quantize_4bit(lin.weight.detach(), blocksize=64, compress_statistics=True, quant_type="nf4")
    assert torch.equal(q.weight_nf4, packed) and state.nested and q.weight_nf4.numel() == 64 * 32 // 2
    assert torch.equal(q.frozen_weight(), bnbf.dequantize_4bit(packed, state))
    restored = NF4Linear(64, 32, True, torch.float32)
    restored.load_state_dict(q.state_dict())
    assert torch.equal(restored.frozen_weight(), q.frozen_weight())


@pytest.mark.parametrize("arch, dtype", [("llama", torch.float32), ("llama", torch.bfloat16), ("gpt2", torch.float32)])
def test_qrosa_equals_rosa_on_dequantised_weights(tiny_llama, tiny_gpt2, token_batches, arch, dtype):
    """GPT-2's Conv1D weights are quantised and sparse-adapted in their stored (in, out) layout."""
    torch.manual_seed(0)
    base = build_causal_lm(tiny_llama if arch == "llama" else tiny_gpt2).to(dtype)
    q_model, d_model = base, copy.deepcopy(base)
    torch.manual_seed(1)
    q_layers = apply_rosa(q_model, "all-linear", r=4, lora_alpha=8, density=0.05, quantize="nf4")
    # the dense twin gets W := dequantize_4bit(NF4(W)) and the same adapters and mask
    for name, layer in q_layers.items():
        with torch.no_grad():
            d_model.get_submodule(name).weight.copy_(layer.base_layer.frozen_weight())
    torch.manual_seed(1)
    d_layers = apply_rosa(d_model, "all-linear", r=4, lora_alpha=8, density=0.05)
    g = torch.Generator().manual_seed(2)
    for name, ql in q_layers.items():
        dl = d_layers[name]
        idx = torch.randperm(ql.in_features * ql.out_features, generator=g)[: ql.nnz]
        vals = torch.randn(ql.nnz, generator=g) * 0.05
        ql.set_mask(idx, vals)
        dl.set_mask(idx, vals)
        b = torch.randn(ql.lora_B.weight.shape, generator=g) * 0.05
        with torch.no_grad():
            ql.lora_B.weight.copy_(b)
            dl.lora_B.weight.copy_(b)
    batch = token_batches(1)[0]
    out_q, out_d = q_model(**batch), d_model(**batch)
    assert torch.equal(out_q.logits, out_d.logits)
    out_q.loss.backward()
    out_d.loss.backward()
    for name in q_layers:
        for attr in ("sparse_values", "lora_A", "lora_B"):
            pq = getattr(q_layers[name], attr)
            pd = getattr(d_layers[name], attr)
            gq = pq.grad if attr == "sparse_values" else pq.weight.grad
            gd = pd.grad if attr == "sparse_values" else pd.weight.grad
            assert torch.equal(gq, gd), (name, attr)


def test_qrosa_cannot_merge(tiny_llama):
    model = build_causal_lm(tiny_llama)
    layers = apply_rosa(model, ["q_proj"], r=2, lora_alpha=2, quantize="nf4")
    with pytest.raises(ZooError, match="NF4"):
        next(iter(layers.values())).merge()
    with pytest.raises(ZooError, match="quantize"):
        apply_rosa(build_causal_lm(tiny_llama), ["q_proj"], quantize="int8")
