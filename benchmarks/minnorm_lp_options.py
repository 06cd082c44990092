"""The basis-pursuit LP min 1ᵀ(u+v) s.t. X(u−v) = y, u, v ≥ 0 under HiGHS's linprog options: which method and
presolve setting solve it fastest (the LP is the one issue #20 names; only the solver settings change).

Same problem as benchmarks/minnorm_solvers.py (Gaussian X, n = 200, w* = e1, y = Xw* + 0.5 ξ, seed 0), one solve
per setting in this process, in the order given; the first setting that solves is the reference for the relative
ℓ2 distance of the others. `zoo.minnorm.basis_pursuit` uses the first one (method "highs", presolve off).

    python benchmarks/minnorm_lp_options.py --d 20000
    python benchmarks/minnorm_lp_options.py --quick          # n = 20, d = 200 (a second)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (label, method, options): dual simplex is what method "highs" picks for an LP; highs-ipm is HiGHS's interior
# point (IPX, with crossover to a vertex); simplex_strategy 4 is HiGHS's primal simplex (passed through verbatim).
SETTINGS = [
    ("highs, presolve off (ours)", "highs", {"presolve": False}),
    ("highs, presolve on", "highs", {"presolve": True}),
    ("highs-ds, presolve off", "highs-ds", {"presolve": False}),
    ("highs-ipm, presolve off", "highs-ipm", {"presolve": False}),
    ("highs-ds primal simplex, presolve off", "highs-ds", {"presolve": False, "simplex_strategy": 4}),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--d", type=int, default=20000)
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per solve")
    ap.add_argument("--settings", type=int, nargs="+", default=list(range(len(SETTINGS))),
                    help="indices into SETTINGS, in the order to run")
    ap.add_argument("--quick", action="store_true", help="n = 20, d = 200")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.d = 20, 200
    import warnings

    import numpy as np
    import scipy
    from scipy.optimize import OptimizeWarning, linprog

    from datamodules.linear_designs import sample_design

    warnings.filterwarnings("ignore", category=OptimizeWarning)  # simplex_strategy is passed to HiGHS verbatim
    rng = np.random.default_rng([0, args.d])
    X = sample_design("gaussian", args.n, args.d, rng)
    y = X[:, 0] + 0.5 * rng.standard_normal(args.n)
    A, c = np.hstack([X, -X]), np.ones(2 * args.d)
    print(f"scipy {scipy.__version__} (HiGHS), n = {args.n}, d = {args.d:,}, time limit {args.time_limit:g} s")
    print("| setting | s | status | iterations | objective | rel. distance to the first |")
    print("|---|---|---|---|---|---|")
    ref = None
    for i in args.settings:
        label, method, options = SETTINGS[i]
        t0 = time.perf_counter()
        out = linprog(c, A_eq=A, b_eq=y, bounds=(0, None), method=method,
                      options={**options, "time_limit": args.time_limit})
        seconds = time.perf_counter() - t0
        w = None if out.x is None else out.x[: args.d] - out.x[args.d:]
        if ref is None and out.status == 0:
            ref = w
        dist = "n/a" if w is None or ref is None else f"{np.linalg.norm(w - ref) / np.linalg.norm(ref):.1e}"
        fun = "n/a" if out.fun is None else f"{out.fun:.10g}"
        print(f"| {label} | {seconds:.2f} | {out.status} ({out.message[:40]}) | {out.nit} | {fun} | {dist} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
