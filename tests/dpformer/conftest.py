"""Shared helpers for the dpformer tests: a tiny tied-embedding SASRec and torch.func oracles."""

import pytest
import torch
from torch.func import functional_call, grad, vmap

from sasrec_oracles import PerSampleLoss
from zoo.dpformer.model import SASRec


def make_model(num_items=30, max_len=8, re_attention=False, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    m = SASRec(num_items, max_len=max_len, d_model=16, n_layers=2, n_heads=2, d_ff=24, dropout=0.0,
               re_attention=re_attention).to(dtype)
    return m


def make_batch(B=5, T=8, num_items=30, seed=1):
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(1, num_items + 1, (B, T + 1), generator=g)
    # Left padding of varying length, and repeated items (exercise the [s_j = s_k] term).
    for b in range(B):
        seq[b, : b % 4] = 0
    seq[:, 3] = seq[:, 2]
    return seq[:, :-1].contiguous(), torch.where(seq[:, :-1] == 0, 0, seq[:, 1:]).contiguous()


def func_per_sample_grads(model, seq, tgt):
    """Materialised per-sample gradients of the per-sample losses via torch.func (the oracle)."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())

    wrap = PerSampleLoss(model)

    def loss_one(p, s, t):
        state = {**{"m." + k: v for k, v in p.items()}, **{"m." + k: v for k, v in buffers.items()}}
        return functional_call(wrap, state, (s.unsqueeze(0), t.unsqueeze(0)), tie_weights=True)[0]

    return vmap(grad(loss_one), in_dims=(None, 0, 0))(params, seq, tgt)


@pytest.fixture
def tiny():
    return make_model, make_batch, func_per_sample_grads
