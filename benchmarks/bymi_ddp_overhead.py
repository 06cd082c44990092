"""Overhead of `ByzantineIdentification` on a DDP training step: 2 gloo CPU processes (forked), each a machine with
its shard of scikit-learn digits, `FeatureClassifier` MLPs of growing width, the same run with and without the
callback (every 10 steps; the geometric-median and the spectral-filter centre, logging or excluding flagged ranks;
g2 from the step's own gradient (one extra half-batch pass per check, the default where exact) or by two passes).

Step time = rank 0's time from ``on_train_batch_start`` (a timing callback placed before the identification) to
``on_train_batch_end``, so a check's extra forward/backward passes, gathers and ByMI are inside the step that pays
for them. Every variant runs ``--repeats`` times, interleaved (round r runs all variants in a rotated order), so machine load
hits them alike. Per run: the mean step time over the timed steps (whole check cycles, after a warm-up) and its
ratio to the plain-DDP run of the same round; reported: the median and [min, max] over the runs, and the median
time of the check steps alone. Wall and CPU time of rank 0 (the machine is shared: CPU time is steadier).
With 2 ranks there is one worker, so knockoff+ needs offset 0 here.

Usage: python benchmarks/bymi_ddp_overhead.py [--hidden 32 512] [--steps 50] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from callbacks.byzantine_identification import ByzantineIdentification
from datamodules.byzantine import MachineShardDataModule
from zoo.bymi import FeatureClassifier


class StepTimer(Callback):
    def __init__(self, out: str, warmup: int):
        self.out, self.warmup, self.rows = out, warmup, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.t = (time.perf_counter(), time.process_time())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step - 1
        if step >= self.warmup and trainer.global_rank == 0:
            self.rows.append((step, time.perf_counter() - self.t[0], time.process_time() - self.t[1]))

    def on_train_end(self, trainer, pl_module):
        if trainer.global_rank == 0:
            Path(self.out).write_text(json.dumps(self.rows))


def run(hidden: int, steps: int, warmup: int, batch: int, ident: dict | None, root: str) -> list[tuple]:
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


def stats(xs: list[float]) -> tuple[float, float, float]:
    """median, min, max"""
    return float(np.median(xs)), min(xs), max(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, nargs="+", default=[32, 512])
    ap.add_argument("--steps", type=int, default=50, help="timed steps per run (a multiple of --every)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5, help="runs of every variant, interleaved")
    ap.add_argument("--quick", action="store_true", help="hidden 16, 10 steps, 1 repeat, plain DDP and geom only")
    args = ap.parse_args()
    if args.quick:
        args.hidden, args.steps, args.warmup, args.repeats = [16], 10, 2, 1
    if args.steps % args.every:
        raise SystemExit(f"--steps ({args.steps}) must be a multiple of --every ({args.every}): whole check cycles")
    torch.set_num_threads(1)
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
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
    table = [f"# 2 gloo CPU processes (ddp_fork), digits shards, batch {args.batch} per rank, {args.steps} timed steps "
             f"after {args.warmup}, a check every {args.every} steps, {args.repeats} interleaved runs per variant; "
             f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
             "# step = rank 0's mean step time over a run's timed steps (check steps included); ratio = a run's step "
             "time over the plain-DDP run of the same round; median [min, max] over the runs",
             "\n| hidden | params | variant | step wall ms | ratio (wall) | step CPU ms | ratio (CPU) | check step wall ms |",
             "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as root:
        for hidden in args.hidden:
            n_params = sum(p.numel() for p in FeatureClassifier(hidden=hidden).parameters())
            res = {name: {"wall": [], "cpu": [], "rw": [], "rc": [], "check": []} for name in variants}
            for rep in range(args.repeats):
                order = list(variants)[rep % len(variants):] + list(variants)[: rep % len(variants)]  # rotate
                means = {}
                for name in order:
                    rows = run(hidden, args.steps, args.warmup, args.batch, variants[name], root)
                    means[name] = (float(np.mean([r[1] for r in rows])), float(np.mean([r[2] for r in rows])))
                    res[name]["check"] += [r[1] for r in rows if r[0] % args.every == 0]
                for name, (wall, cpu) in means.items():
                    res[name]["wall"].append(wall)
                    res[name]["cpu"].append(cpu)
                    res[name]["rw"].append(wall / means["plain DDP"][0])
                    res[name]["rc"].append(cpu / means["plain DDP"][1])
            for name, r in res.items():
                w, c, rw, rc = (stats(r[k]) for k in ("wall", "cpu", "rw", "rc"))
                check = (f"{1e3 * float(np.median(r['check'])):.1f}" if variants[name] and r["check"] else "-")
                table.append(f"| {hidden} | {n_params:,} | {name} | {1e3 * w[0]:.2f} [{1e3 * w[1]:.2f}, {1e3 * w[2]:.2f}] | "
                             f"{rw[0]:.2f}x [{rw[1]:.2f}, {rw[2]:.2f}] | {1e3 * c[0]:.2f} [{1e3 * c[1]:.2f}, "
                             f"{1e3 * c[2]:.2f}] | {rc[0]:.2f}x [{rc[1]:.2f}, {rc[2]:.2f}] | {check} |")
    print("\n".join(table))


if __name__ == "__main__":
    main()
