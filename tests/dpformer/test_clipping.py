"""Oracle: Σ c_i g_i by book-keeping equals the sum of clipped materialised per-sample gradients."""

import pytest
import torch

from zoo.dp import PerSampleClipper
from zoo.errors import ZooError


@pytest.mark.parametrize("mode", ["phantom", "per_sample"])
def test_clipped_sum_matches_materialised(tiny, mode):
    make_model, make_batch, func_grads = tiny
    model = make_model()
    seq, tgt = make_batch(B=6)
    gs = func_grads(model, seq, tgt)
    C = float(torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in gs.values())).median())
    clipper = PerSampleClipper(model, mode, C)
    model.per_sample_loss(seq, tgt).mean().backward()
    norms, sums = clipper.clipped_grads("mean", check=True)
    coef = (C / (norms + 1e-6)).clamp(max=1.0)
    assert (coef < 1).any() and (coef == 1).any()  # some samples are clipped, some are not
    names = {p: k for k, p in model.named_parameters()}
    clipped_sq = torch.zeros(seq.shape[0], dtype=torch.float64)
    for p in clipper.params:
        ref = torch.tensordot(coef, gs[names[p]], dims=1)
        assert torch.allclose(sums[p], ref, atol=1e-10), names[p]
        clipped_sq += (coef.view(-1, *[1] * p.dim()) * gs[names[p]]).flatten(1).pow(2).sum(1)
    assert (clipped_sq.sqrt() <= C + 1e-9).all()  # no clipped per-sample gradient exceeds C
    clipper.remove()


def test_noisy_step_mean_and_std(tiny):
    """p.grad = (Σ c_i g_i + N(0, σ²C²)) / (qN): check its mean and noise std."""
    make_model, make_batch, _ = tiny
    model = make_model()
    seq, tgt = make_batch(B=4)
    clipper = PerSampleClipper(model, "phantom", 0.5)
    model.per_sample_loss(seq, tgt).mean().backward()
    _, sums = clipper.clipped_grads("mean")
    clipper.step(noise_multiplier=2.0, loss_reduction="mean", expected_batch_size=4.0,
                 generator=torch.Generator().manual_seed(0))
    noise = torch.cat([(p.grad * 4.0 - sums[p]).flatten() for p in clipper.params])
    assert noise.numel() > 4000
    assert abs(noise.std().item() - 1.0) < 0.05 and abs(noise.mean().item()) < 0.05  # σC = 1
    assert clipper.capture.records == []
    clipper.remove()


def test_empty_poisson_batch(tiny):
    make_model, _, _ = tiny
    model = make_model()
    clipper = PerSampleClipper(model, "phantom", 1.0)
    seq = torch.zeros(0, 8, dtype=torch.long)
    per = model.per_sample_loss(seq, seq)
    (per.sum() / 1).backward()
    norms = clipper.step(noise_multiplier=1.0, expected_batch_size=4.0)
    assert norms.shape == (0,)
    assert all(torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for p in clipper.params)  # noise only
    clipper.remove()


def test_hook_check_catches_parameter_used_outside_its_layer():
    class Leaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x):  # uses lin.weight outside lin's forward: hooks cannot see it
            return self.lin(x).sum(-1) + (x[:, :2] @ self.lin.weight[:, :2].T).sum(-1)

    m = Leaky().double()
    clipper = PerSampleClipper(m, "ghost", 1.0)
    m(torch.randn(4, 3, dtype=torch.float64)).sum().backward()
    with pytest.raises(ZooError, match="lin.weight"):
        clipper.clipped_grads("sum", check=True)
    clipper.remove()
