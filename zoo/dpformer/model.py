"""SASRec-style causal Transformer with tied item embeddings and the Re-Attention Mechanism.

Re-Attention (Ding et al. 2024, Sec. 5): under DP noise a key is K_j ~ N(μ_j, σ_j²I), and
E[exp⟨q, K_j⟩/√d] = exp(⟨q, μ_j⟩/√d + Cσ_j²/2), so rare (noisy) items attract attention.
The corrected logits are ⟨q, K_j⟩/√d − Cσ_j²/2.

Choices where the paper is silent (documented in cards/dpformer.md):
- σ_j² of key j: the variance of the token's input is the effective noise variance of its embedding
  row, (σ_DP·C_clip / (B·p_i))², p_i = the item's occurrences per training sequence; it passes the
  residual stream and LayerNorm unchanged, then the key projection propagates it with the NPN
  moment-matching rule v_y = v_x(W∘W) + (m_x∘m_x)V + v_xV, V = (σ_DP·C_clip/B)²; σ_j² is the mean
  of v_y over a head's dimensions. It is detached (a statistic, not a function to differentiate),
  which also keeps every weight's gradient inside its own nn.Linear for per-sample clipping.
- C is a hyper-parameter (`re_attention_c`), as the paper leaves it (C ∝ ‖q‖² in the derivation).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def re_attention_logits(q: torch.Tensor, k: torch.Tensor, key_var: torch.Tensor | None, c: float) -> torch.Tensor:
    """q: (..., Tq, d), k: (..., Tk, d), key_var: (..., Tk) σ_j² → logits (..., Tq, Tk)."""
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if key_var is not None:
        logits = logits - 0.5 * c * key_var.unsqueeze(-2)
    return logits


def linear_output_variance(layer: nn.Linear, x: torch.Tensor, var_x: torch.Tensor, var_w: torch.Tensor) -> torch.Tensor:
    """NPN moment matching for y = xWᵀ with isotropic input variance var_x (..,) and weight variance var_w.

    v_y[o] = Σ_i v_x W_oi² + m_i² V + v_x V = v_x(‖W_o‖² + d_in V) + V‖m‖².
    """
    w2 = layer.weight.detach().pow(2).sum(1)  # (o,)
    d_in = layer.weight.shape[1]
    m2 = x.detach().pow(2).sum(-1, keepdim=True)  # (..., 1)
    return var_x.unsqueeze(-1) * (w2 + d_in * var_w) + var_w * m2


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float, re_attention: bool, re_attention_c: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.h, self.re_attention, self.c = n_heads, re_attention, re_attention_c
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask, token_var=None, weight_var=None):
        B, T, D = x.shape
        split = lambda t: t.view(B, T, self.h, D // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        key_var = None
        if self.re_attention and token_var is not None:
            vk = linear_output_variance(self.k, x, token_var, weight_var)  # (B,T,D)
            key_var = vk.view(B, T, self.h, D // self.h).mean(-1).transpose(1, 2)  # (B,h,T)
        att = re_attention_logits(q, k, key_var, self.c).masked_fill(~mask, float("-inf"))
        y = self.drop(att.softmax(-1)) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout, re_attention, re_attention_c):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout, re_attention, re_attention_c)
        self.ff1, self.ff2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask, token_var=None, weight_var=None):
        x = x + self.drop(self.attn(self.ln1(x), mask, token_var, weight_var))
        return x + self.drop(self.ff2(self.drop(F.gelu(self.ff1(self.ln2(x))))))


class SASRec(nn.Module):
    """Items are 1..num_items; 0 is padding (sequences are left-padded)."""

    def __init__(self, num_items: int, max_len: int = 50, d_model: int = 64, n_layers: int = 2, n_heads: int = 1,
                 d_ff: int = 256, dropout: float = 0.2, re_attention: bool = True, re_attention_c: float = 1.0):
        super().__init__()
        self.num_items, self.max_len = num_items, max_len
        self.item_emb = nn.Embedding(num_items + 1, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_ff, dropout, re_attention, re_attention_c) for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        # Tied output layer: the same Parameter in an nn.Linear, as in HF models; Phantom Clipping
        # sees both uses through the hooks of the two modules.
        self.output = nn.Linear(d_model, num_items + 1, bias=False)
        self.output.weight = self.item_emb.weight
        nn.init.normal_(self.item_emb.weight, std=0.02)
        # Re-Attention statistics (zeros = vanilla attention): filled by `set_dp_noise`.
        self.register_buffer("item_noise_var", torch.zeros(num_items + 1))
        self.register_buffer("weight_noise_var", torch.zeros(()))
        self._noise_on = False  # host copy of weight_noise_var > 0: no device sync in forward
        # item 0 (padding) is never a prediction: its logit column is masked
        pad_col = torch.zeros(num_items + 1, dtype=torch.bool)
        pad_col[0] = True
        self.register_buffer("pad_col", pad_col, persistent=False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._noise_on = bool(self.weight_noise_var > 0)

    @torch.no_grad()
    def set_dp_noise(self, noise_std: float, item_frequency: torch.Tensor) -> None:
        """noise_std = σ_DP·C_clip/B (std of the averaged gradient noise); item_frequency: p_i per row."""
        p = item_frequency.to(self.item_noise_var).clamp_min(1e-12)
        self.item_noise_var.copy_((noise_std / p).pow(2))
        self.item_noise_var[0] = 0.0
        self.weight_noise_var.fill_(noise_std**2)
        self._noise_on = noise_std > 0

    def hidden(self, seq: torch.Tensor) -> torch.Tensor:
        B, T = seq.shape
        valid = seq != 0
        # Batch-first and contiguous, as per-sample clipping hooks (ours and Opacus') need.
        pos = torch.arange(T, device=seq.device).repeat(B, 1)
        # Masking by multiplication (not padding_idx) zeroes the padding positions' backprops.
        x = self.item_emb(seq) * valid.unsqueeze(-1).to(self.item_emb.weight.dtype) + self.pos_emb(pos)
        x = self.drop(x)
        causal = torch.ones(T, T, dtype=torch.bool, device=seq.device).tril()
        # Padding keys are masked; every query may attend to itself so no row is empty.
        mask = (causal & valid.unsqueeze(1)) | torch.eye(T, dtype=torch.bool, device=seq.device)
        mask = mask.unsqueeze(1)  # (B,1,T,T)
        token_var = None
        if self._noise_on:
            token_var = self.item_noise_var[seq]
        for blk in self.blocks:
            x = blk(x, mask, token_var, self.weight_noise_var)
        return self.ln_f(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        # Item 0 (padding) is never a prediction; masking keeps its tied row's gradient zero.
        return self.output(h).masked_fill(self.pad_col, float("-inf"))

    def per_sample_loss(self, seq: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Full-softmax next-item cross-entropy, averaged over each sequence's valid positions: (B,)."""
        logp = self.logits(self.hidden(seq)).log_softmax(-1)
        valid = targets != 0
        nll = torch.where(valid, -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), 0.0)
        return nll.sum(-1) / valid.sum(-1).clamp_min(1)
