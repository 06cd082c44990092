"""The RoSA layer: a frozen weight W plus a low-rank adapter (A, B) and a sparse adapter S.

    y = x (W + S)ᵀ + b + (α/r) · B A drop(x)                       (RoSA, Eq. 1 with the LoRA scaling)

S has a fixed support (the mask, chosen by `zoo.rosa.mask.fisher_mask`) and trainable values. It is stored as
a flat row-major index into the *stored* weight (`sparse_index`, int32 or int64) and a value vector
(`sparse_values`), so adapter memory grows with nnz, never with out·in.

Weight layouts. `nn.Linear` stores W as (out, in); transformers' `Conv1D` (GPT-2) stores it transposed, (in, out),
and computes x W + b (PEFT's `fan_in_fan_out`). The support indexes the weight as stored in either case, so a mask
addresses `base.weight.view(-1)` directly: merging is an `index_add_` into W, and the Fisher score of an entry is
the squared gradient of that stored entry. The LoRA factors do not depend on the layout (A is r×in, B is out×r,
as in PEFT).

The gradient of the values is the masked product dOᵀX (XᵀdO for Conv1D) evaluated only on the support (SDDMM),
never as a dense out×in gradient. Three exact kernels, chosen per layer by the `sddmm` argument:
* `"csr"`: PyTorch's CSR SDDMM kernel `torch.sparse.sampled_addmm` (work ∝ nnz·T at kernel speed);
* `"gather"`: gathers the needed columns of both operands in chunks of the support (work ∝ nnz·T);
* `"blocked"`: GEMMs over blocks of weight rows from which the support entries are picked (work at GEMM speed,
  a bounded temporary block);
* `"auto"` (the default): `"csr"` where this PyTorch build has the kernel for the tensors' device (probed once per
  device type, on first use — never at import), otherwise `"gather"` at low density and `"blocked"` above
  1/(2·GATHER_VS_GEMM_COST).

The frozen W may be dense (`nn.Linear`, `Conv1D`) or an NF4 weight (`zoo.rosa.quant.NF4Linear`); either way W is
re-materialised in the backward pass instead of being saved (the official code does the same with
`dequantize_4bit` in forward and backward).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from zoo.errors import ZooError

# Elements per gathered chunk in the gather SDDMM: two (chunk × tokens) buffers, 2**24 floats = 64 MiB each in fp32.
SDDMM_CHUNK_ELEMENTS = 1 << 24
# Largest dense block (rows × cols) of the product the blocked SDDMM forms at a time: 16 MiB in fp32, i.e. a quarter
# of a 4096×4096 LLaMA projection; the full weight-sized gradient is never formed for large layers.
SDDMM_BLOCK_ELEMENTS = 1 << 22
# Cost of one gathered multiply-add relative to one GEMM multiply-add (measured ~100-200 on CPU; GPUs favour
# GEMMs even more). Above density 1/(2·ratio) the blocked GEMM is cheaper than gathering 2·nnz·T elements.
GATHER_VS_GEMM_COST = 128

SDDMMKernel = Literal["auto", "csr", "gather", "blocked"]
SDDMM_KERNELS = ("auto", "csr", "gather", "blocked")


def index_dtype(numel: int) -> torch.dtype:
    """int32 indices while they fit (half the memory of int64; the official CSR uses int32/int16)."""
    return torch.int32 if numel < 2**31 else torch.int64


class SupportPlan:
    """What the SDDMM kernels derive from a fixed, sorted support: the CSR row pointers of `sampled_addmm`'s
    pattern ((rows + 1) integers) and the support range of each row block of the blocked kernel. Both are fixed
    once the mask is set, so `RoSALinear` builds them once per mask instead of in every backward pass. This saves
    four small kernels per layer and step for the CSR kernel, and for the blocked kernel a device→host read (a
    host sync on CUDA, where the step is host-bound: benchmarks/RESULTS.md, rosa on the H200). Only O(rows)
    integers are kept; the column indices (nnz of them) are recomputed per call rather than held a second time."""

    def __init__(self, index: torch.Tensor, rows: int, cols: int):
        self.index, self.rows, self.cols = index, rows, cols
        self.key = self.key_of(index, rows, cols)
        self._crow: torch.Tensor | None = None
        self._blocks: dict[int, list[tuple[int, int, int, int]]] = {}

    @staticmethod
    def key_of(index: torch.Tensor, rows: int, cols: int) -> tuple:
        """Identifies a support without reading it: its storage, device and geometry. Writes into the same
        storage (`set_mask`, `load_state_dict`) drop the layer's plan explicitly; DDP's buffer broadcast writes
        the support every rank already has (all ranks take the same top-k, `RoSAModule.fisher_scores`)."""
        return index.data_ptr(), index.device, index.numel(), rows, cols

    def crow(self) -> torch.Tensor:
        if self._crow is None:
            edges = torch.arange(self.rows + 1, device=self.index.device) * self.cols
            self._crow = torch.searchsorted(self.index.long(), edges).to(self.index.dtype)
        return self._crow

    def row_blocks(self, rows_per_block: int) -> list[tuple[int, int, int, int]]:
        """(r0, r1, s, e) per block of `rows_per_block` weight rows: its rows and its entries' range s:e in the
        sorted support."""
        if rows_per_block not in self._blocks:
            bounds = list(range(0, self.rows, rows_per_block)) + [self.rows]
            edges = torch.tensor(bounds, device=self.index.device, dtype=torch.long) * self.cols
            starts = torch.searchsorted(self.index.long(), edges).tolist()
            self._blocks[rows_per_block] = list(zip(bounds[:-1], bounds[1:], starts[:-1], starts[1:]))
        return self._blocks[rows_per_block]


# --- SDDMM: (aᵀ b) on a support of flat row-major indices k = i·cols + j ------------------------------------------
# For nn.Linear a = dO (T, out), b = X (T, in), cols = in: the gradient of W (out, in). For Conv1D a = X, b = dO,
# cols = out: the gradient of its stored (in, out) weight.

def sddmm_gather(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor, cols: int,
                 chunk_elements: int = SDDMM_CHUNK_ELEMENTS) -> torch.Tensor:
    """Sampled dense-dense product: for each flat support index k = i·cols + j, sum_t a[t, i] · b[t, j].

    `a` is (T, rows), `b` is (T, cols). Both are transposed once so that the gathers read contiguous rows;
    products accumulate in float32 (or float64 when the inputs are float64). Work and memory ∝ nnz·T.
    """
    nnz = index.numel()
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    out = torch.empty(nnz, dtype=acc, device=a.device)
    if nnz == 0:
        return out
    a_t = a.t().contiguous()  # (rows, T)
    b_t = b.t().contiguous()  # (cols, T)
    tokens = max(a_t.shape[1], 1)
    step = max(1, chunk_elements // tokens)
    for s in range(0, nnz, step):
        idx = index[s:s + step].long()
        ga = a_t.index_select(0, idx // cols).to(acc)
        gb = b_t.index_select(0, idx % cols).to(acc)
        torch.sum(ga.mul_(gb), dim=1, out=out[s:s + step])  # ga is a fresh gather: multiply in place
    return out


def sddmm_blocked(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor, cols: int,
                  block_elements: int = SDDMM_BLOCK_ELEMENTS, plan: SupportPlan | None = None) -> torch.Tensor:
    """The same sampled product, one block of rows at a time: (a[:, r0:r1])ᵀ b is a GEMM of at most
    `block_elements` entries, from which the support entries of those rows are gathered. Needs `index` sorted
    (row-major), which `RoSALinear.set_mask` guarantees. Work ∝ rows·cols·T at GEMM speed, memory ∝ one block.
    `plan` (the layer's `SupportPlan`) supplies each block's support range without a device→host read."""
    nnz, rows = index.numel(), a.shape[-1]
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    out = torch.empty(nnz, dtype=acc, device=a.device)
    if nnz == 0:
        return out
    plan = plan if plan is not None else SupportPlan(index, rows, cols)
    for r0, r1, s, e in plan.row_blocks(max(1, block_elements // cols)):
        if s == e:
            continue
        block = a[:, r0:r1].t() @ b  # (r1 - r0, cols): one slab of aᵀb
        out[s:e] = block.reshape(-1).index_select(0, index[s:e].long() - r0 * cols)
    return out


def sddmm_csr(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor, cols: int,
              plan: SupportPlan | None = None) -> torch.Tensor:
    """The same sampled product through PyTorch's own SDDMM kernel, `torch.sparse.sampled_addmm` on a CSR
    pattern built from the sorted flat index (CPU and CUDA; work ∝ nnz·T like the official `spops` SDDMM).
    Measured 3× faster than the blocked GEMM and 6–14× faster than the gather on a 1344×512 layer at
    d = 0.6–1.8%, 512 tokens (2-core CPU). `plan` (the layer's `SupportPlan`) supplies the row pointers."""
    nnz, rows = index.numel(), a.shape[-1]
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    if nnz == 0:
        return torch.empty(0, dtype=acc, device=a.device)
    plan = plan if plan is not None else SupportPlan(index, rows, cols)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": the kernel is covered by our oracle tests
        warnings.simplefilter("ignore", UserWarning)
        # column indices in the index's own dtype (int32 while it fits): no int64 copy of the support per call
        pattern = torch.sparse_csr_tensor(plan.crow(), index % cols, torch.zeros(nnz, dtype=acc, device=index.device),
                                          (rows, cols), check_invariants=False)
    out = torch.sparse.sampled_addmm(pattern, a.t().to(acc), b.to(acc), beta=0.0)
    return out.values()


@functools.cache
def csr_sddmm_available(device_type: str = "cpu") -> bool:
    """Whether this PyTorch build runs `sampled_addmm` on `device_type` (a 1×1 probe, once per device type)."""
    try:
        one = torch.ones(1, 1, device=device_type)
        sddmm_csr(one, one, torch.zeros(1, dtype=torch.long, device=device_type), 1)
        return True
    except (RuntimeError, NotImplementedError):  # builds without sparse CSR kernels
        return False


def check_sddmm_kernel(kernel: str) -> None:
    if kernel not in SDDMM_KERNELS:
        raise ZooError(f"unknown sddmm kernel {kernel!r}; use one of {list(SDDMM_KERNELS)}")


def sddmm(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor, cols: int,
          kernel: SDDMMKernel = "auto", plan: SupportPlan | None = None) -> torch.Tensor:
    """(aᵀb) on the support with the given kernel; `"auto"`: PyTorch's CSR SDDMM when this build has it for the
    device, otherwise the gather SDDMM at low density and the blocked GEMM + gather above 1/(2·GATHER_VS_GEMM_COST).
    `plan`: the support's cached `SupportPlan` (built here when not given)."""
    if kernel == "auto":
        if csr_sddmm_available(a.device.type):
            kernel = "csr"
        else:
            kernel = "blocked" if 2 * GATHER_VS_GEMM_COST * index.numel() > cols * a.shape[-1] else "gather"
    if kernel == "csr":
        return sddmm_csr(a, b, index, cols, plan=plan)
    if kernel == "blocked":
        return sddmm_blocked(a, b, index, cols, plan=plan)
    if kernel == "gather":
        return sddmm_gather(a, b, index, cols)
    raise ZooError(f"unknown sddmm kernel {kernel!r}; use one of {list(SDDMM_KERNELS)}")


# --- the frozen base --------------------------------------------------------------------------------------------

def add_sparse(weight: torch.Tensor, values: torch.Tensor, index: torch.Tensor, fresh: bool = False) -> torch.Tensor:
    """W + S as a dense tensor (in W's stored layout); W is never modified unless `fresh` says it is a throwaway
    copy (NF4 dequantises a new one per call), in which case S is added into it. With no sparse entry yet, W
    itself (read only). This is the official `csr_add`."""
    if not index.numel():  # mask warm-up / empty mask: no full-weight copy
        return weight
    w = weight if fresh else weight.clone()
    w.view(-1).index_add_(0, index, values.to(w.dtype))
    return w


class DenseFrozen:
    """The frozen-base interface (`frozen_weight()`, `bias`, `fan_in_fan_out`, `fresh_weight`) of a dense
    `nn.Linear` or `Conv1D`; `zoo.rosa.quant.NF4Linear` has the same interface natively."""

    fresh_weight = False  # frozen_weight() is the layer's own tensor: never add into it

    def __init__(self, layer: nn.Module):
        self.layer = layer
        self.fan_in_fan_out = isinstance(layer, Conv1D)

    def frozen_weight(self) -> torch.Tensor:
        return self.layer.weight.detach()

    @property
    def bias(self):
        b = self.layer.bias
        return None if b is None else b.detach()


def frozen_base(layer: nn.Module):
    """The frozen-base interface of `layer`: NF4 layers are their own, dense layers get a `DenseFrozen`."""
    return layer if hasattr(layer, "frozen_weight") else DenseFrozen(layer)


def base_geometry(layer: nn.Module) -> tuple[int, int, bool]:
    """(in_features, out_features, fan_in_fan_out) of a layer RoSA can adapt."""
    if isinstance(layer, Conv1D):  # weight (nx, nf) = (in, out); y = x W + b
        n_in, n_out = layer.weight.shape
        return n_in, n_out, True
    if isinstance(layer, nn.Linear):
        return layer.in_features, layer.out_features, False
    if hasattr(layer, "frozen_weight"):  # NF4Linear
        return layer.in_features, layer.out_features, bool(layer.fan_in_fan_out)
    raise ZooError(f"RoSA adapts nn.Linear, transformers Conv1D and NF4Linear layers, not {type(layer).__name__}")


class SparseFrozenLinear(torch.autograd.Function):
    """y = x (W + S)ᵀ + b (x (W + S) + b for the Conv1D layout), with W frozen and provided by
    `base.frozen_weight()` (dense or dequantised NF4) and S on the stored layout of W.

    Saved for backward: x, the index and the values (nnz each). W + S is rebuilt in backward.
    """

    @staticmethod
    def forward(ctx, x, values, index, base, kernel="auto", plan=None):
        w_eff = add_sparse(base.frozen_weight(), values, index, base.fresh_weight)
        bias = base.bias
        w_lin = w_eff.t() if base.fan_in_fan_out else w_eff  # F.linear wants (out, in)
        y = F.linear(x.to(w_eff.dtype), w_lin, None if bias is None else bias.to(w_eff.dtype))
        ctx.base, ctx.kernel, ctx.plan = base, kernel, plan
        ctx.x_dtype = x.dtype
        ctx.save_for_backward(x, values, index)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, values, index = ctx.saved_tensors
        base = ctx.base
        grad_x = grad_values = None
        if ctx.needs_input_grad[0]:
            w_eff = add_sparse(base.frozen_weight(), values, index, base.fresh_weight)
            g = grad_out.to(w_eff.dtype)
            grad_x = (g @ w_eff.t() if base.fan_in_fan_out else g @ w_eff).to(ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            go = grad_out.reshape(-1, grad_out.shape[-1])
            x2 = x.reshape(-1, x.shape[-1])
            if base.fan_in_fan_out:  # stored (in, out): the gradient is Xᵀ dO
                grad_values = sddmm(x2, go, index, go.shape[-1], ctx.kernel, ctx.plan)
            else:  # stored (out, in): dOᵀ X
                grad_values = sddmm(go, x2, index, x2.shape[-1], ctx.kernel, ctx.plan)
            grad_values = grad_values.to(values.dtype)
        return grad_x, grad_values, None, None, None, None


def _drop(t: torch.Tensor, keep: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Inverted dropout with a given keep mask (no float copy of the mask)."""
    return t if keep is None else torch.where(keep, t, 0.0).mul_(scale)


class DropoutLoRAA(torch.autograd.Function):
    """u = (x ⊙ keep / (1-p)) Aᵀ, saving x (already saved by the sparse branch) and the 1-byte keep mask
    instead of the dropped-out copy of x that `lora_A(dropout(x))` keeps alive; the dropped-out input is
    recomputed in backward. Used on the RoSA path (d > 0) so its activation memory stays within LoRA's."""

    @staticmethod
    def forward(ctx, x, weight, keep, scale):
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else weight.dtype
        ctx.save_for_backward(x, weight, keep)
        ctx.scale, ctx.dtype = scale, dtype
        with torch.autocast(x.device.type, enabled=False):
            return F.linear(_drop(x.to(dtype), keep, scale), weight.to(dtype))

    @staticmethod
    def backward(ctx, grad_u):
        x, weight, keep = ctx.saved_tensors
        dtype, scale = ctx.dtype, ctx.scale
        grad_u = grad_u.to(dtype)
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = _drop(grad_u @ weight.to(dtype), keep, scale).to(x.dtype)
        if ctx.needs_input_grad[1]:
            xd = _drop(x.to(dtype), keep, scale)
            grad_w = (grad_u.reshape(-1, grad_u.shape[-1]).t() @ xd.reshape(-1, xd.shape[-1])).to(weight.dtype)
        return grad_x, grad_w, None, None


def _sync_mask_ready(module: RoSALinear, incompatible_keys) -> None:
    """Load-state-dict post hook: refresh the host copy of `sparse_ready` (one read per load, none per forward)
    and drop the support plan (the support was written in place)."""
    module._ready = bool(module.sparse_ready)
    module._plan = None


class RoSALinear(nn.Module):
    """Low-rank + sparse adapter around a frozen `nn.Linear`, `Conv1D` or `NF4Linear` (PEFT-compatible names:
    `base_layer`, `lora_A`, `lora_B`, `lora_dropout`, `scaling`).

    r = 0 gives pure sparse adaptation (`spa_only`), density 0 gives pure LoRA (`lora_only`); without an
    active support the forward is literally PEFT's `Linear.forward` (for Conv1D: PEFT's `fan_in_fan_out` LoRA),
    so d = 0 is bit-identical to PEFT LoRA. The support is set once by `set_mask(index)` (exactly int(d·out·in)
    distinct flat indices into the stored weight); the values start at 0, so the layer starts at the base model.
    `sddmm` picks the kernel of the value gradient (see the module docstring; default "auto").
    """

    def __init__(self, base_layer: nn.Module, r: int, lora_alpha: float, lora_dropout: float = 0.0,
                 density: float = 0.0, adapter_dtype: torch.dtype = torch.float32, sddmm: SDDMMKernel = "auto"):
        super().__init__()
        check_sddmm_kernel(sddmm)
        if sddmm == "csr" and not csr_sddmm_available(_device_of(base_layer).type):
            raise ZooError("sddmm='csr' needs torch.sparse.sampled_addmm, which this PyTorch build lacks; use 'auto'")
        self.base_layer = base_layer
        self.in_features, self.out_features, self.fan_in_fan_out = base_geometry(base_layer)
        self.sddmm = sddmm
        self.r, self.lora_alpha = r, lora_alpha
        self.lora_dropout = nn.Dropout(p=lora_dropout) if lora_dropout > 0 else nn.Identity()
        device = _device_of(base_layer)
        if r > 0:
            # Same construction order as PEFT's LoraLayer.update_layer (two nn.Linear, then kaiming A, zero B)
            # so that under the same seed the initial A equals PEFT's.
            self.lora_A = nn.Linear(self.in_features, r, bias=False)
            self.lora_B = nn.Linear(r, self.out_features, bias=False)
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B.weight)
            self.lora_A.to(device=device, dtype=adapter_dtype)
            self.lora_B.to(device=device, dtype=adapter_dtype)
            self.scaling = lora_alpha / r
        else:
            self.lora_A = self.lora_B = None
            self.scaling = 0.0
        # The support size k = int(d · out · in) is known up front (the mask is a per-layer top-k), so the
        # values are allocated at construction: optimizers and DDP see their final shape before the mask
        # exists, and a checkpoint always loads into matching shapes. Until `set_mask`, S is inactive.
        numel = self.in_features * self.out_features
        self.density = density
        k = int(density * numel)
        self.register_buffer("sparse_index", torch.zeros(k, dtype=index_dtype(numel), device=device))
        self.register_buffer("sparse_ready", torch.tensor(False, device=device))
        self.sparse_values = nn.Parameter(torch.zeros(k, dtype=adapter_dtype, device=device), requires_grad=k > 0)
        self._ready = False  # host copy of `sparse_ready` (no device sync in forward)
        self._plan: SupportPlan | None = None  # the support's SDDMM bookkeeping, rebuilt when the support changes
        self.register_load_state_dict_post_hook(_sync_mask_ready)
        self.merged = False

    # --- the support --------------------------------------------------------------------------------------
    @property
    def weight_shape(self) -> tuple[int, int]:
        """Shape of the stored weight that the support indexes: (in, out) for Conv1D, else (out, in)."""
        return (self.in_features, self.out_features) if self.fan_in_fan_out else (self.out_features, self.in_features)

    @property
    def nnz(self) -> int:
        return self.sparse_index.numel()

    @property
    def mask_ready(self) -> bool:
        """Whether the support has been set (by `set_mask` or a loaded state dict)."""
        return self._ready

    @property
    def active_nnz(self) -> int:
        return self.nnz if self._ready else 0

    def set_mask(self, index: torch.Tensor, values: torch.Tensor | None = None) -> None:
        """Fix the support S (flat row-major indices into the stored weight) and reset its values to 0."""
        rows, cols = self.weight_shape
        index = index.flatten()
        if index.numel() != self.nnz:
            raise ZooError(f"mask with {index.numel()} entries does not fit a {rows}x{cols} weight at density "
                           f"{self.density} (expected int(d*numel) = {self.nnz})")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= rows * cols):
            raise ZooError(f"mask index out of range for a {rows}x{cols} weight")
        if torch.unique(index).numel() != index.numel():
            raise ZooError("mask indices must be distinct")
        with torch.no_grad():
            self.sparse_index.copy_(torch.sort(index.long()).values.to(self.sparse_index))
            self.sparse_values.zero_() if values is None else self.sparse_values.copy_(values)
            self.sparse_ready.fill_(True)
        self._ready = True
        self._plan = None  # written in place: same storage, new contents

    def support_plan(self) -> SupportPlan:
        """The current support's `SupportPlan`, rebuilt after a new mask or a loaded state dict (both drop it) or
        when the index buffer was replaced (a device move); the check reads no tensor data."""
        rows, cols = self.weight_shape
        if self._plan is None or self._plan.key != SupportPlan.key_of(self.sparse_index, rows, cols):
            self._plan = SupportPlan(self.sparse_index, rows, cols)
        return self._plan

    def dense_sparse(self) -> torch.Tensor:
        """dense(S) in the stored weight's shape (for merging and tests only)."""
        s = torch.zeros(self.out_features * self.in_features, dtype=self.sparse_values.dtype,
                        device=self.sparse_values.device)
        if self._ready:
            s.index_add_(0, self.sparse_index.long(), self.sparse_values.detach())
        return s.view(self.weight_shape)

    # --- forward ------------------------------------------------------------------------------------------
    def frozen(self):
        """The frozen-base interface of `base_layer` (see `SparseFrozenLinear`)."""
        return frozen_base(self.base_layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:
            return self.base_layer(x)
        dense_base = not hasattr(self.base_layer, "frozen_weight")
        if self.active_nnz == 0 and dense_base:
            result = self.base_layer(x)  # lora_only (or before the mask exists): exactly PEFT's path
        elif self.active_nnz == 0:  # NF4 base without sparse part
            empty = self.sparse_values.detach().new_zeros(0)
            result = SparseFrozenLinear.apply(x, empty, self.sparse_index[:0], self.frozen(), self.sddmm)
        else:
            result = SparseFrozenLinear.apply(x, self.sparse_values, self.sparse_index, self.frozen(), self.sddmm,
                                              self.support_plan())
        if self.lora_A is None:
            return result
        torch_result_dtype = result.dtype
        x = x.to(self.lora_A.weight.dtype) if x.dtype != self.lora_A.weight.dtype else x
        if self.active_nnz == 0:  # PEFT's LoRA, op for op
            return (result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling).to(torch_result_dtype)
        p = self.lora_dropout.p if isinstance(self.lora_dropout, nn.Dropout) and self.training else 0.0
        keep = torch.empty_like(x, dtype=torch.bool).bernoulli_(1 - p) if p > 0 else None
        u = DropoutLoRAA.apply(x, self.lora_A.weight, keep, 1.0 / (1 - p))
        return (result + self.lora_B(u) * self.scaling).to(torch_result_dtype)

    # --- merge ----------------------------------------------------------------------------------------------
    def delta_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """ΔW = (α/r)·BA + dense(S) in the stored weight's layout ((α/r)(BA)ᵀ for Conv1D, as PEFT's
        `transpose(B @ A, fan_in_fan_out)`), computed in `dtype` (at least float32)."""
        dtype = torch.promote_types(dtype, torch.float32)
        delta = self.dense_sparse().to(dtype)
        if self.lora_A is not None:
            lora = self.lora_B.weight.to(dtype) @ self.lora_A.weight.to(dtype)
            delta = delta + self.scaling * (lora.t() if self.fan_in_fan_out else lora)
        return delta

    @torch.no_grad()
    def merge(self) -> None:
        """W ← W + ΔW in place (dense bases only; QRoSA is evaluated unmerged, as officially)."""
        if hasattr(self.base_layer, "frozen_weight"):
            raise ZooError("merging into an NF4 base is not supported (the official code has no 4-bit merge)")
        if not self.merged:
            w = self.base_layer.weight
            acc = torch.promote_types(w.dtype, torch.float32)
            w.copy_((w.to(acc) + self.delta_weight(acc).to(w.device)).to(w.dtype))
            self.merged = True

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, r={self.r}, alpha={self.lora_alpha}, "
                f"nnz={self.nnz}, mask={'set' if self._ready else 'pending'}"
                f"{', fan_in_fan_out' if self.fan_in_fan_out else ''}")


def _device_of(module: nn.Module) -> torch.device:
    for t in list(module.parameters()) + list(module.buffers()):
        return t.device
    return torch.device("cpu")
