"""Forward noising and the eps target against diffusers and the closed form; the partial-noise path at strength 0;
the denoiser's shapes and refusals."""

import pytest
import torch

from zoo.errors import ZooError
from zoo.vpdm.diffusion import (ConditionalDenoiser, build_scheduler, diffusion_loss, partial_denoise,
                                sampling_scheduler)


def test_add_noise_matches_closed_form():
    sched = build_scheduler(1000, "linear", 1e-4, 0.02)
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    abar = torch.cumprod(1 - betas, 0)
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(4, 3, 2, 2, generator=g, dtype=torch.float64)
    eps = torch.randn(4, 3, 2, 2, generator=g, dtype=torch.float64)
    t = torch.tensor([0, 10, 500, 999])
    ref = abar[t].sqrt()[:, None, None, None] * x0 + (1 - abar[t]).sqrt()[:, None, None, None] * eps
    torch.testing.assert_close(sched.betas.double(), betas, rtol=2e-7, atol=0)  # float32 betas
    # diffusers accumulates abar in float32 over the 1000 steps: a few 1e-6 from the float64 closed form
    torch.testing.assert_close(sched.add_noise(x0, eps, t), ref, rtol=0, atol=1e-5)


def test_loss_target_is_the_noise():
    """L_diff with an oracle denoiser that recovers eps from (x_t, t, x0 passed as the condition) is 0."""
    sched = build_scheduler(100)
    abar = sched.alphas_cumprod

    class Oracle(torch.nn.Module):
        def forward(self, x_t, t, cond):
            a = abar[t].to(x_t)[:, None, None, None]
            return (x_t - a.sqrt() * cond) / (1 - a).sqrt()

    x0 = torch.randn(6, 2, 4, 4, dtype=torch.float64)
    loss = diffusion_loss(Oracle(), sched, x0, x0, torch.Generator().manual_seed(1))
    assert float(loss) < 1e-20


def _tiny():
    torch.manual_seed(0)
    return ConditionalDenoiser(4, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4)


@pytest.mark.parametrize("sampler", ["ddpm", "ddim"])
def test_partial_denoise_strength_zero_returns_input(sampler):
    sched = sampling_scheduler(build_scheduler(100), sampler)
    x = torch.randn(2, 4, 4, 4)
    out = partial_denoise(_tiny(), sched, x, torch.zeros_like(x), 0.0, 10)
    assert torch.equal(out, x)
    out = partial_denoise(_tiny(), sched, x, torch.zeros_like(x), 0.3, 10, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and not torch.equal(out, x)


def test_ddim_one_step_with_exact_eps_recovers_x0():
    """DDIM (eta 0) from x_t with the true eps lands on x0: x_prev = sqrt(abar_prev) x0_hat + sqrt(1-abar_prev) eps,
    and with one inference step abar_prev = 1 (set_alpha_to_one)."""
    sched = sampling_scheduler(build_scheduler(100), "ddim")
    x0 = torch.randn(2, 4, 4, 4, dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(3), dtype=x0.dtype)

    class TrueEps(torch.nn.Module):
        def forward(self, x_t, t, cond):
            return noise

    out = partial_denoise(TrueEps(), sched, x0, x0, 1.0, 1, g)
    torch.testing.assert_close(out, x0, rtol=1e-5, atol=1e-5)


def test_denoiser_refusals():
    with pytest.raises(ZooError, match="multiples of norm_num_groups"):
        ConditionalDenoiser(4, block_out_channels=(6, 16), norm_num_groups=4)
    with pytest.raises(ZooError, match="not divisible"):
        _tiny()(torch.randn(1, 4, 5, 5), torch.tensor([1]), torch.randn(1, 4, 5, 5))
    with pytest.raises(ZooError, match="strength must be in"):
        partial_denoise(_tiny(), build_scheduler(10), torch.randn(1, 4, 4, 4), torch.randn(1, 4, 4, 4), 1.5, 5)
