"""Dataset generation: DiffOAS (Algorithm 1 of the paper) and the conventional solver baseline.

DiffOAS, per problem:
  1. draw ``l`` coefficient fields and sources, solve ``A(a_i) u_i = f_i`` with a real solver (basis solutions);
  2. per sample: draw a fresh coefficient field ``a``, form ``u = sum_i w_i u_i + eps`` with ``w ~ N(0, I)/||w||``
     (as the official code; the paper writes normalised weights) and boundary-masked GRF noise ``eps``;
  3. one operator action ``f = A(a) u``. The pair ``(a, f) -> u`` solves the discrete PDE exactly.
     By default the action is matrix-free (``action='stencil'``: the same five-point operator as the assembled
     sparse matrix, tested equal to it to 1e-12, without building a matrix per sample);
     ``action='sparse'`` assembles the sparse matrices and multiplies, as the official scripts do.

The baseline draws ``(a, f)`` and solves every sample with SciPy GMRES at the paper's tolerance (rtol 1e-5,
SciPy's default, Appendix B.3) or with a sparse direct solver.

Fields are stored on the full ``s x s`` node grid: ``a`` (N, C, s, s) coefficient channels, ``f`` and ``u``
(N, s, s) with zero boundary rows/columns. The official Darcy script saves the last *basis* solution as the target
``y`` instead of the generated ``u`` (notes: darcy/generate_darcy_u.py); here the target is always ``u``.
Also unlike the official scripts (card, deviations): ``a``, ``f`` and ``u`` share one grid frame (the official
matrices number nodes column-wise but reshape ``u``/``f`` row-wise, i.e. use ``a^T``), ``f`` is 0 on the boundary
(the official ``creat_f3`` pads it with row means), and a solve that misses ``rtol`` is an error (they ignore
GMRES's ``info``).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import scipy
import scipy.sparse.linalg as spla
import torch

from zoo.data import first_non_finite
from zoo.diffoas.formats import read_dataset, write_dataset
from zoo.diffoas.grf import sample_grf
from zoo.diffoas.operators import apply_operator, assemble_block_diagonal, assemble_operator, check_grid
from zoo.errors import ZooError

PAPER_RTOL = 1e-5  # Appendix B.3: basis functions by GMRES "with an accuracy of 1E-5" (= SciPy's default)
NOISE_SCALE = 0.05  # official code: noise = exp(GRF) * min(u) * 0.05 / (s-2) * mask


# ----------------------------------------------------------------------------------------------- problems
@dataclass(frozen=True)
class Problem:
    """One PDE of Appendix B.2: how to draw its coefficients and sources and which operator it uses."""

    name: str
    channels: tuple[str, ...]  # coefficient channels stored in ``a``
    sigma: float  # sign of -div(c grad u), see operators.py
    grid_size: int  # paper grid s (Table 2 header: 10,000 / 22,500 / 62,500 unknowns)
    n_basis: int  # paper: 30 / 50 / 50 basis solutions (Appendix B.2)
    coefficients: Callable[[np.random.Generator, int, int], np.ndarray]  # (rng, n, s) -> (n, C, s, s)
    source: Callable[[np.random.Generator, int, int], np.ndarray]  # (rng, n, s) -> (n, s, s)
    # (c, q) of A(c, q) from coefficient channels ``a`` (C, s, s) or a batch (C, m, s, s)
    operator_fields: Callable[[np.ndarray], tuple]

    def operator(self, a: np.ndarray):
        c, q = self.operator_fields(a)
        return assemble_operator(c, q, self.sigma)


def _exp_grf(rng, n, s, alpha, tau):
    g = sample_grf(rng, n, s, alpha, tau)
    return np.exp(g, out=g)


def _darcy_coef(rng, n, s):  # K = exp(GRF(tau=7, alpha=2.5)), B.2.1 and official generate_darcy_*.py
    return _exp_grf(rng, n, s, alpha=2.5, tau=7.0)[:, None]


def _darcy_source(rng, n, s):  # f = exp(GRF(tau=7, alpha=2.5)), B.2.1 / official `fset`
    return _exp_grf(rng, n, s, alpha=2.5, tau=7.0)


def _helmholtz_coef(rng, n, s):  # k^2 = GRF(tau=3, alpha=2)/10, B.2.2
    return sample_grf(rng, n, s, alpha=2.0, tau=3.0)[:, None] / 10.0


def _helmholtz_source(rng, n, s):  # S = GRF(tau=3, alpha=2)/10, B.2.2
    return sample_grf(rng, n, s, alpha=2.0, tau=3.0) / 10.0


def _diffusion_coef(rng, n, s):
    # k = 10 * exp(GRF(tau=3, alpha=2)): the paper writes "10 * GRF", which is not positive; the official
    # ground_water_*.py uses 10 * exp(GRF). q ~ U[0, 1] (B.2.3).
    k = 10.0 * _exp_grf(rng, n, s, alpha=2.0, tau=3.0)
    return np.stack([k, rng.random((n, s, s))], axis=1)


def _diffusion_source(rng, n, s):  # f = GRF(tau=3, alpha=2), B.2.3
    return sample_grf(rng, n, s, alpha=2.0, tau=3.0)


PROBLEMS: dict[str, Problem] = {
    "darcy": Problem("darcy", ("K",), 1.0, 102, 30, _darcy_coef, _darcy_source, lambda a: (a[0], None)),
    "helmholtz": Problem("helmholtz", ("k2",), -1.0, 152, 50, _helmholtz_coef, _helmholtz_source,
                         lambda a: (np.ones_like(a[0]), a[0])),  # c = 1, q = k^2
    "diffusion": Problem("diffusion", ("k", "q"), -1.0, 252, 50, _diffusion_coef, _diffusion_source,
                         lambda a: (a[0], a[1])),  # c = k, q = q
}


def get_problem(name: str) -> Problem:
    if name not in PROBLEMS:
        raise ZooError(f"unknown PDE problem {name!r}: choose one of {sorted(PROBLEMS)}")
    return PROBLEMS[name]


# ----------------------------------------------------------------------------------------------- solvers
def solve(A, b: np.ndarray, solver: str = "gmres", rtol: float = PAPER_RTOL, maxiter: int | None = None):
    """Solve ``A x = b``; returns (x, relative residual). ZooError if the solver does not reach ``rtol``."""
    bnorm = np.linalg.norm(b)
    if solver == "direct":
        with warnings.catch_warnings():
            warnings.simplefilter("error", spla.MatrixRankWarning)
            try:
                x = spla.spsolve(A.tocsc(), b)
            except spla.MatrixRankWarning as e:
                raise ZooError(f"direct solve failed: the operator is singular ({e})") from e
    elif solver == "gmres":
        # restart=20 and atol=0 are SciPy's defaults, i.e. the official `gmres(A, b)` call
        x, info = spla.gmres(A, b, rtol=rtol, atol=0.0, maxiter=maxiter)
        if info != 0:
            res = np.linalg.norm(b - A @ x) / bnorm
            raise ZooError(
                f"GMRES did not converge to rtol={rtol:g} (info={info}, relative residual {res:.2e}); "
                "raise maxiter or use solver='direct'"
            )
    else:
        raise ZooError(f"unknown solver {solver!r}: choose 'gmres' or 'direct'")
    res = float(np.linalg.norm(b - A @ x) / bnorm) if bnorm > 0 else float(np.linalg.norm(A @ x))
    limit = 1e-8 if solver == "direct" else 1.5 * rtol  # GMRES' restart-end estimate may sit a hair above rtol
    if not np.isfinite(res) or res > limit:
        raise ZooError(f"{solver} solve failed: relative residual {res:.2e} above {limit:.1e}")
    return x, res


def boundary_mask(s: int) -> np.ndarray:
    """1 - Chebyshev distance to the centre / centre on the s x s grid: 0 on the boundary (official noise mask)."""
    centre = (s - 1) / 2.0
    i = np.arange(s)
    d = np.maximum(np.abs(i[:, None] - centre), np.abs(i[None, :] - centre))
    return 1.0 - d / centre


def _dtype(name: str):
    if name not in ("float64", "float32"):
        raise ZooError(f"unknown storage dtype {name!r}: choose 'float64' or 'float32'")
    return np.dtype(name)


# ----------------------------------------------------------------------------------------------- datasets
@dataclass
class PDEData:
    """``(a, f) -> u`` pairs on the full grid plus the metadata of how they were made."""

    a: np.ndarray  # (N, C, s, s)
    f: np.ndarray  # (N, s, s), zero on the boundary
    u: np.ndarray  # (N, s, s), zero on the boundary
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.u.shape[0]

    @property
    def problem(self) -> Problem:
        return get_problem(self.meta["problem"])

    def residuals(self) -> np.ndarray:
        """Relative residual ||A(a) u - f|| / ||f|| of every sample, in float64."""
        P = self.problem
        out = np.empty(len(self))
        for i in range(len(self)):
            f = self.f[i, 1:-1, 1:-1].ravel()
            r = P.operator(self.a[i]) @ self.u[i, 1:-1, 1:-1].ravel() - f
            out[i] = np.linalg.norm(r) / np.linalg.norm(f)
        return out


def _meta(problem, method, s, n, seed, **kw) -> dict:
    return {
        "problem": problem.name,
        "method": method,
        "grid_size": s,
        "n_samples": n,
        "seed": seed,
        "channels": list(problem.channels),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "torch": torch.__version__,  # the GRF normals come from torch's generator
        **kw,
    }


class _StageClock:
    """Adds the CPU seconds since the previous lap to ``times[stage]`` (a no-op without a dict)."""

    def __init__(self, times: dict[str, float] | None):
        self.times = times
        self.t = time.process_time()

    def lap(self, stage: str | None) -> None:
        if self.times is None:
            return
        now = time.process_time()
        if stage is not None:
            self.times[stage] = self.times.get(stage, 0.0) + now - self.t
        self.t = now


def solve_basis(problem: Problem, s: int, n_basis: int, rng, solver="gmres", rtol=PAPER_RTOL, maxiter=None):
    """Basis solutions u_i of A(a_i) u_i = f_i (interior values, shape (l, (s-2)^2)) and their max residual."""
    a = problem.coefficients(rng, n_basis, s)
    f = problem.source(rng, n_basis, s)
    U = np.empty((n_basis, (s - 2) ** 2))
    res = 0.0
    for i in range(n_basis):
        U[i], r = solve(problem.operator(a[i]), f[i, 1:-1, 1:-1].ravel(), solver, rtol, maxiter)
        res = max(res, r)
    return U, res


STAGES = ("coefficients", "combination", "noise", "assembly", "action")


def diffoas_chunks(P: Problem, U: np.ndarray, n_samples: int, s: int, rng, noise_scale=NOISE_SCALE, chunk=128,
                   action: str = "stencil", stage_times: dict[str, float] | None = None):
    """Steps 2-3 of Algorithm 1 for ``n_samples`` samples, in chunks: yields (a, f, u) with ``a`` (m, C, s, s) and
    interior ``f``, ``u`` (m, (s-2)^2). ``U`` holds the basis solutions, one per row.

    ``action='stencil'`` applies the operator matrix-free (the default: cheaper, no matrix is stored);
    ``'sparse'`` assembles the operators as sparse matrices and multiplies (as the official scripts). The two are
    identical up to floating-point summation order.

    ``stage_times``, if given, accumulates the CPU seconds of each stage (``STAGES``: the coefficient draw, the
    basis combination, the masked noise, the matrix assembly (``sparse`` only) and the operator action). The paper's
    Table 2 counts only the basis solves and the operator actions (TIME1 = basis + TIME2, "the time required for
    our method ... can be divided into two parts: generating basis functions and applying operators", Sec. 6.2);
    these stage times let a benchmark report the same quantity."""
    if action not in ("sparse", "stencil"):
        raise ZooError(f"unknown operator action {action!r}: choose 'sparse' or 'stencil'")
    n = s - 2
    l = U.shape[0]
    mask = boundary_mask(s)[1:-1, 1:-1]
    clock = _StageClock(stage_times)
    for lo in range(0, n_samples, chunk):
        m = min(chunk, n_samples - lo)
        a = P.coefficients(rng, m, s)
        clock.lap("coefficients")
        w = rng.standard_normal((m, l))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        u = w @ U  # combination of basis solutions
        clock.lap("combination")
        # boundary-masked noise, scaled by min(u) as the official code (sign included) and divided by n
        eps = _exp_grf(rng, m, n, alpha=2.5, tau=7.0)  # in-place steps: one pass each
        eps *= mask
        eps *= u.min(axis=1)[:, None, None] * (noise_scale / n)
        u += eps.reshape(m, -1)
        clock.lap("noise")
        # the one operator action per sample; sparse: the whole chunk as one block-diagonal sparse product
        c, q = P.operator_fields(a.transpose(1, 0, 2, 3))
        if action == "sparse":
            A = assemble_block_diagonal(c, q, P.sigma)
            clock.lap("assembly")
            f = (A @ u.ravel()).reshape(m, -1)
        else:
            f = apply_operator(c, u.reshape(m, n, n), q, P.sigma).reshape(m, -1)
        clock.lap("action")
        yield a, f, u
        clock.lap(None)  # time spent by the consumer between chunks is nobody's stage


def generate_diffoas(
    problem: str,
    n_samples: int,
    grid_size: int | None = None,
    n_basis: int | None = None,
    seed: int = 0,
    solver: str = "gmres",
    rtol: float = PAPER_RTOL,
    noise_scale: float = NOISE_SCALE,
    chunk: int = 128,
    maxiter: int | None = None,
    action: str = "stencil",
    dtype: str = "float64",
) -> PDEData:
    """DiffOAS dataset of ``n_samples`` pairs (Algorithm 1).

    The random fields are drawn in single precision (as the official sampler, see ``grf.sample_grf``) and everything
    computed from them in float64; ``dtype='float32'`` only stores the result in single precision (as the
    official scripts' torch tensors), which halves memory at paper scale but limits the stored residual to ~1e-7."""
    P = get_problem(problem)
    s = check_grid(grid_size or P.grid_size)
    n = s - 2
    l = P.n_basis if n_basis is None else int(n_basis)
    if n_samples < 1:
        raise ZooError(f"n_samples must be >= 1, got {n_samples}")
    if l < 1 or l > n_samples:
        raise ZooError(
            f"basis count n_basis={l} does not fit the sample budget n_samples={n_samples}: DiffOAS needs "
            "1 <= n_basis <= n_samples (more bases than samples costs more solves than the GMRES baseline)"
        )
    if l > n * n:
        raise ZooError(f"basis count n_basis={l} exceeds the {n * n} unknowns of grid s={s}")
    dt = _dtype(dtype)
    rng = np.random.default_rng(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    U, basis_res = solve_basis(P, s, l, rng, solver, rtol, maxiter)
    t1 = time.perf_counter()
    a_all = np.empty((n_samples, len(P.channels), s, s), dtype=dt)
    f_all = np.zeros((n_samples, s, s), dtype=dt)
    u_all = np.zeros((n_samples, s, s), dtype=dt)
    lo = 0
    stages: dict[str, float] = {}
    for a, f, u in diffoas_chunks(P, U, n_samples, s, rng, noise_scale, chunk, action, stages):
        m = a.shape[0]
        a_all[lo : lo + m] = a
        f_all[lo : lo + m, 1:-1, 1:-1] = f.reshape(m, n, n)
        u_all[lo : lo + m, 1:-1, 1:-1] = u.reshape(m, n, n)
        lo += m
    t2 = time.perf_counter()
    meta = _meta(
        P, "diffoas", s, n_samples, seed, n_basis=l, basis_solver=solver, rtol=rtol, noise_scale=noise_scale, action=action,
        dtype=dtype,
        basis_max_residual=basis_res, time_basis_s=t1 - t0, time_samples_s=t2 - t1, time_total_s=t2 - t0,
        cpu_total_s=time.process_time() - c0, cpu_stage_s={k: round(v, 6) for k, v in stages.items()},
    )
    return PDEData(a_all, f_all, u_all, meta)


def generate_solver(
    problem: str,
    n_samples: int,
    grid_size: int | None = None,
    seed: int = 0,
    solver: str = "gmres",
    rtol: float = PAPER_RTOL,
    maxiter: int | None = None,
    dtype: str = "float64",
) -> PDEData:
    """Conventional dataset: draw (a, f), solve each system (the GMRES baseline, or a direct solver)."""
    P = get_problem(problem)
    s = check_grid(grid_size or P.grid_size)
    if n_samples < 1:
        raise ZooError(f"n_samples must be >= 1, got {n_samples}")
    dt = _dtype(dtype)
    rng = np.random.default_rng(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    a = P.coefficients(rng, n_samples, s)
    f = P.source(rng, n_samples, s)
    f[:, 0, :] = f[:, -1, :] = f[:, :, 0] = f[:, :, -1] = 0.0  # the boundary carries no equation
    u = np.zeros((n_samples, s, s))
    res = 0.0
    for i in range(n_samples):
        x, r = solve(P.operator(a[i]), f[i, 1:-1, 1:-1].ravel(), solver, rtol, maxiter)
        u[i, 1:-1, 1:-1] = x.reshape(s - 2, s - 2)
        res = max(res, r)
    t1 = time.perf_counter()
    meta = _meta(P, solver, s, n_samples, seed, rtol=rtol, max_residual=res, time_total_s=t1 - t0,
                 cpu_total_s=time.process_time() - c0, dtype=dtype)
    return PDEData(a.astype(dt, copy=False), f.astype(dt, copy=False), u.astype(dt, copy=False), meta)


def generate(problem: str, method: str, n_samples: int, grid_size: int | None = None, **kw) -> PDEData:
    """``method``: 'diffoas', 'gmres' or 'direct'."""
    if method == "diffoas":
        return generate_diffoas(problem, n_samples, grid_size, **kw)
    if method in ("gmres", "direct"):
        return generate_solver(problem, n_samples, grid_size, solver=method, **kw)
    raise ZooError(f"unknown generation method {method!r}: choose 'diffoas', 'gmres' or 'direct'")


# ----------------------------------------------------------------------------------------------- storage
def save_dataset(data: PDEData, path: str | Path) -> Path:
    """Write a, f, u and the generation metadata (JSON) as .npz, .h5/.hdf5 or .safetensors."""
    return write_dataset(Path(path), {"a": data.a, "f": data.f, "u": data.u}, data.meta)


def load_dataset(path: str | Path) -> PDEData:
    """A dataset file of this project or a released one (official DiffOAS .pt, FNO .mat, PDEBench .hdf5); the
    layout detected and the mapping of its fields to (a, f, u) are in ``meta['format']`` / ``meta['fields']``
    (``zoo.diffoas.formats``). Its metadata, shapes and values are checked (`check_dataset`)."""
    data = PDEData(*read_dataset(path))
    check_dataset(data, str(path))
    return data


#: coefficient channels that must be positive everywhere: Darcy's permeability K and the diffusion coefficient k
#: (exp of a GRF in every generator); helmholtz's k2 and diffusion's q may take any sign
POSITIVE_CHANNELS = {"darcy": ("K",), "diffusion": ("k",)}


def check_dataset(data: PDEData, where: str) -> None:
    """What a training run needs of a dataset, as one-line ZooErrors that start with ``where``:
    * metadata that is a JSON object naming a known problem and an integer grid size >= 3 (this project's own files
      carry it as written by `save_dataset`: a hand-edited list ended in an AttributeError, a missing grid size in a
      shape message of "None");
    * a (N, C, s, s), f and u (N, s, s), C the problem's channels (a hand-written own file is read as stored: a
      without its channel axis or u on another grid surfaced as a traceback in the model);
    * every value a finite number, and the coefficients that must be positive so. The readers check shapes and,
      for the official .pt files, the PDE residual on the interior; a NaN on the boundary (where the residual does
      not look) or anywhere in a file without that check went into the inputs or targets, and the run logged NaN
      losses. The error names the sample, the field and the grid point (and how the file's fields map to a, f, u).
    """
    meta = data.meta
    if not isinstance(meta, dict):
        raise ZooError(f"{where}: its metadata 'meta' is a JSON {type(meta).__name__}, expected an object with "
                       "problem, method and grid_size (as zoo.diffoas.generate.save_dataset writes)")
    for key, ok, expected in (("problem", lambda v: v in PROBLEMS, f"a PDE name ({', '.join(PROBLEMS)})"),
                              ("grid_size", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 3,
                               "the nodes per side, an integer >= 3")):
        if not ok(meta.get(key)):
            raise ZooError(f"{where}: its metadata has {key} = {meta.get(key)!r}, expected {expected}")
    n, channels, s = len(data.u), data.problem.channels, meta["grid_size"]
    shapes = {k: tuple(getattr(data, k).shape) for k in ("a", "f", "u")}
    if shapes != {"a": (n, len(channels), s, s), "f": (n, s, s), "u": (n, s, s)}:
        raise ZooError(f"{where} has a {shapes['a']}, f {shapes['f']}, u {shapes['u']}; {meta['problem']} with "
                       f"meta grid_size {s} needs a (N, {len(channels)}, {s}, {s}), f and u (N, {s}, {s})")
    mapping = f" (read as {meta['fields']})" if meta.get("fields") else ""
    for name, arr, what in (("a", data.a, "coefficient"), ("f", data.f, "source"), ("u", data.u, "solution")):
        if arr.dtype.kind not in "biuf":  # text where numbers belong (np.isfinite would raise a TypeError)
            raise ZooError(f"{where}: the {what} {name} holds {arr.dtype} values, expected numbers{mapping}")
        if found := first_non_finite(arr):
            (i, *point), count = found
            label = f"{name} channel {channels[point.pop(0)]!r}" if name == "a" else name
            raise ZooError(f"{where}: sample {i}, {what} {label} at grid point {tuple(point)} is {arr[found[0]]}, "
                           f"expected a finite number ({count} non-finite values in {name}){mapping}")
    for c, channel in enumerate(channels):
        if channel in POSITIVE_CHANNELS.get(meta["problem"], ()):
            bad = np.argwhere(data.a[:, c] <= 0)
            if len(bad):
                i, *point = (int(k) for k in bad[0])
                raise ZooError(f"{where}: sample {i}, coefficient {channel} at grid point {tuple(point)} is "
                               f"{data.a[i, c][tuple(point)]:g}; {meta['problem']} needs {channel} > 0 everywhere "
                               f"({len(bad)} such values){mapping}")


def main(argv=None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Generate a PDE dataset (DiffOAS or solver baseline) and save it.")
    p.add_argument("--problem", default="darcy", choices=sorted(PROBLEMS))
    p.add_argument("--method", default="diffoas", choices=["diffoas", "gmres", "direct"])
    p.add_argument("--n", type=int, default=1000, help="number of samples")
    p.add_argument("--grid", type=int, default=None, help="nodes per side s (default: the paper's)")
    p.add_argument("--n-basis", type=int, default=None)
    p.add_argument("--action", default="stencil", choices=["stencil", "sparse"],
                   help="DiffOAS operator action: matrix-free (default) or assembled sparse matrix")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help=".npz, .h5 or .safetensors")
    args = p.parse_args(argv)
    kw = {"n_basis": args.n_basis, "action": args.action} if args.method == "diffoas" else {}
    data = generate(args.problem, args.method, args.n, args.grid, seed=args.seed, **kw)
    save_dataset(data, args.out)
    print(f"wrote {len(data)} {args.problem} samples ({args.method}) to {args.out} in {data.meta['time_total_s']:.2f} s")


if __name__ == "__main__":
    main()
