"""Oracles added by mutation testing: multi-head Re-Attention subtracts C/2 times each key's per-coordinate
variance σ_j² (the mean of the NPN key variances over the head's coordinates, cards/dpformer.md), written out
here by hand for a small attention layer; the embedding-row noise variance is (σ_DP·C_clip / (B·p_i))² with p_i the
item's occurrences per *training* sequence (leave-one-out: the last two items of a user are never trained on)."""

from __future__ import annotations

import math

import torch

from datamodules.seqrec import SeqRecDataModule
from zoo.dpformer import DPSASRecModule
from zoo.dpformer.model import CausalSelfAttention


def test_multi_head_re_attention_uses_the_per_coordinate_key_variance():
    torch.manual_seed(0)
    B, T, D, H, C = 2, 5, 8, 2, 3.0
    att = CausalSelfAttention(D, H, dropout=0.0, re_attention=True, re_attention_c=C).double().eval()
    x = torch.randn(B, T, D, dtype=torch.float64)
    token_var = torch.rand(B, T, dtype=torch.float64)  # v_x of every token
    V = torch.tensor(0.07, dtype=torch.float64)  # weight noise variance
    mask = torch.ones(T, T, dtype=torch.bool).tril().expand(B, 1, T, T)
    got = att(x, mask, token_var, V)

    W = att.k.weight.detach()  # (out, in)
    # NPN: Var[k_o] = v_x Σ_i W_oi² + Σ_i m_i² V + v_x d_in V, one value per output coordinate o
    var_k = token_var[..., None] * (W.pow(2).sum(1) + D * V) + V * x.pow(2).sum(-1, keepdim=True)  # (B, T, D)
    dh = D // H
    heads = lambda t: t.view(B, T, H, dh).transpose(1, 2)
    q, k, v = heads(att.q(x)), heads(att.k(x)), heads(att.v(x))
    sigma2 = var_k.view(B, T, H, dh).mean(-1).transpose(1, 2)  # per-coordinate variance of key j in head h
    logits = q @ k.transpose(-1, -2) / math.sqrt(dh) - C / 2 * sigma2[:, :, None, :]
    y = logits.masked_fill(~mask, float("-inf")).softmax(-1) @ v
    expected = att.o(y.transpose(1, 2).reshape(B, T, D))
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def _hand_made_data():
    dm = SeqRecDataModule(source="embedded", synthetic_items=6, max_len=4)
    dm.sequences, dm.num_items = [[1, 2, 3, 4], [2, 3, 5, 1]], 6  # training parts [1, 2] and [2, 3]
    return dm


def test_item_frequency_counts_the_training_part_only():
    expected = torch.tensor([1, 1, 2, 1, 1, 1, 1], dtype=torch.float32) / 2  # unseen items (and 0) count once
    torch.testing.assert_close(_hand_made_data().item_frequency, expected)


def test_re_attention_variances_are_those_of_the_averaged_gradient_noise():
    sigma, clip, batch = 1.3, 0.8, 16.0
    module = DPSASRecModule(num_items=6, max_len=4, d_model=8, d_ff=8)
    module.item_frequency = _hand_made_data().item_frequency
    module.on_dp_noise(sigma, clip, batch)
    std = sigma * clip / batch  # the noise std of the averaged gradient, σ_DP·C/B
    torch.testing.assert_close(module.model.weight_noise_var, torch.tensor(std**2))
    expected = (std / module.item_frequency) ** 2
    expected[0] = 0.0  # padding
    torch.testing.assert_close(module.model.item_noise_var, expected)
