"""CPU reproduction of Table 1 in miniature: FNO trained on DiffOAS data vs on GMRES data of the same size.

Darcy flow on a small grid; both training sets have ``n_train`` samples; the test set is ``n_test`` GMRES samples
(Sec. 5.1), identical for both models. Reports generation time (CPU and wall seconds) and the test relative L2 error.

    python -m zoo.diffoas.repro --out runs/diffoas_repro          # defaults: s=18, 400 samples, 15 epochs

The FNO keeps the paper's 4 layers, width 32, lr 1e-3, batch 20 (B.1); modes are capped by the small grid.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from datamodules.pde import TEST_SEED_OFFSET, normalization_stats, to_tensors
from zoo.diffoas.generate import generate_diffoas, generate_solver
from zoo.diffoas.models import relative_l2
from zoo.diffoas.module import NeuralOperatorModule


def timed(fn):
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def train_and_test(train_ds, test_ds, args, seed: int) -> float:
    L.seed_everything(seed, verbose=False)
    model = NeuralOperatorModule(model="fno", in_channels=2, grid_size=args.grid, modes=args.modes, width=32,
                                 n_layers=4, lr=1e-3, step_size=max(1, args.epochs // 2))
    model.set_normalization(normalization_stats(train_ds))
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(train_ds, batch_size=20, shuffle=True))
    model.eval()
    x, y = test_ds.tensors
    with torch.no_grad():
        return relative_l2(model(x), y).mean().item()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", type=int, default=18, help="nodes per side s (interior (s-2)^2)")
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--n-basis", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--modes", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--diffoas-factor", type=int, default=1,
                    help="also train on factor x n_train DiffOAS samples (Table 1 uses 10x); 1 = off")
    ap.add_argument("--out", default="runs/diffoas_repro")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # shared 2-core machines: one intra-op thread is fastest for these sizes

    diffoas, d_cpu, d_wall = timed(lambda: generate_diffoas("darcy", args.n_train, args.grid, args.n_basis, seed=args.seed))
    gmres, g_cpu, g_wall = timed(lambda: generate_solver("darcy", args.n_train, args.grid, seed=args.seed + 1))
    test = generate_solver("darcy", args.n_test, args.grid, seed=args.seed + TEST_SEED_OFFSET)
    test_ds = to_tensors(test)
    runs = [("GMRES", gmres, g_cpu, g_wall), ("DiffOAS", diffoas, d_cpu, d_wall)]
    if args.diffoas_factor > 1:
        n_big = args.diffoas_factor * args.n_train
        big, b_cpu, b_wall = timed(lambda: generate_diffoas("darcy", n_big, args.grid, args.n_basis, seed=args.seed))
        runs.append(("DiffOAS", big, b_cpu, b_wall))
    rows = []
    for name, data, cpu, wall in runs:
        (err, t_cpu, t_wall) = timed(lambda: train_and_test(to_tensors(data), test_ds, args, seed=args.seed))
        rows.append({"method": name, "n_train": len(data), "gen_cpu_s": cpu, "gen_wall_s": wall,
                     "fno_test_rel_l2": err, "train_cpu_s": t_cpu, "train_wall_s": t_wall,
                     "max_residual": float(data.residuals().max())})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"args": vars(args), "rows": rows, "test_max_residual": float(test.residuals().max())}
    (out / "results.json").write_text(json.dumps(result, indent=2))
    print(f"Darcy, s={args.grid} ({(args.grid - 2) ** 2} unknowns), {args.n_train} training samples per method, "
          f"{args.n_test} GMRES test samples, FNO 4 layers / {args.modes} modes / width 32, {args.epochs} epochs\n")
    print("| method | training samples | generation CPU s (wall) | FNO test rel. L2 | max PDE residual of training data |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['n_train']} | {r['gen_cpu_s']:.2f} ({r['gen_wall_s']:.2f}) | "
              f"{r['fno_test_rel_l2']:.3e} | {r['max_residual']:.1e} |")
    print(f"\nwritten to {out / 'results.json'}")


if __name__ == "__main__":
    main()
