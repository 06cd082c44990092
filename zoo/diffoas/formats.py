"""PDE dataset files: this project's own files and the released formats of other Darcy-flow generators.

Every reader returns ``(a, f, u, meta)`` in this project's convention (``zoo.diffoas.generate.PDEData``):
``a`` (N, C, s, s) coefficient channels, ``f`` (N, s, s) right-hand side, ``u`` (N, s, s) solution, all on one
grid and in one orientation (``a[i, :, r, c]``, ``f[i, r, c]`` and ``u[i, r, c]`` are the same point), in the
file's precision (promoted to one dtype). ``meta`` holds at least ``problem``, ``method``, ``grid_size``,
``n_samples``, ``channels``, plus ``format`` (the layout that was detected) and ``fields`` (how the file's fields
map to a, f, u; absent for this project's own files, whose metadata is returned exactly as written). The layout is decided by the file's container and its keys, never by trial and error; a file
that matches no layout is an error that lists its keys.

========================  =======================================  ==============================================
format                    files                                    fields -> (a, f, u)
========================  =======================================  ==============================================
``zoo``                   ``.npz``, ``.h5``/``.hdf5``,             ``a``, ``f``, ``u`` as stored; ``meta`` (JSON:
                          ``.safetensors`` from ``save_dataset``   npz key / HDF5 attribute / safetensors metadata)
``diffoas-official``      ``darcy_{train,test}_{s}_fGRF.pt`` of    ``x`` (N, s, s) -> ``a`` transposed (below);
                          the official ``darcy/generate_darcy_     ``f`` (N, s, s) -> ``f`` with its boundary set to
                          f.py`` (GMRES) and ``generate_darcy_     0, or (N, s-2, s-2) -> ``f`` zero-padded;
                          u.py`` (DiffOAS): a ``torch.save`` dict  ``y`` (N, s, s) -> ``u``
``fno-mat``               ``piececonst_r421_N1024_smooth*.mat``    ``coeff`` -> ``a``; ``f = 1`` on the interior
                          (FNO benchmark, Li et al. 2021), MAT     (the benchmark's source), 0 on the boundary;
                          v5 (scipy.io) or v7.3 (HDF5, h5py)       ``sol`` -> ``u``
``pdebench-darcy``        ``2D_DarcyFlow_beta{b}_Train.hdf5``      ``nu`` (N, s, s) -> ``a``; ``f = b`` (the
                          (PDEBench, Takamoto et al. 2022)         constant forcing, read from the file name);
                                                                   ``tensor`` (N, 1, s, s) -> ``u``
========================  =======================================  ==============================================

Notes per layout:

* ``diffoas-official``: read only with ``torch.load(weights_only=True)``; a file that needs a pickle is refused.
  The scripts number the unknowns column by column of the coefficient array (``build_darcy2``/``creat_f`` loop
  over its second index) but reshape solutions and sources row by row, so ``y`` and ``f`` are the transpose of
  ``x``'s frame: ``a = x^T`` puts all three on one frame (checked: the residual below is at solver tolerance only
  then). ``method`` is ``gmres`` when ``f`` covers the full grid (``generate_darcy_f.py``: a drawn source, of
  which the solve uses the interior) and ``diffoas`` when it covers the interior (``generate_darcy_u.py``:
  ``f = A u``). Two known defects of ``generate_darcy_u.py`` are refused with a message rather than read: it saves
  its last basis solution as every ``y`` (notes: darcy/generate_darcy_u.py), and its basis loop appends the basis
  coefficients to ``x`` as well, which shifts ``x`` against ``y``/``f`` by ``n_basis``. Every file is checked on up
  to ``CHECK_SAMPLES`` samples: ``||A(a) u - f|| / ||f|| <= CHECK_RTOL`` with this project's Darcy operator (the same
  five-point flux operator as the official scripts).
* ``fno-mat``: MATLAB v7.3 files are HDF5 and store arrays column-major, so h5py reads them with reversed axes;
  they are transposed back. ``u`` is the benchmark's solution from its own solver (a different discretisation:
  the residual under this project's operator is not zero), ``method = "external-solver"``.
* ``pdebench-darcy``: the grid is cell-centred (``x-coordinate`` = (k + 1/2) / s), without boundary nodes, so
  ``f`` and ``u`` are not zero on the outer cells; ``method = "external-solver"``. The forcing is not stored in
  the file, only in its released name; a file renamed without ``beta<b>`` is an error.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np

from zoo.diffoas.operators import assemble_operator
from zoo.errors import ZooError

WRITE_FORMATS = {".npz": "npz", ".h5": "hdf5", ".hdf5": "hdf5", ".safetensors": "safetensors"}
READ_SUFFIXES = (*WRITE_FORMATS, ".pt", ".pth", ".mat")
OWN_KEYS = ("a", "f", "u")
CHECK_SAMPLES = 4
CHECK_RTOL = 1e-3  # GMRES at rtol 1e-5 with float32 storage sits near 1e-5; a wrong pairing or frame is O(1)
EXTERNAL_SOLVER = "external-solver"  # solver-generated by another project's code (FNO benchmark, PDEBench)

_GET_OWN = "write one with `python -m zoo.diffoas.generate --out FILE ...` or use source='generate'"


# ----------------------------------------------------------------------------------------------- writing
def write_dataset(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> Path:
    """This project's layout: ``a``, ``f``, ``u`` plus the metadata as JSON, as npz, HDF5 or safetensors."""
    fmt = WRITE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ZooError(f"cannot write dataset format {path.suffix!r} ({path}): use one of {sorted(WRITE_FORMATS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(meta)
    if fmt == "npz":
        np.savez(path, meta=np.array(text), **arrays)
    elif fmt == "hdf5":
        import h5py

        with h5py.File(path, "w") as h:
            for k, v in arrays.items():
                h.create_dataset(k, data=v)
            h.attrs["meta"] = text
    else:
        from safetensors.numpy import save_file

        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(path), metadata={"meta": text})
    return path


# ----------------------------------------------------------------------------------------------- reading
def read_dataset(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``(a, f, u, meta)`` from any supported file (see the module docstring); ZooError naming the problem."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in READ_SUFFIXES:
        raise ZooError(f"unknown dataset format {path.suffix!r} for {path}: use one of {list(READ_SUFFIXES)}")
    if not path.is_file():
        raise ZooError(f"PDE dataset {path} not found: {_GET_OWN}, or point to a released file "
                       "(official DiffOAS darcy_*_fGRF.pt, FNO piececonst_*.mat, PDEBench 2D_DarcyFlow_beta*.hdf5)")
    try:
        if suffix in (".pt", ".pth"):
            return _read_official_pt(path)
        if suffix == ".mat":
            return _read_fno_mat(path)
        if suffix == ".npz":
            return _read_own_npz(path)
        if suffix == ".safetensors":
            return _read_own_safetensors(path)
        return _read_hdf5(path)
    except ZooError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, EOFError) as e:  # a damaged or truncated container
        raise ZooError(f"cannot read PDE dataset {path} ({type(e).__name__}: {e})") from e


def _own(a, f, u, meta_text) -> tuple:
    return a, f, u, json.loads(meta_text)  # the metadata as written: a round trip changes nothing


def _no_layout(path: Path, keys, known: str):
    raise ZooError(f"{path} matches no known layout: it holds keys {sorted(keys)}; known: {known}")


def _read_own_npz(path: Path):
    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
        if not {*OWN_KEYS, "meta"} <= keys:
            _no_layout(path, keys, "a, f, u, meta (zoo.diffoas.generate.save_dataset)")
        return _own(*(z[k] for k in OWN_KEYS), str(z["meta"]))


def _read_own_safetensors(path: Path):
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as st:
        keys, meta = set(st.keys()), (st.metadata() or {}).get("meta")
        if not set(OWN_KEYS) <= keys or meta is None:
            _no_layout(path, keys, "a, f, u + metadata 'meta' (zoo.diffoas.generate.save_dataset)")
        return _own(*(st.get_tensor(k) for k in OWN_KEYS), meta)


def _read_hdf5(path: Path):
    import h5py

    with h5py.File(path, "r") as h:
        keys = set(h.keys())
        if set(OWN_KEYS) <= keys and "meta" in h.attrs:
            return _own(*(h[k][()] for k in OWN_KEYS), h.attrs["meta"])
        if {"nu", "tensor"} <= keys:
            return _pdebench_darcy(path, h)
        _no_layout(path, keys, "a, f, u + attribute meta (zoo.diffoas.generate.save_dataset); "
                               "nu, tensor, x-coordinate, y-coordinate (PDEBench 2D_DarcyFlow_beta*.hdf5)")


def _promote(*arrays) -> list[np.ndarray]:
    dt = np.result_type(*arrays, np.float32)
    return [np.asarray(x, dtype=dt) for x in arrays]


def _zero_boundary_source(shape, value: float, dtype) -> np.ndarray:
    f = np.zeros(shape, dtype=dtype)
    f[:, 1:-1, 1:-1] = value
    return f


def _external_meta(fmt: str, fields: str, a: np.ndarray, **kw) -> dict:
    return {"problem": "darcy", "method": EXTERNAL_SOLVER, "grid_size": int(a.shape[-1]),
            "n_samples": int(a.shape[0]), "channels": ["K"], "dtype": str(a.dtype), "format": fmt,
            "fields": fields, **kw}


# --- PDEBench -------------------------------------------------------------------------------------------
_BETA = re.compile(r"beta([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)")


def _pdebench_darcy(path: Path, h):
    nu, tensor = h["nu"], h["tensor"]
    if nu.ndim != 3 or tensor.ndim != 4 or tensor.shape[1] != 1 or tensor.shape[0] != nu.shape[0] \
            or tensor.shape[2:] != nu.shape[1:] or nu.shape[1] != nu.shape[2]:
        raise ZooError(f"{path}: PDEBench Darcy layout needs nu (N, s, s) and tensor (N, 1, s, s), "
                       f"got nu {nu.shape} and tensor {tensor.shape}")
    m = _BETA.search(path.name)
    if m is None:
        raise ZooError(f"{path}: a PDEBench Darcy file names its forcing beta only in the released file name "
                       "(2D_DarcyFlow_beta1.0_Train.hdf5); keep 'beta<value>' in the name")
    beta = float(m.group(1).rstrip("."))
    a, u = _promote(nu[()], tensor[:, 0])
    f = np.full_like(u, beta)  # cell-centred grid: no boundary nodes to zero
    meta = _external_meta("pdebench-darcy (HDF5)", f"nu -> a, beta={beta:g} (file name) -> f, tensor[:, 0] -> u",
                          a, beta=beta, grid="cell-centred", generator="PDEBench (Takamoto et al. 2022)")
    return a[:, None], f, u, meta


# --- FNO benchmark .mat ---------------------------------------------------------------------------------
def _read_fno_mat(path: Path):
    from scipy.io import loadmat, whosmat
    from scipy.io.matlab import matfile_version

    major, _ = matfile_version(str(path))
    if major == 2:  # v7.3: an HDF5 file, arrays in MATLAB's column-major order
        import h5py

        with h5py.File(path, "r") as h:
            keys = set(h.keys())
            if not {"coeff", "sol"} <= keys:
                _no_layout(path, keys, "coeff, sol (FNO benchmark piececonst_*.mat)")
            coeff, sol = (np.transpose(h[k][()]) for k in ("coeff", "sol"))
        container = "MAT v7.3 / HDF5, axes reversed"
    else:
        keys = {name for name, _, _ in whosmat(str(path))}
        if not {"coeff", "sol"} <= keys:
            _no_layout(path, keys, "coeff, sol (FNO benchmark piececonst_*.mat)")
        z = loadmat(str(path), variable_names=["coeff", "sol"])  # not Kcoeff*: unused, as large again
        coeff, sol = z["coeff"], z["sol"]
        container = f"MAT v{'5' if major == 1 else '4'}"
    if coeff.ndim != 3 or coeff.shape != sol.shape or coeff.shape[1] != coeff.shape[2]:
        raise ZooError(f"{path}: FNO Darcy layout needs coeff and sol of one shape (N, s, s), "
                       f"got {coeff.shape} and {sol.shape}")
    a, u = _promote(coeff, sol)
    f = _zero_boundary_source(u.shape, 1.0, u.dtype)  # the benchmark solves -div(a grad u) = 1, u = 0 on the edge
    meta = _external_meta(f"fno-mat ({container})", "coeff -> a, f = 1 (interior) -> f, sol -> u", a,
                          generator="FNO benchmark (Li et al. 2021), MATLAB solver")
    return a[:, None], f, u, meta


# --- official DiffOAS .pt -------------------------------------------------------------------------------
def _read_official_pt(path: Path):
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ZooError(f"{path} needs a pickle to load (torch.load(weights_only=True) refused it: "
                       f"{str(e).splitlines()[0]}); only plain tensor dicts are read, pickles are never run") from e
    if not isinstance(obj, dict) or not {"x", "y", "f"} <= set(obj) \
            or not all(isinstance(obj[k], torch.Tensor) for k in ("x", "y", "f")):
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise ZooError(f"{path} matches no known layout: holds {keys}; known: a dict of tensors x, y, f "
                       "(official DiffOAS darcy_*_fGRF.pt)")
    x, y, f = (obj[k].numpy() for k in ("x", "y", "f"))
    if x.ndim != 3 or y.ndim != 3 or x.shape[1:] != y.shape[1:] or x.shape[1] != x.shape[2]:
        raise ZooError(f"{path}: official DiffOAS Darcy layout needs x and y of shape (N, s, s), got x {x.shape}, "
                       f"y {y.shape} (the ground-water and acoustics scripts' layouts are not read)")
    n, s = y.shape[0], y.shape[-1]
    if f.shape[1:] == (s, s):
        method, f_map = "gmres", "f with boundary set to 0 -> f"
    elif f.shape[1:] == (s - 2, s - 2):
        method, f_map = "diffoas", "f (interior) zero-padded -> f"
    else:
        raise ZooError(f"{path}: f has shape {f.shape}, expected ({n}, {s}, {s}) (generate_darcy_f.py) or "
                       f"({n}, {s - 2}, {s - 2}) (generate_darcy_u.py)")
    if len(x) != n or len(f) != n:
        raise ZooError(f"{path}: x has {len(x)} samples but y {n} and f {len(f)}: generate_darcy_u.py appends its "
                       "basis coefficients to x as well, so x is shifted against y and f; save only the samples' x")
    if n > 1 and np.array_equal(y, np.broadcast_to(y[:1], y.shape)):
        raise ZooError(f"{path}: every y is the same field: generate_darcy_u.py saves its last basis solution "
                       "(ori_solver) as y for every sample instead of the sample's u (a known bug); save u instead")
    a = np.swapaxes(x, -1, -2)  # x is transposed against y and f (see the module docstring)
    a, y, f = _promote(a, y, f)
    if method == "gmres":
        f = f.copy()
        f[:, 0], f[:, -1], f[:, :, 0], f[:, :, -1] = 0, 0, 0, 0
    else:
        f = np.pad(f, ((0, 0), (1, 1), (1, 1)))
    _check_darcy_residual(path, a, f, y)
    meta = {"problem": "darcy", "method": method, "grid_size": int(s), "n_samples": int(n), "channels": ["K"],
            "dtype": str(a.dtype), "format": "diffoas-official (torch dict, weights_only)",
            "fields": f"x transposed -> a, {f_map}, y -> u", "generator": "official DiffOAS darcy scripts"}
    return a[:, None], f, y, meta


def _check_darcy_residual(path: Path, a: np.ndarray, f: np.ndarray, u: np.ndarray) -> None:
    for i in range(min(CHECK_SAMPLES, len(u))):
        b = f[i, 1:-1, 1:-1].astype(np.float64).ravel()
        r = assemble_operator(a[i]) @ u[i, 1:-1, 1:-1].astype(np.float64).ravel() - b
        rel = float(np.linalg.norm(r) / max(np.linalg.norm(b), 1e-300))
        if not rel <= CHECK_RTOL:
            raise ZooError(f"{path}: sample {i} does not solve the Darcy problem it pairs with "
                           f"(||A(x) y - f|| / ||f|| = {rel:.2e} > {CHECK_RTOL:g}): x, y and f do not belong "
                           "together (is x shifted by the basis coefficients, or is this not Darcy data?)")
