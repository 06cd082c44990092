"""What the CPU optimiser check (configs/sweeps/dpodiff_tiny_search.yaml) can show: how much the tiny random stack's
loss distinguishes the prompts of a space, and how well the one-step loss GPO follows predicts it.

For each prompt and seed, on the sweep's tiny stack, sampler and NPLib negative-prompt space (4.6M prompts):
- the full-generation distance of `--sample` distinct uniform prompts of the space: its spread (std, range) and
  the original's (all slots empty = no negative prompt) distance beside it;
- the expected best of n uniform draws (n = the sweep's budgets), estimated from that sample: what random search
  reaches at the sweep's budget;
- Spearman's ρ between the one-step loss at t (hard one-hot α; the value whose gradient GPO follows) and the
  full distance, over the same sample.

    python benchmarks/dpodiff_landscape.py --seeds 10      # the sweep's 3 prompts at seed 10, 150 prompts, t = 3 5
    python benchmarks/dpodiff_landscape.py --quick         # one prompt, 6 prompts of a 4-step sampler (test miniature)
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from scipy import stats

from datamodules.prompts import PromptsDataModule
from zoo.dpodiff.optimize import DPOSettings, PromptProblem
from zoo.dpodiff.spaces import build_space, nplib_candidates
from zoo.dpodiff.stack import tiny_stack

# configs/smoke/dpodiff_improve_diffusiondb.yaml's stack and the sweep's sampler (10 steps, GPO at t = 3..5)
STACK = {"seed": 0, "unet_channels": (8, 16), "vae_channels": (8, 8), "latent_size": 8, "hidden": 16, "layers": 1,
         "heads": 2, "clip_image_size": 16, "clip_patch": 8}


def sweep_prompts() -> list[str]:
    """The prompts the sweep's datamodule keeps (its seeded subset of the embedded list)."""
    dm = PromptsDataModule(source="embedded", max_prompts=3, seed=0)
    dm.setup()
    return [row["prompt"] for row in dm.rows]


def expected_best(values: np.ndarray, n: int) -> float:
    """E[min of n draws without replacement] = Σ_k v_(k) C(N−k, n−1) / C(N, n), v sorted ascending."""
    v, N = np.sort(values), len(values)
    w = np.array([math.comb(N - k, n - 1) for k in range(1, N + 1)], dtype=float) / math.comb(N, n)
    return float(v @ w)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--seeds", type=int, nargs="*", default=[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ts", type=int, nargs="*", default=[3, 5])
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--budgets", type=int, nargs="*", default=[12, 40])
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.quick:
        a.prompts, a.seeds, a.steps, a.ts, a.sample, a.budgets = 1, [0], 4, [1], 6, [4]
    stack = tiny_stack(**STACK)
    print(f"stack {STACK}, NPLib space, {a.steps} steps, CFG 7.5, one image per evaluation")
    print("| prompt | seed | sample | original | sample best | mean | std | range | "
          + " | ".join(f"E best of {n} (random)" for n in a.budgets)
          + " | " + " | ".join(f"Spearman ρ (t={t})" for t in a.ts) + " |")
    print("|---" * (8 + len(a.budgets) + len(a.ts)) + "|", flush=True)
    for prompt in sweep_prompts()[:a.prompts]:
        space = build_space(prompt, "nplib", stack.tokenizer, nplib_candidates(), "improve", 5)
        for seed in a.seeds:
            t0 = time.process_time()
            prob = PromptProblem(stack, space, DPOSettings(num_inference_steps=a.steps, t_start=min(a.ts)), seed)
            rng = np.random.default_rng(seed)
            seen: set = set()
            while len(seen) < a.sample:  # distinct uniform prompts, as random search draws them
                seen.add(tuple(int(rng.integers(n)) for n in space.sizes))
            choices = sorted(seen)
            with torch.no_grad():
                orig = prob.score((0,) * len(space.sizes))
                full = np.array([prob.score(c) for c in choices])
                rhos = []
                for t in a.ts:
                    one = [float(prob.loss_at([torch.nn.functional.one_hot(torch.tensor(i), n).double()
                                               for i, n in zip(c, space.sizes)], t)) for c in choices]
                    rhos.append(stats.spearmanr(one, full).statistic)
            print(f"| {prompt} | {seed} | {len(full)} | {orig:.4f} | {full.min():.4f} | {full.mean():.4f} "
                  f"| {full.std():.4f} | {np.ptp(full):.4f} | "
                  + " | ".join(f"{expected_best(full, n):.4f}" for n in a.budgets)
                  + " | " + " | ".join(f"{r:+.2f}" for r in rhos) + f" |  <!-- {time.process_time() - t0:.0f} CPU s -->",
                  flush=True)


if __name__ == "__main__":
    main()
