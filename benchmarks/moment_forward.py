"""MOMENT forward pass: ours (zoo.moment) against the official momentfm 0.1.4, same T5 configs and weights.

For each T5 shape, task and channel count, both models get the same random weights (momentfm's, mapped through
the key table), the same input, eval mode, no grad; the runs are interleaved. Reports the median and the
interquartile range of the wall time per forward pass, the ratio ours / momentfm (goal: <= 1.05), and the peak
CUDA memory (max_memory_allocated; not measured on CPU, see `peak_memory_mb`). Outputs are checked equal.

    python benchmarks/moment_forward.py                       # small- and large-shaped T5, batch 32, 1 and 7 channels
    python benchmarks/moment_forward.py --quick               # a tiny T5, for tests/test_benchmarks.py
    python benchmarks/moment_forward.py --shapes small --batch 4 --reps 5 --device cpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch

SHAPES = {  # T5 encoder shapes of MOMENT-1-small / -large (flan-t5-small / flan-t5-large)
    "tiny": dict(d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2),
    "small": dict(d_model=512, d_ff=1024, d_kv=64, num_heads=6, num_layers=8),
    "large": dict(d_model=1024, d_ff=2816, d_kv=64, num_heads=16, num_layers=24),
}
COMMON = dict(vocab_size=32128, feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
              relative_attention_max_distance=128, dropout_rate=0.1, layer_norm_epsilon=1e-6, is_encoder_decoder=False)
TASKS = {"reconstruction": {}, "forecasting": {"forecast_horizon": 96}, "classification": {"num_class": 5},
         "embedding": {}}


def peak_memory_mb(fn, x, m, device: torch.device) -> float | None:
    """Peak CUDA memory of one forward (max_memory_allocated above what was allocated before). On CPU there is no
    allocator statistic to read (RSS hides reuse of freed memory, and a forked child deadlocks on torch's thread
    pool), so None: not measured."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        fn(x, m)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def build_pair(momentfm, shape: str, task: str, channels: int, device: torch.device):
    from zoo.moment import MOMENT, MomentConfig, convert_momentfm_state_dict
    from zoo.moment.checkpoints import load_converted

    t5 = {**COMMON, **SHAPES[shape]}
    kw = dict(TASKS[task])
    if task == "classification":
        kw["n_channels"] = channels
    cfg = dict(task_name="reconstruction", model_name="MOMENT", transformer_type="encoder_only", d_model=None,
               seq_len=512, patch_len=8, patch_stride_len=8, device="cpu", transformer_backbone="google/flan-t5-large",
               model_kwargs={}, t5_config=dict(t5))
    with device:  # built (and randomly initialised) on the device: a large T5's init is slow on the CPU
        peer = momentfm.MOMENTPipeline(cfg, model_kwargs={"task_name": task, "enable_gradient_checkpointing": False,
                                                          **kw})
        peer.init()
        ours = MOMENT(MomentConfig(t5_config=dict(t5), task_name=task, **kw))
        load_converted(ours, convert_momentfm_state_dict(peer.state_dict(), ours, task), "momentfm")
    return peer.to(device).eval(), ours.to(device).eval()


def forward_fns(peer, ours, task: str):
    if task == "reconstruction":
        return (lambda x, m: peer(x_enc=x, input_mask=m, mask=m).reconstruction,
                lambda x, m: ours.reconstruct(x, m, m.long())[0])
    attr = {"forecasting": "forecast", "classification": "logits", "embedding": "embeddings"}[task]
    method = {"forecasting": ours.forecast, "classification": ours.classify, "embedding": ours.embed}[task]
    return (lambda x, m: getattr(peer(x_enc=x, input_mask=m), attr)), method


def timed(fn, x, m, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.no_grad():
        fn(x, m)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["small", "large"], choices=list(SHAPES))
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--channels", nargs="+", type=int, default=[1, 7])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="tiny T5, batch 2, 2 reps, 1 and 2 channels")
    a = ap.parse_args()
    if a.quick:
        a.shapes, a.batch, a.reps, a.channels = ["tiny"], 2, 2, [1, 2]
    if a.threads:
        torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore")
    try:
        import momentfm
    except ImportError as e:  # not a dependency: its wheel pins transformers 4.33.3 (see cards/moment.md)
        sys.exit(f"moment_forward: the peer momentfm does not import ({e}); "
                 "install it with: pip install --no-deps momentfm==0.1.4")
    from _memory import device_line  # the sibling helper of the benchmark scripts

    device = torch.device(a.device)
    print(f"device {device_line(device)}, threads {torch.get_num_threads()}, batch {a.batch}, "
          f"reps {a.reps}")
    print("| T5 shape | task | channels | momentfm ms (median [IQR]) | ours ms (median [IQR]) | ours / momentfm "
          "| momentfm peak MB | ours peak MB | max abs diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in a.shapes:
        for task in a.tasks:
            for c in a.channels:
                torch.manual_seed(0)
                peer, ours = build_pair(momentfm, shape, task, c, device)
                x = torch.randn(a.batch, c, 512, device=device)
                m = torch.ones(a.batch, 512, device=device)
                m[0, :64] = 0
                f_peer, f_ours = forward_fns(peer, ours, task)
                with torch.no_grad():
                    diff = (f_peer(x, m) - f_ours(x, m)).abs().max().item()  # also the warm-up
                times = {"peer": [], "ours": []}
                for _ in range(a.reps):
                    times["peer"].append(timed(f_peer, x, m, device))
                    times["ours"].append(timed(f_ours, x, m, device))
                peaks = {name: peak_memory_mb(fn, x, m, device) for name, fn in (("peer", f_peer), ("ours", f_ours))}

                def fmt(v):
                    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
                    return f"{1e3 * statistics.median(v):.1f} [{1e3 * q[0]:.1f}, {1e3 * q[2]:.1f}]"

                def mb(v):
                    return "n/a (CPU)" if v is None else f"{v:.0f}"

                ratio = statistics.median(times["ours"]) / statistics.median(times["peer"])
                print(f"| {shape} | {task} | {c} | {fmt(times['peer'])} | {fmt(times['ours'])} | {ratio:.3f} | "
                      f"{mb(peaks['peer'])} | {mb(peaks['ours'])} | {diff:.1e} |", flush=True)
                del peer, ours


if __name__ == "__main__":
    main()
