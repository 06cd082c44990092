"""Training-step time and peak memory of the k-SPC Jacobian penalty: ours vs deepinv's JacobianSpectralNorm.

One step = L1 loss of a reduced DRUNet (deepinv's, bias-free, noise-map input) on a batch of patches + r * the
hinged ||J_{kI+(1-k)D}||^2 at the batch's first image by `iters` power steps (the same count for both: deepinv's
early stop is off, tol = 0), backward, Adam step. Both penalties are the same estimator, so the ratio measures
implementation overhead only. Repetitions alternate between the two methods (machine load hits both alike);
the table gives the median and the [min, max] of the step times and the ratio of medians.

Memory: on CUDA, torch.cuda.max_memory_allocated over one step; on CPU, each method alone in a forked child, the
peak RSS (ru_maxrss) after warm-up steps minus the RSS before the first step (the autograd graph of the power
iteration dominates it).

    nice -n 10 python benchmarks/pcdenoiser_penalty.py                # 64 px patches, batch 4, nc 16-128, 1 block
    python benchmarks/pcdenoiser_penalty.py --quick                   # a few seconds (tests/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import time

import torch

from _memory import in_forked_child  # noqa: E402 - the sibling helper of the benchmark scripts
from zoo.pcdenoiser.denoisers import DeepinvDRUNet
from zoo.pcdenoiser.jacobian import jacobian_spectral_norm_sq, spc_operator, spc_penalty

METHODS = ("ours", "deepinv")


def build(args, device):
    torch.manual_seed(0)
    net = DeepinvDRUNet(1, tuple(args.nc), args.nb).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    clean = torch.rand(args.batch, 1, args.patch, args.patch, generator=g).to(device)
    sigma = (torch.rand(args.batch, generator=g) * 60 / 255).to(device)
    noisy = clean + sigma.view(-1, 1, 1, 1) * torch.randn(clean.shape, generator=g).to(device)
    return net, opt, (noisy, clean, sigma)


def penalty(method: str, net, noisy, sigma, iters: int) -> torch.Tensor:
    f = spc_operator(lambda z: net(z, sigma[:1]), 0.9)
    if method == "ours":
        norm_sq = jacobian_spectral_norm_sq(f, noisy[:1], iters, create_graph=True)
    else:
        from deepinv.loss import JacobianSpectralNorm

        x = noisy[:1].detach().clone().requires_grad_(True)
        norm_sq = JacobianSpectralNorm(max_iter=iters, tol=0.0, eval_mode=False)(f(x), x).reshape(1) ** 2
    return spc_penalty(norm_sq, 0.2)


def step(method: str, net, opt, batch, iters: int) -> None:
    noisy, clean, sigma = batch
    loss = torch.nn.functional.l1_loss(net(noisy, sigma), clean) + 1e-4 * penalty(method, net, noisy, sigma, iters)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _rss_child(method, args, q) -> None:
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    net, opt, batch = build(args, device)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(2):
        step(method, net, opt, batch, args.iters)
    q.put((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)


def peak_mib(method: str, args, device) -> float:
    if device.type == "cuda":
        net, opt, batch = build(args, device)
        step(method, net, opt, batch, args.iters)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step(method, net, opt, batch, args.iters)
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    return in_forked_child(_rss_child, method, args, timeout=600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patch", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--nc", type=int, nargs=4, default=[16, 32, 64, 128])
    ap.add_argument("--nb", type=int, default=1)
    ap.add_argument("--iters", type=int, default=10, help="power iterations of both penalties (official 10)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="32 px, batch 2, nc 8-64, 1 block, 3 power steps, 3 reps")
    args = ap.parse_args()
    if args.quick:
        args.patch, args.batch, args.nc, args.nb, args.iters, args.reps = 32, 2, [8, 16, 32, 64], 1, 3, 3
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(args.threads)
    import deepinv

    mem = {m: peak_mib(m, args, device) for m in METHODS}  # forked before this process builds its own graphs
    net, opt, batch = build(args, device)
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    for m in METHODS:  # warm-up
        step(m, net, opt, batch, args.iters)
    for _ in range(args.reps):
        for m in METHODS:
            sync(device)
            t = time.perf_counter()
            step(m, net, opt, batch, args.iters)
            sync(device)
            times[m].append(time.perf_counter() - t)
    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"device {device} ({platform.processor() or platform.machine()}), torch {torch.__version__}, deepinv "
          f"{deepinv.__version__}, {args.threads} thread(s); DRUNet nc {args.nc} nb {args.nb}, batch {args.batch} x "
          f"{args.patch}^2, {args.iters} power steps, {args.reps} reps")
    print("| penalty | step ms (median) | [min, max] | ratio to deepinv | peak MiB | memory ratio |")
    print("|---|---|---|---|---|---|")
    for m in METHODS:
        print(f"| {m} | {med[m] * 1e3:.1f} | [{min(times[m]) * 1e3:.1f}, {max(times[m]) * 1e3:.1f}] | "
              f"{med[m] / med['deepinv']:.3f} | {mem[m]:.1f} | {mem[m] / max(mem['deepinv'], 1e-9):.3f} |")


if __name__ == "__main__":
    main()
