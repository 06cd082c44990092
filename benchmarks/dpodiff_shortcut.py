"""Shortcut Text Gradient vs full backpropagation through the sampler (gradient checkpointing on): gradient time
and peak memory for t in {5, 15, 25, 45} on a mid-size SD-shaped random stack (issue goal: shortcut flat in t and
at least 3x leaner than full backprop at t = 45).

    python benchmarks/dpodiff_shortcut.py            # mid-size stack, t = 5 15 25 45, 3 repetitions
    python benchmarks/dpodiff_shortcut.py --quick    # tiny stack, t = 2 5, 1 repetition (tests/test_benchmarks.py)
    python benchmarks/dpodiff_shortcut.py --device cuda

Peak memory: CUDA's max_memory_allocated above the start on a GPU; on the CPU the peak resident set size above
the start, sampled every millisecond by a thread (psutil).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import psutil
import torch

from zoo.dpodiff.loss import clip_text_features
from zoo.dpodiff.sampler import estimation_loss, text_embeds
from zoo.dpodiff.stack import tiny_stack

MID = dict(unet_channels=(64, 128, 128), vae_channels=(32, 64, 64), latent_size=32, hidden=128, layers=4, heads=4,
           clip_image_size=64, clip_patch=16, norm_groups=16)
QUICK = dict(unet_channels=(8, 16), vae_channels=(8, 8), latent_size=8, hidden=16, layers=1, heads=2,
             clip_image_size=16, clip_patch=8)


def peak_during(fn, device: str) -> tuple[float, float]:
    """(seconds, peak MiB above the start) of fn()."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0, (torch.cuda.max_memory_allocated() - base) / 2**20
    proc, peak, stop = psutil.Process(), [0], threading.Event()
    base = proc.memory_info().rss

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.001)

    th = threading.Thread(target=watch)
    th.start()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    stop.set()
    th.join()
    return dt, max(peak[0] - base, 0) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--ts", type=int, nargs="*", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1) if a.device == "cpu" and a.quick else None
    ts = a.ts or ([2, 5] if a.quick else [5, 15, 25, 45])
    reps = a.reps or (1 if a.quick else 3)
    stack = tiny_stack(**(QUICK if a.quick else MID)).to(a.device)
    feats = clip_text_features(stack, "a photo of a dog")
    cond0, uncond0 = text_embeds(stack, "a photo of a dog").detach(), text_embeds(stack, "").detach()
    z = torch.randn((1, *stack.latent_shape), generator=torch.Generator().manual_seed(0)).to(a.device)
    print(f"device={a.device} stack={'quick' if a.quick else 'mid'} steps={a.steps} reps={reps} torch={torch.__version__}")
    print("| t | shortcut s | full (ckpt) s | time ratio | shortcut MiB | full MiB | memory ratio |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for t in ts:
        res = {}
        for mode in ("shortcut", "full"):
            times, mems = [], []
            for _ in range(reps):
                cond = cond0.clone().requires_grad_(True)

                def grad():
                    estimation_loss(stack, cond, uncond0, feats, t, a.steps, 7.5, latents=z, backprop=mode).backward()

                dt, mb = peak_during(grad, a.device)
                times.append(dt)
                mems.append(mb)
            res[mode] = (statistics.median(times), max(times) - min(times), statistics.median(mems))
        (ts_, _, ms), (tf, _, mf) = res["shortcut"], res["full"]
        print(f"| {t} | {ts_:.3f} | {tf:.3f} | {tf / ts_:.2f} | {ms:.1f} | {mf:.1f} | {mf / max(ms, 1e-9):.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
