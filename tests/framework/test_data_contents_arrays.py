"""Bad contents in a valid container of the numeric data sets (found by `tests/support/fuzz_data.py`, cases in
`tests/support/data_cases/arrays.py`): each is a one-line ZooError naming the file, the row or array and the field,
where it was a traceback or was read and trained on."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import rdata
import torch
from data_cases.arrays import CPS_HEADER  # tests/support

from datamodules.byzantine import read_npz, read_rdata
from datamodules.conditional import ConditionalDataModule
from datamodules.linear_designs import load_npz
from datamodules.medmnist import read_medmnist
from datamodules.pde import PDEDataModule
from zoo.diffoas.generate import generate, load_dataset
from zoo.errors import ZooError

# ------------------------------------------------------------------------------------------------ GENTLE (LDW-CPS)
CPS_ROW = "1.0,25.0,10.0,0.0,1.0,0.0,1.0,1000.0,0.0,{y}"


def _cps_dir(tmp_path, column: str | None = None, value: str = ""):
    """Three small splits in the released layout; `column` of train's second row set to `value`."""
    rng = np.random.default_rng(0)
    for split, n_cov, per in (("train", 4, 2), ("val", 1, 3), ("test", 1, 3)):
        rows = [",".join([f"{c % 2:.1f}", f"{20 + c:.1f}", *CPS_ROW.split(",")[2:-1], f"{rng.gamma(2, 3000):.3f}"])
                for c in range(n_cov) for _ in range(per)]
        if split == "train" and column is not None:
            cells = rows[1].split(",")
            cells[CPS_HEADER.split(",").index(column)] = value
            rows[1] = ",".join(cells)
        (tmp_path / f"{split}.csv").write_text("\n".join([CPS_HEADER, *rows]) + "\n")
    return str(tmp_path)


def _cps(data_dir):
    return ConditionalDataModule(dataset="cps", source="local", data_dir=data_dir, min_eval_samples=3)


def test_cps_files_as_released_are_read(tmp_path):
    dm = _cps(_cps_dir(tmp_path))
    dm.setup("fit")
    assert len(dm.frames["train"]) == 8


@pytest.mark.parametrize("column, value, expected", [
    # negative ages, schooling or earnings, indicators outside {0, 1}: standardised and trained on, silently
    ("age", "-1", r"age is -1 in row 1 .*expected >= 0"),
    ("education", "-1", r"education is -1 in row 1 .*expected >= 0"),
    ("re74", "-1", r"re74 is -1 in row 1 .*expected >= 0"),
    ("re75", "-1", r"re75 is -1 in row 1 .*expected >= 0"),
    ("t", "-1", r"t is -1 in row 1 .*expected >= 0"),
    ("black", "-1", r"black is -1 in row 1 .*expected 0 or 1"),
    ("married", "2", r"married is 2 in row 1 .*expected 0 or 1"),
    ("nodegree", "0.5", r"nodegree is 0.5 in row 1 .*expected 0 or 1"),
    # these were refused before, without the file or the cell
    ("age", "zz_bogus", r"age is 'zz_bogus' in row 1 .*expected a number"),
    ("re78", "nan", r"non-finite re78 \(nan\) in row 1 "),
])
def test_cps_value_out_of_its_range_names_file_row_and_column(tmp_path, column, value, expected):
    with pytest.raises(ZooError, match=rf"cps train file .*train\.csv: {expected}"):
        _cps(_cps_dir(tmp_path, column, value)).setup("fit")


def test_cps_split_with_its_header_only_names_the_file(tmp_path):
    d = _cps_dir(tmp_path)
    (tmp_path / "val.csv").write_text(CPS_HEADER + "\n")
    with pytest.raises(ZooError, match=r"cps val file .*val\.csv is empty \(a header and no rows\)"):
        _cps(d).setup("fit")


# ------------------------------------------------------------------------------------------------ MinNorm (.npz)
def _minnorm_npz(path, **change):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 4, 12))
    w = np.eye(12)[0]
    arrays = {"X": X, "y": (X @ w)[:, None, :] + 0.1 * rng.standard_normal((2, 2, 4)), "w_star": w, **change}
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def _nan_at(shape, index):
    a = np.random.default_rng(1).standard_normal(shape)
    a[index] = np.nan
    return a


def test_minnorm_npz_as_written_is_read(tmp_path):
    (a, b) = load_npz(_minnorm_npz(tmp_path / "p.npz"))
    assert a["y"].shape == (2, 4) and b["w_star"].shape == (12,)


@pytest.mark.parametrize("change, expected", [
    # one design whose y is (0, n): K = 0 responses, an IndexError at test time
    ({"X": np.ones((4, 12)), "y": np.ones((0, 4))}, r"y has shape \(0, 4\), which does not fit .*K >= 1"),
    # NaNs reached the solver, which refused them naming no file (w*'s NaN as "y has 4 non-finite entries")
    ({"X": _nan_at((2, 4, 12), (1, 2, 3))}, r"X\[1, 2, 3\] is nan, expected a finite number"),
    ({"y": _nan_at((2, 2, 4), (0, 1, 0))}, r"y\[0, 1, 0\] is nan, expected a finite number"),
    ({"w_star": _nan_at((12,), 5)}, r"w_star\[5\] is nan, expected a finite number"),
    ({"X": np.ones((2, 4, 3)), "w_star": None}, r"X has shape \(2, 4, 3\): n=4 rows and d=3 columns per design.*needs n < d"),
])
def test_minnorm_npz_bad_contents_name_the_file_and_array(tmp_path, change, expected):
    with pytest.raises(ZooError, match=rf"p\.npz: {expected}"):
        load_npz(_minnorm_npz(tmp_path / "p.npz", **change))


# ------------------------------------------------------------------------------------------------ ByMI features
def _features(**change):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.standard_normal((40, 3)), "y_train": np.tile(np.arange(1.0, 11.0), 4),
              "x_test": rng.standard_normal((20, 3)), "y_test": np.tile(np.arange(1.0, 11.0), 2)}
    for key, (index, value) in change.items():
        arrays[key] = arrays[key].astype(type(value)) if isinstance(value, str) else arrays[key]
        arrays[key][index] = value
    return arrays


@pytest.mark.parametrize("fmt", ["npz", "rdata"])
def test_bymi_features_as_released_are_read(tmp_path, fmt):
    path = _write_features(tmp_path, fmt, _features())
    x_tr, y_tr, _, y_te = (read_npz if fmt == "npz" else read_rdata)(path)
    assert x_tr.shape == (40, 3) and sorted(set(y_tr.tolist())) == list(range(10)) and y_te.max() == 9


def _write_features(tmp_path, fmt, arrays):
    path = tmp_path / f"f.{'npz' if fmt == 'npz' else 'Rdata'}"
    if fmt == "npz":
        np.savez(path, **arrays)
    else:
        rdata.write_rda(path, arrays)
    return str(path)


BAD_FEATURES = [
    # text features reached np.isfinite: a TypeError traceback (the rdata writer has no character matrices)
    ("npz", {"x_test": (slice(None), "zz_bogus")}, r"x_test holds <U\d+ values, expected numbers"),
    # text labels were refused as "test labels [...] do not occur in y_train", naming the wrong array
    *((fmt, {"y_train": (slice(None), "zz_bogus")}, r"y_train holds <U\d+ values, expected numbers")
      for fmt in ("npz", "rdata")),
    *((fmt, change, expected) for fmt in ("npz", "rdata") for change, expected in [
        ({"x_train": ((3, 1), np.nan)}, r"x_train\[3, 1\] is nan, expected a finite feature"),
        # a NaN or -1 training label became an 11th class, refused later by the model naming no file
        ({"y_train": (0, np.nan)}, r"y_train\[0\] is nan, expected a class label"),
        ({"y_train": (2, -1.0)}, r"y_train\[2\] is -1.0, expected a class label, a whole number >= 0"),
        ({"y_test": (4, 2.5)}, r"y_test\[4\] is 2.5, expected a class label"),
    ]),
]


@pytest.mark.parametrize("fmt, change, expected", BAD_FEATURES)
def test_bymi_bad_feature_contents_name_the_file_and_array(tmp_path, fmt, change, expected):
    path = _write_features(tmp_path, fmt, _features(**change))
    with pytest.raises(ZooError, match=rf"f\.(npz|Rdata): {expected}"):
        (read_npz if fmt == "npz" else read_rdata)(path)


# ------------------------------------------------------------------------------------------------ DiffOAS
def _own_pde_npz(path, problem="darcy", channels=1, change=None, meta=None):
    """This project's own layout (save_dataset): a (N, C, s, s) > 0, f and u (N, s, s), the metadata as JSON."""
    rng = np.random.default_rng(0)
    n, s = 3, 6
    arrays = {"a": np.exp(rng.standard_normal((n, channels, s, s))), "f": rng.random((n, s, s)),
              "u": rng.random((n, s, s))}
    if change:
        name, index, value = change
        if isinstance(value, str):
            arrays[name] = arrays[name].astype(str)
        arrays[name][index] = value
    meta = {"problem": problem, "method": "gmres", "grid_size": s} if meta is None else meta
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
    return str(path)


@pytest.mark.parametrize("problem, channels, change, expected", [
    # a NaN or inf in a file without a residual check went into the inputs or targets: NaN losses and metrics
    ("darcy", 1, ("u", (1, 0, 2), np.nan), r"sample 1, solution u at grid point \(0, 2\) is nan, expected a finite"),
    ("darcy", 1, ("a", (2, 0, 3, 4), np.inf), r"sample 2, coefficient a channel 'K' at grid point \(3, 4\) is inf"),
    ("darcy", 1, ("f", (0, 5, 5), -np.inf), r"sample 0, source f at grid point \(5, 5\) is -inf"),
    # a permeability <= 0 is no Darcy problem (the operator is no longer elliptic)
    ("darcy", 1, ("a", (1, 0, 0, 0), -1.0), r"sample 1, coefficient K at grid point \(0, 0\) is -1; darcy needs K > 0"),
    ("diffusion", 2, ("a", (0, 0, 2, 2), 0.0), r"sample 0, coefficient k at grid point \(2, 2\) is 0; diffusion needs"),
])
def test_pde_own_file_with_bad_values_names_sample_field_and_point(tmp_path, problem, channels, change, expected):
    path = _own_pde_npz(tmp_path / "own.npz", problem, channels, change)
    dm = PDEDataModule(problem=problem, source="local", train_path=path, test_path=path)
    with pytest.raises(ZooError, match=rf"own\.npz: {expected}"):
        dm.setup("test")


@pytest.mark.parametrize("meta, change, expected", [
    # a JSON list as metadata: an AttributeError ('list' object has no attribute 'get')
    ([1, 2], None, r"its metadata 'meta' is a JSON list, expected an object with problem, method and grid_size"),
    # no grid size: "darcy with meta grid_size None needs a (N, 1, None, None)"
    ({"problem": "darcy", "method": "gmres"}, None, r"its metadata has grid_size = None, expected the nodes per side"),
    ({"problem": "darcy", "method": "gmres", "grid_size": "6"}, None, r"its metadata has grid_size = '6', expected"),
    ({"method": "gmres", "grid_size": 6}, None, r"its metadata has problem = None, expected a PDE name"),
    # text where numbers belong: a TypeError in np.isfinite
    (None, ("u", (0, 1, 1), "zz_bogus"), r"the solution u holds <U\d+ values, expected numbers"),
])
def test_pde_own_file_with_bad_metadata_or_text_is_refused(tmp_path, meta, change, expected):
    path = _own_pde_npz(tmp_path / "own.npz", change=change, meta=meta)
    dm = PDEDataModule(problem="darcy", source="local", train_path=path, test_path=path)
    with pytest.raises(ZooError, match=rf"own\.npz: {expected}"):
        dm.setup("test")


@pytest.mark.parametrize("meta, change, expected", [
    (None, ("u", (1, 0, 2), np.nan), r"sample 1, solution u at grid point \(0, 2\) is nan, expected a finite"),
    ({"problem": "heat", "method": "gmres", "grid_size": 6}, None,
     r"its metadata has problem = 'heat', expected a PDE name \(darcy, helmholtz, diffusion\)"),
])
def test_the_library_loader_checks_what_the_datamodule_relies_on(tmp_path, meta, change, expected):
    """`zoo.diffoas.load_dataset` is public: a user reading a file in Python gets the datamodule's checks, not NaNs
    in the arrays it returns."""
    path = _own_pde_npz(tmp_path / "own.npz", change=change, meta=meta)
    with pytest.raises(ZooError, match=rf"^{re.escape(path)}: {expected}"):
        load_dataset(path)
    assert len(load_dataset(_own_pde_npz(tmp_path / "fine.npz"))) == 3


def test_pde_own_file_with_valid_values_is_read(tmp_path):
    path = _own_pde_npz(tmp_path / "own.npz", "helmholtz", 1, ("a", (0, 0, 1, 1), -0.3))  # k2 may be negative
    dm = PDEDataModule(problem="helmholtz", source="local", train_path=path, test_path=path, n_train=2, n_val=1)
    dm.setup("fit")
    assert len(dm._sets["train"]) == 2


def test_pde_official_pt_with_a_nan_where_the_residual_does_not_look(tmp_path):
    # the official .pt reader checks ||A(x) y - f|| on the interior only: a NaN in a corner of x (no face touches it)
    # or of y passed it, and the run trained on NaN inputs
    d = generate("darcy", "direct", 2, 9, seed=0)
    x = np.swapaxes(d.a[:, 0], -1, -2).astype(np.float32)
    x[1, 0, 0] = np.nan
    path = tmp_path / "darcy_test_9_fGRF.pt"
    torch.save({"x": torch.from_numpy(x), "y": torch.from_numpy(d.u), "f": torch.from_numpy(d.f)}, path)
    dm = PDEDataModule(problem="darcy", source="local", train_path=str(path), test_path=str(path))
    with pytest.raises(ZooError, match=r"fGRF\.pt: sample 1, coefficient a channel 'K' at grid point \(0, 0\) is nan.*"
                                       r"\(read as x transposed -> a, f with boundary set to 0 -> f, y -> u\)"):
        dm.setup("test")


# ------------------------------------------------------------------------------------------------ SCoRe (MedMNIST)
def _medmnist(path, key=None, value=None):
    """organamnist.npz as MedMNIST ships it: {split}_images uint8 (N, 28, 28), {split}_labels uint8 (N, 1)."""
    rng = np.random.default_rng(0)
    data = {}
    for split, n in (("train", 20), ("val", 10), ("test", 10)):
        data[f"{split}_images"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        data[f"{split}_labels"] = (np.arange(n) % 10).reshape(-1, 1).astype(np.uint8)
    if key is not None:
        data[key] = value(data[key])
    np.savez_compressed(path, **data)
    return path


def _negative_row(y):
    y = y.astype(np.int64)
    y[3] = -1
    return y


@pytest.mark.parametrize("key, value, expected", [
    # text labels: the message took their minimum, numpy's UFuncNoLoopError
    ("val_labels", lambda y: np.full(y.shape, "zz_bogus"), r"val_labels must be integer classes 0..K-1, got <U8"),
    ("train_labels", _negative_row, r"train_labels must be integer classes 0..K-1, got -1 in row 3 \(1 negative"),
])
def test_medmnist_bad_labels_name_the_array(tmp_path, key, value, expected):
    with pytest.raises(ZooError, match=rf"organamnist\.npz: {expected}"):
        read_medmnist(_medmnist(tmp_path / "organamnist.npz", key, value))


def test_medmnist_file_as_released_is_read(tmp_path):
    data = read_medmnist(_medmnist(tmp_path / "organamnist.npz"))
    assert data["train_labels"].shape == (20, 1)
