"""Numeric data sets read from local files: GENTLE's LDW-CPS CSVs, MinNorm's .npz designs, DiffOAS's PDE files (the
official DiffOAS .pt, the FNO benchmark's .mat, PDEBench's .hdf5, this project's own .h5), SCoRe's MedMNIST .npz and
ByMI's feature files (.npz and the official .Rdata). Each is written small, in the layout its datamodule documents
(and its tests write); the containers the generic changes do not know (.pt, .hdf5/.h5, .Rdata) get the same array
changes through `more`, read and written back with their own libraries."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from fuzz_data import BOGUS, Case, array_changes
from fuzz_settings import ROOT

# ------------------------------------------------------------------------------------------------ GENTLE (CSV)
CPS_HEADER = "t,age,education,black,hispanic,married,nodegree,re74,re75,re78"  # the official datasets/cps/*.csv


def cps_rows(n_cov: int, per: int, seed: int, base_age: int = 20) -> list[str]:
    """Rows as the released LDW-CPS files write them (floats as `1.0`), `per` observations of each covariate."""
    rng = np.random.default_rng(seed)
    out = []
    for c in range(n_cov):
        t, age, educ = c % 2, base_age + c, 8 + c % 6
        for _ in range(per):
            out.append(f"{t:.1f},{age:.1f},{educ:.1f},0.0,1.0,0.0,1.0,{1000.0 * c:.1f},0.0,{rng.gamma(2, 3000):.3f}")
    return out


def gentle_cps(folder: Path) -> list[str]:
    splits = {"train": cps_rows(8, 2, 0), "val": cps_rows(2, 3, 1), "test": cps_rows(2, 3, 2)}
    for split, rows in splits.items():
        (folder / f"{split}.csv").write_text("\n".join([CPS_HEADER, *rows]) + "\n")
    return ["--data.init_args.source=local", f"--data.init_args.data_dir={folder}",
            "--data.init_args.min_eval_samples=3"]


# ------------------------------------------------------------------------------------------------ MinNorm (.npz)
def minnorm(batched: bool):
    """X (B, n, d), y (B, K, n), w_star (d,) -- or one design: X (n, d), y (K, n), w_star (d,)."""
    def write(folder: Path) -> list[str]:
        rng = np.random.default_rng(0)
        B, n, d, K = 2, 4, 12, 2
        X = rng.standard_normal((B, n, d))
        w = np.zeros(d)
        w[0] = 1.0
        y = X @ w
        y = y[:, None, :] + 0.1 * rng.standard_normal((B, K, n))
        arrays = {"X": X, "y": y, "w_star": w} if batched else {"X": X[0], "y": y[0], "w_star": w}
        np.savez(folder / "problems.npz", **arrays)
        return ["--data.init_args.source=local", f"--data.init_args.path={folder / 'problems.npz'}"]
    return write


# ------------------------------------------------------------------------------------------------ DiffOAS
S = 18  # the smoke configs' grid
PDE_ARGS = ["--data.init_args.n_train=4", "--data.init_args.n_val=2", "--trainer.max_steps=2"]


def _in_child(call: str) -> None:
    """Run `call` (an expression over this module) in a fresh interpreter. Generating PDE data draws its fields with
    torch, which starts torch's OpenMP threads; the fuzzer forks every run from this process, and a child forked after
    that hangs in its first parallel operation (its training never ends). So nothing here may compute with torch."""
    code = f"import data_cases.arrays as m; m.{call}"
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})


def _darcy(n: int, seed: int):
    """(a, f, u) of Darcy flow on the smoke grid, solved directly (a solver-made set: a valid test file)."""
    from zoo.diffoas.generate import generate

    return generate("darcy", "direct", n, S, seed=seed)


def _write_pt(path: Path, arrays: dict) -> None:
    import torch

    # a torch dict holds tensors; an array of strings can only be a (nested) list of str, which weights_only allows
    torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) if v.dtype.kind in "biuf" else v.tolist()
                for k, v in arrays.items()}, path)


def _official_pt(n: int, seed: int, method: str) -> dict[str, np.ndarray]:
    """As the official darcy scripts save them: x (N, s, s) float32 in the transposed frame, y (N, s, s) the padded
    solution, f (N, s, s) the drawn source (generate_darcy_f.py, GMRES) or (N, s-2, s-2) = A u (generate_darcy_u.py,
    DiffOAS)."""
    d = _darcy(n, seed)
    x = np.swapaxes(d.a[:, 0], -1, -2).astype(np.float32)
    f = d.f if method == "gmres" else d.f[:, 1:-1, 1:-1]
    return {"x": x, "y": d.u.astype(np.float64), "f": f.astype(np.float64)}


def write_official_pts(folder: str) -> None:
    _write_pt(Path(folder) / f"darcy_train_{S}_fGRF.pt", _official_pt(6, 0, "diffoas"))
    _write_pt(Path(folder) / f"darcy_test_{S}_fGRF.pt", _official_pt(3, 1, "gmres"))


def diffoas_pt(folder: Path) -> list[str]:
    _in_child(f"write_official_pts({str(folder)!r})")
    return ["--data.init_args.source=local", f"--data.init_args.train_path={folder / f'darcy_train_{S}_fGRF.pt'}",
            f"--data.init_args.test_path={folder / f'darcy_test_{S}_fGRF.pt'}"]


def pt_changes(path: Path) -> list[tuple[str, bytes]]:
    if path.suffix != ".pt":
        return []
    import torch

    obj = torch.load(path, weights_only=True)
    arrays = {k: v.numpy() for k, v in obj.items()}
    out = []
    for label, changed in array_changes(arrays):
        buf = io.BytesIO()
        _write_pt(buf, changed)
        out.append((label, buf.getvalue()))
    for label, other in (("a list of tensors, not a dict", list(obj.values())),
                         ("'y' of ints", {**obj, "y": torch.from_numpy(arrays["y"].round().astype(np.int64))})):
        buf = io.BytesIO()
        torch.save(other, buf)
        out.append((label, buf.getvalue()))
    return out


def _fno_fields(n: int, seed: int) -> dict[str, np.ndarray]:
    """The FNO benchmark's piececonst_*.mat: coeff (piecewise constant 12 / 3), sol, Kcoeff* (N, s, s) float64."""
    rng = np.random.default_rng(seed)
    coeff = np.where(rng.random((n, S, S)) > 0.5, 12.0, 3.0)
    sol = np.pad(rng.random((n, S - 2, S - 2)) * 0.01, ((0, 0), (1, 1), (1, 1)))
    return {"coeff": coeff, "sol": sol, "Kcoeff": coeff * 0.5, "Kcoeff_x": coeff[:, :, :-1], "Kcoeff_y": coeff}


def diffoas_mat(folder: Path) -> list[str]:
    from scipy.io import savemat

    savemat(folder / f"piececonst_r{S}_N6_smooth1.mat", _fno_fields(6, 0))
    savemat(folder / f"piececonst_r{S}_N3_smooth2.mat", _fno_fields(3, 1))
    return ["--data.init_args.source=local",
            f"--data.init_args.train_path={folder / f'piececonst_r{S}_N6_smooth1.mat'}",
            f"--data.init_args.test_path={folder / f'piececonst_r{S}_N3_smooth2.mat'}"]


def _read_h5(path: Path) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    import h5py

    with h5py.File(path, "r") as h:
        return {k: h[k][()] for k in h}, dict(h.attrs)


def _h5_bytes(arrays: dict[str, np.ndarray], attrs: dict[str, object]) -> bytes:
    import h5py

    buf = io.BytesIO()
    with h5py.File(buf, "w") as h:
        for k, v in arrays.items():
            h[k] = v.astype(np.bytes_) if v.dtype.kind == "U" else v  # HDF5 stores text as bytes
        for k, v in attrs.items():
            h.attrs[k] = v
    return buf.getvalue()


def h5_changes(path: Path) -> list[tuple[str, bytes]]:
    if path.suffix not in (".h5", ".hdf5"):
        return []
    arrays, attrs = _read_h5(path)
    out = [(label, _h5_bytes(changed, attrs)) for label, changed in array_changes(arrays)]
    if "meta" in attrs:  # this project's own layout: the generation metadata as a JSON attribute
        meta = json.loads(attrs["meta"])
        out.append(("attribute 'meta' dropped", _h5_bytes(arrays, {})))
        out.append(("attribute 'meta' not JSON", _h5_bytes(arrays, {"meta": BOGUS})))
        out.append(("attribute 'meta' a JSON list", _h5_bytes(arrays, {"meta": "[1, 2]"})))
        for key in ("problem", "method", "grid_size", "channels"):
            out.append((f"meta {key!r} dropped", _h5_bytes(arrays, {"meta": json.dumps(
                {k: v for k, v in meta.items() if k != key})})))
        for key, value in (("grid_size", BOGUS), ("grid_size", -1), ("grid_size", None), ("method", None),
                           ("problem", 7)):
            out.append((f"meta {key!r} = {value!r}", _h5_bytes(arrays, {"meta": json.dumps({**meta, key: value})})))
    return out


def diffoas_pdebench(folder: Path) -> list[str]:
    """PDEBench 2D_DarcyFlow_beta*.hdf5: nu (N, s, s), tensor (N, 1, s, s) float32 and the coordinates."""
    rng = np.random.default_rng(3)
    for name, n in (("2D_DarcyFlow_beta1.0_Train.hdf5", 6), ("2D_DarcyFlow_beta0.1_Train.hdf5", 3)):
        arrays = {"nu": rng.random((n, S, S)).astype(np.float32),
                  "tensor": rng.random((n, 1, S, S)).astype(np.float32),
                  "x-coordinate": ((np.arange(S) + 0.5) / S).astype(np.float32),
                  "y-coordinate": ((np.arange(S) + 0.5) / S).astype(np.float32),
                  "t-coordinate": np.linspace(0, 1, 10, dtype=np.float32)}
        (folder / name).write_bytes(_h5_bytes(arrays, {}))
    return ["--data.init_args.source=local",
            f"--data.init_args.train_path={folder / '2D_DarcyFlow_beta1.0_Train.hdf5'}",
            f"--data.init_args.test_path={folder / '2D_DarcyFlow_beta0.1_Train.hdf5'}"]


def diffoas_own(suffix: str):
    """This project's own files (`python -m zoo.diffoas.generate --out FILE`): a, f, u and the metadata."""
    def write(folder: Path) -> list[str]:
        for method, n, out in (("diffoas", 6, "train"), ("gmres", 3, "test")):
            subprocess.run([sys.executable, "-m", "zoo.diffoas.generate", "--problem", "darcy", "--method", method,
                            "--n", str(n), "--grid", str(S), "--n-basis", "2", "--out", str(folder / f"{out}{suffix}")],
                           cwd=ROOT, check=True, capture_output=True)
        return ["--data.init_args.source=local", f"--data.init_args.train_path={folder / f'train{suffix}'}",
                f"--data.init_args.test_path={folder / f'test{suffix}'}"]
    return write


# ------------------------------------------------------------------------------------------------ SCoRe (MedMNIST)
def score_medmnist(folder: Path) -> list[str]:
    """organamnist.npz as MedMNIST ships it: {split}_images uint8 (N, 28, 28), {split}_labels uint8 (N, 1)."""
    rng = np.random.default_rng(0)
    data = {}
    for split, per in (("train", 4), ("val", 1), ("test", 2)):
        k = 10 * per
        data[f"{split}_images"] = rng.integers(0, 256, (k, 28, 28), dtype=np.uint8)
        data[f"{split}_labels"] = (np.arange(k) % 10).reshape(-1, 1).astype(np.uint8)
    np.savez_compressed(folder / "organamnist.npz", **data)
    return ["--data.init_args.source=local", f"--data.init_args.root={folder}",
            "--data.init_args.imbalance_ratio=null"]


# ------------------------------------------------------------------------------------------------ ByMI features
def _features(seed: int = 0) -> dict[str, np.ndarray]:
    """ResNet18 -> PCA-20 features with labels 1..10 as doubles, as the official .Rdata holds them."""
    rng = np.random.default_rng(seed)
    return {"x_train": rng.standard_normal((40, 20)), "y_train": np.tile(np.arange(1.0, 11.0), 4),
            "x_test": rng.standard_normal((20, 20)), "y_test": np.tile(np.arange(1.0, 11.0), 2)}


BYMI_ARGS = ["--data.init_args.machines=3", "--data.init_args.n_per_machine=10", "--data.init_args.n_repeats=1",
             "--trainer.max_epochs=2"]


def bymi_npz(folder: Path) -> list[str]:
    np.savez(folder / "features.npz", **_features())
    return ["--data.init_args.source=npz", f"--data.init_args.path={folder / 'features.npz'}"]


def bymi_rdata(folder: Path) -> list[str]:
    import rdata

    rdata.write_rda(folder / "mnist_resnet18_pca_20.Rdata", _features())
    return ["--data.init_args.source=rdata", f"--data.init_args.path={folder / 'mnist_resnet18_pca_20.Rdata'}"]


def rdata_changes(path: Path) -> list[tuple[str, bytes]]:
    if path.suffix != ".Rdata":
        return []
    import rdata

    arrays = {k: np.asarray(v) for k, v in rdata.read_rda(path).items()}
    out = []
    for label, changed in array_changes(arrays):
        tmp = path.with_name("changed.Rdata")
        try:
            rdata.write_rda(tmp, changed)
        except AssertionError:  # the rdata writer has no character matrices (R has): that change cannot be written
            continue
        out.append((label, tmp.read_bytes()))
        tmp.unlink()
    return out


# ------------------------------------------------------------------------------------------------ cases
CASES = [
    Case("gentle_cps", "configs/smoke/gentle_cps.yaml", gentle_cps),
    Case("minnorm_npz", "configs/smoke/minnorm_gaussian.yaml", minnorm(True), verb="test"),
    Case("minnorm_npz_single", "configs/smoke/minnorm_gaussian.yaml", minnorm(False), verb="test"),
    Case("diffoas_pt", "configs/smoke/diffoas_darcy.yaml", diffoas_pt, args=PDE_ARGS, more=pt_changes),
    Case("diffoas_mat", "configs/smoke/diffoas_darcy.yaml", diffoas_mat, args=PDE_ARGS),
    Case("diffoas_pdebench", "configs/smoke/diffoas_darcy.yaml", diffoas_pdebench, args=PDE_ARGS, more=h5_changes),
    Case("diffoas_own_h5", "configs/smoke/diffoas_darcy.yaml", diffoas_own(".h5"), args=PDE_ARGS, more=h5_changes),
    Case("bymi_npz", "configs/smoke/bymi_mnist.yaml", bymi_npz, args=BYMI_ARGS),
    Case("bymi_rdata", "configs/smoke/bymi_mnist.yaml", bymi_rdata, args=BYMI_ARGS, more=rdata_changes),
]


def _generic_changes_take(arrays: dict[str, np.ndarray]) -> bool:
    """Whether fuzz_data's array changes handle these arrays: they fail on a 0-d array (the own .npz's `meta`) and
    on an unsigned one (a -1 does not fit MedMNIST's uint8 pixels) -- reported; the cases join once they do."""
    try:
        array_changes(arrays)
    except (IndexError, ValueError, OverflowError):
        return False
    return True


if _generic_changes_take({"meta": np.array("{}")}):
    CASES.append(Case("diffoas_own_npz", "configs/smoke/diffoas_darcy.yaml", diffoas_own(".npz"), args=PDE_ARGS))
if _generic_changes_take({"labels": np.zeros((2, 1), np.uint8)}):
    CASES.append(Case("score_medmnist", "configs/smoke/score_organamnist.yaml", score_medmnist))
