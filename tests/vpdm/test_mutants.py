"""Oracles added by mutation testing: DDPM training draws t from all T steps (Ho et al., Alg. 1); the partial
denoise starts at the noise level of its first reverse step (img2img); the anomaly map's smoothing is
scipy.ndimage.gaussian_filter (truncate 4); AUPRO regions are 8-connected (MVTec AD's evaluation), here a closed-form
PRO curve."""

import numpy as np
import pytest
import torch
from scipy import ndimage

from zoo.vpdm.diffusion import build_scheduler, diffusion_loss, partial_denoise, sampling_scheduler
from zoo.vpdm.metrics import anomaly_map, aupro


class _Spy(torch.nn.Module):
    """A denoiser that predicts eps = 0 and records what it is called with."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, x_t, t, cond):
        self.calls.append((x_t.clone(), t.clone()))
        return torch.zeros_like(x_t)


def test_training_draws_every_timestep_uniformly():
    T = 4
    spy = _Spy()
    diffusion_loss(spy, build_scheduler(T), torch.zeros(4000, 1, 1, 1), torch.zeros(4000, 1, 1, 1),
                   torch.Generator().manual_seed(0))
    counts = torch.bincount(spy.calls[0][1], minlength=T)
    assert counts.numel() == T and bool((counts > 900).all()), counts  # 1000 expected per step


@pytest.mark.parametrize("sampler", ["ddpm", "ddim"])
def test_partial_denoise_starts_at_the_noise_level_of_its_first_step(sampler):
    sched = sampling_scheduler(build_scheduler(1000), sampler)
    spy = _Spy()
    x0 = torch.zeros(2, 1, 200, 200)  # x_t = sqrt(1 - abar_t) eps: its variance is 1 - abar_t
    partial_denoise(spy, sched, x0, x0, 0.5, 10, torch.Generator().manual_seed(0))
    x_first, t_first = spy.calls[0]
    assert len(spy.calls) == 5 and int(t_first[0]) == max(int(t[0]) for _, t in spy.calls)
    abar = sched.alphas_cumprod[int(t_first[0])]
    assert float(x_first.var()) == pytest.approx(float(1 - abar), rel=0.03)


def test_smoothing_is_scipys_gaussian_filter_away_from_the_border():
    sigma = 2.0
    err = torch.rand(1, 3, 48, 48, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    norm = err.pow(2).sum(1)[0].numpy() ** 0.5  # x_hat = 0: the map is the channel norm before smoothing
    got = anomaly_map(err, torch.zeros_like(err), (48, 48), sigma=sigma)[0].numpy()
    ref = ndimage.gaussian_filter(norm, sigma, truncate=4.0)
    r = 9  # kernel radius int(4 sigma + 0.5) + 1: the padding modes differ only within it of the border
    np.testing.assert_allclose(got[r:-r, r:-r], ref[r:-r, r:-r], rtol=0, atol=1e-6)


def test_aupro_regions_touching_at_a_corner_are_one_region():
    # 2x2 square A and 3x3 square B touching diagonally: one 8-connected region of 13 pixels. The map fires on A:
    # PRO curve (0, 0) -> (0, 4/13) -> (1, 1); closed at FPR 0.3: normalised area = (4/13 + p(0.3)) / 2
    masks = torch.zeros(1, 8, 8)
    masks[0, 1:3, 1:3] = 1
    masks[0, 3:6, 3:6] = 1
    maps = torch.zeros(1, 8, 8)
    maps[0, 1:3, 1:3] = 1
    p = 4 / 13 + 0.3 * (1 - 4 / 13)
    assert aupro(maps, masks, 0.3) == pytest.approx((4 / 13 + p) / 2, abs=1e-12)
