"""GENTLE's OT term after training: the neural semi-dual (R_i + ε, the potential network's lower bound) vs the exact
KL-regularised OT value of POT (`ot.solve(reg_type="KL")`) between the same generated samples at a training covariate
and at its MST neighbour, and the Sinkhorn-divergence parts (self terms, exactly solved). A ratio near 1 means the
potential network solves the inner maximisation; far below 1, the generator minimises a loose bound.

    python benchmarks/gentle_semidual_gap.py RUN_DIR [RUN_DIR ...]   # toy1 run dirs of the gentle sweeps (last.ckpt)
    python benchmarks/gentle_semidual_gap.py --quick                 # untrained models on tiny toy1 data (seconds)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import ot
import torch
import yaml

from datamodules.conditional import ConditionalDataModule
from zoo.gentle import GENTLEModule
from zoo.gentle.entropic import self_transport, semi_dual


def load_run(run: Path) -> tuple[GENTLEModule, ConditionalDataModule]:
    config = yaml.safe_load((run / "config.yaml").read_text())
    # the public loader: hyper-parameters, weights, standardisation buffers and GDA anchors, all keys checked
    model = GENTLEModule.load_from_checkpoint(run / "checkpoints" / "last.ckpt", map_location="cpu")
    data = dict(config["data"]["init_args"])
    data["seed"] = data.get("seed") if data.get("seed") is not None else config["seed_everything"]
    return model, ConditionalDataModule(**data)


def gap(model: GENTLEModule, dm: ConditionalDataModule, n_cov: int, n_u: int) -> dict[str, float]:
    dm.setup("fit")
    model.set_standardisation(dm.standardisation())
    model.build_tables(*dm.train_groups())
    eps = model.hparams.epsilon
    torch.manual_seed(0)
    idx = torch.linspace(0, len(model.train_x) - 1, n_cov).long()
    with torch.no_grad():
        x_i, x_j = model.train_x[idx], model.train_x[model.neighbour[idx]]
        a, b = model.T(torch.rand(len(idx), n_u), x_i), model.T(torch.rand(len(idx), n_u), x_j)
        neural = (semi_dual(a, b, model.v(b, x_j), eps) + eps).double().numpy()
    a, b = a.double(), b.double()
    w = np.full(n_u, 1 / n_u)
    exact = np.array([float(ot.solve(((a[k][:, None] - b[k][None, :]) ** 2).numpy(), w, w, reg=eps, reg_type="KL",
                                     max_iter=20000, tol=1e-10).value) for k in range(len(idx))])
    selfs = (0.5 * (self_transport(a, eps, tol=1e-10, max_iter=2000)
                    + self_transport(b, eps, tol=1e-10, max_iter=2000))).numpy()
    return {"eps": eps, "debias": bool(model.hparams.get("debias", False)), "lambda": model.hparams.lambda_ot,
            "neural": neural.mean(), "exact": exact.mean(), "self": selfs.mean()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--covariates", type=int, default=50, help="training covariates probed per run")
    ap.add_argument("--n-u", type=int, default=50, help="u-samples per side (the sweeps' B)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        tiny = dict(dataset="toy1", n_train_covariates=12, n_train_samples=3, n_val_covariates=2, n_test_covariates=2,
                    n_eval_draws=20, batch_size=12, seed=0)
        cases = [(f"untrained, eps {e}", GENTLEModule(epsilon=e, n_u=8), ConditionalDataModule(**tiny))
                 for e in (1.0, 0.01)]
        args.covariates, args.n_u = 4, 8
    else:
        cases = [(str(r), *load_run(r)) for r in args.runs]
    print("| run | λ | ε | debias | neural R+ε | exact W_ε (POT) | neural / exact | ½(W_ε(α,α)+W_ε(β,β)) | "
          "exact divergence | neural divergence |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, model, dm in cases:
        g = gap(model, dm, args.covariates, args.n_u)
        print(f"| {name} | {g['lambda']} | {g['eps']} | {g['debias']} | {g['neural']:.4f} | {g['exact']:.4f} | "
              f"{g['neural'] / g['exact']:.3f} | {g['self']:.4f} | {g['exact'] - g['self']:.4f} | "
              f"{g['neural'] - g['self']:.4f} |")


if __name__ == "__main__":
    main()
