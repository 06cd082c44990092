"""ByMI identification time: `zoo.bymi.bymi` (torch, float64) vs the official R functions (mywang99/ByMI,
``ByMI_function.R`` + the ``geom`` package) called through rpy2, on the same inputs in the same process.

One identification = everything after the gradients are known: centring and scaling of g1, the robust centre
(spectral filter with Σ₀, geometric median, or the Filter+ projection and 1-D trimmed mean), Ω from the MAD, the
scores W and the knockoff+ threshold. Inputs: m + 1 = 150 machines (15 Byzantine, shifted), gradient dimension
p = 20 (the issue's setting) and p = 210 (the real-data experiment's (20 + 1) × 10 logistic gradients), halves of 200.

R's ``filtering_refine`` prints every round's τ_max; its output goes to a null sink while timed. Both sides run on
one thread (torch.set_num_threads(1); Debian's R links the reference BLAS). The flagged sets are compared too.
Times: process CPU time, median and interquartile range over repetitions, interleaved (R, ours, R, ours, ...).

Usage: python benchmarks/bymi_identification.py [--r-code /path/to/ByMI] [--reps 20] [--quick]
       (the official repository is read from --r-code or $BYMI_R_CODE; without it, or without R and rpy2, only
       ours is timed and the reason is printed)
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
import torch

from zoo.bymi import bymi

R_PIPELINES = {
    "filter": """function(g1, g2, S0, bs, alpha, eps) {
        nb <- nrow(g1); g1m <- apply(g1, 2, mean); g1s <- t(t(g1) - g1m) * sqrt(bs)
        out <- filtering_refine(g1s, rep(1/nb, nb), ep = 1.2*eps, Sig_0 = S0, iter_pow = 5000, tol_pow = 1e-8)
        mu <- out[[1]] / sqrt(bs) + g1m
        Om <- solve(diag(apply((g1 + g2) / 2, 2, mad)))
        ByMI(id = 2, mu_hat = mu, Xbar2 = .split(g1, g2), Omega = Om, alpha = alpha, is_scale = T)}""",
    "geom": """function(g1, g2, S0, bs, alpha, eps) {
        nb <- nrow(g1); g1m <- apply(g1, 2, mean); g1s <- t(t(g1) - g1m) * sqrt(bs)
        mu <- geom_solver_C(X = g1s, tol = 1e-10, is_echo = F)[[1]] / sqrt(bs) + g1m
        Om <- solve(diag(apply((g1 + g2) / 2, 2, mad)))
        ByMI(id = 2, mu_hat = mu, Xbar2 = .split(g1, g2), Omega = Om, alpha = alpha, is_scale = T)}""",
    "filter_plus": """function(g1, g2, S0, bs, alpha, eps) {
        nb <- nrow(g1); g1m <- apply(g1, 2, mean); g1s <- t(t(g1) - g1m) * sqrt(bs)
        v1 <- eigen(t(g1s) %*% g1s / nb)$vectors[, 1]
        mu <- est_dim_one(w0 = rep(1/nb, nb), Z = g1 %*% v1, ep = 1.2*eps, loop_max = 2000)[[1]]
        ByMI(id = 2, mu_hat = mu, Xbar2 = .split(g1, g2) %*% v1, Omega = 1, alpha = alpha, is_scale = T)}""",
}
R_SPLIT = """.split <- function(g1, g2) { s <- matrix(0, 2*nrow(g1), ncol(g1))
    s[seq(1, 2*nrow(g1), 2), ] <- g1; s[seq(2, 2*nrow(g1), 2), ] <- g2; s }"""


def inputs(M: int, p: int, n_half: int, n_byz: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    g1, g2 = (rng.standard_normal((M, p)) / np.sqrt(n_half) for _ in range(2))
    shift = rng.standard_normal(p)
    shift *= 4 / np.linalg.norm(shift) / np.sqrt(n_half) * np.sqrt(p) ** 0.5
    g1[1: n_byz + 1] += shift
    g2[1: n_byz + 1] += shift
    S0 = np.cov(rng.standard_normal((2 * n_half, p)).T, bias=True)
    return g1, g2, S0


def load_r(r_code: str | None):
    """(rpy2 robjects, converter) with the official functions sourced, or (None, reason)."""
    if not r_code:
        return None, "no local copy of github.com/mywang99/ByMI (--r-code or $BYMI_R_CODE)"
    if not (Path(r_code) / "ByMI_function.R").is_file():
        return None, f"{r_code}/ByMI_function.R not found"
    try:
        import rpy2.robjects as ro
        from rpy2.robjects import numpy2ri
    except Exception as e:  # noqa: BLE001 - rpy2 fails in several ways when R is missing or mismatched
        return None, f"rpy2 unavailable ({type(e).__name__}: {e})"
    tar = Path(r_code) / "geom_1.0.tar.gz"
    ro.r(f'if (!suppressWarnings(require(geom, quietly = TRUE))) install.packages("{tar}", repos = NULL, '
         f'type = "source", quiet = TRUE); suppressMessages(library(geom)); source("{Path(r_code) / "ByMI_function.R"}")')
    ro.r(R_SPLIT)
    return (ro, ro.default_converter + numpy2ri.converter), None


def timed(fn, reps: int) -> list[float]:
    """CPU seconds of the process per call (R runs inside this process too): the shared development machine's
    load inflates wall time far more than CPU time."""
    out = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return out


def summary(ts: list[float]) -> tuple[float, float, float]:
    q = np.percentile(ts, [25, 50, 75])
    return q[1] * 1e3, q[0] * 1e3, q[2] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--r-code", default=os.environ.get("BYMI_R_CODE"))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--machines", type=int, default=150)
    ap.add_argument("--dims", type=int, nargs="+", default=[20, 210])
    ap.add_argument("--batch", type=int, default=500, help="also time this many identifications batched (0: skip)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions, p = 20 only, R skipped")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.dims, args.r_code = 3, [20], None
    torch.set_num_threads(1)
    r, why = load_r(args.r_code)
    M, n_half, alpha, eps = args.machines, 200, 0.1, 0.1
    n_byz = int((M - 1) * eps)
    print(f"# ByMI identification, m+1 = {M} machines ({n_byz} Byzantine), halves of {n_half}, alpha = {alpha}")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"torch {torch.__version__}, threads 1"
          + (f", {r[0].r('R.version.string')[0]}" if r else f"; R reference: unavailable ({why})"))
    print("\n| method | p | ours CPU ms (IQR) | official R CPU ms (IQR) | R / ours | same flagged set |")
    print("|---|---|---|---|---|---|")
    for p in args.dims:
        g1, g2, S0 = inputs(M, p, n_half, n_byz)
        t1, t2, tS = (torch.tensor(a) for a in (g1, g2, S0))
        if r:
            ro, cv = r
            from rpy2.robjects.conversion import localconverter

            with localconverter(cv):
                for k, v in dict(g1=g1, g2=g2, S0=S0).items():
                    ro.globalenv[k] = v
        for method in ("filter", "geom", "filter_plus"):
            ours = lambda: bymi(t1, t2, alpha=alpha, estimator=method, eps=eps, n_half=n_half, sigma0=tS)  # noqa: E731
            flags = sorted((ours().workers[ours().flagged] + 1).tolist())
            ours_t, r_t, same = [], [], "-"
            if r:
                ro.globalenv["pipeline"] = ro.r(R_PIPELINES[method])
                call = ro.r(f"function() {{ sink(nullfile()); on.exit(sink()); pipeline(g1, g2, S0, {n_half}, "
                            f"{alpha}, {eps}) }}")
                result = call()
                r_flags = sorted(int(x) for x in (list(result) if result is not ro.NULL else []))
                same = "yes" if r_flags == flags else f"no ({len(r_flags)} vs {len(flags)})"
                for _ in range(args.reps):  # interleaved: both sides see the same machine load
                    r_t += timed(call, 1)
                    ours_t += timed(ours, 1)
            else:
                ours_t = timed(ours, args.reps)
            o = summary(ours_t)
            row = f"| {method} | {p} | {o[0]:.2f} ({o[1]:.2f}-{o[2]:.2f}) |"
            if r_t:
                rr = summary(r_t)
                row += f" {rr[0]:.1f} ({rr[1]:.1f}-{rr[2]:.1f}) | {rr[0] / o[0]:.1f}x | {same} |"
            else:
                row += " - | - | - |"
            print(row)
            if r_t and args.batch:  # the simulation's use: many identifications at once; R has to loop
                B = args.batch
                bt1, bt2 = t1.expand(B, -1, -1).contiguous(), t2.expand(B, -1, -1).contiguous()
                batched = timed(lambda: bymi(bt1, bt2, alpha=alpha, estimator=method, eps=eps, n_half=n_half,
                                             sigma0=tS), 3)
                b = summary(batched)
                print(f"| {method}, {B} at once | {p} | {b[0]:.1f} ({b[1]:.1f}-{b[2]:.1f}) | {rr[0] * B:.0f} "
                      f"({B} x the median) | {rr[0] * B / b[0]:.1f}x | - |")
    print(f"\npeak RSS of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB "
          f"(R and torch together); flagged sets: {len(flags)} workers at the last setting")
    print(f"CPU ms per identification, median over {args.reps} repetitions; ratios are the medians' ratios")


if __name__ == "__main__":
    main()
