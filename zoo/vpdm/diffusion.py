"""The conditional feature diffusion of VPDM: a DDPM on the (D, h, w) token grid, epsilon-prediction, conditioned
on the vague prototypes (or, as the ablation that exhibits the identical shortcut, on the input itself).

Noise schedules and reverse steps are diffusers' (``DDPMScheduler`` for training and ancestral sampling,
``DDIMScheduler`` from the same config for deterministic few-step refinement). The denoiser is a diffusers
``UNet2DModel`` that sees the noisy tokens and the condition concatenated along channels (the paper's denoiser
architecture is not available here: our choice).
"""

from __future__ import annotations

from typing import Literal, Optional, Sequence

import torch
from diffusers import DDIMScheduler, DDPMScheduler, UNet2DModel
from torch import nn

from zoo.errors import ZooError


def build_scheduler(num_train_timesteps: int = 1000, beta_schedule: str = "linear", beta_start: float = 1e-4,
                    beta_end: float = 0.02) -> DDPMScheduler:
    """The training (forward) process; the DDPM defaults of Ho et al. (linear 1e-4 .. 0.02 over 1000 steps)."""
    if num_train_timesteps < 1:
        raise ZooError(f"num_train_timesteps must be >= 1, got {num_train_timesteps}")
    return DDPMScheduler(num_train_timesteps=num_train_timesteps, beta_schedule=beta_schedule,
                         beta_start=beta_start, beta_end=beta_end, clip_sample=False,
                         prediction_type="epsilon")


def sampling_scheduler(train: DDPMScheduler, sampler: Literal["ddpm", "ddim"]):
    if sampler == "ddpm":
        return DDPMScheduler.from_config(train.config)
    if sampler == "ddim":
        return DDIMScheduler.from_config(train.config)
    raise ZooError(f"sampler {sampler!r} is not one of 'ddpm', 'ddim'")


class ConditionalDenoiser(nn.Module):
    """eps_theta(x_t, t, c): a UNet2DModel over the token grid with input channels [x_t, c]."""

    def __init__(self, feature_dim: int, block_out_channels: Sequence[int] = (256, 512),
                 layers_per_block: int = 2, norm_num_groups: int = 32, attention: bool = False):
        super().__init__()
        if any(ch % norm_num_groups for ch in block_out_channels):
            raise ZooError(f"denoiser block_out_channels {list(block_out_channels)} must be multiples of "
                           f"norm_num_groups={norm_num_groups}")
        n = len(block_out_channels)
        down = ["AttnDownBlock2D" if attention and i == n - 1 else "DownBlock2D" for i in range(n)]
        up = ["AttnUpBlock2D" if attention and i == 0 else "UpBlock2D" for i in range(n)]
        self.unet = UNet2DModel(in_channels=2 * feature_dim, out_channels=feature_dim,
                                block_out_channels=tuple(block_out_channels), layers_per_block=layers_per_block,
                                norm_num_groups=norm_num_groups, down_block_types=tuple(down),
                                up_block_types=tuple(up))
        self.downsamples = n - 1

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h, w = x_t.shape[-2:]
        if h % 2 ** self.downsamples or w % 2 ** self.downsamples:
            raise ZooError(f"token grid {h}x{w} is not divisible by 2^{self.downsamples} (the denoiser's "
                           f"{self.downsamples} downsamplings): change feature_size or block_out_channels")
        return self.unet(torch.cat([x_t, cond], dim=1), t).sample


def diffusion_loss(denoiser: nn.Module, scheduler: DDPMScheduler, x0: torch.Tensor, cond: torch.Tensor,
                   generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """L_diff = E_{t, eps} || eps - eps_theta(sqrt(abar_t) x0 + sqrt(1 - abar_t) eps, t, c) ||^2."""
    noise = torch.randn(x0.shape, generator=generator, device=x0.device, dtype=x0.dtype)
    t = torch.randint(0, scheduler.config.num_train_timesteps, (x0.shape[0],), generator=generator,
                      device=x0.device)
    x_t = scheduler.add_noise(x0, noise, t)
    return nn.functional.mse_loss(denoiser(x_t, t, cond), noise)


@torch.no_grad()
def partial_denoise(denoiser: nn.Module, scheduler, x0: torch.Tensor, cond: torch.Tensor, strength: float,
                    num_inference_steps: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Noise x0 part of the way (``strength`` of the inference steps, diffusers' img2img convention) and run the
    reverse steps back to 0 under the condition. ``strength == 0`` returns x0 unchanged."""
    if not 0.0 <= strength <= 1.0:
        raise ZooError(f"strength must be in [0, 1], got {strength}")
    scheduler.set_timesteps(num_inference_steps, device=x0.device)
    n_steps = min(int(num_inference_steps * strength), num_inference_steps)
    if n_steps == 0:
        return x0
    timesteps = scheduler.timesteps[num_inference_steps - n_steps:]
    noise = torch.randn(x0.shape, generator=generator, device=x0.device, dtype=x0.dtype)
    x = scheduler.add_noise(x0, noise, timesteps[:1].repeat(x0.shape[0]))
    for t in timesteps:
        eps = denoiser(x, t.repeat(x0.shape[0]), cond)
        x = scheduler.step(eps, t, x, generator=generator).prev_sample
    return x
