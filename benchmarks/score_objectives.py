"""Forward+backward time of every SCoRe objective vs pytorch-metric-learning's SupConLoss, same process.

    python benchmarks/score_objectives.py            # batch 512 and 1024 rows, dim 128, 10 and 100 classes
    python benchmarks/score_objectives.py --quick    # batch 128, 10 classes

"batch" is the number of rows the loss sees (the concatenated views: 512 rows = 256 images x 2 views),
which is what PML's SupConLoss receives. Memory is the bytes autograd saves for backward (unique
storages, CPU and GPU alike) and, on CUDA, the peak allocated memory. Goal: every objective within
1.5x of PML SupCon's time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import SupConLoss

from zoo.score.losses import OBJECTIVES, score_loss
from _memory import saved_bytes  # noqa: E402 - the sibling helper of the benchmark scripts


def time_round_robin(fns, z, reps: int, device) -> list[float]:
    """Median fwd+bwd seconds of each fn, interleaving the fns so a shared machine's load drifts evenly."""

    def step(fn):
        z.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    for fn in fns:  # warm-up
        step(fn), step(fn)
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            times[i].append(step(fn))
    return [statistics.median(t) for t in times]


def peak_cuda_mib(fn, z) -> str:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    z.grad = None
    fn().backward()
    torch.cuda.synchronize()
    return f"{torch.cuda.max_memory_allocated() / 2**20:.1f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1: steadier on a shared machine)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes, class_counts = ([128], [10]) if args.quick else ([512, 1024], [10, 100])
    reps = args.reps or (5 if args.quick else 15)
    d = 128
    print(f"device {device}, threads {torch.get_num_threads()}, dim {d}, median of {reps} runs\n")
    print("| batch | classes | objective | fwd+bwd ms | ratio vs PML SupCon | saved MiB | peak MiB |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for n in sizes:
        for K in class_counts:
            g = torch.Generator().manual_seed(0)
            z = F.normalize(torch.randn(n, d, generator=g), dim=1).to(device).requires_grad_()
            y = (torch.arange(n) % K)[torch.randperm(n, generator=g)].to(device)
            pml = SupConLoss(temperature=0.07)
            entries = [("PML SupConLoss", lambda: pml(z, y))] + [
                (o, (lambda o=o: score_loss(z, y, o))) for o in OBJECTIVES]
            times = time_round_robin([fn for _, fn in entries], z, reps, device)
            for (name, fn), t in zip(entries, times):
                peak = peak_cuda_mib(fn, z) if device.type == "cuda" else "n/a"
                ratio = t / times[0]
                if name != "PML SupConLoss":
                    worst = max(worst, ratio)
                print(f"| {n} | {K} | {name} | {t * 1e3:.2f} | {ratio:.2f} | "
                      f"{saved_bytes(fn) / 2**20:.1f} | {peak} |", flush=True)
    print(f"\nworst ratio {worst:.2f} (goal <= 1.5): {'met' if worst <= 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
