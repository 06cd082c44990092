"""Where the adapters go and where the sparse support comes from.

* `apply_rosa` wraps the target linear layers of a model (`nn.Linear`, and transformers' `Conv1D` as in GPT-2)
  in `RoSALinear` (PEFT's target matching rules).
* `FisherCollector` + `fisher_mask` implement the official "grad-acc" mask (peft-rosa `hooks.py`,
  `scheduler.py`): for every target layer, hooks record the full-weight gradient of each micro-batch in the
  stored layout of the weight (G = dOᵀX for `nn.Linear`, XᵀdO for `Conv1D`); the score is the running mean of G²
  (empirical diagonal Fisher, option `mean_squared`, the default) or of G (`mean`, scored by |Ḡ|); the mask
  keeps the top int(d·numel) entries *per layer*.
* `save_mask` / `load_mask`: the mask as a safetensors file of flat row-major indices per layer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from zoo.errors import ZooError
from zoo.rosa.layer import RoSALinear, SDDMMKernel

ALL_LINEAR = "all-linear"
LINEAR_TYPES = (nn.Linear, Conv1D)  # what PEFT's "all-linear" matches too


def find_targets(model: nn.Module, target_modules: str | Iterable[str]) -> list[str]:
    """Names of the linear modules (`nn.Linear` or transformers `Conv1D`) to adapt, in `named_modules` order
    (the order PEFT uses).

    `"all-linear"`: every linear layer except the output head (PEFT's rule). A list: a module matches a
    target when its name equals it or ends with `"." + target` (PEFT's rule); every target must match.
    """
    linears = [n for n, m in model.named_modules() if isinstance(m, LINEAR_TYPES) and n]
    if target_modules == ALL_LINEAR:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        names = [n for n in linears if model.get_submodule(n) is not head]
        if not names:
            raise ZooError("target_modules='all-linear' matched no nn.Linear or Conv1D layer besides the output "
                           "head")
        return names
    targets = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    if not targets:
        raise ZooError("target_modules is empty; use 'all-linear' or a list of module names")
    matched = [n for n in linears if any(n == t or n.endswith("." + t) for t in targets)]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in linears)]
    if missing:
        example = sorted({n.rsplit(".", 1)[-1] for n in linears})
        raise ZooError(f"target module(s) {missing} match no nn.Linear or Conv1D layer of the model "
                       f"(linear layers: {example})")
    return matched


def apply_rosa(model: nn.Module, target_modules: str | Iterable[str] = ALL_LINEAR, r: int = 16,
               lora_alpha: float = 16.0, lora_dropout: float = 0.0, density: float = 0.0, quantize: str | None = None,
               adapter_dtype: torch.dtype = torch.float32, sddmm: SDDMMKernel = "auto") -> dict[str, RoSALinear]:
    """Replace each target linear by a `RoSALinear` (empty support); freeze everything else.

    `quantize="nf4"` first stores the target weights in NF4 with double quantisation (QRoSA). `sddmm` is the
    kernel of the sparse value gradient (`zoo.rosa.layer`; default "auto").
    """
    if r < 0:
        raise ZooError(f"LoRA rank r must be >= 0, got {r}")
    check_density(density)
    names = find_targets(model, target_modules)
    for p in model.parameters():
        p.requires_grad_(False)
    layers = {}
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        base = getattr(parent, child)
        if quantize == "nf4":
            from zoo.rosa.quant import NF4Linear

            base = NF4Linear.from_linear(base)
        elif quantize is not None:
            raise ZooError(f"unknown quantize={quantize!r}; use null or 'nf4'")
        layer = RoSALinear(base, r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, density=density,
                           adapter_dtype=adapter_dtype, sddmm=sddmm)
        setattr(parent, child, layer)
        layers[name] = layer
    return layers


def rosa_layers(model: nn.Module) -> dict[str, RoSALinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, RoSALinear)}


class FisherCollector:
    """Accumulates, per target layer, the micro-batch gradient G of its frozen weight, in the stored layout
    (dOᵀX for `nn.Linear`, XᵀdO for `Conv1D`).

    Use as a context manager around forward/backward passes (or `open()` / `close()`) and call
    `end_microbatch()` after each micro-batch's backward. G is formed from the layer input X (forward hook) and
    the output gradient dO (tensor hook), so the frozen (even NF4) weight needs no `.grad`; gradients of the
    trainable adapters are unaffected. The input embeddings are made to require grad so the hooks fire even
    with r = 0.
    """

    def __init__(self, model: nn.Module, layers: dict[str, RoSALinear],
                 mode: Literal["mean_squared", "mean"] = "mean_squared"):
        if mode not in ("mean_squared", "mean"):
            raise ZooError(f"unknown Fisher mode {mode!r}; use 'mean_squared' or 'mean'")
        self.model, self.layers, self.mode = model, layers, mode
        self.current: dict[str, torch.Tensor] = {}
        self.calls: dict[str, int] = {}
        self.total: dict[str, torch.Tensor] = {}
        self.count = 0
        self._handles: list = []

    def _forward_hook(self, name: str):
        def hook(module, inputs, output):
            if not torch.is_grad_enabled() or not output.requires_grad:
                return
            x = inputs[0].detach()
            self.calls[name] = self.calls.get(name, 0) + 1
            transposed = module.fan_in_fan_out

            def grad_hook(grad_out):
                # fp32 for bf16 runs; the official hook forms, squares and averages G in bf16 (cards/rosa.md)
                acc = torch.float64 if grad_out.dtype == torch.float64 else torch.float32
                go = grad_out.reshape(-1, grad_out.shape[-1]).to(acc)
                x2 = x.reshape(-1, x.shape[-1]).to(acc)
                g = x2.t() @ go if transposed else go.t() @ x2  # dL/dW of this call in W's stored layout
                if self.calls[name] == 1:  # the usual case: fold at once, no second out×in buffer per layer
                    self._fold(name, g)
                elif name in self.current:  # a layer called twice per micro-batch: sum G before squaring
                    self.current[name] += g
                else:
                    self.current[name] = g

            output.register_hook(grad_hook)

        return hook

    def _fold(self, name: str, g: torch.Tensor) -> None:
        # g is owned (a fresh dOᵀX or the summed buffer of a twice-called layer): square and add in place, no
        # second out×in temporary per layer and micro-batch
        total = self.total.get(name)
        if self.mode == "mean_squared":
            if total is None:
                self.total[name] = g.square_()
            else:
                total.addcmul_(g, g)
        elif total is None:
            self.total[name] = g
        else:
            total += g

    def open(self) -> FisherCollector:
        """Install the hooks (from now on every forward/backward of the target layers is recorded)."""
        for name, layer in self.layers.items():
            self._handles.append(layer.register_forward_hook(self._forward_hook(name)))
        emb = self.model.get_input_embeddings() if hasattr(self.model, "get_input_embeddings") else None
        if emb is not None:
            self._handles.append(emb.register_forward_hook(lambda m, i, o: o.requires_grad_(True)))
        return self

    def close(self) -> None:
        """Remove the hooks; the collected sums stay."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> FisherCollector:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def end_microbatch(self) -> None:
        """Fold this micro-batch's G into the running sum (G² for the empirical Fisher)."""
        for name, g in self.current.items():
            self._fold(name, g)
        self.current, self.calls = {}, {}
        self.count += 1

    def means(self) -> dict[str, torch.Tensor]:
        """Per layer: the mean over micro-batches of G² (`mean_squared`) or of the signed G (`mean`), before any
        absolute value: the quantity that averages across data-parallel ranks (`RoSAModule.fisher_scores`)."""
        if self.count == 0:
            raise ZooError("no gradients were collected for the RoSA mask (empty training data?)")
        out = {}
        for name in self.layers:
            layer = self.layers[name]
            if name not in self.total:  # layer never reached by the loss: score 0 everywhere
                self.total[name] = torch.zeros(layer.weight_shape)
            out[name] = self.total[name] / self.count
        return out

    def scores(self) -> dict[str, torch.Tensor]:
        """Per layer: mean over micro-batches of G² (or |mean of G|)."""
        return scores_from_means(self.means(), self.mode)


def scores_from_means(means: dict[str, torch.Tensor], mode: Literal["mean_squared", "mean"]) -> dict[str, torch.Tensor]:
    """The scores whose top-k is the mask, from `FisherCollector.means`: G² means as they are, |Ḡ| for `mean` (the
    official `_grad_to_mask_fn` takes topk of |collected_grad|). The absolute value comes after any averaging over
    ranks: the mean of |Ḡ_rank| is not |Ḡ|."""
    return {n: m.abs() for n, m in means.items()} if mode == "mean" else dict(means)


def topk_mask(score: torch.Tensor, density: float) -> torch.Tensor:
    """Flat row-major indices of the int(d·numel) largest scores: exactly that many, sorted."""
    k = int(density * score.numel())
    idx = torch.topk(score.flatten().float(), k, sorted=False).indices if k else score.new_zeros(0, dtype=torch.long)
    return torch.sort(idx).values


def fisher_mask(scores: dict[str, torch.Tensor], density: float) -> dict[str, torch.Tensor]:
    """Per-layer (local) top-k of the Fisher scores, k = int(density · numel) (official `grad-acc` masks)."""
    check_density(density)
    return {name: topk_mask(s, density) for name, s in scores.items()}


def check_density(density: float) -> None:
    if not 0.0 <= density < 1.0:
        raise ZooError(f"density must lie in (0, 1), or be 0 for LoRA only; got {density}")


def save_mask(path: str | Path, masks: dict[str, torch.Tensor], density: float) -> Path:
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {n: m.to(torch.int64).contiguous().cpu() for n, m in masks.items()}
    save_file(tensors, str(path), metadata={"density": json.dumps(density), "format": "rosa-mask-v1"})
    return path


def load_mask(path: str | Path, layers: dict[str, RoSALinear]) -> dict[str, torch.Tensor]:
    """Read a mask file and check that it fits `layers` (same layer names, indices inside each weight)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise ZooError(f"RoSA mask file {str(path)!r} not found")
    try:
        masks = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise ZooError(f"RoSA mask file {str(path)!r} is not a safetensors mask ({e})") from e
    missing = sorted(set(layers) - set(masks))
    extra = sorted(set(masks) - set(layers))
    if missing or extra:
        raise ZooError(f"RoSA mask file {str(path)!r} does not fit the model: layers missing from the mask "
                       f"{missing[:3]}{'...' if len(missing) > 3 else ''}, unknown layers in the mask "
                       f"{extra[:3]}{'...' if len(extra) > 3 else ''}")
    for name, idx in masks.items():
        numel = layers[name].in_features * layers[name].out_features
        if idx.numel() != layers[name].nnz:
            raise ZooError(f"RoSA mask file {str(path)!r} does not fit the model: {name!r} has {idx.numel()} "
                           f"entries, the model expects {layers[name].nnz} (density {layers[name].density})")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= numel):
            rows, cols = layers[name].weight_shape
            raise ZooError(f"RoSA mask file {str(path)!r} does not fit the model: indices of {name!r} exceed "
                           f"its {rows}x{cols} weight")
    return masks
