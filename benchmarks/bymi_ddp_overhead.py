"""Overhead of `ByzantineIdentification` on a DDP training step: 2 gloo CPU processes (forked), each a machine with
its shard of scikit-learn digits, `FeatureClassifier` MLPs (hidden width 512 = the `bymi_ddp_digits` classifier's
shape at that width, 15,882 parameters, and optionally others), the same run with and without the callback (every 10
steps; the geometric-median and the spectral-filter centre, logging or excluding flagged ranks; g2 from the step's own
gradient (one extra half-batch pass per check, the default where exact) or by two passes).

Step time = rank 0's process CPU time (and wall time) from ``on_train_batch_start`` (a timing callback placed before
the identification) to ``on_train_batch_end``, so a check's extra passes, gather and ByMI are inside the step that
pays for them. Every variant runs ``--repeats`` times, interleaved (round r runs all variants in a rotated order), so
machine load hits them alike. Two estimates of the overhead at one check in ``--every`` steps, per run:

* **ratio** = the run's mean step CPU time over its timed steps (whole check cycles, after a warm-up) / the plain-DDP
  run's of the same round (between runs: carries the runs' drift);
* **from the per-check cost** = 1 + (mean CPU of the run's check steps − mean CPU of its other steps) / (every ×
  the plain run's mean step): the check's extra cost measured inside one run, so slow drift of the machine cancels.

Reported: the median over the runs, a 95 % bootstrap interval of that median (resampling the runs, 2,000 draws) and
[min, max]. Also the per-check CPU ms and, for the identification variants, rank 0's CPU ms per check in the
callback's pieces (spans around split_batch, the half-batch pass, the gather, bymi, the CSV write, Σ₀), medians
over all checks. With 2 ranks there is one worker, so knockoff+ needs offset 0 here.

Usage: python benchmarks/bymi_ddp_overhead.py [--hidden 512] [--steps 300] [--repeats 7] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

import callbacks.byzantine_identification as cb_module
from callbacks.byzantine_identification import ByzantineIdentification
from datamodules.byzantine import MachineShardDataModule
from zoo.bymi import FeatureClassifier

SPANS: dict[str, list[float]] = defaultdict(list)  # process-CPU seconds per call, this process (rank)


def _timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            SPANS[name].append(time.process_time() - t)
    return wrapper


def install_spans() -> None:
    """Wrap the callback's pieces (module functions and methods) with CPU-time spans, once, before the forks."""
    cb_module.split_batch = _timed("split", cb_module.split_batch)
    cb_module.bymi = _timed("bymi", cb_module.bymi)
    cls = ByzantineIdentification
    for attr, name in [("_half_gradient", "half pass"), ("_all_gather", "gather"), ("_write", "CSV (rank 0)"),
                       ("per_sample_gradients", "sigma0 (rank 0)"), ("_identify", "identify (gather..CSV)")]:
        setattr(cls, attr, _timed(name, getattr(cls, attr)))


class StepTimer(Callback):
    def __init__(self, out: str, warmup: int):
        self.out, self.warmup, self.rows = out, warmup, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.t = (time.perf_counter(), time.process_time())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step - 1
        if step >= self.warmup and trainer.global_rank == 0:
            self.rows.append((step, time.perf_counter() - self.t[0], time.process_time() - self.t[1]))
        if step + 1 == self.warmup:
            SPANS.clear()  # spans of the timed steps only

    def on_train_end(self, trainer, pl_module):
        if trainer.global_rank == 0:
            Path(self.out).write_text(json.dumps({"rows": self.rows, "spans": dict(SPANS)}))


def run(hidden: int, steps: int, warmup: int, batch: int, ident: dict | None, root: str) -> dict:
    L.seed_everything(0, verbose=False)
    out = os.path.join(root, f"times_{hidden}_{len(os.listdir(root))}.json")
    callbacks: list = [StepTimer(out, warmup)]
    if ident is not None:
        callbacks.append(ByzantineIdentification(**ident, log_dir=root))
    model = FeatureClassifier(hidden=hidden, lr=0.05)
    dm = MachineShardDataModule(machines=2, n_per_machine=2 * batch, batch_size=batch)
    L.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", max_steps=warmup + steps, logger=False,
              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
              limit_val_batches=0, num_sanity_val_steps=0, callbacks=callbacks,
              default_root_dir=root).fit(model, datamodule=dm)
    return json.loads(Path(out).read_text())


def summary(xs: list[float], rng: np.random.Generator, draws: int = 2000) -> tuple[float, float, float, float, float]:
    """median, 95 % bootstrap interval of the median (resampling the runs), min, max"""
    a = np.asarray(xs, dtype=float)
    boot = np.median(a[rng.integers(0, len(a), (draws, len(a)))], axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return float(np.median(a)), float(lo), float(hi), float(a.min()), float(a.max())


def fmt(s: tuple, scale: float = 1.0, unit: str = "") -> str:
    med, lo, hi, mn, mx = (scale * v for v in s)
    return f"{med:.3f}{unit} ({lo:.3f}-{hi:.3f}) [{mn:.3f}, {mx:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, nargs="+", default=[512])
    ap.add_argument("--steps", type=int, default=300, help="timed steps per run (a multiple of --every)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7, help="runs of every variant, interleaved")
    ap.add_argument("--variants", nargs="+", default=None, help="a subset of the variants, by name")
    ap.add_argument("--quick", action="store_true", help="hidden 16, 10 steps, 1 repeat, plain DDP and geom only")
    args = ap.parse_args()
    if args.quick:
        args.hidden, args.steps, args.warmup, args.repeats = [16], 10, 2, 1
    if args.steps % args.every:
        raise SystemExit(f"--steps ({args.steps}) must be a multiple of --every ({args.every}): whole check cycles")
    torch.set_num_threads(1)
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    install_spans()
    common = dict(every_n_steps=args.every, alpha=0.2, offset=0, projection_dim=None, max_dim=10 ** 9)
    variants = {
        "plain DDP": None,
        "geom, log": dict(common, estimator="geom"),
        "geom, log, two passes": dict(common, estimator="geom", reuse_step_gradient=False),
        "geom, exclude": dict(common, estimator="geom", action="exclude"),
        "filter, log": dict(common, estimator="filter", sigma0_samples=64, projection_dim=256),
    }
    if args.quick:  # two variants keep the miniature short (each run forks and sets up a 2-process group)
        variants = {k: variants[k] for k in ("plain DDP", "geom, log")}
    elif args.variants:
        variants = {k: variants[k] for k in ["plain DDP"] + [v for v in args.variants if v != "plain DDP"]}
    rng = np.random.default_rng(0)
    head = [f"# 2 gloo CPU processes (ddp_fork), digits shards, batch {args.batch} per rank, {args.steps} timed steps "
            f"({args.steps // args.every} checks) after {args.warmup}, a check every {args.every} steps, "
            f"{args.repeats} interleaved runs per variant; torch {torch.__version__}, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, rank 0's process CPU time",
            "# cells: median over the runs (95 % bootstrap interval of the median) [min, max]",
            "\n| hidden | params | variant | step CPU ms | ratio (CPU) | per-check CPU ms | overhead from per-check "
            "cost | step wall ms | ratio (wall) |",
            "|---|---|---|---|---|---|---|---|---|"]
    table, spans_table = list(head), ["\n| hidden | variant | " + " | ".join(
        ["split", "half pass", "gather", "bymi", "CSV (rank 0)", "sigma0 (rank 0)", "identify (gather..CSV)"])
        + " | check steps CPU ms | other steps CPU ms |", "|---" * 11 + "|"]
    with tempfile.TemporaryDirectory() as root:
        for hidden in args.hidden:
            n_params = sum(p.numel() for p in FeatureClassifier(hidden=hidden).parameters())
            res = {name: defaultdict(list) for name in variants}
            for rep in range(args.repeats):
                order = list(variants)[rep % len(variants):] + list(variants)[: rep % len(variants)]  # rotate
                per = {}
                for name in order:
                    out = run(hidden, args.steps, args.warmup, args.batch, variants[name], root)
                    rows = out["rows"]
                    check = [r[2] for r in rows if r[0] % args.every == 0]
                    other = [r[2] for r in rows if r[0] % args.every]
                    per[name] = dict(wall=float(np.mean([r[1] for r in rows])), cpu=float(np.mean([r[2] for r in rows])),
                                     extra=float(np.mean(check) - np.mean(other)))
                    print(json.dumps({"hidden": hidden, "round": rep, "variant": name, **per[name]}), file=sys.stderr,
                          flush=True)  # a run's figures as they come (a run cut short still leaves them)
                    res[name]["check_cpu"] += check
                    res[name]["other_cpu"] += other
                    for k, v in out["spans"].items():
                        res[name]["span " + k] += v
                base = per["plain DDP"]
                for name, m in per.items():
                    r = res[name]
                    r["cpu"].append(m["cpu"])
                    r["wall"].append(m["wall"])
                    r["rc"].append(m["cpu"] / base["cpu"])
                    r["rw"].append(m["wall"] / base["wall"])
                    r["extra"].append(m["extra"])
                    r["model"].append(1 + m["extra"] / (args.every * base["cpu"]))
            for name, r in res.items():
                ident = variants[name] is not None
                table.append(
                    f"| {hidden} | {n_params:,} | {name} | {fmt(summary(r['cpu'], rng), 1e3)} | "
                    f"{fmt(summary(r['rc'], rng), unit='x')} | "
                    f"{fmt(summary(r['extra'], rng), 1e3) if ident else '-'} | "
                    f"{fmt(summary(r['model'], rng), unit='x') if ident else '-'} | "
                    f"{fmt(summary(r['wall'], rng), 1e3)} | {fmt(summary(r['rw'], rng), unit='x')} |")
                if ident:
                    n_checks = max(1, len(r["check_cpu"]))
                    cells = []
                    for k in ["split", "half pass", "gather", "bymi", "CSV (rank 0)", "sigma0 (rank 0)",
                              "identify (gather..CSV)"]:
                        v = r.get("span " + k, [])  # calls per check may exceed 1 (two passes: 2 half passes)
                        cells.append(f"{1e3 * sum(v) / n_checks:.2f}" if v else "-")
                    spans_table.append(f"| {hidden} | {name} | " + " | ".join(cells) +
                                       f" | {1e3 * np.median(r['check_cpu']):.2f} | {1e3 * np.median(r['other_cpu']):.2f} |")
    print("\n".join(table))
    print("\n# rank 0's CPU ms per check in the callback's pieces (total span time / checks, over all runs); "
          "check / other steps: medians over all runs' steps")
    print("\n".join(spans_table))


if __name__ == "__main__":
    main()
