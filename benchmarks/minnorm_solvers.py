"""Minimum-ℓ_p interpolation solvers side by side: dual Newton vs cvxpy (Clarabel) for p ∈ (1, 2), and HiGHS
(`scipy.optimize.linprog`, the basis-pursuit LP) vs cvxpy (Clarabel) for p = 1, at n = 200 and growing d.

Every solve runs in its own process (forked from a server that has imported torch, scipy, cvxpy and zoo once), so its
peak resident memory is its own: the table gives the peak RSS and its increase over the process's RSS once the
problem is in memory (``+MB``), the median and spread
of the wall time over the repetitions, the ratio cvxpy / ours, and the relative ℓ2 distance between the solutions.
cvxpy runs with Clarabel's four stopping tolerances at 1e-10 (at its defaults the solutions differ by up to a few
1e-6, which is the interior-point accuracy ~sqrt(gap) in w), under a time limit; a timed-out solve is reported
as such. Problems: Gaussian X, w* = e1, y = Xw* + 0.5 ξ (seed 0).

    python benchmarks/minnorm_solvers.py                      # n = 200, d in {2,000, 20,000, 100,000}
    python benchmarks/minnorm_solvers.py --quick              # a miniature setting for tests (a few seconds)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _problem(n: int, d: int, seed: int = 0):
    import numpy as np

    from datamodules.linear_designs import sample_design

    rng = np.random.default_rng([seed, d])
    X = sample_design("gaussian", n, d, rng)
    return X, X[:, 0] + 0.5 * rng.standard_normal(n)


def _cvxpy_problem(X, y, p: float, form: str):
    """The problem as cvxpy is given it, and a function returning w from the solved problem.

    norm:    min cp.norm(w, p) s.t. X @ w == y (as the issue and tests/minnorm pose it); cvxpy approximates p by a
             rational and builds a tree of 3-d second-order cones per coordinate (exact for p = 1.1 and 1.5).
    powcone: the same with cp.pnorm(w, p, approx=False): one 3-d power cone per coordinate.
    dual:    max yᵀλ s.t. ‖v‖_q ≤ 1, v == Xᵀλ (q = p/(p−1); ∞ at p = 1); ŵ is minus the multiplier of v == Xᵀλ
             (stationarity in λ gives y = Xŵ), so Clarabel returns it without our formulas."""
    import cvxpy as cp

    n, d = X.shape
    if form == "dual":
        lam, v = cp.Variable(n), cp.Variable(d)
        link = v == X.T @ lam
        ball = cp.norm(v, "inf") <= 1 if p == 1.0 else cp.pnorm(v, p / (p - 1.0), approx=False) <= 1
        problem = cp.Problem(cp.Maximize(y @ lam), [link, ball])
        return problem, lambda: None if link.dual_value is None else -link.dual_value
    w = cp.Variable(d)
    objective = cp.norm(w, p) if form == "norm" else cp.pnorm(w, p, approx=False)
    return cp.Problem(cp.Minimize(objective), [X @ w == y]), lambda: w.value


def _worker(solver: str, p: float, n: int, d: int, threads: int, time_limit: float, lp_time_limit, out,
            memory_gb: float | None = None, form: str = "norm") -> None:
    import warnings

    import numpy as np
    import torch

    warnings.filterwarnings("ignore", message="Solution may be inaccurate")  # the status column says so
    torch.set_num_threads(threads)
    X, y = _problem(n, d)
    base = _rss_mb()
    t0 = time.perf_counter()
    status = "ok"
    if solver == "ours":
        from zoo.errors import ZooError
        from zoo.minnorm import basis_pursuit, min_norm_interpolator

        try:
            w = (basis_pursuit(X, y, time_limit=lp_time_limit) if p == 1.0 else min_norm_interpolator(X, y, p)).numpy()
        except ZooError as e:  # HiGHS at its time limit
            status, w = f"failed: {e}"[:60], np.full(d, np.nan)
    else:
        import cvxpy as cp

        if memory_gb:  # cvxpy's canonicalisation and Clarabel's KKT grow ~65 MB per 1,000 columns at n = 200
            cap = int(memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        prob, solution = _cvxpy_problem(X, y, p, form)
        tol = 1e-10
        try:
            prob.solve(solver="CLARABEL", tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol, tol_ktratio=tol,
                       time_limit=time_limit)
            iters = getattr(prob.solver_stats, "num_iters", None)
            status = prob.status if iters is None else f"{prob.status} ({iters} it)"
        except cp.error.SolverError as e:
            status = f"failed: {e}"[:60]
        except MemoryError:
            status = f"out of memory (> {memory_gb:g} GB)"
        w = solution()
        w = np.full(d, np.nan) if w is None else w
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    np.save(out, w)
    out_meta = Path(str(out) + ".meta")
    out_meta.write_text(f"{seconds}\n{peak}\n{base}\n{status}\n")


def run_one(solver: str, p: float, n: int, d: int, threads: int, time_limit: float, tmp: Path,
            lp_time_limit: float | None = None, memory_gb: float | None = None, form: str = "norm",
            grace: float = 120.0):
    import numpy as np

    out = tmp / f"{solver}_{p}_{d}.npy"
    ctx = mp.get_context("forkserver")
    proc = ctx.Process(target=_worker, args=(solver, p, n, d, threads, time_limit, lp_time_limit, out, memory_gb,
                                                             form))
    t0 = time.perf_counter()
    proc.start()
    limit = time_limit if solver == "cvxpy" else (lp_time_limit if lp_time_limit and p == 1.0 else None)
    proc.join(None if limit is None else limit + grace)  # set-up and canonicalisation are outside the solver's limit
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"seconds": time.perf_counter() - t0, "peak": float("nan"), "base": float("nan"),
                "status": f"killed at {limit + grace:g} s (limit + set-up grace)",
                "w": None}
    meta = Path(str(out) + ".meta")
    if proc.exitcode != 0 or not meta.exists():
        return {"seconds": float("nan"), "peak": float("nan"), "base": float("nan"),
                "status": f"crashed (exit {proc.exitcode})", "w": None}
    seconds, peak, base, status = meta.read_text().splitlines()
    return {"seconds": float(seconds), "peak": float(peak), "base": float(base), "status": status,
            "w": np.load(out)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--ds", type=int, nargs="+", default=[2000, 20000, 100000])
    ap.add_argument("--ps", type=float, nargs="+", default=[1.0, 1.1, 1.5], help="p = 1: HiGHS; else dual Newton")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per cell (1 above d = 20,000)")
    ap.add_argument("--cvxpy-time-limit", type=float, default=300.0, help="seconds per cvxpy solve")
    ap.add_argument("--lp-time-limit", type=float, default=None, help="seconds per HiGHS solve (default: none)")
    ap.add_argument("--grace", type=float, default=120.0,
                    help="seconds allowed beyond a time limit (problem set-up, cvxpy's canonicalisation) before the "
                         "process is killed")
    ap.add_argument("--cvxpy-memory-gb", type=float, default=10.0,
                    help="address-space cap of each cvxpy process (a solve beyond it is reported, not swapped)")
    ap.add_argument("--cvxpy-form", choices=["norm", "powcone", "dual"], default="norm",
                    help="how the problem is posed to cvxpy (see _cvxpy_problem); default: the issue's cp.norm form")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of our solver")
    ap.add_argument("--quick", action="store_true", help="n = 20, d in {200, 1,000}, one repetition")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.ds, args.reps, args.cvxpy_time_limit = 20, [200, 1000], 1, 60.0
    import tempfile

    mp.set_forkserver_preload(["torch", "scipy.optimize", "cvxpy", "zoo.minnorm", "datamodules.linear_designs"])

    import cvxpy
    import numpy as np
    import scipy
    import torch

    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__} "
          f"({args.threads} thread(s)), scipy {scipy.__version__} (HiGHS), cvxpy {cvxpy.__version__} "
          f"(Clarabel, time limit {args.cvxpy_time_limit:g} s, form {args.cvxpy_form!r})")
    header = ("| p | d | ours | ours s (median, min–max) | ours peak MB (+MB) | cvxpy s | cvxpy peak MB (+MB) | "
              "cvxpy status | cvxpy / ours | rel. distance |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for d in args.ds:
            reps = args.reps if d <= 20000 else 1
            for p in args.ps:
                ours = [run_one("ours", p, args.n, d, args.threads, args.cvxpy_time_limit, tmp, args.lp_time_limit,
                                grace=args.grace)
                        for _ in range(reps)]
                if any(r["w"] is None or r["status"] != "ok" for r in ours):
                    print(f"| {p:g} | {d:,} | ours: {ours[0]['status']} after {ours[0]['seconds']:.0f} s | "
                          "| | | | | | |", flush=True)
                    continue
                peer = run_one("cvxpy", p, args.n, d, args.threads, args.cvxpy_time_limit, tmp,
                               memory_gb=args.cvxpy_memory_gb, form=args.cvxpy_form, grace=args.grace)
                ts = [r["seconds"] for r in ours]
                med = statistics.median(ts)
                name = "HiGHS LP" if p == 1.0 else "dual Newton"
                w, wp = ours[0]["w"], peer["w"]
                ok = peer["status"].split(" (")[0] in ("optimal", "optimal_inaccurate")
                dist = (float(np.linalg.norm(w - wp) / np.linalg.norm(wp))
                        if ok and wp is not None and np.isfinite(wp).all() else float("nan"))
                ratio = f"{peer['seconds'] / med:.1f}x"
                if not ok:  # a lower bound: cvxpy's wall time so far over ours
                    ratio = (f">{peer['seconds'] / med:.0f}x (not solved within {args.cvxpy_time_limit:g} s)"
                             if np.isfinite(peer["seconds"]) else "n/a (no cvxpy solution)")
                print(f"| {p:g} | {d:,} | {name} | {med:.2f} ({min(ts):.2f}–{max(ts):.2f}) | "
                      f"{max(r['peak'] for r in ours):.0f} (+{max(r['peak'] - r['base'] for r in ours):.0f}) | {peer['seconds']:.2f} | "
                      f"{peer['peak']:.0f} (+{peer['peak'] - peer['base']:.0f}) | {peer['status']} | {ratio} | "
                      f"{'n/a' if np.isnan(dist) else f'{dist:.1e}'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
