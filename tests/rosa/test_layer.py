"""Oracles for the RoSA layer: finite differences (float64 gradcheck), a dense masked reference, PEFT LoRA."""

from __future__ import annotations

import copy

import pytest
import torch
from rosa_reference import assert_matches_dense_reference  # tests/rosa, put on sys.path by its conftest
from torch import nn

from zoo.errors import ZooError
from zoo.lm import build_causal_lm
from zoo.memory import saved_bytes
from zoo.rosa.layer import (DropoutLoRAA, RoSALinear, SparseFrozenLinear, SupportPlan, sddmm, sddmm_blocked, sddmm_csr,
                            sddmm_gather)
from zoo.rosa.mask import apply_rosa


def _layer(out=10, inp=12, r=3, density=0.15, seed=0, dtype=torch.float64, bias=True):
    torch.manual_seed(seed)
    base = nn.Linear(inp, out, bias=bias).to(dtype)
    layer = RoSALinear(base, r=r, lora_alpha=6.0, density=density, adapter_dtype=dtype)
    layer.set_mask(torch.randperm(out * inp)[: layer.nnz])
    with torch.no_grad():
        layer.sparse_values.normal_()
        if r:
            layer.lora_B.weight.normal_()
    return layer


def test_nnz_is_int_density_times_numel():
    layer = _layer(out=10, inp=12, density=0.15)
    assert layer.nnz == int(0.15 * 120) == layer.sparse_values.numel()


@pytest.mark.parametrize("nnz", [0, 1, 23, 99])
def test_sddmm_equals_masked_dense_product(nnz):
    g = torch.Generator().manual_seed(1)
    go, x = torch.randn(37, 9, generator=g, dtype=torch.float64), torch.randn(37, 11, generator=g, dtype=torch.float64)
    index = torch.sort(torch.randperm(99, generator=g)[:nnz]).values.to(torch.int32)
    expected = (go.t() @ x).flatten()[index.long()]  # dOᵀX on the support
    for chunk in (1, 37 * 5, 1 << 20):  # one entry per chunk, several chunks, one chunk
        got = sddmm_gather(go, x, index, cols=11, chunk_elements=chunk)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    for block in (1, 11 * 2, 11 * 4, 1 << 20):  # one row per block, uneven blocks, one block
        got = sddmm_blocked(go, x, index, cols=11, block_elements=block)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(sddmm_csr(go, x, index, cols=11), expected, rtol=0, atol=1e-12)
    for kernel in ("auto", "csr", "gather", "blocked"):  # the kernel is the caller's choice
        torch.testing.assert_close(sddmm(go, x, index, cols=11, kernel=kernel), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("nnz", [1, 23, 99])
def test_support_plan_is_the_csr_layout_and_the_row_blocks_support_ranges(nnz):
    g = torch.Generator().manual_seed(2)
    index = torch.sort(torch.randperm(99, generator=g)[:nnz]).values.to(torch.int32)
    mask = torch.zeros(99)
    mask[index.long()] = 1
    plan = SupportPlan(index, rows=9, cols=11)
    torch.testing.assert_close(plan.crow(), mask.view(9, 11).to_sparse_csr().crow_indices().to(torch.int32))
    assert plan.crow().dtype == index.dtype  # int32 stays int32: no int64 copy is kept
    for rows_per_block in (1, 2, 4, 9):
        bounds = list(range(0, 9, rows_per_block)) + [9]
        by_count = [int((index.long() < r * 11).sum()) for r in bounds]  # entries before each block's first row
        assert plan.row_blocks(rows_per_block) == list(zip(bounds[:-1], bounds[1:], by_count[:-1], by_count[1:]))


@pytest.mark.parametrize("kernel", ["csr", "blocked"])
def test_the_layer_builds_its_plan_once_per_support_and_never_uses_a_stale_one(kernel):
    layer = _layer()
    layer.sddmm = kernel
    x = torch.randn(5, 12, dtype=torch.float64)

    def value_grad():  # d sum(y) / dS on the support = (1ᵀX) at each entry's column: dOᵀX with dO = 1
        layer.zero_grad()
        layer(x).sum().backward()
        expected = (torch.ones(5, 10, dtype=x.dtype).t() @ x).flatten()[layer.sparse_index.long()]
        torch.testing.assert_close(layer.sparse_values.grad, expected, rtol=0, atol=1e-12)

    value_grad()
    plan = layer.support_plan()
    value_grad()
    assert layer.support_plan() is plan  # kept across steps
    layer.set_mask(torch.randperm(120)[: layer.nnz])  # same buffer, new contents
    assert layer.support_plan() is not plan
    value_grad()
    other = _layer(seed=1)
    plan = layer.support_plan()
    layer.load_state_dict(other.state_dict())  # written in place again
    assert layer.support_plan() is not plan and torch.equal(layer.sparse_index, other.sparse_index)
    value_grad()


@pytest.mark.parametrize("shape,density", [((10, 12), 0.15), ((40, 48), 0.002)])  # blocked / gather SDDMM
def test_sparse_linear_gradcheck_float64(shape, density):
    layer = _layer(out=shape[0], inp=shape[1], density=density)
    x = torch.randn(2, 4, shape[1], dtype=torch.float64, requires_grad=True)
    v = layer.sparse_values.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, v: SparseFrozenLinear.apply(x, v, layer.sparse_index, layer.frozen()),
                                    (x, v))


def test_full_layer_gradcheck_float64():
    layer = _layer()
    names = ["sparse_values", "lora_A.weight", "lora_B.weight"]
    params = [dict(layer.named_parameters())[n].detach().clone().requires_grad_() for n in names]
    x = torch.randn(3, 12, dtype=torch.float64, requires_grad=True)

    def f(x, *ps):
        return torch.func.functional_call(layer, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(f, (x, *params))


def test_gradients_match_dense_masked_reference():
    assert_matches_dense_reference(_layer(), 12)


def test_no_dense_weight_sized_tensor_is_saved_for_backward():
    layer = _layer(out=40, inp=48, density=0.02, dtype=torch.float32)
    saved = []
    x = torch.randn(3, 48, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        layer(x).sum().backward()
    assert all(torch.Size(s).numel() != 40 * 48 for s in saved), saved


def test_r0_with_zero_values_is_the_base_layer():
    layer = _layer(r=0)
    with torch.no_grad():
        layer.sparse_values.zero_()
    x = torch.randn(4, 12, dtype=torch.float64)
    assert torch.equal(layer(x), layer.base_layer(x))


def test_merge_reproduces_the_adapter_output():
    layer = _layer()
    x = torch.randn(6, 12, dtype=torch.float64)
    y = layer(x)
    merged = copy.deepcopy(layer)
    merged.merge()
    torch.testing.assert_close(merged(x), y, rtol=0, atol=1e-12)
    torch.testing.assert_close(merged.base_layer(x), y, rtol=0, atol=1e-12)


def test_mask_of_wrong_size_is_an_error():
    layer = _layer()
    with pytest.raises(ZooError, match="does not fit"):
        layer.set_mask(torch.arange(layer.nnz + 1))
    with pytest.raises(ZooError, match="out of range"):
        layer.set_mask(torch.arange(layer.nnz) + 120)


@pytest.mark.parametrize("arch, dropout", [("llama", 0.0), ("llama", 0.3), ("gpt2", 0.0), ("gpt2", 0.3)])
def test_density_zero_is_peft_lora_bit_for_bit(tiny_llama, tiny_gpt2, arch, dropout):
    """Llama (nn.Linear) against PEFT's LoRA; GPT-2 (Conv1D, weights stored (in, out)) against PEFT's
    fan_in_fan_out LoRA."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = build_causal_lm(tiny_llama if arch == "llama" else tiny_gpt2)
    ours_model = copy.deepcopy(base)
    torch.manual_seed(123)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules="all-linear",
                                                 fan_in_fan_out=arch == "gpt2"))
    torch.manual_seed(123)
    layers = apply_rosa(ours_model, "all-linear", r=4, lora_alpha=8, lora_dropout=dropout, density=0.0)
    peft_layers = {n.removeprefix("base_model.model."): m for n, m in peft_model.named_modules()
                   if hasattr(m, "lora_A") and "default" in getattr(m, "lora_A", {})}
    assert set(layers) == set(peft_layers) and len(layers) == (14 if arch == "llama" else 8)
    # same seed and construction order: identical initial A (B is 0 in both)
    for name, layer in layers.items():
        assert torch.equal(layer.lora_A.weight, peft_layers[name].lora_A["default"].weight), name
    # make B non-zero identically so the adapters matter
    g = torch.Generator().manual_seed(7)
    for name, layer in layers.items():
        w = torch.randn(layer.lora_B.weight.shape, generator=g) * 0.1
        with torch.no_grad():
            layer.lora_B.weight.copy_(w)
            peft_layers[name].lora_B["default"].weight.copy_(w)
    ids = torch.randint(0, 384, (2, 10), generator=g)
    torch.manual_seed(5)
    out_peft = peft_model(input_ids=ids, labels=ids)
    out_peft.loss.backward()
    torch.manual_seed(5)
    out_ours = ours_model(input_ids=ids, labels=ids)
    out_ours.loss.backward()
    assert torch.equal(out_ours.logits, out_peft.logits)
    for name, layer in layers.items():
        assert torch.equal(layer.lora_A.weight.grad, peft_layers[name].lora_A["default"].weight.grad), name
        assert torch.equal(layer.lora_B.weight.grad, peft_layers[name].lora_B["default"].weight.grad), name


def test_dropout_lora_branch_matches_reference_float64():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 12, dtype=torch.float64, generator=g, requires_grad=True)
    a = torch.randn(3, 12, dtype=torch.float64, generator=g, requires_grad=True)
    keep = torch.rand(4, 12, generator=g) > 0.3
    assert torch.autograd.gradcheck(lambda x, a: DropoutLoRAA.apply(x, a, keep, 1 / 0.7), (x, a))
    xr, ar = x.detach().clone().requires_grad_(), a.detach().clone().requires_grad_()
    ref = (xr * keep / 0.7) @ ar.t()
    out = DropoutLoRAA.apply(x, a, keep, 1 / 0.7)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    gy = torch.randn_like(out)
    out.backward(gy)
    ref.backward(gy)
    torch.testing.assert_close(x.grad, xr.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(a.grad, ar.grad, rtol=0, atol=1e-12)


def test_rosa_path_with_dropout_saves_less_than_peft_lora():
    """The d > 0 path keeps x and a 1-byte keep mask, not a dropped-out fp32 copy of x."""

    def kept(module, x):
        frozen = [p for p in module.parameters() if not p.requires_grad]
        return saved_bytes(lambda: module(x).sum().backward(), exclude=frozen)

    torch.manual_seed(0)
    base = nn.Linear(64, 64)
    lora = RoSALinear(copy.deepcopy(base), r=4, lora_alpha=8, lora_dropout=0.1, density=0.0)
    rosa = RoSALinear(copy.deepcopy(base), r=4, lora_alpha=8, lora_dropout=0.1, density=0.02)
    rosa.set_mask(torch.randperm(64 * 64)[: rosa.nnz])
    x = torch.randn(128, 64, requires_grad=True)
    assert kept(rosa, x) < kept(lora, x)
