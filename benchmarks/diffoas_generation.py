"""DiffOAS vs the GMRES baseline: time to generate 1,000 and 10,000 Darcy samples at 10,000 unknowns (Table 2).

Both methods run in this process on the same problem (s = 102 nodes per side, 100 x 100 interior unknowns):

* DiffOAS = 30 GMRES basis solves (rtol 1e-5, Appendix B.3) + per-sample GRF draws, basis combination, noise and
  one operator action (matrix-free `stencil`, the default, and the assembled `sparse` matrix product of the
  official scripts). The samples are produced in chunks and discarded after each chunk (the same work as
  `generate_diffoas`, without holding 10,000 x 3 fields of 102^2 doubles in memory).
* GMRES baseline = draw (K, f) and solve each system with `scipy.sparse.linalg.gmres` (rtol 1e-5, restart 20:
  SciPy's defaults, as the official `gmres(A, b)` call). It is timed on a subset of samples and scaled linearly
  to 1,000 and 10,000 (each sample is an independent solve of the same cost distribution). Baseline solves are
  interleaved with the basis solves (basis 1, baseline 1, basis 2, ...): the shared machine's speed drifts by
  10-20% over minutes, and both sides of the ratio must see the same drift.
* For reference, the same baseline with a sparse direct solver (`spsolve`, SuperLU) on a subset.

Times are process CPU time (`time.process_time`, BLAS/OpenMP pinned to one thread): the development machines share
2 cores among many processes, so wall-clock ratios there measure the neighbours' load; wall time is printed too.

Usage: python benchmarks/diffoas_generation.py [--quick] [--gmres-samples 20]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import platform
import time
import tracemalloc

import numpy as np
import scipy

from zoo.diffoas.generate import PAPER_RTOL, STAGES, diffoas_chunks, get_problem, solve, solve_basis


class Clock:
    """CPU and wall seconds of a block; ``add`` accumulates another clock's seconds."""

    cpu = wall = 0.0

    def __enter__(self):
        self.c, self.w = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = time.process_time() - self.c, time.perf_counter() - self.w

    def add(self, other: "Clock", scale: float = 1.0) -> None:
        self.cpu, self.wall = self.cpu + scale * other.cpu, self.wall + scale * other.wall


def time_basis_and_gmres(P, s, n_basis, n_gmres, seed_basis, seed_gmres):
    """Basis solves of DiffOAS (``solve_basis``, one basis per call) interleaved with baseline samples
    (``time_solver``, one sample per call: draw + assemble + GMRES).

    Returns (U, basis clock, baseline clock per sample, baseline draw clock per sample)."""
    rb = np.random.default_rng(seed_basis)
    U, basis, base, draw = [], Clock(), Clock(), Clock()
    for i in range(max(n_basis, n_gmres)):
        if i < n_basis:
            with Clock() as c:
                U.append(solve_basis(P, s, 1, rb, "gmres", PAPER_RTOL)[0][0])
            basis.add(c)
        if i < n_gmres:
            sample, sample_draw = time_solver(P, s, 1, "gmres", seed=seed_gmres + i)
            base.add(sample, 1 / n_gmres)
            draw.add(sample_draw, 1 / n_gmres)
    return np.stack(U), basis, base, draw


def time_solver(P, s, n, solver, seed) -> tuple[Clock, Clock]:
    """Per-sample cost of the baseline (draw (a, f), assemble, solve) and of its input draw alone."""
    rng = np.random.default_rng(seed)
    with Clock() as draw:
        a = P.coefficients(rng, n, s)
        f = P.source(rng, n, s)
    with Clock() as clk:
        for i in range(n):
            solve(P.operator(a[i]), f[i, 1:-1, 1:-1].ravel(), solver, PAPER_RTOL)
    clk.cpu, clk.wall = (clk.cpu + draw.cpu) / n, (clk.wall + draw.wall) / n
    draw.cpu, draw.wall = draw.cpu / n, draw.wall / n
    return clk, draw


def time_diffoas_samples(P, U, s, n, seed, action="stencil", chunk=125, mark=1000):
    """CPU/wall time of the DiffOAS sample loop for ``n`` samples and for its first ``mark`` samples, each with the
    CPU seconds of its stages (coefficient draw, combination, noise, operator action)."""
    rng = np.random.default_rng(seed)
    first, stages, first_stages = Clock(), {}, {}
    done = 0
    with Clock() as clk:
        for a, _, _ in diffoas_chunks(P, U, n, s, rng, chunk=chunk, action=action, stage_times=stages):
            done += a.shape[0]
            if done == mark:
                first.cpu, first.wall = time.process_time() - clk.c, time.perf_counter() - clk.w
                first_stages = dict(stages)
    clk.stages, first.stages = stages, first_stages
    return clk, first


def peak_mib(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="s=34 (1,024 unknowns), 1,000 / 2,000 samples")
    ap.add_argument("--gmres-samples", type=int, default=None, help="GMRES subset size (default 30, quick 10)")
    ap.add_argument("--n-basis", type=int, default=30)
    args = ap.parse_args(argv)
    s = 34 if args.quick else 102
    sizes = (1000, 2000) if args.quick else (1000, 10000)
    n_gmres = args.gmres_samples or (10 if args.quick else 30)
    P = get_problem("darcy")
    n_unknowns = (s - 2) ** 2

    U, basis, gm, gm_draw = time_basis_and_gmres(P, s, args.n_basis, n_gmres, seed_basis=0, seed_gmres=1)
    samples = {}
    for act in ("sparse", "stencil"):
        full, first = time_diffoas_samples(P, U, s, sizes[1], seed=7, action=act, mark=sizes[0])
        samples[(sizes[0], act)], samples[(sizes[1], act)] = first, full
    n_direct = max(n_gmres, 20)
    di, _ = time_solver(P, s, n_direct, "direct", seed=2)

    mem_diffoas = peak_mib(lambda: time_diffoas_samples(P, U, s, 250, seed=3, mark=0))
    mem_gmres = peak_mib(lambda: time_solver(P, s, 1, "gmres", seed=4))

    print(f"## DiffOAS vs GMRES: Darcy, {n_unknowns:,} unknowns (s={s}), {args.n_basis} basis solutions\n")
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, {platform.machine()}, one thread; times are CPU seconds "
          "(wall seconds in brackets)\n")
    print(f"- basis: {args.n_basis} GMRES solves (rtol 1e-5) in {basis.cpu:.2f} s [{basis.wall:.2f}], "
          f"{basis.cpu / args.n_basis:.3f} s each")
    print(f"- GMRES baseline: {n_gmres} samples timed (draw + assemble + solve, interleaved with the basis solves), "
          f"{gm.cpu:.3f} s/sample [{gm.wall:.3f}], scaled linearly")
    print(f"- direct baseline (spsolve): {n_direct} samples timed, {di.cpu * 1e3:.1f} ms/sample [{di.wall * 1e3:.1f}], "
          "scaled linearly")
    full = samples[(sizes[1], "stencil")]
    print("- per-sample CPU ms by stage (10,000 samples, stencil / sparse): " + ", ".join(
        f"{k} {full.stages.get(k, 0) / sizes[1] * 1e3:.3f} / "
        f"{samples[(sizes[1], 'sparse')].stages.get(k, 0) / sizes[1] * 1e3:.3f}" for k in STAGES))
    print(f"- input draws in the baseline (K and f): {gm_draw.cpu * 1e3:.2f} ms/sample\n")
    print("| samples | operator action | DiffOAS total (s) | of which basis (s) | DiffOAS per sample (ms) "
          "| of which action (ms) | GMRES (s, scaled) | speed-up vs GMRES | speed-up, input draws excluded "
          "| speed-up, basis + action only (paper's TIME1) | spsolve (s, scaled) | speed-up vs spsolve |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        for act in ("sparse", "stencil"):
            clk = samples[(n, act)]
            total, wall = basis.cpu + clk.cpu, basis.wall + clk.wall
            no_draw = (gm.cpu - gm_draw.cpu) * n / (total - clk.stages["coefficients"])
            paper_acc = gm.cpu * n / (basis.cpu + clk.stages["action"])
            print(f"| {n:,} | {act} | {total:.2f} [{wall:.2f}] | {basis.cpu:.2f} | {clk.cpu / n * 1e3:.2f} "
                  f"| {clk.stages['action'] / n * 1e3:.3f} "
                  f"| {gm.cpu * n:.0f} [{gm.wall * n:.0f}] | **{gm.cpu * n / total:.0f}x** [{gm.wall * n / wall:.0f}x] "
                  f"| {no_draw:.0f}x | {paper_acc:.0f}x | {di.cpu * n:.1f} | {di.cpu * n / total:.1f}x |")
    # by the paper's accounting DiffOAS costs at least the basis solves, so GMRES time / basis time bounds the
    # speed-up; a basis solve (no input draws or assembly) is a little cheaper than one baseline sample, so this
    # ceiling is slightly above samples / basis count
    print("\nceiling of the speed-up by the paper's accounting = GMRES time for the samples / basis solve time "
          f"(a basis solve costs {basis.cpu / args.n_basis:.3f} s, a baseline sample {gm.cpu:.3f} s): "
          + ", ".join(f"{gm.cpu * n / basis.cpu:.0f}x at {n:,}" for n in sizes))
    print(f"peak traced memory: DiffOAS chunk of 250 samples {mem_diffoas:.0f} MiB, one GMRES solve {mem_gmres:.1f} MiB")
    print("paper (Table 2, Xeon Gold 6154, 10,000 samples, 10,000 unknowns): DiffOAS 9.58 s vs GMRES 2,996 s = 313x")
    print("'basis + action only' is the paper's accounting (Table 2: TIME1 = basis solves + TIME2, the operator "
          "actions): it leaves out the random-field draws, the combination, the noise and the matrix assembly")


if __name__ == "__main__":
    main()
