"""CPU reproduction: CE vs SupCon vs SCoRe-FL / GC / LogDet on long-tailed digits (IR 10 and 100).

    python -m zoo.score.repro                 # full grid (~10 min on 2 CPU cores)
    python -m zoo.score.repro --seeds 1 --epochs 10 --irs 10   # a quick look

scikit-learn's 8x8 digits stand in for CIFAR (no download): the training split is made long-tailed with
n_i = floor(n_max (1/IR)^(i/(C-1))) (the official split), the test split stays balanced (30 per class).
Two-stage as in the paper: a small CNN trained with the objective on two augmented views, then a linear
probe on frozen features; CE is trained end to end. Same optimiser and schedule for every objective
(no per-objective tuning). Prints a markdown table of top-1 and many/medium/few-shot accuracy
(many = the 3 largest classes, few = the 3 smallest, medium = the other 4), mean +- std over seeds.
"""

from __future__ import annotations

import argparse
import functools
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from datamodules.cifar_lt import embedded_digits, long_tail_counts, long_tail_indices
from zoo.score.losses import score_loss
from zoo.score.model import SCoReNet

METHODS = {"CE": "ce", "SupCon": "supcon", "SCoRe-FL (C_f)": "fl_cf", "SCoRe-GC (C_f)": "gc_cf",
           "SCoRe-LogDet (C_f)": "logdet_cf"}


def augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Batched random affine (rotation +-15 deg, scale 0.9-1.1, shift +-1 px) plus pixel noise."""
    b = x.shape[0]
    ang = (torch.rand(b, generator=g) - 0.5) * (math.pi / 6)
    sc = 0.9 + 0.2 * torch.rand(b, generator=g)
    sh = (torch.rand(b, 2, generator=g) - 0.5) * 0.5
    theta = torch.stack([torch.stack([torch.cos(ang) / sc, -torch.sin(ang) / sc, sh[:, 0]], 1),
                         torch.stack([torch.sin(ang) / sc, torch.cos(ang) / sc, sh[:, 1]], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, align_corners=False) + 0.1 * torch.randn(x.shape, generator=g)


@functools.lru_cache(maxsize=1)
def _digits():
    return embedded_digits(image_size=8, channels=1)


def load(ir: float, seed: int):
    (tx, ty), (ex, ey) = _digits()
    n_max = int(np.bincount(ty).min())
    counts = long_tail_counts(n_max, 10, ir)
    keep = long_tail_indices(ty, counts, seed)
    norm = lambda x: x.float() / 255.0 * 2 - 1  # noqa: E731
    return norm(tx[torch.from_numpy(keep)]), torch.from_numpy(ty[keep]), norm(ex), torch.from_numpy(ey), counts


def train(objective: str, x, y, seed: int, epochs: int, batch: int = 128, lr: float = 0.1):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = SCoReNet("tiny_cnn", 10, in_chans=1, proj_dim=32)
    ce = objective == "ce"
    params = list(net.encoder.parameters()) + list((net.classifier if ce else net.head).parameters())
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
    steps = epochs * max(1, len(y) // batch)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, max(1, len(y) - batch + 1), batch):  # drop the last partial batch
            idx = perm[i:i + batch]
            xb, yb = x[idx], y[idx]
            if ce:
                loss = F.cross_entropy(net(augment(xb, g)), yb)
            else:
                views = torch.cat([augment(xb, g), augment(xb, g)])  # view-major two-crop batch
                loss = score_loss(net.project(net.encoder(views)), yb.repeat(2), objective)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    net.eval()
    if not ce:  # stage 2: linear probe on frozen features of un-augmented images
        with torch.no_grad():
            h = net.encoder(x)
        probe = torch.optim.LBFGS(net.classifier.parameters(), lr=1, max_iter=200, history_size=20,
                                  line_search_fn="strong_wolfe")

        def closure():
            probe.zero_grad()
            loss = F.cross_entropy(net.classifier(h), y) + 1e-4 * net.classifier.weight.square().sum()
            loss.backward()
            return loss

        probe.step(closure)
    return net


@torch.no_grad()
def evaluate(net, ex, ey) -> dict[str, float]:
    pred = net(ex).argmax(-1)
    per_class = torch.stack([(pred[ey == c] == c).float().mean() for c in range(10)])
    # class index = rank of its training size (the long-tail profile is sorted)
    return {"all": (pred == ey).float().mean().item() * 100, "many": per_class[:3].mean().item() * 100,
            "medium": per_class[3:7].mean().item() * 100, "few": per_class[7:].mean().item() * 100}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--irs", type=float, nargs="+", default=[10.0, 100.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # 2 threads on a shared 2-core machine thrash
    t0 = time.time()
    rows = []
    for ir in args.irs:
        for name in args.methods:
            res = []
            for seed in range(args.seeds):
                x, y, ex, ey, counts = load(ir, seed)
                res.append(evaluate(train(METHODS[name], x, y, seed, args.epochs), ex, ey))
            agg = {k: (np.mean([r[k] for r in res]), np.std([r[k] for r in res])) for k in res[0]}
            rows.append((ir, name, agg))
            print(f"IR {ir:g} {name}: " + ", ".join(f"{k} {m:.1f}+-{s:.1f}" for k, (m, s) in agg.items()),
                  f"[{time.time() - t0:.0f}s, train counts {counts}]", flush=True)
    print("\n| IR | method | top-1 | many | medium | few |\n|---|---|---|---|---|---|")
    for ir, name, agg in rows:
        print(f"| {ir:g} | {name} | " + " | ".join(f"{agg[k][0]:.1f} ± {agg[k][1]:.1f}"
                                                  for k in ("all", "many", "medium", "few")) + " |")
    print(f"\n{args.seeds} seeds, {args.epochs} epochs, total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
