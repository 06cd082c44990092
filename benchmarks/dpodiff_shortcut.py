"""Shortcut Text Gradient vs full backpropagation through the sampler (gradient checkpointing on): gradient time
and peak memory for t in {5, 15, 25, 45} on a mid-size SD-shaped random stack, in one run (issue goal: shortcut
flat in t and at least 3x leaner than full backprop at t = 45).

Two full-backprop baselines, both checkpointed: "blocks", diffusers' `unet.enable_gradient_checkpointing()` (what
a diffusers user switches on: every ResNet/transformer block recomputed, block inputs and skip activations of every
step stored), the main baseline; and "call", each whole UNet call checkpointed (only each step's latents stored,
the most frugal placement there is). The shortcut runs as the official code runs it, without checkpointing.

    python benchmarks/dpodiff_shortcut.py            # mid-size stack, t = 5 15 25 45, 3 repetitions per cell
    python benchmarks/dpodiff_shortcut.py --quick    # tiny stack, t = 2 5 of 8 steps, 1 repetition, cells in this process
    python benchmarks/dpodiff_shortcut.py --device cuda

A gradient is d loss / d (conditional and unconditional text states) of the one-step CLIP loss at step t, exactly
what GPO backpropagates to α. On the CPU every (mode, t) cell of a full run runs in a child forked from one parent
that built the stack and paid every mode's first-use costs, so all cells start from the same state and none
inherits another's allocator history (one import instead of one per cell). Time: on the CPU the process's CPU time
(1 thread), which the other jobs on a shared machine do not inflate as they do the wall clock; on CUDA the wall
clock. Peak memory above the start of each gradient: on CUDA `max_memory_allocated`; on the CPU the kernel's
resident high-water mark (VmHWM, reset through /proc/self/clear_refs before every gradient), with glibc's mmap
threshold pinned to one page (MALLOC_MMAP_THRESHOLD_, set for the script's own re-executed process) so that freed
tensors go back to the OS at once and the RSS follows the live tensors, not the heap's history.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

from zoo.dpodiff.loss import clip_text_features
from zoo.dpodiff.sampler import estimation_loss, text_embeds
from zoo.dpodiff.stack import tiny_stack
from _memory import in_forked_child, reset_peak_rss, status_kib  # the sibling helper of the benchmark scripts

# SD-shaped (3-level UNet with cross-attention on 4-channel 16x16 latents, 3-level VAE decoding to 64x64, CLIP text
# and vision towers of width 128, 4 layers), sized so that the whole t = 5..45 run, 3 repetitions per cell, fits the
# shared 2-core CPU's 12-minute heavy slot (32x32 latents took ~4x longer per UNet call there).
MID = dict(unet_channels=(32, 64, 64), vae_channels=(32, 64, 64), latent_size=16, hidden=128, layers=4, heads=4,
           clip_image_size=64, clip_patch=16, norm_groups=16)
QUICK = dict(unet_channels=(8, 16), vae_channels=(8, 8), latent_size=8, hidden=16, layers=1, heads=2,
             clip_image_size=16, clip_patch=8)
PROMPT = "a photo of a dog"
PINNED = "4096"  # bytes (one page): larger allocations are mmapped, and unmapped when freed


def measure(fn, device: str) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of this process, peak MiB above the start) of fn()."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0, time.process_time() - c0,
                (torch.cuda.max_memory_allocated() - base) / 2**20)
    reset_peak_rss()
    base = status_kib("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, max(status_kib("VmHWM") - base, 0) / 1024


# mode -> (backprop, checkpointing) of `estimation_loss`
MODES = {"shortcut": ("shortcut", "none"), "full-blocks": ("full", "blocks"), "full-call": ("full", "call")}


def gradient(stack, feats, cond0, uncond0, z, mode: str, t: int, steps: int) -> None:
    """d loss / d (text states) of the one-step CLIP loss at step t, through the shortcut or the whole sampler."""
    cond, uncond = cond0.clone().requires_grad_(True), uncond0.clone().requires_grad_(True)
    backprop, ckpt = MODES[mode]
    estimation_loss(stack, cond, uncond, feats, t, steps, 7.5, latents=z, backprop=backprop,
                    checkpointing=ckpt).backward()


def setup(a) -> tuple:
    """The stack, the scoring features, the text states and the initial latents every cell shares; every mode's
    first-use costs (kernels, autograd, allocator) paid here, outside the measurements."""
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    stack = tiny_stack(**(QUICK if a.quick else MID)).to(a.device)
    feats = clip_text_features(stack, PROMPT)
    cond0, uncond0 = text_embeds(stack, PROMPT).detach(), text_embeds(stack, "").detach()
    z = torch.randn((1, *stack.latent_shape), generator=torch.Generator().manual_seed(0)).to(a.device)
    for m in MODES:
        gradient(stack, feats, cond0, uncond0, z, m, 1, a.steps)
    return stack, feats, cond0, uncond0, z


def cell(state, mode: str, t: int, a, queue=None) -> list[tuple[float, float, float]]:
    """`reps` measured gradients of one (mode, t) cell (put on `queue` when run in a forked child)."""
    stack, feats, cond0, uncond0, z = state
    # a forked child's first backward starts autograd's worker thread and allocator state afresh (~30 MiB once)
    gradient(stack, feats, cond0, uncond0, z, mode, 1, a.steps)
    out = [measure(lambda: gradient(stack, feats, cond0, uncond0, z, mode, t, a.steps), a.device)
           for _ in range(a.reps)]
    if queue is not None:
        queue.put(out)
    return out


def run_cell(state, mode: str, t: int, a) -> list[tuple[float, float, float]]:
    if a.quick or a.device != "cpu":  # CUDA cannot fork after initialisation; its peak counter is exact anyway
        return cell(state, mode, t, a)
    return in_forked_child(cell, state, mode, t, a)


def params_of(stack) -> str:
    return ", ".join(f"{k} {sum(p.numel() for p in getattr(stack, k).parameters()) / 1e6:.2f}M"
                     for k in ("unet", "vae", "text_encoder", "clip"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=None, help="sampler steps (default 50; --quick: 8)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ts", type=int, nargs="*", default=None)
    a = ap.parse_args()
    a.reps = a.reps or (1 if a.quick else 3)
    a.steps = a.steps or (8 if a.quick else 50)
    if a.device == "cpu" and not a.quick and os.environ.get("MALLOC_MMAP_THRESHOLD_") != PINNED:
        # glibc reads the threshold at start-up: run this script again with it pinned (its own process only)
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
                  dict(os.environ, MALLOC_MMAP_THRESHOLD_=PINNED))
    ts = a.ts or ([2, 5] if a.quick else [5, 15, 25, 45])
    import diffusers
    import transformers

    print(f"device={a.device} stack={'quick' if a.quick else 'mid'} {QUICK if a.quick else MID} steps={a.steps} "
          f"reps={a.reps} threads={a.threads} cpu={platform.processor() or platform.machine()} "
          f"torch={torch.__version__} diffusers={diffusers.__version__} transformers={transformers.__version__}")
    state = setup(a)
    print(f"parameters: {params_of(state[0])}")
    clock = "wall" if a.device == "cuda" else "CPU"  # a shared CPU's wall clock measures the other jobs too
    print(f"| t | shortcut {clock} s | full-blocks {clock} s | ratio | full-call {clock} s | ratio "
          "| shortcut peak MiB | full-blocks peak MiB | ratio | full-call peak MiB | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for t in ts:
        r = {m: run_cell(state, m, t, a) for m in MODES}

        def stat(m, i, digits=2, r=r):
            xs = [x[i] for x in r[m]]
            return statistics.median(xs), f"{statistics.median(xs):.{digits}f} ± {(max(xs) - min(xs)) / 2:.{digits}f}"

        k = 0 if a.device == "cuda" else 1
        (cs, cs_txt), (cb, cb_txt), (cc, cc_txt) = (stat(m, k) for m in MODES)
        (ms, ms_txt), (mb, mb_txt), (mc, mc_txt) = (stat(m, 2, 1) for m in MODES)
        mratio = lambda x: x / ms if ms >= 1 else float("nan")
        print(f"| {t} | {cs_txt} | {cb_txt} | {cb / cs:.2f} | {cc_txt} | {cc / cs:.2f} "
              f"| {ms_txt} | {mb_txt} | {mratio(mb):.2f} | {mc_txt} | {mratio(mc):.2f} |", flush=True)
    print("(ratios: full backprop over the shortcut; medians over the repetitions ± half their range; memory ratio "
          "nan: a shortcut peak under 1 MiB, below what the RSS resolves)")


if __name__ == "__main__":
    main()
