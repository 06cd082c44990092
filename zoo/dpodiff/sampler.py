"""Sampling with classifier-free guidance, and the Shortcut Text Gradient (paper Sec. 5.2).

Shortcut Text Gradient: run the first t sampler steps without gradients, then one guided ε_θ(x_t, c) with
gradients, jump to x̂0 = (x_t − √(1−ᾱ_t)·ε)/√ᾱ_t, decode with the VAE and score with CLIP. The backward pass
goes through one UNet call, one VAE decode and CLIP whatever t is, so its memory is constant in t. The baseline
(`backprop="full"`) keeps the first t steps in the graph too, with gradient checkpointing at one of two
granularities: "blocks", diffusers' own `unet.enable_gradient_checkpointing()` (every ResNet and transformer block
of the UNet recomputed in the backward pass; the block inputs and skip activations of every step stay stored), which
is what a diffusers user turns on; or "call", each whole UNet call recomputed (only each step's latents stored: the
most frugal placement). The official code (src/model/sd_pipeline.py) has no full-backprop path and enables no
checkpointing anywhere; its shortcut runs without it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Literal, Optional

import torch
from torch.utils.checkpoint import checkpoint

from zoo.dpodiff.loss import clip_loss
from zoo.errors import ZooError

Checkpointing = Literal["blocks", "call", "none"]
CHECKPOINTING = ("blocks", "call", "none")


def text_embeds(stack, prompt: str) -> torch.Tensor:
    """(1, 77, D) encoder states of a discrete prompt (SD's `_encode_prompt`: max-length padding, truncation)."""
    tok = stack.tokenizer(prompt, padding="max_length", max_length=stack.tokenizer.model_max_length,
                          truncation=True, return_tensors="pt")
    te = stack.text_encoder
    return te(input_ids=tok.input_ids.to(te.device)).last_hidden_state


def fresh_scheduler(stack, num_inference_steps: int):
    """A new scheduler per trajectory: PNDM keeps a history of ε that must not leak between samples."""
    s = type(stack.scheduler).from_config(stack.scheduler.config)
    s.set_timesteps(num_inference_steps, device=stack.unet.device)
    return s


def initial_latents(stack, generator: Optional[torch.Generator] = None, batch: int = 1) -> torch.Tensor:
    from diffusers.utils.torch_utils import randn_tensor

    x = randn_tensor((batch, *stack.latent_shape), generator=generator, device=stack.unet.device, dtype=stack.dtype)
    return x * stack.scheduler.init_noise_sigma


def guided_eps(stack, latents: torch.Tensor, timestep, cond: torch.Tensor, uncond: torch.Tensor,
               guidance_scale: float, scheduler) -> torch.Tensor:
    """ε_uncond + w·(ε_cond − ε_uncond) from one batched UNet call, as diffusers' SD pipeline does."""
    dt = stack.dtype
    x = scheduler.scale_model_input(torch.cat([latents, latents]), timestep)
    ctx = torch.cat([uncond.expand(latents.shape[0], -1, -1), cond.expand(latents.shape[0], -1, -1)]).to(dt)
    eps_u, eps_c = stack.unet(x.to(dt), timestep, encoder_hidden_states=ctx).sample.chunk(2)
    return eps_u + guidance_scale * (eps_c - eps_u)


def predict_x0(scheduler, x_t: torch.Tensor, eps: torch.Tensor, timestep) -> torch.Tensor:
    a = scheduler.alphas_cumprod.to(device=x_t.device, dtype=x_t.dtype)[int(timestep)]
    return (x_t - (1 - a).sqrt() * eps) / a.sqrt()


def decode(stack, latents: torch.Tensor) -> torch.Tensor:
    """Latents to (B, 3, H, W) images in [0, 1] (SD's `decode_latents`)."""
    vae = stack.vae
    img = vae.decode(latents.to(stack.dtype) / vae.config.scaling_factor).sample
    return (img / 2 + 0.5).clamp(0, 1)


def check_t(t: int, num_inference_steps: int) -> None:
    if not 0 <= int(t) < num_inference_steps:
        raise ZooError(f"t={t} is outside the sampler's schedule: the shortcut step must be in "
                       f"[0, {num_inference_steps - 1}] for {num_inference_steps} inference steps")


@torch.no_grad()
def generate(stack, cond: torch.Tensor, uncond: torch.Tensor, num_inference_steps: int = 50,
             guidance_scale: float = 7.5, latents: Optional[torch.Tensor] = None,
             generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A full guided generation (the evaluation of a discrete prompt): images in [0, 1]."""
    sched = fresh_scheduler(stack, num_inference_steps)
    x = initial_latents(stack, generator) if latents is None else latents.to(stack.dtype)
    for ts in sched.timesteps:
        x = sched.step(guided_eps(stack, x, ts, cond, uncond, guidance_scale, sched), ts, x).prev_sample
    return decode(stack, x)


@contextmanager
def block_checkpointing(unet, on: bool = True) -> Iterator[None]:
    """diffusers' per-block gradient checkpointing on `unet` for the duration of the block only (the UNet is a
    shared object: its own setting is restored afterwards)."""
    if not on or unet.is_gradient_checkpointing:
        yield
        return
    unet.enable_gradient_checkpointing()
    try:
        yield
    finally:
        unet.disable_gradient_checkpointing()


def latents_at(stack, cond: torch.Tensor, uncond: torch.Tensor, t: int, num_inference_steps: int,
               guidance_scale: float, latents: torch.Tensor, grad: bool = False, sched=None,
               checkpointing: Checkpointing = "none") -> tuple:
    """x_t after the first t sampler steps (with or without a graph), and the scheduler that took them.

    With a graph, checkpointing "call" recomputes each whole UNet call in the backward pass; "blocks" is applied
    by the caller (`block_checkpointing`), "none" keeps every activation."""
    sched = sched or fresh_scheduler(stack, num_inference_steps)
    x = latents.to(stack.dtype)
    for ts in sched.timesteps[:t]:
        if grad and checkpointing != "call":
            eps = guided_eps(stack, x, ts, cond, uncond, guidance_scale, sched)
        elif grad:
            eps = checkpoint(guided_eps, stack, x, ts, cond, uncond, guidance_scale, sched, use_reentrant=False)
        else:
            with torch.no_grad():
                eps = guided_eps(stack, x, ts, cond.detach(), uncond.detach(), guidance_scale, sched)
        x = sched.step(eps, ts, x).prev_sample
    return x, sched


def estimation_loss(stack, cond: torch.Tensor, uncond: torch.Tensor, text_features: torch.Tensor, t: int,
                    num_inference_steps: int = 50, guidance_scale: float = 7.5,
                    latents: Optional[torch.Tensor] = None, generator: Optional[torch.Generator] = None,
                    backprop: Literal["shortcut", "full"] = "shortcut",
                    checkpointing: Optional[Checkpointing] = None) -> torch.Tensor:
    """CLIP loss of the one-step estimate x̂0 at step t; differentiable w.r.t. `cond`/`uncond`.

    shortcut: x_t computed under no_grad (the paper's Shortcut Text Gradient, official `pipe_train` with
    `estimation_step=t`). full: gradients also flow through the first t steps. checkpointing: "blocks"
    (diffusers' per-block checkpointing on every UNet call with a graph), "call" (each of the first t UNet calls
    checkpointed whole), "none"; default (None): "none" for the shortcut, as the official code runs it, and
    "blocks" for full backpropagation, what a diffusers user would switch on."""
    check_t(t, num_inference_steps)
    if backprop not in ("shortcut", "full"):
        raise ZooError(f"backprop must be 'shortcut' or 'full', got {backprop!r}")
    if checkpointing is None:
        checkpointing = "blocks" if backprop == "full" else "none"
    if checkpointing not in CHECKPOINTING:
        raise ZooError(f"checkpointing must be one of {CHECKPOINTING} (or None), got {checkpointing!r}")
    x0 = initial_latents(stack, generator) if latents is None else latents
    with block_checkpointing(stack.unet, checkpointing == "blocks"):
        x_t, sched = latents_at(stack, cond, uncond, t, num_inference_steps, guidance_scale, x0,
                                grad=backprop == "full", checkpointing=checkpointing)
        ts = sched.timesteps[t]
        eps = guided_eps(stack, x_t, ts, cond, uncond, guidance_scale, sched)
        image = decode(stack, predict_x0(sched, x_t, eps, ts))
        return clip_loss(stack, image, text_features)
