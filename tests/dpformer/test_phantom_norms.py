"""Oracle: Phantom/ghost/per-sample norms vs torch.func and Opacus per-sample gradients (float64)."""

import warnings

import pytest
import torch

from opacus import GradSampleModule

from zoo.dp import PerSampleClipper
from zoo.dp.norms import contributions, inner
from sasrec_oracles import PerSampleLoss
from zoo.errors import ZooError


def _ref_norms(gs):
    return torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in gs.values()))


def _our_norms(model, seq, tgt, mode, reduction="mean"):
    clipper = PerSampleClipper(model, mode, 1.0)
    model.zero_grad()
    loss = model.per_sample_loss(seq, tgt)
    (loss.mean() if reduction == "mean" else loss.sum()).backward()
    norms = clipper.per_sample_norms(reduction)
    records = list(clipper.capture.records)
    clipper.remove()
    return norms, records


@pytest.mark.parametrize("mode", ["phantom", "per_sample"])
@pytest.mark.parametrize("re_attention", [False, True])
def test_norms_match_torch_func(tiny, mode, re_attention):
    make_model, make_batch, func_grads = tiny
    model = make_model(re_attention=re_attention)
    if re_attention:
        model.set_dp_noise(0.05, torch.rand(model.num_items + 1, dtype=torch.float64) + 0.1)
    seq, tgt = make_batch()
    ref = _ref_norms(func_grads(model, seq, tgt))
    ours, _ = _our_norms(model, seq, tgt, mode)
    assert torch.allclose(ours, ref, rtol=0, atol=1e-6), (ours, ref)
    ours_sum, _ = _our_norms(model, seq, tgt, mode, reduction="sum")
    assert torch.allclose(ours_sum, ref, rtol=0, atol=1e-6)


def test_phantom_matches_opacus_hooks(tiny):
    make_model, make_batch, _ = tiny
    model = make_model()
    seq, tgt = make_batch(B=6, seed=3)
    ours, _ = _our_norms(model, seq, tgt, "phantom")
    model.zero_grad()
    gsm = GradSampleModule(PerSampleLoss(model), batch_first=True, loss_reduction="sum")
    gsm(seq, tgt).sum().backward()
    params = list(dict.fromkeys(model.parameters()))  # the tied weight once, its grad_sample summed
    ref = torch.sqrt(sum(p.grad_sample.flatten(1).pow(2).sum(1) for p in params))
    gsm._close()
    assert torch.allclose(ours, ref, rtol=0, atol=1e-6), (ours, ref)


def test_tied_embedding_cross_term_matters(tiny):
    """The three Phantom terms: dropping 2⟨emb, lin⟩ of the tied weight gives a wrong norm."""
    make_model, make_batch, func_grads = tiny
    model = make_model()
    seq, tgt = make_batch()
    gs = func_grads(model, seq, tgt)
    _, records = _our_norms(model, seq, tgt, "phantom")
    cs = contributions(records, "phantom", scale=seq.shape[0])[model.item_emb.weight]
    kinds = sorted(c.kind for c in cs)
    assert kinds == ["embedding", "linear"]
    emb = next(c for c in cs if c.kind == "embedding")
    lin = next(c for c in cs if c.kind == "linear")
    full = inner(emb, emb) + inner(lin, lin) + 2 * inner(emb, lin)
    ref = gs["item_emb.weight"].flatten(1).pow(2).sum(1)
    assert torch.allclose(full, ref, atol=1e-9)
    cross = 2 * inner(emb, lin)
    assert cross.abs().min() > 1e-4 * ref.min()  # non-negligible: without it the norm is wrong
    assert not torch.allclose(full - cross, ref, atol=1e-6)


def test_ghost_mode_refuses_tied_weights_and_matches_untied(tiny):
    make_model, make_batch, func_grads = tiny
    model = make_model()
    with pytest.raises(ZooError, match="tied weight.*phantom"):
        PerSampleClipper(model, "ghost")
    untied = make_model()
    untied.output.weight = torch.nn.Parameter(untied.item_emb.weight.detach().clone())
    seq, tgt = make_batch()
    ref = _ref_norms(func_grads(untied, seq, tgt))
    ours, _ = _our_norms(untied, seq, tgt, "ghost")
    assert torch.allclose(ours, ref, rtol=0, atol=1e-6)


def test_opacus_ghost_clipping_refuses_tied_weights(tiny):
    """Answers the notes' open question for opacus 1.6: its ghost mode does not support tying at all."""
    from opacus.grad_sample import GradSampleModuleFastGradientClipping

    make_model, make_batch, _ = tiny
    model = make_model()
    seq, tgt = make_batch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gsm = GradSampleModuleFastGradientClipping(PerSampleLoss(model), batch_first=True, loss_reduction="sum",
                                                   max_grad_norm=1.0, use_ghost_clipping=True)
    with pytest.raises(NotImplementedError, match="tying"):
        gsm(seq, tgt)


def test_unsupported_layers_give_zoo_error():
    mha = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.MultiheadAttention(4, 1))
    with pytest.raises(ZooError, match="MultiheadAttention"):
        PerSampleClipper(mha, "phantom")
    conv = torch.nn.Sequential(torch.nn.Conv1d(2, 2, 3))
    with pytest.raises(ZooError, match="Conv1d"):
        PerSampleClipper(conv, "ghost")
    PerSampleClipper(conv, "per_sample").remove()  # Opacus has a grad sampler for it
    with pytest.raises(ZooError, match="mode"):
        PerSampleClipper(conv, "fast")
