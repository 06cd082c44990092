"""Readers of the released file formats the MOMENT experiments use, and the bundled copies in aeon/sktime.

* **ETT** (``ETTh1.csv``, Zhou et al. 2021; copy in the moment repo's ``data/``): CSV with a header ``date`` +
  ``HUFL, HULL, MUFL, MULL, LUFL, LULL, OT``, hourly rows ``YYYY-MM-DD HH:MM:SS``, 17,420 rows.
* **UCR/UEA ``.ts``** (sktime/aeon format): ``#`` comments, ``@`` header lines (``@problemName``,
  ``@univariate``, ``@equalLength``, ``@classLabel true <labels>``, ...), then ``@data`` and one case per line:
  channels separated by ``:``, values by ``,``, the class label last; ``?`` is a missing value.
* **UCR anomaly archive** (Wu & Keogh, KDD Cup 2021): ``NNN_UCR_Anomaly_<name>_<trainEnd>_<begin>_<end>.txt``,
  the values whitespace-separated, the labels in the name (anomaly = points begin .. end-1, 0-based, as aeon's
  copy of dataset 135 labels them). TSB-UAD's ``.out`` copy (used by the moment repo): CSV ``value,label``
  without a header, the training length in the 5th ``_`` field of the name. aeon's ``KDD-TSAD_135``:
  ``<name>_TEST.csv`` (``timestamp,value,is_anomaly``, the whole series) + ``<name>_TRAIN.csv`` (its first
  ``trainEnd`` rows).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from zoo.errors import ZooError

ETT_COLUMNS = ("date", "HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
AEON_CLASSIFICATION = ("GunPoint", "ArrowHead", "ItalyPowerDemand", "BasicMotions")
AEON_ANOMALY = {"KDD-TSAD_135": "135_UCR_Anomaly_InternalBleeding16"}


# ------------------------------------------------------------------------------------------------ ETT
def read_ett_csv(path: str | Path) -> pd.DataFrame:
    """An ETT CSV with its released header; ``date`` parsed, the 7 load/temperature columns as float64."""
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"ETT file {path} does not exist; ETTh1.csv is in the moment repo's data/ folder "
                       "(github.com/moment-timeseries-foundation-model/moment) or github.com/zhouhaoyi/ETDataset")
    df = pd.read_csv(path)
    if tuple(df.columns) != ETT_COLUMNS:
        raise ZooError(f"{path}: header {list(df.columns)} is not the ETT schema {list(ETT_COLUMNS)}")
    try:
        df["date"] = pd.to_datetime(df["date"], format="%Y-%m-%d %H:%M:%S")
        df[list(ETT_COLUMNS[1:])] = df[list(ETT_COLUMNS[1:])].astype(np.float64)
    except (ValueError, TypeError) as e:
        raise ZooError(f"{path}: not ETT rows (date 'YYYY-MM-DD HH:MM:SS' + 7 numbers): {e}") from e
    return df


# ------------------------------------------------------------------------------------------------ .ts
@dataclass
class TSData:
    series: list[np.ndarray]  # one [channels, length] float64 array per case
    labels: np.ndarray  # class labels as strings
    meta: dict

    @property
    def n_channels(self) -> int:
        return self.series[0].shape[0]

    def as_array(self) -> np.ndarray:
        """[cases, channels, length] (equal-length files only)."""
        lengths = {s.shape[1] for s in self.series}
        if len(lengths) > 1:
            raise ZooError(f"{self.meta.get('problemname')}: series of unequal lengths {sorted(lengths)[:5]}")
        return np.stack(self.series)


def read_ts(path: str | Path) -> TSData:
    """A UCR/UEA ``.ts`` classification file (equal or unequal length, uni- or multivariate, ``?`` = NaN)."""
    path = Path(path)
    if not path.is_file():
        raise ZooError(f".ts file {path} does not exist (UCR/UEA archives: timeseriesclassification.com)")
    meta: dict = {}
    series, labels = [], []
    in_data = False
    with path.open(encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                if not line.startswith("@"):
                    raise ZooError(f"{path}:{lineno}: data before @data")
                key, _, value = line[1:].partition(" ")
                key = key.lower()
                if key == "data":
                    in_data = True
                elif key == "classlabel":
                    parts = value.split()
                    meta["classlabel"] = bool(parts) and parts[0].lower() == "true"
                    meta["class_values"] = parts[1:]
                elif key in ("timestamps", "missing", "univariate", "equallength"):
                    meta[key] = value.strip().lower() == "true"
                else:
                    meta[key] = value.strip()
                continue
            if meta.get("timestamps"):
                raise ZooError(f"{path}: .ts files with timestamps are not supported")
            *channels, label = line.split(":")
            if not meta.get("classlabel", True):
                channels, label = channels + [label], None
            if not channels:
                raise ZooError(f"{path}:{lineno}: a case needs values and a class label separated by ':'")
            # one value after the last ':' is what a class label looks like, which the header says is not there
            hint = (" (its last field is one value, as a class label is, but the header says @classLabel false)"
                    if label is None and len(channels) > 1 and "," not in channels[-1] else "")
            try:
                rows = [np.array([np.nan if v.strip() == "?" else float(v) for v in ch.split(",")]) for ch in channels]
            except ValueError as e:
                raise ZooError(f"{path}:{lineno}: not a number ({e}){hint}") from e
            if len({len(r) for r in rows}) > 1:
                raise ZooError(f"{path}:{lineno}: channels of one case have different lengths "
                               f"{[len(r) for r in rows]}{hint}")
            series.append(np.stack(rows))
            labels.append(label)
    if not in_data:
        raise ZooError(f"{path}: no @data line: not a .ts file")
    if not series:
        raise ZooError(f"{path}: no cases after @data")
    if len({s.shape[0] for s in series}) > 1:
        raise ZooError(f"{path}: cases have different numbers of channels")
    values = meta.get("class_values")
    if values and any(lab not in values for lab in labels):
        bad = next(lab for lab in labels if lab not in values)
        raise ZooError(f"{path}: class label {bad!r} is not among @classLabel {values}")
    return TSData(series, np.array(labels, dtype=object if None in labels else str), meta)


# ------------------------------------------------------------------------------------------------ anomaly
@dataclass
class AnomalySeries:
    name: str
    values: np.ndarray  # [T] float64
    labels: np.ndarray  # [T] int (1 = anomaly)
    train_end: int  # values[:train_end] is the (anomaly-free) training part


_UCR_NAME = re.compile(r"(\d+)_UCR_Anomaly_(.+)_(\d+)_(\d+)_(\d+)$")


def read_ucr_anomaly(path: str | Path) -> AnomalySeries:
    """A UCR anomaly archive ``.txt`` file or TSB-UAD's ``.out`` copy (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"UCR anomaly file {path} does not exist (UCR Time Series Anomaly Archive, KDD Cup 2021)")
    m = _UCR_NAME.match(path.stem)
    if not m:
        raise ZooError(f"{path.name}: not a UCR anomaly name NNN_UCR_Anomaly_<name>_<trainEnd>_<begin>_<end>")
    train_end, begin, end = int(m.group(3)), int(m.group(4)), int(m.group(5))
    if path.suffix == ".out":
        # header-less value,label rows (the official loader reads the first row as a header and loses it)
        df = pd.read_csv(path, header=None)
        if df.shape[1] != 2:
            raise ZooError(f"{path}: a TSB-UAD .out file has 2 columns (value,label), found {df.shape[1]}")
        values, labels = df[0].to_numpy(np.float64), df[1].to_numpy(np.float64)
    else:
        try:
            values = np.array(path.read_text().split(), dtype=np.float64)
        except ValueError as e:
            raise ZooError(f"{path}: not whitespace-separated numbers ({e})") from e
        labels = np.zeros(values.size, dtype=int)
        labels[begin:end] = 1
    if not np.isfinite(values).all():  # a nan read as a number was scaled into a nan window, an inf hit the scaler
        i = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ZooError(f"{path}: point {i} is {values[i]} ({int((~np.isfinite(values)).sum())} non-finite point(s))")
    if not np.isin(labels, (0, 1)).all():
        raise ZooError(f"{path}: labels must be 0 or 1, found {sorted(set(np.unique(labels).tolist()) - {0, 1})[:5]}")
    if not 0 < train_end < values.size or not begin < end <= values.size:
        raise ZooError(f"{path.name}: train end {train_end} / anomaly [{begin}, {end}) do not fit {values.size} points")
    return AnomalySeries(m.group(2), values, labels.astype(int), train_end)


def read_kdd_tsad_csv(folder: str | Path, name: str) -> AnomalySeries:
    """aeon's bundled KDD-TSAD pair ``<name>_TEST.csv`` (whole series) + ``<name>_TRAIN.csv`` (training prefix)."""
    folder = Path(folder)
    test, train = folder / f"{name}_TEST.csv", folder / f"{name}_TRAIN.csv"
    for p in (test, train):
        if not p.is_file():
            raise ZooError(f"{p} does not exist")
    full = pd.read_csv(test)
    if list(full.columns) != ["timestamp", "value", "is_anomaly"]:
        raise ZooError(f"{test}: columns {list(full.columns)} are not timestamp,value,is_anomaly")
    n_train = len(pd.read_csv(train))
    return AnomalySeries(name, full["value"].to_numpy(np.float64), full["is_anomaly"].to_numpy().astype(int), n_train)


# ------------------------------------------------------------------------------------------------ bundled data
def bundled_dir(package: str, dataset: str) -> Path:
    """Folder of a dataset bundled with aeon or sktime (``<package>/datasets/data/<dataset>``), located without
    importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ZooError(f"{package} is not installed; it bundles {dataset} "
                       f"(pip install --no-deps {'aeon==1.6.0' if package == 'aeon' else package})")
    folder = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / dataset
    if not folder.is_dir():
        raise ZooError(f"{package} does not bundle {dataset!r} (looked in {folder})")
    return folder
