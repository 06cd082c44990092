"""Oracles (a) and (b) of the Shortcut Text Gradient, on the tiny float64 stack.

(a) Its gradient equals autograd of the one-step loss whose x_t comes, detached, from diffusers' own
StableDiffusionPipeline sampler (captured by a step callback), with ε, x̂0, the VAE decode and the CLIP loss
written out here. (b) The memory its backward pass keeps (bytes of the tensors autograd saves) is the same at t=5
and t=45, while full backpropagation through the sampler keeps more with every step (t=5 vs 15).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.dpodiff.optimize import DPOSettings, PromptProblem
from zoo.dpodiff.relax import gumbel_coefficients, init_log_coeffs
from zoo.dpodiff.sampler import CHECKPOINTING, estimation_loss
from zoo.dpodiff.spaces import build_space
from zoo.errors import ZooError
from zoo.memory import saved_bytes

PROMPT = "a hot bowl of soup on a cold night"
ANT = {"hot": ["cold", "cool"], "cold": ["hot", "warm"]}
STEPS = 50


def _pipeline_latents(stack, cond, uncond, z, t):
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline(vae=stack.vae, text_encoder=stack.text_encoder, tokenizer=stack.tokenizer,
                                   unet=stack.unet, scheduler=type(stack.scheduler).from_config(stack.scheduler.config),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    seen = {}

    def grab(p, i, timestep, kw):
        if i == t - 1:
            seen["x_t"] = kw["latents"].clone()
            p._interrupt = True
        return kw

    pipe(prompt_embeds=cond.detach(), negative_prompt_embeds=uncond.detach(), latents=z, num_inference_steps=STEPS,
         guidance_scale=7.5, output_type="latent", callback_on_step_end=grab)
    return seen["x_t"], pipe.scheduler


def _one_step_loss(stack, x_t, sched, t, cond, uncond, feats):
    ts = sched.timesteps[t]
    out = stack.unet(torch.cat([x_t, x_t]), ts, encoder_hidden_states=torch.cat([uncond, cond])).sample
    eu, ec = out.chunk(2)
    eps = eu + 7.5 * (ec - eu)
    a = sched.alphas_cumprod.double()[int(ts)]
    x0 = (x_t - (1 - a).sqrt() * eps) / a.sqrt()
    img = (stack.vae.decode(x0 / stack.vae.config.scaling_factor).sample / 2 + 0.5).clamp(0, 1)
    img = F.interpolate(img, size=(stack.clip_size,) * 2, mode="bilinear", antialias=True, align_corners=False)
    img = (img - stack.image_mean.double()) / stack.image_std.double()
    f = stack.clip.visual_projection(stack.clip.vision_model(pixel_values=img).pooler_output)
    cos = F.cosine_similarity(f, feats, dim=-1).clamp(-1, 1)
    return (torch.arccos(cos) ** 2 / 2).mean()  # = 2·arcsin(‖x̂−ŷ‖/2)², the paper's distance


@pytest.fixture(scope="module")
def problem(stack64):
    space = build_space(PROMPT, "antonym", stack64.tokenizer, ANT, "improve")
    return PromptProblem(stack64, space, DPOSettings(num_inference_steps=STEPS, t_start=1), seed=0)


def test_shortcut_gradient_equals_autograd_of_the_one_step_loss(stack64, problem):
    t = 3
    alphas = init_log_coeffs(problem.space, dtype=torch.float64)
    coeffs = gumbel_coefficients(alphas)
    fixed = [c.detach().requires_grad_(False) for c in coeffs]

    def coeff_graph():  # the same Gumbel sample, differentiable in α (softmax((α + g)/τ) with g held fixed)
        g = [torch.log(c) - a.detach() for c, a in zip(fixed, alphas)]
        return [torch.softmax(a + gi, 0) for a, gi in zip(alphas, g)]

    ours = torch.autograd.grad(problem.loss_at(coeff_graph(), t), alphas)
    cond, uncond = problem.pair(problem.relaxed_states(coeff_graph()))
    x_t, sched = _pipeline_latents(stack64, cond, uncond, problem.latents[0], t)
    ref = torch.autograd.grad(_one_step_loss(stack64, x_t, sched, t, cond, uncond, problem.text_features), alphas)
    for a, b in zip(ours, ref):
        assert a.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_shortcut_memory_is_flat_in_t_and_full_backprop_grows(stack64, problem):
    cond = problem.original.detach().clone().requires_grad_(True)
    uncond = problem.empty.detach().clone().requires_grad_(True)
    z, f = problem.latents[0], problem.text_features

    def run(t, backprop):
        return lambda: estimation_loss(stack64, cond, uncond, f, t, STEPS, 7.5, latents=z, backprop=backprop,
                                       checkpointing="none")

    short = [saved_bytes(run(t, "shortcut")) for t in (5, 45)]
    full = [saved_bytes(run(t, "full")) for t in (5, 15)]
    assert short[0] == short[1] > 0
    assert short[0] < full[0] < full[1]
    per_step = (full[1] - full[0]) / 10  # linear growth: every sampler step adds the same graph
    assert per_step > 0 and full[0] == pytest.approx(short[0] + 5 * per_step, rel=0.05)


def test_checkpointing_changes_memory_not_the_full_backprop_gradient(stack64, problem):
    """Full backpropagation through the sampler gives the same gradient with diffusers' per-block checkpointing,
    with whole-call checkpointing and without any (float64: recomputation is exact), and the UNet's own
    checkpointing setting is left as it was."""
    z, f, t = problem.latents[0], problem.text_features, 3

    def grad(mode):
        cond = problem.original.detach().clone().requires_grad_(True)
        uncond = problem.empty.detach().clone().requires_grad_(True)
        loss = estimation_loss(stack64, cond, uncond, f, t, STEPS, 7.5, latents=z, backprop="full",
                               checkpointing=mode)
        return torch.autograd.grad(loss, (cond, uncond))

    ref = grad("none")
    assert ref[1].abs().max() > 0
    cond = problem.original.detach().clone().requires_grad_(True)
    kept = {m: saved_bytes(lambda m=m: estimation_loss(stack64, cond, problem.empty, f, t, STEPS, 7.5, latents=z,
                                                        backprop="full", checkpointing=m)) for m in CHECKPOINTING}
    assert max(kept["call"], kept["blocks"]) < kept["none"]  # checkpointing is really on in both modes
    for mode in ("blocks", "call", None):
        for a, b in zip(grad(mode), ref):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert not stack64.unet.is_gradient_checkpointing
    with pytest.raises(ZooError, match="checkpointing must be one of"):
        estimation_loss(stack64, problem.original, problem.empty, f, t, STEPS, checkpointing="layers")


def test_t_outside_the_schedule_is_refused(stack64, problem):
    for t in (-1, STEPS):
        with pytest.raises(ZooError, match="outside the sampler's schedule"):
            estimation_loss(stack64, problem.original, problem.empty, problem.text_features, t, STEPS)
    with pytest.raises(ZooError, match="outside the sampler's schedule"):
        DPOSettings(num_inference_steps=10, t_start=15).check()
