"""VPOT's batched Sinkhorn (zoo.vpdm.vpot.sinkhorn_log, one call for the batch) vs POT's ot.sinkhorn called per
image, on UniAD-sized problems: B images x 14x14 tokens x K prototypes, same eps and marginal tolerance; the plans
are asserted equal in the same run. Two settings: ours in float32 at tol 1e-6 (the issue's marginal accuracy; the
model's own tolerance is 1e-5, so float32 suffices there) and ours in float64 at tol 1e-9; POT runs in float64
(numpy) in both.

    python benchmarks/vpdm_sinkhorn.py            # batch 1, 8, 32; K 64; D 272; 7 repetitions
    python benchmarks/vpdm_sinkhorn.py --quick    # a few seconds (tests/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np
import ot
import torch

from zoo.vpdm.vpot import prototype_cost, sinkhorn_log


def problem(batch: int, tokens: int, k: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.nn.functional.layer_norm(torch.randn(batch, tokens, d, generator=g, dtype=torch.float64), (d,))
    p = torch.randn(k, d, generator=g, dtype=torch.float64)
    return prototype_cost(x, p)


def ours(cost, eps, tol):
    return sinkhorn_log(cost, eps, tol=tol, max_iter=100000, check_every=10).plan


def pot(cost, eps, tol):
    n, k = cost.shape[1:]
    a, b = np.full(n, 1 / n), np.full(k, 1 / k)
    return np.stack([ot.sinkhorn(a, b, c, eps, stopThr=tol, numItermax=100000) for c in cost.numpy()])


def timed(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, times


def peak_mib(fn) -> float:
    """Peak Python-heap (tracemalloc: numpy) allocation of one call; torch's CPU allocator is not traced, so the
    torch side is the analytic size of its (B, N, K) work arrays instead (marked *)."""
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


SETTINGS = [(torch.float32, 1e-6), (torch.float64, 1e-9)]  # (our dtype, marginal tolerance of both solvers)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--prototypes", type=int, default=64)
    ap.add_argument("--dim", type=int, default=272)
    args = ap.parse_args()
    torch.set_num_threads(1)
    batches, reps, side = ([1, 4], 2, 7) if args.quick else ([1, 8, 32], args.reps, 14)
    print(f"torch {torch.__version__}, POT {ot.__version__}, threads 1, tokens {side}x{side}, K {args.prototypes}, "
          f"D {args.dim}, eps {args.eps}, {reps} repetitions")
    print("| ours dtype | tol | batch | ours median s (min-max) | POT per image median s (min-max) | speed-up | "
          "max abs plan diff | POT peak MiB | ours work MiB* |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype, tol in SETTINGS:
        for b in batches:
            cost = problem(b, side * side, args.prototypes, args.dim)
            c_ours = cost.to(dtype)
            p_ours, t_ours = timed(lambda: ours(c_ours, args.eps, tol), reps)
            p_pot, t_pot = timed(lambda: pot(cost, args.eps, tol), reps)
            diff = float(np.abs(p_ours.double().numpy() - p_pot).max())
            # both stop at a marginal error <= tol, so each plan is within O(tol) of the exact one
            assert diff < tol, f"plans differ by {diff} (tol {tol})"
            m_ours = cost.numel() * c_ours.element_size() / 2**20  # one [B, N, K] array: z -> K -> the plan, in place
            m_pot = peak_mib(lambda: pot(cost, args.eps, tol))
            mo, mp = statistics.median(t_ours), statistics.median(t_pot)
            print(f"| {str(dtype).replace('torch.', '')} | {tol:g} | {b} | {mo:.4f} ({min(t_ours):.4f}-{max(t_ours):.4f}) "
                  f"| {mp:.4f} ({min(t_pot):.4f}-{max(t_pot):.4f}) | {mp / mo:.1f}x | {diff:.1e} | {m_pot:.1f} | "
                  f"{m_ours:.1f} |")


if __name__ == "__main__":
    main()
