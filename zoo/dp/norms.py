"""Per-sample gradient contributions, their inner products (ghost / Phantom norms) and clipped sums.

Every call of a layer contributes one term to the per-sample gradient of each of its parameters:
- ``linear``:    g_i = G_iᵀ A_i  (G: T×o output grads, A: T×i inputs), never materialised when
                 T² ≤ i·o (ghost norm ⟨A Aᵀ, G Gᵀ⟩, Li et al. 2022);
- ``embedding``: g_i = S_iᵀ A_i  (S: one-hot ids, A: T×d output grads), never materialised;
- ``dense``:     the materialised per-sample gradient (biases, norms, and every layer in
                 ``per_sample`` mode).
The squared norm of a parameter's per-sample gradient is Σ_xy ⟨x, y⟩ over its contributions.
For the tied input/output embedding of a Transformer the three terms of Phantom Clipping
(Ding et al. 2024, Eq. 3 as corrected in the notes) are exactly
⟨emb, emb⟩ = Σ_jk [s_j = s_k](AAᵀ)_jk, ⟨lin, lin⟩ = Σ_jk (GGᵀ)_jk(HHᵀ)_jk and
2⟨emb, lin⟩ = 2 Σ_jk (AHᵀ)_jk G[k, s_j].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from zoo.dp.capture import Record
from zoo.dp.opacus_samplers import grad_samplers

NORM_TYPES = (nn.LayerNorm, nn.RMSNorm)
GHOST_TYPES = (nn.Linear, nn.Embedding, *NORM_TYPES)


@dataclass
class Contribution:
    kind: str  # "linear" | "embedding" | "dense"
    g: torch.Tensor  # linear: (B,T,o); embedding: (B,T,d); dense: (B, *param.shape)
    a: torch.Tensor | None = None  # linear: inputs (B,T,i); embedding: ids (B,T)
    shape: tuple = ()  # the parameter's shape


def contributions(records: list[Record], mode: str, scale: float = 1.0) -> dict[nn.Parameter, list]:
    """Turns captured records into per-parameter lists of `Contribution`s.

    `scale` multiplies the backprops (n for a batch-mean loss, so that contributions are the
    gradients of the per-sample losses).
    """
    out: dict[nn.Parameter, list[Contribution]] = {}

    def add(p, c):
        if p is not None and p.requires_grad:
            out.setdefault(p, []).append(c)

    for rec in records:
        if rec.backprop is None:  # output did not reach the loss
            continue
        m, g = rec.module, (rec.backprop if scale == 1.0 else rec.backprop * scale)
        x = rec.inputs[0]
        B = g.shape[0]
        if B == 0:  # an empty Poisson batch contributes nothing (the noise is still added)
            continue
        if isinstance(m, nn.Embedding):
            ids = x.reshape(B, -1)
            g = g.reshape(B, ids.shape[1], -1)
            if m.padding_idx is not None:  # nn.Embedding gives the padding row no gradient
                g = g * (ids != m.padding_idx).unsqueeze(-1).to(g.dtype)
        if mode == "per_sample":
            inputs = rec.inputs if not isinstance(m, nn.Embedding) else [ids]
            for p, gs in grad_samplers()[type(m)](m, inputs, g).items():
                add(p, Contribution("dense", gs.to(g.dtype), shape=tuple(p.shape)))
            continue
        if isinstance(m, nn.Linear):
            o, i = m.weight.shape
            a3, g3 = x.reshape(B, -1, i).to(g.dtype), g.reshape(B, -1, o)
            add(m.weight, Contribution("linear", g3, a3, tuple(m.weight.shape)))
            if m.bias is not None:
                add(m.bias, Contribution("dense", g3.sum(1), shape=tuple(m.bias.shape)))
        elif isinstance(m, nn.Embedding):
            add(m.weight, Contribution("embedding", g, ids, tuple(m.weight.shape)))
        elif isinstance(m, NORM_TYPES):
            shape = tuple(m.normalized_shape)
            if isinstance(m, nn.LayerNorm):
                xhat = F.layer_norm(x.to(g.dtype), shape, None, None, m.eps)
            else:
                xhat = F.rms_norm(x.to(g.dtype), shape, None, m.eps)
            g3 = g.reshape(B, -1, *shape)
            if m.weight is not None:
                w = (g3 * xhat.reshape(B, -1, *shape)).sum(1)
                add(m.weight, Contribution("dense", w, shape=shape))
            if getattr(m, "bias", None) is not None:
                add(m.bias, Contribution("dense", g3.sum(1), shape=shape))
        else:  # validated before training; kept as a guard
            raise TypeError(f"no per-sample rule for {type(m).__name__} in mode {mode}")
    return out


def to_dense(c: Contribution) -> torch.Tensor:
    if c.kind == "dense":
        return c.g
    if c.kind == "linear":
        return torch.einsum("bto,bti->boi", c.g, c.a)
    B, T, d = c.g.shape  # embedding: scatter the rows (O(B·M·d), only as a fallback)
    dense = c.g.new_zeros(B, c.shape[0], d)
    return dense.scatter_add_(1, c.a.unsqueeze(-1).expand(B, T, d), c.g)


def _emb_dense(e: Contribution, d: torch.Tensor) -> torch.Tensor:
    rows = d.gather(1, e.a.unsqueeze(-1).expand(*e.a.shape, d.shape[-1]))
    return (e.g * rows).sum((1, 2))


def _emb_linear(e: Contribution, lin: Contribution) -> torch.Tensor:
    """⟨S_iᵀA_i, G_iᵀH_i⟩ = Σ_jk (A Hᵀ)_jk G[k, s_j]: the Phantom cross term of a tied embedding."""
    A, s = e.g, e.a
    G, H = lin.g, lin.a
    AH = torch.einsum("bjd,bkd->bjk", A, H)
    Gs = G.gather(2, s.unsqueeze(1).expand(G.shape[0], G.shape[1], s.shape[1]))  # [b,k,j]=G[b,k,s_bj]
    return (AH * Gs.transpose(1, 2)).sum((1, 2))


def inner(x: Contribution, y: Contribution) -> torch.Tensor:
    """Per-sample ⟨x_i, y_i⟩ (shape B) between two contributions to the same parameter."""
    kinds = (x.kind, y.kind)
    if kinds == ("dense", "dense"):
        return (x.g * y.g).flatten(1).sum(1)
    if kinds == ("linear", "linear"):
        o, i = x.shape
        if x.a.shape[1] * y.a.shape[1] <= o * i:  # ghost: O(B·T²) memory
            aa = torch.einsum("bti,bsi->bts", x.a, y.a)
            gg = torch.einsum("bto,bso->bts", x.g, y.g)
            return (aa * gg).sum((1, 2))
        return (to_dense(x) * to_dense(y)).flatten(1).sum(1)
    if kinds == ("embedding", "embedding"):
        same = x.a.unsqueeze(2) == y.a.unsqueeze(1)
        return (torch.einsum("btd,bsd->bts", x.g, y.g) * same).sum((1, 2))
    if kinds == ("embedding", "linear"):
        return _emb_linear(x, y)
    if kinds == ("linear", "embedding"):
        return _emb_linear(y, x)
    if kinds == ("embedding", "dense"):
        return _emb_dense(x, y.g)
    if kinds == ("dense", "embedding"):
        return _emb_dense(y, x.g)
    return (to_dense(x) * to_dense(y)).flatten(1).sum(1)


def per_sample_sq_norms(contribs: dict[nn.Parameter, list], batch_size: int, device=None, dtype=None):
    """Σ over parameters of ‖g_i‖², with every cross term of shared parameters."""
    total = torch.zeros(batch_size, device=device, dtype=dtype)
    for cs in contribs.values():
        for k, x in enumerate(cs):
            total = total + inner(x, x)
            for y in cs[k + 1 :]:
                total = total + 2 * inner(x, y)
    return total


def clipped_sum(cs: list[Contribution], coef: torch.Tensor) -> torch.Tensor:
    """Σ_i c_i g_i for one parameter by book-keeping from the captured tensors (no 2nd backward)."""
    out = None
    for c in cs:
        if c.kind == "dense":
            term = torch.tensordot(coef.to(c.g.dtype), c.g, dims=1)
        elif c.kind == "linear":
            o, i = c.shape
            # Scale the smaller side by c_i: Σ_i c_i G_iᵀA_i = (c∘G)ᵀA over all tokens.
            if o <= i:
                term = (c.g * coef[:, None, None]).reshape(-1, o).T @ c.a.reshape(-1, i)
            else:
                term = c.g.reshape(-1, o).T @ (c.a * coef[:, None, None]).reshape(-1, i)
        else:  # embedding
            d = c.g.shape[-1]
            term = c.g.new_zeros(c.shape).index_add_(
                0, c.a.reshape(-1), (c.g * coef[:, None, None]).reshape(-1, d)
            )
        out = term if out is None else out + term
    return out
