"""QRoSA: the frozen base weight in NF4 with double quantisation (bitsandbytes), dequantised on use.

The official QRoSA loads the model through `BitsAndBytesConfig(load_in_4bit, nf4, double quant, bf16 compute)`
and calls `bnb.functional.dequantize_4bit` in both the forward and the backward pass. We quantise each target
linear with the same bitsandbytes function (`quantize_4bit`, blocksize 64, `compress_statistics=True`) and keep
the packed weight and its quantisation state as buffers, so the state dict round-trips through safetensors.
A transformers `Conv1D` (GPT-2) is quantised in its stored (in, out) layout and keeps that layout
(`fan_in_fan_out=True`), so RoSA's sparse support indexes the same entries as on the dense layer.
bitsandbytes >= 0.45 runs these kernels on CPU too, which is what the tests use.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.errors import ZooError
from zoo.rosa.layer import SparseFrozenLinear, base_geometry

BLOCKSIZE = 64  # bitsandbytes' default for NF4 (and what transformers' BitsAndBytesConfig uses)

# QuantState.as_dict(packed=True) keys -> buffer names (dots are not allowed in buffer names)
_STATE_KEYS = {"absmax": "nf4_absmax", "quant_map": "nf4_quant_map", "nested_absmax": "nf4_nested_absmax",
               "nested_quant_map": "nf4_nested_quant_map", "quant_state.bitsandbytes__nf4": "nf4_state"}


def _bnb():
    try:
        import bitsandbytes.functional as bnbf
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ZooError("QRoSA needs bitsandbytes: pip install 'zoo[quant]'") from e
    return bnbf


class NF4Linear(nn.Module):
    """A frozen linear layer whose weight is stored in NF4 (4 bits + double-quantised block scales).

    `fan_in_fan_out`: the weight is stored (in, out) and applied as x W + b (a quantised `Conv1D`)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, compute_dtype: torch.dtype,
                 fan_in_fan_out: bool = False):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.compute_dtype = compute_dtype
        self.fan_in_fan_out = fan_in_fan_out
        self.register_buffer("weight_nf4", torch.zeros(0, dtype=torch.uint8))
        for buf in _STATE_KEYS.values():
            self.register_buffer(buf, torch.zeros(0))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=compute_dtype), requires_grad=False) if bias else None
        self._state_cache: tuple | None = None
        self.register_load_state_dict_pre_hook(_adopt_incoming_shapes)

    @classmethod
    def from_linear(cls, linear: nn.Module) -> NF4Linear:
        """Quantise an `nn.Linear` or a transformers `Conv1D` (kept in its stored layout)."""
        bnbf = _bnb()
        n_in, n_out, fan_in_fan_out = base_geometry(linear)
        w = linear.weight.detach()
        layer = cls(n_in, n_out, linear.bias is not None, w.dtype, fan_in_fan_out)
        packed, state = bnbf.quantize_4bit(w.contiguous(), blocksize=BLOCKSIZE, compress_statistics=True,
                                           quant_type="nf4")
        layer.weight_nf4 = packed
        for key, value in state.as_dict(packed=True).items():
            setattr(layer, _STATE_KEYS[key], value)
        if linear.bias is not None:
            layer.bias.data.copy_(linear.bias.detach())
        return layer.to(w.device)

    def _quant_state(self):
        # Rebuilding QuantState parses a small packed header; cache it per device/dtype of the buffers.
        key = (self.weight_nf4.device, self.weight_nf4.data_ptr(), self.nf4_absmax.data_ptr())
        if self._state_cache is None or self._state_cache[0] != key:
            d = {k: getattr(self, b) for k, b in _STATE_KEYS.items()}
            state = _bnb().QuantState.from_dict(d, device=self.weight_nf4.device)
            self._state_cache = (key, state)
        return self._state_cache[1]

    fresh_weight = True  # frozen_weight() builds a new tensor per call: add_sparse may add into it

    def frozen_weight(self) -> torch.Tensor:
        """dequantize_4bit(W): a fresh dense tensor in the stored layout ((out, in), or (in, out) with
        `fan_in_fan_out`) and the compute dtype."""
        if self.weight_nf4.numel() == 0:
            raise ZooError("NF4Linear has no quantised weight (load a state dict or use from_linear)")
        return _bnb().dequantize_4bit(self.weight_nf4, self._quant_state()).to(self.compute_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # plain (adapter-free) use
        empty = torch.zeros(0, dtype=self.compute_dtype, device=x.device)
        return SparseFrozenLinear.apply(x, empty, empty.new_zeros(0, dtype=torch.int64), self)

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, nf4 (double quant), compute={self.compute_dtype}"
                f"{', fan_in_fan_out' if self.fan_in_fan_out else ''}")


def _adopt_incoming_shapes(module: NF4Linear, state_dict, prefix, *args) -> None:
    """Load-state-dict pre hook: the buffers' shapes depend on the weight, so adopt the incoming shapes before
    the copy (and drop the cached quantisation state)."""
    for name in ["weight_nf4", *_STATE_KEYS.values()]:
        t = state_dict.get(prefix + name)
        if t is not None:
            setattr(module, name, torch.empty_like(t, device=getattr(module, name).device))
    module._state_cache = None
