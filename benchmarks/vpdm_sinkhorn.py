"""VPOT's batched log-domain Sinkhorn (zoo.vpdm.vpot.sinkhorn_log, one call for the batch) vs POT's ot.sinkhorn
called per image, on UniAD-sized problems: B images x 14x14 tokens x K prototypes, float64, same eps and marginal
tolerance; the plans are asserted equal in the same run.

    python benchmarks/vpdm_sinkhorn.py            # batch 1, 8, 32; K 64; D 272; 5 repetitions
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
    torch side is the analytic size of its (B, N, K) float64 work arrays instead (marked *)."""
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--prototypes", type=int, default=64)
    ap.add_argument("--dim", type=int, default=272)
    args = ap.parse_args()
    torch.set_num_threads(1)
    batches, reps, side = ([1, 4], 2, 7) if args.quick else ([1, 8, 32], args.reps, 14)
    print(f"torch {torch.__version__}, POT {ot.__version__}, threads 1, tokens {side}x{side}, K {args.prototypes}, "
          f"D {args.dim}, eps {args.eps}, tol {args.tol}, float64")
    print("| batch | ours median s (min-max) | POT per image median s (min-max) | speed-up | max |plan diff| | "
          "POT peak MiB | ours work MiB* |")
    print("|---|---|---|---|---|---|---|")
    for b in batches:
        cost = problem(b, side * side, args.prototypes, args.dim)
        p_ours, t_ours = timed(lambda: ours(cost, args.eps, args.tol), reps)
        p_pot, t_pot = timed(lambda: pot(cost, args.eps, args.tol), reps)
        diff = float(np.abs(p_ours.numpy() - p_pot).max())
        assert diff < 1e-8, f"plans differ by {diff}"
        m_ours = 4 * cost.numel() * 8 / 2**20  # cost/eps, the logsumexp argument, the plan, its exp
        m_pot = peak_mib(lambda: pot(cost, args.eps, args.tol))
        mo, mp = statistics.median(t_ours), statistics.median(t_pot)
        print(f"| {b} | {mo:.4f} ({min(t_ours):.4f}-{max(t_ours):.4f}) | {mp:.4f} ({min(t_pot):.4f}-{max(t_pot):.4f}) "
              f"| {mp / mo:.1f}x | {diff:.1e} | {m_pot:.1f} | {m_ours:.1f} |")


if __name__ == "__main__":
    main()
