"""PMTR's coarse-level efficiency claim: the coarse PMT block vs a GeoTransformer-style block built on
`torch.nn.MultiheadAttention` (self- plus cross-attention), at the same widths (512-d node features in and out,
4 heads), for a (source, target) pair of n nodes each.

Per n: forward+backward wall time (median and spread over --reps, after a warm-up step that is also the memory
measurement), peak memory of one forward+backward, FLOPs of one
forward (`torch.utils.flop_counter.FlopCounterMode`) and parameter counts. On CUDA memory is
`torch.cuda.max_memory_allocated` above the inputs; on CPU it is the peak of live tensor memory that
`torch.profiler` (profile_memory=True) records during the step, above what was live before it (the allocator's
live bytes, not the process RSS, which cannot see freed-and-reused blocks). The same measurement for every block.

PMT is the block as the model uses it (`recompute=True`: its linear chains keep only their inputs and are
recomputed in the backward, see `zoo/pmtr/pmt.py`); PMT-autograd is the same block and weights with plain autograd
(`recompute=False`), which stores every intermediate; the attention blocks are plain autograd.

    python benchmarks/pmtr_coarse.py --large-reps 1        # CPU, 128 ... 4096 nodes (1 timed step above 1024)
    python benchmarks/pmtr_coarse.py --device cuda         # 128 ... 4096 nodes
    python benchmarks/pmtr_coarse.py --quick               # a few seconds (tests/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from zoo.pmtr.pmt import CoarsePMTBlock


def sinusoid(x: torch.Tensor, d: int, sigma: float = 0.2) -> torch.Tensor:
    """GeoTransformer's sinusoidal embedding of a distance / sigma_d (its Breaking Bad-free default 0.2)."""
    freq = torch.exp(torch.arange(0, d, 2, device=x.device, dtype=x.dtype) * (-torch.log(torch.tensor(1e4)) / d))
    a = (x / sigma).unsqueeze(-1) * freq
    return torch.stack([a.sin(), a.cos()], dim=-1).flatten(-2)


class AttentionBlock(nn.Module):
    """GeoTransformer-style coarse matcher: per layer self-attention within each cloud and cross-attention between
    them (weights shared by the two clouds), each with a residual and LayerNorm, then an output Linear of the same
    width as PMT's. With `geometric=True` the self-attention also gets GeoTransformer's geometric structure term
    q_i . r_ij / sqrt(d_h), r_ij a Linear of the sinusoidal embedding of the pair distance (the (n, n, d) tensor that
    makes GeoTransformer quadratic in memory; its angular term is left out), passed to `nn.MultiheadAttention` as an
    additive float mask."""

    def __init__(self, d: int = 512, heads: int = 4, layers: int = 1, geometric: bool = False):
        super().__init__()
        self.d, self.heads, self.geometric = d, heads, geometric
        self.self_att = nn.ModuleList(nn.MultiheadAttention(d, heads, batch_first=True) for _ in range(layers))
        self.cross_att = nn.ModuleList(nn.MultiheadAttention(d, heads, batch_first=True) for _ in range(layers))
        self.norm1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.norm2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.geo = nn.ModuleList(nn.Linear(d, d) for _ in range(layers)) if geometric else None
        self.out = nn.Linear(d, d)

    def _bias(self, x, emb, mha, geo):
        n, dh = x.shape[1], self.d // self.heads
        q = (x[0] @ mha.in_proj_weight[: self.d].t() + mha.in_proj_bias[: self.d]).reshape(n, self.heads, dh)
        r = geo(emb).reshape(n, n, self.heads, dh)
        return torch.einsum("ihd,ijhd->hij", q, r) / dh ** 0.5

    def forward(self, src_pos, trg_pos, src, trg):
        s, t = src.unsqueeze(0), trg.unsqueeze(0)
        if self.geometric:
            e_s, e_t = sinusoid(torch.cdist(src_pos, src_pos), self.d), sinusoid(torch.cdist(trg_pos, trg_pos), self.d)
        for i, (sa, ca, n1, n2) in enumerate(zip(self.self_att, self.cross_att, self.norm1, self.norm2)):
            ms = self._bias(s, e_s, sa, self.geo[i]) if self.geometric else None
            mt = self._bias(t, e_t, sa, self.geo[i]) if self.geometric else None
            s = n1(s + sa(s, s, s, attn_mask=ms, need_weights=False)[0])
            t = n1(t + sa(t, t, t, attn_mask=mt, need_weights=False)[0])
            s, t = n2(s + ca(s, t, t, need_weights=False)[0]), n2(t + ca(t, s, s, need_weights=False)[0])
        return self.out(s[0]), self.out(t[0])


def cpu_peak_mib(fn) -> float:
    """Peak of the live CPU tensor memory during `fn`, above what was live before: the running sum of the
    allocation/free events that `torch.profiler` records with profile_memory=True (RSS cannot see it: freed blocks
    are reused from the allocator's cache)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # each op's own net allocation (children excluded) at its start, plus the frees recorded outside ops; an op's
    # internal temporaries that it frees itself are not seen
    events = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events())
    running = peak = 0
    for _, b in events:
        running += b
        peak = max(peak, running)
    return peak / 2**20


def inputs(n: int, d: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    side = 0.04 * n ** (1 / 3)  # node spacing ~ the level-2 grid 0.04: a few neighbours within PMT's 0.05
    pos = [(torch.rand(n, 3, generator=g) * side).to(device) for _ in range(2)]
    feats = [torch.randn(n, d, generator=g).to(device).requires_grad_() for _ in range(2)]
    return pos, feats


def step(block, pos, feats):
    a, b = block(pos[0], pos[1], feats[0], feats[1])
    (a.square().mean() + b.square().mean()).backward()


def peak_step_mib(block, pos, feats, device) -> float:
    block.zero_grad(set_to_none=True)
    for f in feats:
        f.grad = None
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step(block, pos, feats)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    return cpu_peak_mib(lambda: step(block, pos, feats))


def count_cpu_attention_flops() -> None:
    """`FlopCounterMode` has formulas for the CUDA SDPA kernels but none for CPU's flash kernel, which
    `nn.MultiheadAttention` uses here: without one the attention products (Q K^T, A V: 4 n_q n_k d per call) are not
    counted. Register torch's own SDPA formula for it (once)."""
    from torch.utils import flop_counter

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    if op not in flop_counter.flop_registry and op.default not in flop_counter.flop_registry:
        flop_counter.register_flop_formula(op)(
            lambda q, k, v, *args, out_shape=None, **kwargs: flop_counter.sdpa_flop_count(q, k, v))


def measure(block, n: int, d: int, device, reps: int) -> dict:
    pos, feats = inputs(n, d, device)
    with FlopCounterMode(display=False) as fc:  # forward only, on inputs outside autograd
        block(pos[0], pos[1], feats[0].detach(), feats[1].detach())
    flops = fc.get_total_flops()
    peak = peak_step_mib(block, pos, feats, device)  # from a clean state; it is also the timing's warm-up
    times = []
    for _ in range(reps):
        block.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(block, pos, feats)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    spread = 1000 * (max(times) - min(times)) if len(times) > 1 else float("nan")
    return {"ms": 1000 * statistics.median(times), "ms_spread": spread, "gflops": flops / 1e9, "peak_mib": peak}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--nodes", type=int, nargs="*", default=None)
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default 5; 2 with --quick)")
    ap.add_argument("--large-reps", type=int, default=None,
                    help="timed repetitions above 1024 nodes (default: --reps; CPU MHA at 4096 nodes is minutes a step)")
    ap.add_argument("--layers", type=int, default=1, help="self+cross layers of the attention block")
    ap.add_argument("--geo-max-nodes", type=int, default=None,
                    help="skip MHA+geo above this many nodes (its (n, n, d) embedding costs n^2 d^2 FLOPs; CPU: 512)")
    ap.add_argument("--quick", action="store_true", help="64-d widths (c=[16, 8, 4], f=[4, 8, 16]), 32/64 nodes, 2 reps")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    count_cpu_attention_flops()
    if args.quick:
        c, f, d = [16, 8, 4], [4, 8, 16], 64
    else:
        c, f, d = [64, 16, 4], [8, 32, 128], 512  # the paper's coarse block
    nodes = args.nodes or ([32, 64] if args.quick else
                           [128, 256, 512, 1024, 2048, 4096])
    torch.manual_seed(0)
    pmt = CoarsePMTBlock(c, f, [4, 4], radius=0.05).to(device)  # recompute=True: the block's default
    stored = CoarsePMTBlock(c, f, [4, 4], radius=0.05, recompute=False).to(device)
    stored.load_state_dict(pmt.state_dict())  # the same block, plain autograd (stores every intermediate)
    blocks = {"PMT": pmt, "PMT-autograd": stored, "MHA": AttentionBlock(d, 4, args.layers).to(device),
              "MHA+geo": AttentionBlock(d, 4, args.layers, geometric=True).to(device)}
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, width {d}, reps {args.reps}")
    print("parameters: " + ", ".join(f"{k} {sum(p.numel() for p in m.parameters()):,}" for k, m in blocks.items())
          + f" (attention: self+cross x{args.layers})")
    others = [k for k in blocks if k != "PMT"]
    print("| nodes | " + " | ".join(f"{k} ms" for k in blocks) + " | " + " | ".join(f"{k} GFLOPs" for k in blocks)
          + " | " + " | ".join(f"{k} peak MiB" for k in blocks) + " | "
          + " | ".join(f"{k}/PMT memory" for k in others) + " | " + " | ".join(f"{k}/PMT time" for k in others) + " |")
    print("|---" * (1 + 3 * len(blocks) + 2 * len(others)) + "|")
    for n in nodes:
        geo_max = args.geo_max_nodes or (512 if device.type == "cpu" else 1 << 30)
        reps = args.reps if n <= 1024 or args.large_reps is None else args.large_reps
        r = {k: measure(m, n, d, device, reps) if k != "MHA+geo" or n <= geo_max else
             {"ms": float("nan"), "ms_spread": float("nan"), "gflops": float("nan"), "peak_mib": float("nan")}
             for k, m in blocks.items()}
        p = r["PMT"]
        cells = [f"{n}"] + [f"{r[k]['ms']:.1f} ± {r[k]['ms_spread']:.1f}" if reps > 1 else f"{r[k]['ms']:.1f} (1 rep)"
                            for k in blocks]
        cells += [f"{r[k]['gflops']:.3f}" for k in blocks] + [f"{r[k]['peak_mib']:.1f}" for k in blocks]
        cells += [f"{r[k]['peak_mib'] / p['peak_mib']:.2f}" if p["peak_mib"] > 0 else "nan" for k in others]
        cells += [f"{r[k]['ms'] / p['ms']:.2f}" for k in others]
        print("| " + " | ".join(cells) + " |", flush=True)

if __name__ == "__main__":
    main()
