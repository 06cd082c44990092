"""RoSA on GPT-2's `Conv1D` (weights stored (in, out), y = x W + b): PEFT's `fan_in_fan_out` LoRA as the oracle for
the low-rank part, a dense masked reference and finite differences for the sparse part on the transposed layout."""

from __future__ import annotations

import copy

import pytest
import torch
from rosa_reference import assert_matches_dense_reference  # tests/rosa, put on sys.path by its conftest
from transformers.pytorch_utils import Conv1D

from zoo.errors import ZooError
from zoo.lm import build_causal_lm
from zoo.rosa.layer import RoSALinear, SparseFrozenLinear
from zoo.rosa.mask import apply_rosa, find_targets


def _conv_layer(n_in=12, n_out=10, r=3, density=0.15, seed=0, sddmm="auto"):
    torch.manual_seed(seed)
    base = Conv1D(n_out, n_in).double()  # Conv1D(nf=out, nx=in): weight (in, out)
    torch.nn.init.normal_(base.weight)
    torch.nn.init.normal_(base.bias)
    layer = RoSALinear(base, r=r, lora_alpha=6.0, density=density, adapter_dtype=torch.float64, sddmm=sddmm)
    layer.set_mask(torch.randperm(n_in * n_out)[: layer.nnz])
    with torch.no_grad():
        layer.sparse_values.normal_()
        if r:
            layer.lora_B.weight.normal_()
    return layer


def test_geometry_follows_the_stored_weight():
    layer = _conv_layer()
    assert (layer.in_features, layer.out_features, layer.fan_in_fan_out) == (12, 10, True)
    assert layer.weight_shape == (12, 10) == tuple(layer.base_layer.weight.shape)
    assert layer.dense_sparse().shape == (12, 10) and layer.nnz == int(0.15 * 120)


@pytest.mark.parametrize("kernel", ["csr", "gather", "blocked"])
def test_conv1d_sparse_gradients_match_dense_masked_reference(kernel):
    layer = _conv_layer(sddmm=kernel)
    x, g = assert_matches_dense_reference(layer, 12)
    # the value gradient is XᵀdO of the stored (in, out) weight, on the support
    direct = (x.reshape(-1, 12).t() @ g.reshape(-1, 10)).flatten()[layer.sparse_index.long()]
    torch.testing.assert_close(layer.sparse_values.grad, direct, rtol=0, atol=1e-12)


def test_conv1d_sparse_linear_gradcheck_float64():
    layer = _conv_layer(n_in=16, n_out=9, density=0.1)
    x = torch.randn(3, 16, dtype=torch.float64, requires_grad=True)
    v = layer.sparse_values.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, v: SparseFrozenLinear.apply(x, v, layer.sparse_index, layer.frozen()),
                                    (x, v))


def test_conv1d_merge_is_in_the_stored_layout():
    layer = _conv_layer()
    x = torch.randn(6, 12, dtype=torch.float64)
    y = layer(x)
    merged = copy.deepcopy(layer)
    merged.merge()
    torch.testing.assert_close(merged.base_layer(x), y, rtol=0, atol=1e-12)
    lora = layer.scaling * (layer.lora_B.weight @ layer.lora_A.weight).t()  # PEFT: transpose(B @ A, fan_in_fan_out)
    torch.testing.assert_close(merged.base_layer.weight - layer.base_layer.weight, lora + layer.dense_sparse(),
                               rtol=0, atol=1e-12)


def _peft_gpt2(tiny_gpt2, density, seed=0):
    """(ours, ours' layers, PEFT fan_in_fan_out LoRA, PEFT's layers): same base, same initial A, same random B."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    base = build_causal_lm(tiny_gpt2).double()
    ours = copy.deepcopy(base)
    torch.manual_seed(1)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                                                 fan_in_fan_out=True))
    torch.manual_seed(1)
    layers = apply_rosa(ours, "all-linear", r=4, lora_alpha=8, density=density, adapter_dtype=torch.float64)
    peft_layers = {n.removeprefix("base_model.model."): m for n, m in peft_model.named_modules()
                   if hasattr(m, "lora_A") and "default" in getattr(m, "lora_A", {})}
    assert set(layers) == set(peft_layers) and len(layers) == 8
    g = torch.Generator().manual_seed(2)
    for name, layer in layers.items():
        assert isinstance(layer.base_layer, Conv1D) and layer.fan_in_fan_out
        peft_layer = peft_layers[name]
        peft_layer.double()
        w = torch.randn(layer.lora_B.weight.shape, generator=g, dtype=torch.float64) * 0.1
        with torch.no_grad():
            layer.lora_B.weight.copy_(w)
            peft_layer.lora_B["default"].weight.copy_(w)
        assert torch.equal(layer.lora_A.weight, peft_layer.lora_A["default"].weight), name
    return ours, layers, peft_model, peft_layers


def test_gpt2_with_an_empty_sparse_part_equals_peft_fan_in_fan_out_lora(tiny_gpt2):
    """With the mask set but all values 0, the sparse path (W + S formed, SDDMM backward) gives PEFT's outputs and
    LoRA gradients, and the values' gradient is XᵀdO on the support of each (in, out) weight."""
    ours, layers, peft_model, peft_layers = _peft_gpt2(tiny_gpt2, density=0.05)
    g = torch.Generator().manual_seed(3)
    for layer in layers.values():
        layer.set_mask(torch.randperm(layer.in_features * layer.out_features, generator=g)[: layer.nnz])
    inputs, grads_out = {}, {}

    def keep(name):
        def hook(module, args, out):
            inputs[name] = args[0].detach()
            out.register_hook(lambda go: grads_out.__setitem__(name, go.detach()))
        return hook

    handles = [layer.register_forward_hook(keep(n)) for n, layer in layers.items()]
    ids = torch.randint(0, 384, (2, 10), generator=g)
    out_peft = peft_model(input_ids=ids, labels=ids)
    out_peft.loss.backward()
    out_ours = ours(input_ids=ids, labels=ids)
    out_ours.loss.backward()
    for h in handles:
        h.remove()
    torch.testing.assert_close(out_ours.logits, out_peft.logits, rtol=0, atol=1e-12)
    for name, layer in layers.items():
        pl = peft_layers[name]
        torch.testing.assert_close(layer.lora_A.weight.grad, pl.lora_A["default"].weight.grad, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(layer.lora_B.weight.grad, pl.lora_B["default"].weight.grad, rtol=1e-9, atol=1e-12)
        x, go = inputs[name].reshape(-1, layer.in_features), grads_out[name].reshape(-1, layer.out_features)
        expected = (x.t() @ go).flatten()[layer.sparse_index.long()]  # dL/dW of the stored (in, out) weight
        torch.testing.assert_close(layer.sparse_values.grad, expected, rtol=1e-9, atol=1e-14)


def test_gpt2_merge_equals_peft_merge_and_unload(tiny_gpt2):
    ours, layers, peft_model, _ = _peft_gpt2(tiny_gpt2, density=0.0)
    merged_peft = peft_model.merge_and_unload()
    for name, layer in layers.items():
        layer.merge()
        torch.testing.assert_close(layer.base_layer.weight, merged_peft.get_submodule(name).weight, rtol=0,
                                   atol=1e-12)


def test_gpt2_targets_and_errors(tiny_gpt2):
    model = build_causal_lm(tiny_gpt2)
    names = find_targets(model, "all-linear")
    assert names == [f"transformer.h.{i}.{m}" for i in range(2)
                     for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]  # the head is excluded
    assert find_targets(model, ["c_attn"]) == ["transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"]
    with pytest.raises(ZooError, match="Conv1D"):
        find_targets(model, ["q_proj"])


def test_gpt2_modules_train_and_export(tiny_gpt2, tmp_path):
    """RoSAModule (mask generated in the fit, then LoRA + sparse) and the PEFT LoRA baseline on GPT-2."""
    import lightning.pytorch as L
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from datamodules.gsm8k import GSM8KDataModule
    from zoo.rosa import LoRABaselineModule, RoSAModule
    from zoo.rosa.mask import load_mask

    def data():
        # 48 bytes is shorter than every question: the plain format cuts the question, llm-foundry's skips it
        return GSM8KDataModule(source="embedded", tokenizer="byt5", max_length=48, batch_size=2, embedded_size=8,
                               num_test=2, tokenization="plain")

    def trainer(root):
        return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False, default_root_dir=str(root),
                         max_steps=3)

    torch.manual_seed(0)
    module = RoSAModule(model=tiny_gpt2, tokenizer="byt5", r=2, lora_alpha=4, density=0.05, mask_warmup_steps=1,
                        lr_warmup_steps=0, max_new_tokens=4)
    trainer(tmp_path).fit(module, data())
    assert module.has_mask and all(layer.sparse_values.abs().sum() > 0 for layer in module.layers.values())
    masks = load_mask(tmp_path / "rosa_mask.safetensors", module.layers)
    assert all(torch.equal(masks[n], layer.sparse_index.long()) for n, layer in module.layers.items())
    module.export(tmp_path / "merged")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    ids = torch.randint(0, 384, (2, 9))
    module.eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids).logits, module.model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)

    torch.manual_seed(0)
    lora = LoRABaselineModule(model=tiny_gpt2, tokenizer="byt5", r=2, lora_alpha=4, lr_warmup_steps=0,
                              max_new_tokens=4)
    assert isinstance(lora.model, PeftModel)
    assert all(m.fan_in_fan_out for n, m in lora.model.named_modules() if n.endswith(("c_attn", "c_fc")))
    trainer(tmp_path / "lora").fit(lora, data())
    lora.eval()
    with torch.no_grad():
        torch.testing.assert_close(lora.merged_model()(input_ids=ids).logits, lora.model(input_ids=ids).logits,
                                   rtol=1e-5, atol=1e-5)
