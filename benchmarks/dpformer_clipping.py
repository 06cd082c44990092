"""Step time and peak memory of DP-SGD on a tied-embedding Transformer: ours vs Opacus.

Methods (one SGD step each: forward, backward, clipping, noise, update):
- nonprivate:     plain backward, no clipping;
- phantom:        zoo.dp PerSampleClipper, Phantom norms + book-keeping clipped sum (what DPClipping uses);
- phantom-2bwd:   Phantom norms, clipped sum by a second weighted backward (the alternative we measured);
- opacus-hooks:   Opacus GradSampleModule (hooks) + DPOptimizer: materialised per-sample gradients;
- opacus-ghost:   Opacus ghost clipping (GradSampleModuleFastGradientClipping); Opacus 1.6 refuses
                  tied weights, so it runs on the *untied* twin (same shapes and FLOPs, one more M×d matrix).

Times: all methods of one (vocab, seq) in one process, steps interleaved (the 2-core machine is shared,
so load spikes hit every method alike); median of --steps steps after a warm-up step, with the spread: the
interquartile range of the step times and the min–max of the per-round ratios (one round = every method once).
Memory: each method alone in a subprocess, peak RSS (ru_maxrss) of one step minus the RSS after setup.

    python benchmarks/dpformer_clipping.py            # vocab 1k/10k/50k × seq 50/200
    python benchmarks/dpformer_clipping.py --quick    # vocab 1k/10k × seq 50
    python benchmarks/dpformer_clipping.py --device cuda --batch 64 --vocabs 10000 50000   # on a GPU

On CUDA, step times are synchronised wall times and memory is the peak of torch.cuda.max_memory_allocated during
one step above the memory allocated after setup, every method of a point measured in one process in turn.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
import warnings

METHODS = ["nonprivate", "phantom", "phantom-2bwd", "opacus-hooks", "opacus-ghost"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def build(method: str, vocab: int, seq: int, batch: int, d: int, device: str = "cpu"):
    """Returns a function doing one DP-SGD (or plain) step of `method` on a fresh model."""
    import torch

    from zoo.dp import PerSampleClipper
    from zoo.dpformer.model import SASRec

    class PerSampleLoss(torch.nn.Module):  # the per-sequence losses as a module, what Opacus' wrappers take
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, seq, target):
            return self.m.per_sample_loss(seq, target)

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a shared 2-core box: 2 threads thrash under load (measured 10x slower)
    model = SASRec(vocab, max_len=seq, d_model=d, n_layers=2, n_heads=2, d_ff=4 * d, dropout=0.0, re_attention=False)
    if method == "opacus-ghost":
        model.output.weight = torch.nn.Parameter(model.item_emb.weight.detach().clone())
    model.to(device)
    x = torch.randint(1, vocab + 1, (batch, seq), device=device)
    y = torch.randint(1, vocab + 1, (batch, seq), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    C, sigma = 1.0, 1.0

    if method == "nonprivate":
        def step():
            opt.zero_grad()
            model.per_sample_loss(x, y).mean().backward()
            opt.step()
    elif method == "phantom":
        clipper = PerSampleClipper(model, "phantom", C)

        def step():
            opt.zero_grad()
            model.per_sample_loss(x, y).mean().backward()
            clipper.step(sigma, "mean", float(batch))
            opt.step()
    elif method == "phantom-2bwd":
        clipper = PerSampleClipper(model, "phantom", C)

        def step():
            opt.zero_grad()
            losses = model.per_sample_loss(x, y)
            losses.mean().backward(retain_graph=True)
            norms = clipper.per_sample_norms("mean")
            clipper.capture.clear()
            coef = (C / (norms + 1e-6)).clamp(max=1.0)
            opt.zero_grad()
            clipper.capture.enabled = False
            (coef * losses).sum().backward()
            clipper.capture.enabled = True
            for p in clipper.params:
                p.grad = (p.grad + torch.normal(0.0, sigma * C, size=p.shape, device=p.device)) / batch
            opt.step()
    elif method == "opacus-hooks":
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        gsm = GradSampleModule(PerSampleLoss(model), batch_first=True, loss_reduction="mean")
        dpopt = DPOptimizer(opt, noise_multiplier=sigma, max_grad_norm=C, expected_batch_size=batch)

        def step():
            dpopt.zero_grad()
            gsm(x, y).mean().backward()
            dpopt.step()
    elif method == "opacus-ghost":
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping

        gsm = GradSampleModuleFastGradientClipping(PerSampleLoss(model), batch_first=True, loss_reduction="mean",
                                                   max_grad_norm=C, use_ghost_clipping=True)
        dpopt = DPOptimizerFastGradientClipping(opt, noise_multiplier=sigma, max_grad_norm=C,
                                                expected_batch_size=batch)

        def step():
            dpopt.zero_grad()
            DPTensorFastGradientClipping(gsm, dpopt, gsm(x, y), "mean").backward()
            dpopt.step()
    else:
        raise SystemExit(f"unknown method {method}")

    return step


def measure_memory(method: str, vocab: int, seq: int, batch: int, d: int, device: str = "cpu") -> dict:
    """Peak memory of one step above the post-setup level (run alone in its own process): RSS on CPU,
    allocated CUDA memory on a GPU."""
    step = build(method, vocab, seq, batch, d, device)
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return {"peak_mb": max(torch.cuda.max_memory_allocated() - base, 0) / 2**20}
    base = _rss_mb()
    step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    return {"peak_mb": max(peak - base, 0.0)}


def measure_memory_all(methods: list[str], vocab: int, seq: int, batch: int, d: int, device: str) -> dict:
    """On CUDA the allocator's own statistics are exact per process, so every method is measured in this one
    process, one after another, each on a fresh model whose predecessor has been freed (a subprocess per method,
    needed for RSS on CPU, would pay a CUDA start-up each)."""
    import gc

    import torch

    out = {}
    for m in methods:
        try:
            out[m] = measure_memory(m, vocab, seq, batch, d, device)
        except Exception as e:  # report a failing method (e.g. out of memory), keep measuring the others
            out[m] = {"error": f"{type(e).__name__}: {str(e)[:80]}"}
        gc.collect()
        torch.cuda.empty_cache()
    return out


def measure_times(methods: list[str], vocab: int, seq: int, batch: int, d: int, steps: int,
                  device: str = "cpu") -> dict:
    """Step times per method (a list per method, one entry per round), all in this process, interleaved so
    that load spikes of the shared machine hit every method alike."""
    fns, errors = {}, {}
    for m in methods:
        try:
            fns[m] = build(m, vocab, seq, batch, d, device)
            fns[m]()  # warm-up
            _sync(device)
        except Exception as e:  # report a failing method, keep timing the others
            errors[m] = f"{type(e).__name__}: {str(e)[:80]}"
            fns.pop(m, None)
    times = {m: [] for m in fns}
    for _ in range(steps):
        for m, f in fns.items():
            t0 = time.perf_counter()
            f()
            _sync(device)
            times[m].append(time.perf_counter() - t0)
    return {**times, **errors}


def spread(xs: list[float]) -> str:
    """median [q1–q3] of a list of step times."""
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return f"{statistics.median(xs):.3f} [{q[0]:.3f}–{q[2]:.3f}]"


def ratio(xs: list[float], ys: list[float]) -> str:
    """median of the per-round ratios x/y [min–max]: rounds pair steps taken under the same load."""
    r = [x / y for x, y in zip(xs, ys)]
    return f"{statistics.median(r):.2f} [{min(r):.2f}–{max(r):.2f}]"


def _sub(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:90]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="vocab 1k/10k, seq 50 only")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    ap.add_argument("--vocabs", type=int, nargs="+", default=None, help="vocabulary sizes (default 1k 10k 50k)")
    ap.add_argument("--seqs", type=int, nargs="+", default=None, help="sequence lengths (default 50 200)")
    ap.add_argument("--mem-all", nargs=2, metavar=("VOCAB", "SEQ"), help=argparse.SUPPRESS)
    ap.add_argument("--mem", nargs=3, metavar=("METHOD", "VOCAB", "SEQ"), help=argparse.SUPPRESS)
    ap.add_argument("--times", nargs=2, metavar=("VOCAB", "SEQ"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    methods = a.methods.split(",")
    if a.mem:
        print(json.dumps(measure_memory(a.mem[0], int(a.mem[1]), int(a.mem[2]), a.batch, a.d, a.device)))
        return
    if a.mem_all:
        if not a.device.startswith("cuda"):
            raise SystemExit("--mem-all needs a CUDA device (on the CPU each method's RSS needs its own process)")
        print(json.dumps(measure_memory_all(methods, int(a.mem_all[0]), int(a.mem_all[1]), a.batch, a.d, a.device)))
        return
    if a.times:
        print(json.dumps(measure_times(methods, int(a.times[0]), int(a.times[1]), a.batch, a.d, a.steps, a.device)))
        return
    seqs = a.seqs or ((50,) if a.quick else (50, 200))
    vocabs = a.vocabs or ((1000, 10000) if a.quick else (1000, 10000, 50000))
    grid = [(v, t) for t in seqs for v in vocabs]
    cuda = a.device.startswith("cuda")
    common = ["--batch", str(a.batch), "--d", str(a.d), "--steps", str(a.steps), "--device", a.device]
    rows = {}
    for v, t in grid:
        times = _sub(["--times", str(v), str(t), "--methods", ",".join(methods), *common])
        mems = _sub(["--mem-all", str(v), str(t), "--methods", ",".join(methods), *common]) if cuda else {}
        for m in methods:
            mem = (mems if "error" in mems else mems[m]) if cuda else _sub(["--mem", m, str(v), str(t), *common])
            err = times.get("error") or mem.get("error") or (times[m] if isinstance(times[m], str) else None)
            rows[(v, t, m)] = {"error": err} if err else {"time_s": times[m], **mem}
            print(f"# vocab={v} seq={t} {m}: {rows[(v, t, m)]}", file=sys.stderr, flush=True)
    from _memory import device_line  # the sibling helper of the benchmark scripts

    print(f"device {device_line(a.device)}, batch {a.batch}, "
          f"d_model {a.d}, 2 layers, 2 heads, {a.steps} interleaved rounds "
          "after 1 warm-up; step time: median [interquartile range]; ratios: median of the per-round ratios "
          "[min–max], method / nonprivate and method / phantom; memory = peak "
          f"{'CUDA allocation' if cuda else 'RSS'} above the post-setup level\n")
    print("| vocab | seq | method | step time (s) | × non-private | × phantom | peak extra memory (MiB) |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for v, t in grid:
        base = rows.get((v, t, "nonprivate"), {}).get("time_s")
        ph = rows.get((v, t, "phantom"), {}).get("time_s")  # lists of per-round step times
        for m in methods:
            r = rows[(v, t, m)]
            if "error" in r:
                print(f"| {v} | {t} | {m} | failed: {r['error']} | | | |")
                continue
            rnp = ratio(r["time_s"], base) if base else "-"
            rph = ratio(r["time_s"], ph) if ph else "-"
            print(f"| {v} | {t} | {m} | {spread(r['time_s'])} | {rnp} | {rph} | {r['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()
