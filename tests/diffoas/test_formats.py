"""Released PDE dataset formats, written here as their generators write them, read by `load_dataset`/`PDEDataModule`.

* official DiffOAS Darcy scripts (`darcy/generate_darcy_f.py`, `generate_darcy_u.py`): `torch.save` of a dict of
  tensors x (N, s, s) float32 coefficient, y (N, s, s) solution with zero boundary, f (N, s, s) drawn source
  (GMRES script) or (N, s-2, s-2) = A u (DiffOAS script). The oracle below assembles their matrix their way: the
  unknown of coefficient node (i, j) is number (j-1)(s-2) + (i-1), while solutions are reshaped row by row.
* FNO benchmark `piececonst_r421_N1024_smooth1.mat`: coeff, sol, Kcoeff, Kcoeff_x, Kcoeff_y (N, s, s) float64,
  MAT v5 (scipy.io) or v7.3 (HDF5 with a 512-byte MATLAB header; arrays stored column-major).
* PDEBench `2D_DarcyFlow_beta1.0_Train.hdf5`: nu (N, s, s), tensor (N, 1, s, s) float32, x-/y-/t-coordinate.
"""

import json

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import spsolve

from datamodules.pde import PDEDataModule
from zoo.diffoas.generate import load_dataset
from zoo.errors import ZooError

S = 9  # 7 x 7 interior


def official_darcy_matrix(coef: np.ndarray) -> sp.csr_matrix:
    """The official scripts' Darcy matrix, written out point by point: column-major numbering of coef's nodes."""
    K = coef.shape[0]
    n = K - 2
    A = sp.lil_matrix((n * n, n * n))
    for j in range(1, K - 1):
        for i in range(1, K - 1):
            p = (j - 1) * n + (i - 1)
            for di, dj, step in ((-1, 0, -1), (1, 0, 1), (0, -1, -n), (0, 1, n)):
                face = 0.5 * (coef[i, j] + coef[i + di, j + dj])
                A[p, p] += face
                if 1 <= i + di <= K - 2 and 1 <= j + dj <= K - 2:
                    A[p, p + step] = -face
    return (A * (K - 1) ** 2).tocsr()


def _pad(v: np.ndarray) -> np.ndarray:
    return np.pad(v, ((0, 0), (1, 1), (1, 1)))


def write_official_gmres(path, n=5, seed=0):
    """As generate_darcy_f.py: x = exp(GRF) float32, f = exp(GRF) on the full grid, y = the solve, padded."""
    rng = np.random.default_rng(seed)
    x = np.exp(rng.normal(size=(n, S, S))).astype(np.float32)
    F = np.exp(rng.normal(size=(n, S, S))).astype(np.float32)
    y = np.stack([spsolve(official_darcy_matrix(x[k].astype(np.float64)).tocsc(),
                          F[k, 1:-1, 1:-1].astype(np.float64).ravel()).reshape(S - 2, S - 2) for k in range(n)])
    data = {"x": torch.from_numpy(x), "y": torch.from_numpy(_pad(y)), "f": torch.from_numpy(F)}
    torch.save(data, path)
    return data


def write_official_diffoas(path, n=6, n_basis=3, seed=1, bug_y=False, bug_x=None):
    """As generate_darcy_u.py: u = w . U (basis solutions), f = A(x) u on the interior (float64), y = u padded.
    bug_y: y = the last basis solution for every sample (the script as released); bug_x: 'shift' (x[k] belongs to
    sample k - n_basis, the train file) or 'extra' (n_basis more x than y, the test file)."""
    rng = np.random.default_rng(seed)
    w = np.exp(rng.normal(size=(n + n_basis, S, S))).astype(np.float32)
    basis_x = w[:n_basis]
    U = np.stack([spsolve(official_darcy_matrix(c.astype(np.float64)).tocsc(), np.ones((S - 2) ** 2))
                  for c in basis_x])
    xs, ys, fs = [], [], []
    for k in range(n):
        c = w[n_basis + k]
        weights = rng.normal(size=n_basis)
        u = (weights / np.linalg.norm(weights)) @ U
        fs.append((official_darcy_matrix(c.astype(np.float64)) @ u).reshape(S - 2, S - 2))
        ys.append((U[-1] if bug_y else u).reshape(S - 2, S - 2))
        xs.append(c)
    x = np.stack(xs)
    if bug_x == "shift":
        x = np.concatenate([basis_x, x])[:n]
    elif bug_x == "extra":
        x = np.concatenate([basis_x, x])
    data = {"x": torch.from_numpy(x), "y": torch.from_numpy(_pad(np.stack(ys))), "f": torch.from_numpy(np.stack(fs))}
    torch.save(data, path)
    return data


# ---------------------------------------------------------------------------------------------- official .pt
def test_official_gmres_pt_maps_to_coefficient_source_solution(tmp_path):
    raw = write_official_gmres(tmp_path / "darcy_test_9_fGRF.pt")
    d = load_dataset(tmp_path / "darcy_test_9_fGRF.pt")
    assert d.meta["method"] == "gmres" and d.meta["problem"] == "darcy" and d.meta["grid_size"] == S
    assert d.meta["format"].startswith("diffoas-official") and "x transposed -> a" in d.meta["fields"]
    assert d.a.shape == (5, 1, S, S) and d.u.dtype == np.float64
    np.testing.assert_array_equal(d.a[:, 0], raw["x"].numpy().transpose(0, 2, 1))  # x is in the transposed frame
    np.testing.assert_array_equal(d.u, raw["y"].numpy())
    np.testing.assert_array_equal(d.f[:, 1:-1, 1:-1], raw["f"].numpy()[:, 1:-1, 1:-1])
    assert not d.f[:, 0].any() and not d.f[:, :, -1].any()  # the drawn source's boundary is unused by the solve
    assert d.residuals().max() < 1e-10  # this project's operator on the mapped fields: the same PDE


def test_official_diffoas_pt_with_u_saved(tmp_path):
    raw = write_official_diffoas(tmp_path / "darcy_train_9_fGRF.pt")
    d = load_dataset(tmp_path / "darcy_train_9_fGRF.pt")
    assert d.meta["method"] == "diffoas" and "zero-padded" in d.meta["fields"]
    np.testing.assert_array_equal(d.f[:, 1:-1, 1:-1], raw["f"].numpy())
    assert d.residuals().max() < 1e-12  # f = A u exactly


def test_official_diffoas_pt_as_released_is_refused_with_its_known_bugs(tmp_path):
    write_official_diffoas(tmp_path / "y.pt", bug_y=True)
    with pytest.raises(ZooError, match="every y is the same field.*last basis solution"):
        load_dataset(tmp_path / "y.pt")
    write_official_diffoas(tmp_path / "test.pt", bug_x="extra")
    with pytest.raises(ZooError, match="x has 9 samples but y 6.*basis coefficients"):
        load_dataset(tmp_path / "test.pt")
    write_official_diffoas(tmp_path / "train.pt", bug_x="shift")
    with pytest.raises(ZooError, match="sample 0 does not solve the Darcy problem"):
        load_dataset(tmp_path / "train.pt")


class _NotATensor:
    pass


def test_pt_needing_a_pickle_or_of_another_layout_is_refused(tmp_path):
    torch.save({"x": _NotATensor()}, tmp_path / "pickle.pt")
    with pytest.raises(ZooError, match="needs a pickle"):
        load_dataset(tmp_path / "pickle.pt")
    torch.save({"coeff": torch.zeros(2, S, S)}, tmp_path / "other.pt")
    with pytest.raises(ZooError, match=r"matches no known layout: holds \['coeff'\]"):
        load_dataset(tmp_path / "other.pt")
    torch.save({"x": torch.zeros(2, S, S, 2), "y": torch.zeros(2, S, S), "f": torch.zeros(2, S, S)},
               tmp_path / "water_train_9_uGRF2.pt")  # the ground-water script's two-channel x
    with pytest.raises(ZooError, match="ground-water and acoustics"):
        load_dataset(tmp_path / "water_train_9_uGRF2.pt")
    (tmp_path / "trunc.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ZooError, match="cannot read PDE dataset"):
        load_dataset(tmp_path / "trunc.pt")


# ---------------------------------------------------------------------------------------------- FNO .mat
def _fno_fields(n=3, s=11, seed=2):
    rng = np.random.default_rng(seed)
    coeff = np.where(rng.random((n, s, s)) > 0.5, 12.0, 3.0)
    sol = _pad(rng.random((n, s - 2, s - 2)))
    return {"coeff": coeff, "sol": sol, "Kcoeff": coeff * 0.5, "Kcoeff_x": coeff[:, :, :-1], "Kcoeff_y": coeff}


def _check_fno(d, fields):
    np.testing.assert_array_equal(d.a[:, 0], fields["coeff"])
    np.testing.assert_array_equal(d.u, fields["sol"])
    assert (d.f[:, 1:-1, 1:-1] == 1.0).all() and not d.f[:, 0].any() and not d.f[:, :, -1].any()
    assert d.meta["method"] == "external-solver" and d.meta["grid_size"] == 11 and d.meta["problem"] == "darcy"


def test_fno_mat_v5(tmp_path):
    fields = _fno_fields()
    scipy.io.savemat(tmp_path / "piececonst_r11_N3_smooth1.mat", fields)
    d = load_dataset(tmp_path / "piececonst_r11_N3_smooth1.mat")
    _check_fno(d, fields)
    assert "MAT v5" in d.meta["format"]


def write_mat73(path, fields):
    """A MATLAB v7.3 file: HDF5 behind a 512-byte MATLAB header, each array stored with its axes reversed."""
    with h5py.File(path, "w", userblock_size=512) as h:
        for k, v in fields.items():
            h.create_dataset(k, data=np.ascontiguousarray(v.T)).attrs["MATLAB_class"] = np.bytes_("double")
    head = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    with open(path, "r+b") as fh:
        fh.write(head.ljust(116) + b" " * 8 + b"\x00\x02IM")


def test_fno_mat_v73_hdf5(tmp_path):
    fields = _fno_fields()
    write_mat73(tmp_path / "piececonst_r11_N3_smooth2.mat", fields)
    d = load_dataset(tmp_path / "piececonst_r11_N3_smooth2.mat")
    _check_fno(d, fields)  # axes restored: a transposed read would fail (the fields are not symmetric)
    assert "v7.3" in d.meta["format"]


def test_mat_without_coeff_sol_names_its_keys(tmp_path):
    scipy.io.savemat(tmp_path / "ns.mat", {"a": np.zeros((2, 4, 4)), "u": np.zeros((2, 4, 4))})
    with pytest.raises(ZooError, match=r"holds keys \['a', 'u'\].*coeff, sol"):
        load_dataset(tmp_path / "ns.mat")


# ---------------------------------------------------------------------------------------------- PDEBench
def write_pdebench(path, n=4, s=8, seed=3):
    rng = np.random.default_rng(seed)
    nu = rng.random((n, s, s)).astype(np.float32)
    tensor = rng.random((n, 1, s, s)).astype(np.float32)
    with h5py.File(path, "w") as h:
        h["nu"], h["tensor"] = nu, tensor
        h["x-coordinate"] = h["y-coordinate"] = ((np.arange(s) + 0.5) / s).astype(np.float32)
        h["t-coordinate"] = np.linspace(0, 1, 10, dtype=np.float32)
    return nu, tensor


def test_pdebench_darcy_hdf5(tmp_path):
    nu, tensor = write_pdebench(tmp_path / "2D_DarcyFlow_beta0.1_Train.hdf5")
    d = load_dataset(tmp_path / "2D_DarcyFlow_beta0.1_Train.hdf5")
    np.testing.assert_array_equal(d.a[:, 0], nu)
    np.testing.assert_array_equal(d.u, tensor[:, 0])
    assert (d.f == np.float32(0.1)).all() and d.meta["beta"] == 0.1 and d.meta["grid"] == "cell-centred"
    assert d.meta["method"] == "external-solver" and d.meta["format"].startswith("pdebench-darcy")
    write_pdebench(tmp_path / "darcy.hdf5")
    with pytest.raises(ZooError, match="beta only in the released file name"):
        load_dataset(tmp_path / "darcy.hdf5")
    with h5py.File(tmp_path / "other.h5", "w") as h:
        h["density"] = np.zeros((2, 3))
    with pytest.raises(ZooError, match=r"holds keys \['density'\].*PDEBench"):
        load_dataset(tmp_path / "other.h5")


def test_npz_of_another_layout_names_its_keys(tmp_path):
    np.savez(tmp_path / "x.npz", x=np.zeros((2, 4, 4)), y=np.zeros((2, 4, 4)))
    with pytest.raises(ZooError, match=r"holds keys \['x', 'y'\]"):
        load_dataset(tmp_path / "x.npz")


# ---------------------------------------------------------------------------------------------- datamodule
def test_datamodule_reads_released_files_and_logs_the_format(tmp_path, info_log):
    write_official_diffoas(tmp_path / "darcy_train_9_fGRF.pt", n=8)
    write_official_gmres(tmp_path / "darcy_test_9_fGRF.pt", n=3)
    dm = PDEDataModule(problem="darcy", source="local", train_path=str(tmp_path / "darcy_train_9_fGRF.pt"),
                       test_path=str(tmp_path / "darcy_test_9_fGRF.pt"), n_train=6, n_val=2, n_test=3, grid_size=S,
                       batch_size=2)
    dm.setup("fit")
    log = "\n".join(info_log)
    assert "format diffoas-official" in log and "x transposed -> a" in log
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (2, 2, S, S) and y.shape == (2, 1, S, S)
    # a DiffOAS-made official file is not a test set; a PDEBench file (solver-made elsewhere) is
    bad = PDEDataModule(problem="darcy", source="local", train_path=str(tmp_path / "darcy_train_9_fGRF.pt"),
                        test_path=str(tmp_path / "darcy_train_9_fGRF.pt"))
    with pytest.raises(ZooError, match="must be solver-generated"):
        bad.setup("test")
    write_pdebench(tmp_path / "2D_DarcyFlow_beta1.0_Train.hdf5")
    ok = PDEDataModule(problem="darcy", source="local", train_path=str(tmp_path / "darcy_train_9_fGRF.pt"),
                       test_path=str(tmp_path / "2D_DarcyFlow_beta1.0_Train.hdf5"))
    ok.setup("test")
    assert len(ok._sets["test"]) == 4
    wrong = PDEDataModule(problem="helmholtz", source="local", train_path=str(tmp_path / "darcy_train_9_fGRF.pt"),
                          test_path=str(tmp_path / "darcy_test_9_fGRF.pt"))
    with pytest.raises(ZooError, match="holds 'darcy' data, not 'helmholtz'"):
        wrong.setup("test")


def test_batch_size_zero_is_refused():
    with pytest.raises(ZooError, match="batch_size must be >= 1, got 0"):
        PDEDataModule(batch_size=0)


def test_own_file_of_wrong_shape_is_refused_naming_the_shapes(tmp_path):
    # a hand-written file in this project's layout: a without its channel axis, or u on another grid than the
    # metadata says, used to end in a traceback (to_tensors, the model) instead of an error naming the shapes
    s, n = 6, 4
    meta = json.dumps({"problem": "darcy", "method": "gmres", "grid_size": s})
    good = {"a": np.ones((n, 1, s, s)), "f": np.ones((n, s, s)), "u": np.ones((n, s, s))}
    for name, bad in {"a3d": {"a": np.ones((n, s, s))}, "ugrid": {"u": np.ones((n, s - 1, s - 1))},
                      "ulen": {"u": np.ones((n - 1, s, s))}}.items():
        np.savez(tmp_path / f"{name}.npz", meta=np.array(meta), **{**good, **bad})
        dm = PDEDataModule(problem="darcy", source="local", train_path=str(tmp_path / f"{name}.npz"),
                           test_path=str(tmp_path / f"{name}.npz"))
        with pytest.raises(ZooError, match=rf"{name}.npz has a .*darcy with meta grid_size {s} needs "
                                           rf"a \(N, 1, {s}, {s}\)"):
            dm.setup("test")
    np.savez(tmp_path / "ok.npz", meta=np.array(meta), **good)
    dm = PDEDataModule(problem="darcy", source="local", train_path=str(tmp_path / "ok.npz"),
                       test_path=str(tmp_path / "ok.npz"), n_train=3, n_val=1)
    dm.setup("fit")
    assert dm._sets["train"].tensors[0].shape == (3, 2, s, s)
