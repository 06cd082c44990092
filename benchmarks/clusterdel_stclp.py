"""STC-LP: the paper's min-cut solver vs HiGHS (scipy milp, scipy linprog, highspy), plus DegMFP/RatMFP pivot times.

    python benchmarks/clusterdel_stclp.py                       # G(40000, 1.25e-4) (~100k edges)
    python benchmarks/clusterdel_stclp.py --graphs gnp planted  # also 6000 planted 12-cliques at p_in 0.5 (~209k)
    python benchmarks/clusterdel_stclp.py --snap-dir data/snap  # also ca-HepPh and email-Enron where present
    python benchmarks/clusterdel_stclp.py --quick               # a 3k-edge graph, one repetition (the test)

Every solver runs in a forked child process, so its peak memory (ru_maxrss of the child minus its RSS before the
solve) is its own; the values must agree exactly (both are optimal, and the optimum is a multiple of 1/2).
Wedge enumeration is shared and timed on its own; the times below are the solves (network/model built inside).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import scipy
from scipy.optimize import linprog

from datamodules.graphs import gnp_graph, planted_clusters, read_snap
from zoo.clusterdel import (
    as_graph,
    degree_pivot,
    maximal_disjoint_open_wedges,
    ratio_pivot,
    stc_lp_highs,
    stc_lp_mincut,
    wedge_edge_mask,
    wedges_and_triangles,
)
from zoo.clusterdel.lp import _wedge_matrix, highs_solve
from _memory import in_forked_child  # noqa: E402 - the sibling helper of the benchmark scripts


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def solve(method: str, g, wt) -> float:
    if method == "min-cut (ours)":
        return stc_lp_mincut(g, wt).value
    if method == "scipy milp (HiGHS)":
        return stc_lp_highs(g, wt).value
    rows = _wedge_matrix(g, wt)
    if method == "scipy linprog (HiGHS)":
        res = linprog(np.ones(g.m), A_ub=-rows, b_ub=-np.ones(wt.n_wedges), bounds=(0, 1), method="highs")
        assert res.status == 0, res.message
        return float(res.fun)
    status, obj, _ = highs_solve(np.ones(g.m), rows, np.ones(wt.n_wedges), np.full(wt.n_wedges, np.inf),
                                 integer=False)
    assert status == "Optimal", status
    return obj


def _child(method, g, wt, q):
    before = _rss_mb()
    tic = time.perf_counter()
    value = solve(method, g, wt)
    seconds = time.perf_counter() - tic
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    q.put((value, seconds, max(peak - before, 0.0)))


def timed(method, g, wt):
    return in_forked_child(_child, method, g, wt)


def graphs(args):
    if args.quick:
        yield "G(1000, 0.006)", gnp_graph(1000, 0.006, seed=0)
        return
    if "gnp" in args.graphs:
        yield "G(40000, 1.25e-4)", gnp_graph(40000, 1.25e-4, seed=0)
    if "planted" in args.graphs:
        yield "planted 6000 x K12, p_in 0.5", planted_clusters(6000, 12, 0.5, 4e-6, seed=0)
    if args.snap_dir:
        for name in ("ca-HepPh", "email-Enron"):
            hits = [f for f in sorted(Path(args.snap_dir).glob(f"{name}*")) if f.is_file()]
            if hits:
                yield name, read_snap(hits[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=["gnp"], choices=["gnp", "planted"])
    ap.add_argument("--snap-dir", default=None)
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the min-cut solver and the pivots")
    ap.add_argument("--highs-reps", type=int, default=1, help="repetitions of each HiGHS solve (minutes each)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps, highs_reps = (1, 1) if args.quick else (args.reps, args.highs_reps)
    from importlib.metadata import version

    print(f"CPU: {platform.processor() or platform.machine()}, {mp.cpu_count()} cores; numpy {np.__version__}, "
          f"scipy {scipy.__version__}, highspy {version('highspy')}")
    print("| graph | n | edges | open wedges | solver | LP | seconds (median [min, max]) | runs | peak MB | "
          "x vs min-cut |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    pivot_rows = []
    for name, adj in graphs(args):
        g = as_graph(adj, name, standardise=True)
        tic = time.perf_counter()
        wt = wedges_and_triangles(g, triangles=False)
        enum_s = time.perf_counter() - tic
        results = {}
        for method in ("min-cut (ours)", "scipy milp (HiGHS)", "scipy linprog (HiGHS)", "highspy (HiGHS)"):
            runs = [timed(method, g, wt) for _ in range(reps if method.startswith("min-cut") else highs_reps)]
            results[method] = runs
        ref = results["min-cut (ours)"][0][0]
        base = statistics.median(r[1] for r in results["min-cut (ours)"])
        for method, runs in results.items():
            assert all(r[0] == ref for r in runs), f"{method} LP {runs[0][0]} != min-cut {ref} on {name}"
            secs = [r[1] for r in runs]
            med = statistics.median(secs)
            print(f"| {name} | {g.n:,} | {g.m:,} | {wt.n_wedges:,} | {method} | {ref:g} | {med:.2f} "
                  f"[{min(secs):.2f}, {max(secs):.2f}] | {len(runs)} | {max(r[2] for r in runs):.0f} | "
                  f"{med / base:.1f}x |")
        tic = time.perf_counter()
        chosen = maximal_disjoint_open_wedges(g, wt)
        w_s = time.perf_counter() - tic
        h = g.subgraph_keep(wedge_edge_mask(g, wt, chosen) < 0.5)
        deg = [_time(degree_pivot, h) for _ in range(reps)]
        rat = [_time(ratio_pivot, h) for _ in range(reps)]
        pivot_rows.append((name, g.m, enum_s, len(chosen), w_s, deg, rat))
    print()
    print("| graph | edges | wedge enumeration s | abs(W) | wedge set s | DegMFP pivot s (median [min, max]) | "
          "RatMFP pivot s (median [min, max]) |")
    print("|---|---|---|---|---|---|---|")
    for name, m, enum_s, w, w_s, deg, rat in pivot_rows:
        print(f"| {name} | {m:,} | {enum_s:.2f} | {w:,} | {w_s:.2f} | {_fmt(deg)} | {_fmt(rat)} |")


def _time(fn, h):
    tic = time.perf_counter()
    fn(h)
    return time.perf_counter() - tic


def _fmt(xs):
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}, {max(xs):.2f}]"


if __name__ == "__main__":
    main()
