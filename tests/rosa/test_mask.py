"""Oracle for the Fisher mask: top-k of the micro-batch mean of (dL/dW)² from autograd on an unfrozen copy."""

from __future__ import annotations

import copy

import pytest
import torch

from zoo.errors import ZooError
from zoo.lm import build_causal_lm
from zoo.rosa.mask import FisherCollector, apply_rosa, find_targets, fisher_mask, load_mask, rosa_layers, save_mask


def _adapted(config, density=0.05, r=4):
    torch.manual_seed(0)
    model = build_causal_lm(config).double()
    layers = apply_rosa(model, "all-linear", r=r, lora_alpha=8, lora_dropout=0.0, density=density,
                        adapter_dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    for layer in layers.values():  # a warmed-up (non-zero) LoRA, so dO depends on it
        if layer.lora_B is not None:
            with torch.no_grad():
                layer.lora_B.weight.copy_(torch.randn(layer.lora_B.weight.shape, generator=g, dtype=torch.float64))
    return model, layers


def _autograd_fisher(model, batches, mode="mean_squared"):
    """Merge the adapters into an unfrozen copy and take dL/dW with autograd, micro-batch by micro-batch (for
    Conv1D that is the gradient of its stored (in, out) weight, the layout the mask indexes)."""
    merged = copy.deepcopy(model)
    names = list(rosa_layers(merged))
    for name, layer in rosa_layers(merged).items():
        layer.merge()
        parent, _, child = name.rpartition(".")
        setattr(merged.get_submodule(parent), child, layer.base_layer)
    weights = [merged.get_submodule(n).weight for n in names]
    for w in weights:
        w.requires_grad_(True)
    acc = [torch.zeros_like(w) for w in weights]
    for b in batches:
        grads = torch.autograd.grad(merged(**b).loss, weights)
        for a, g in zip(acc, grads):
            a += g * g if mode == "mean_squared" else g
    return {n: (a / len(batches)).abs() for n, a in zip(names, acc)}


@pytest.mark.parametrize("arch, mode", [("llama", "mean_squared"), ("llama", "mean"), ("gpt2", "mean_squared")])
def test_fisher_mask_equals_autograd_topk(tiny_llama, tiny_gpt2, token_batches, arch, mode):
    model, layers = _adapted(tiny_llama if arch == "llama" else tiny_gpt2)
    batches = token_batches(3)
    with FisherCollector(model, layers, mode) as fisher:
        for b in batches:
            model(**b).loss.backward()
            fisher.end_microbatch()
    scores = fisher.scores()
    expected = _autograd_fisher(model, batches, mode)
    assert set(scores) == set(expected) == set(layers)
    for name in layers:
        torch.testing.assert_close(scores[name].double(), expected[name], rtol=1e-9, atol=1e-15)
    masks = fisher_mask(scores, 0.05)
    for name, idx in masks.items():
        k = int(0.05 * expected[name].numel())
        assert idx.numel() == k and torch.unique(idx).numel() == k  # exactly k distinct entries per layer
        top = torch.topk(expected[name].flatten(), k).indices
        assert set(idx.tolist()) == set(top.tolist()), name



class _TwoRanks:
    """A data-parallel strategy's `reduce(mean)` as seen from rank 0 of two: the other rank's tensors arrive in the
    same (layer) order."""

    def __init__(self, other: dict[str, torch.Tensor]):
        self.other = iter(other.values())

    def reduce(self, tensor, reduce_op):
        assert reduce_op == "mean"
        return (tensor + next(self.other).to(tensor)) / 2


@pytest.mark.parametrize("mode", ["mean_squared", "mean"])
def test_data_parallel_fisher_is_the_fisher_of_all_micro_batches(tiny_llama, token_batches, mode):
    """Two ranks, two micro-batches each: the mask `RoSAModule` takes after reducing over the ranks is the official
    one-process mask over all four (top-k of the micro-batch mean of G², or of |mean of G|: `_grad_to_mask_fn`),
    also in `mean` mode, where the signed means must be averaged before the absolute value."""
    from types import SimpleNamespace

    from zoo.rosa import RoSAModule

    torch.manual_seed(0)
    module = RoSAModule(model=tiny_llama, tokenizer="byt5", r=2, lora_alpha=4, lora_dropout=0.0, density=0.05,
                        fisher_mode=mode)
    module.model.double()
    batches = token_batches(4)
    ranks = []
    for part in (batches[:2], batches[2:]):
        with FisherCollector(module.model, module.layers, mode) as fisher:
            for b in part:
                module.model(**b).loss.backward()
                fisher.end_microbatch()
        ranks.append(fisher)
    module.trainer = SimpleNamespace(world_size=2, strategy=_TwoRanks(ranks[1].means()))
    scores = module.fisher_scores(ranks[0])
    expected = _autograd_fisher(module.model, batches, mode)
    for name in module.layers:
        torch.testing.assert_close(scores[name].double(), expected[name], rtol=1e-9, atol=1e-15)
    assert all(torch.equal(a, b) for a, b in zip(fisher_mask(scores, 0.05).values(),
                                                  fisher_mask(expected, 0.05).values()))

def test_spa_only_collects_without_lora(tiny_llama, token_batches):
    model, layers = _adapted(tiny_llama, r=0)
    batches = token_batches(2)
    with FisherCollector(model, layers) as fisher:
        for b in batches:
            model(**b).loss.backward()
            fisher.end_microbatch()
    scores = fisher.scores()
    expected = _autograd_fisher(model, batches)
    for name in layers:
        torch.testing.assert_close(scores[name].double(), expected[name], rtol=1e-9, atol=1e-15)


def test_mask_file_round_trip_and_misfits(tiny_llama, tmp_path):
    model, layers = _adapted(tiny_llama)
    masks = {n: torch.randperm(l.in_features * l.out_features)[: l.nnz] for n, l in layers.items()}
    path = save_mask(tmp_path / "mask.safetensors", masks, 0.05)
    loaded = load_mask(path, layers)
    assert all(torch.equal(loaded[n], masks[n]) for n in masks)
    with pytest.raises(ZooError, match="not found"):
        load_mask(tmp_path / "nope.safetensors", layers)
    first = next(iter(masks))
    save_mask(tmp_path / "missing.safetensors", {n: m for n, m in masks.items() if n != first}, 0.05)
    with pytest.raises(ZooError, match="does not fit the model"):
        load_mask(tmp_path / "missing.safetensors", layers)
    save_mask(tmp_path / "size.safetensors", {**masks, first: masks[first][:-1]}, 0.05)
    with pytest.raises(ZooError, match="does not fit the model"):
        load_mask(tmp_path / "size.safetensors", layers)
    numel = layers[first].in_features * layers[first].out_features
    save_mask(tmp_path / "range.safetensors", {**masks, first: masks[first] + numel}, 0.05)
    with pytest.raises(ZooError, match="does not fit the model"):
        load_mask(tmp_path / "range.safetensors", layers)


def test_targets_and_density_errors(tiny_llama):
    model = build_causal_lm(tiny_llama)
    names = find_targets(model, "all-linear")
    assert "lm_head" not in names and len(names) == 7 * 2
    assert find_targets(model, ["q_proj", "v_proj"]) == [n for n in names if n.endswith(("q_proj", "v_proj"))]
    with pytest.raises(ZooError, match="qq_proj"):
        find_targets(model, ["q_proj", "qq_proj"])
    for d in (-0.1, 1.0, 1.5):
        with pytest.raises(ZooError, match="density"):
            apply_rosa(copy.deepcopy(model), "all-linear", density=d)
