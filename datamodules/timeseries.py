"""Time-series data for MOMENT: ETTh1 forecasting/imputation windows, UCR/UEA classification, UCR anomaly
detection, and a small pre-training mix.

Every item is a dict of tensors: ``x`` [C, 512] float32, ``input_mask`` [512] (1 = observed; shorter series are
left-padded with zeros and 0 here, the side the official ``ClassificationDataset`` pads), plus ``y`` (forecast
[C, H]), ``label`` (class index) or ``labels`` [512] / ``start`` / ``length`` (anomaly windows).

Sources are explicit (``source``) and logged, never a silent fallback:
* ``local``: the released files (formats in `zoo.moment.formats`): ``ETTh1.csv``; ``*_TRAIN.ts``/``*_TEST.ts``;
  a UCR anomaly ``.txt``/``.out`` file.
* ``aeon`` / ``sktime``: the copies bundled in those packages (GunPoint, ArrowHead, ItalyPowerDemand,
  BasicMotions; KDD-TSAD_135; Airline), read with our own readers from the installed package data.
* ``embedded``: seeded generators with the same schema (smoke configs and tests).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import lightning.pytorch as L
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.utilities import rank_zero_info
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, Dataset

from zoo.data import SplitLoaders, reading, refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.moment.formats import (
    AEON_ANOMALY,
    ETT_COLUMNS,
    AnomalySeries,
    TSData,
    bundled_dir,
    read_ett_csv,
    read_kdd_tsad_csv,
    read_ts,
    read_ucr_anomaly,
)

SEQ_LEN = 512

# What the released files look like, checked on the loaded data so that a card names a release only when the files
# read are recognisably it (a user's own file in the same format is named by its path, never as the release).
ETTH1_ROWS = 17_420  # the released ETTh1.csv: hourly rows 2016-07-01 00:00 .. 2018-06-26 19:00
ETTH1_START = pd.Timestamp("2016-07-01 00:00:00")
# ECG5000 (the one UCR/UEA set the configs read from local files): train/test cases, length, classes. The archive's
# full name list ships with aeon (aeon.datasets.tsc_datasets), which is not a dependency of the zoo: a card must not
# depend on whether it is installed, so other names are left unclaimed.
UCR_RELEASES = {"ECG5000": (500, 4500, 140, 5)}


def left_pad(series: np.ndarray, seq_len: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray]:
    """[C, L] -> ([C, seq_len] zero-padded on the left, input_mask [seq_len]); NaNs are unobserved too."""
    c, n = series.shape
    if n > seq_len:
        raise ZooError(f"a series of length {n} is longer than MOMENT's {seq_len} steps: cut it into windows of "
                       f"{seq_len} (a sliding window) or downsample it before classification")
    x = np.zeros((c, seq_len))
    x[:, seq_len - n:] = np.nan_to_num(series)
    mask = np.zeros(seq_len)
    mask[seq_len - n:] = ~np.isnan(series).any(0)
    return x, mask


def _check_batch(batch_size: int, name: str = "batch_size") -> None:
    if batch_size < 1:
        raise ZooError(f"{name} must be at least 1, got {batch_size}")


# ================================================================================================ ETTh1
def embedded_ett(n_rows: int = 17_420, seed: int = 0) -> pd.DataFrame:
    """A seeded series in the ETTh1 schema (hourly from 2016-07-01): daily and weekly cycles, a slow random walk
    and correlated noise on the six loads; OT (oil temperature) follows the loads with a lag."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_rows)
    daily, weekly = np.sin(2 * np.pi * t / 24), np.sin(2 * np.pi * t / (24 * 7))
    trend = np.cumsum(rng.normal(0, 0.05, n_rows))
    loads = []
    for k in range(6):
        a, b = rng.uniform(0.5, 2.0), rng.uniform(0.2, 1.0)
        loads.append(5 + a * daily + b * weekly + trend + rng.normal(0, 0.3, n_rows) + 0.2 * k)
    ot = 20 + 4 * np.roll(np.mean(loads, 0) - 5, 3) + 0.5 * np.sin(2 * np.pi * t / (24 * 365)) + rng.normal(0, 0.5, n_rows)
    df = pd.DataFrame(np.stack(loads + [ot], 1), columns=list(ETT_COLUMNS[1:]))
    df.insert(0, "date", pd.date_range("2016-07-01", periods=n_rows, freq="h"))
    return df


class WindowDataset(Dataset):
    """512-step windows of a [T, C] array: forecasting (history, next H steps) or imputation (the window)."""

    def __init__(self, data: np.ndarray, horizon: int, stride: int, seq_len: int = SEQ_LEN):
        self.data = torch.as_tensor(data.T, dtype=torch.float32)  # [C, T]
        self.horizon, self.stride, self.seq_len = horizon, stride, seq_len
        self.n = (data.shape[0] - seq_len - horizon) // stride + 1
        if self.n < 1:
            raise ZooError(f"{data.shape[0]} rows give no window of {seq_len} steps + horizon {horizon}")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        s = i * self.stride
        e = s + self.seq_len
        item = {"x": self.data[:, s:e], "input_mask": torch.ones(self.seq_len)}
        if self.horizon:
            item["y"] = self.data[:, e:e + self.horizon]
        return item


class _WindowSets(SplitLoaders, L.LightningDataModule):
    """What the four MOMENT datamodules share: `self.sets` by split, a shuffled (resumable) training loader and
    plain evaluation loaders (`EVAL_SPLITS`: which split each evaluation stage reads)."""

    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {}  # no source switch here: the subclasses declare theirs

    def train_dataloader(self):
        return train_loader(self.sets["train"], self.hparams.batch_size, shuffle=True,
                            num_workers=self.hparams.num_workers)

    def eval_loader(self, split: str) -> DataLoader:
        return DataLoader(self.sets[split], batch_size=self.hparams.eval_batch_size, num_workers=self.hparams.num_workers)


class ETTh1DataModule(_WindowSets):
    """ETTh1 windows as the official ``InformerDataset``: train rows [0, 8640), test rows [11008, 14400) =
    2,880 rows plus the 512 before them, a ``StandardScaler`` fit on the training rows. The validation rows are
    the standard Informer border [8128, 11520) (the tutorial does not validate).

    Args:
        source: ``local`` (``path`` = ETTh1.csv) or ``embedded`` (a seeded series in the same schema).
        task: ``forecasting`` (history 512 -> next ``forecast_horizon`` steps) or ``imputation`` (windows only).
        forecast_horizon: H (tutorial 192; paper 96 ... 720).
        train_rows, val_rows, test_rows: the borders (12, 4 and 4 months of hours).
        stride: step between training windows (official 1); eval_stride: between test windows (None: 1 for
            forecasting, 512 for imputation as the imputation tutorial).
        n_rows: length of the embedded series.
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("local",)}

    def __init__(self, source: Literal["local", "embedded"] = "local", path: str | None = None,
                 task: Literal["forecasting", "imputation"] = "forecasting", forecast_horizon: int = 192,
                 train_rows: int = 12 * 30 * 24, val_rows: int = 4 * 30 * 24, test_rows: int = 4 * 30 * 24,
                 stride: int = 1, eval_stride: int | None = None, batch_size: int = 8, eval_batch_size: int = 64,
                 n_rows: int = 17_420, seed: int = 0, num_workers: int = 0):
        super().__init__()
        self.save_hyperparameters()
        if source not in ("local", "embedded"):
            raise ZooError(f"unknown ETTh1 source {source!r}: choose 'local' or 'embedded'")
        if source == "local" and not path:
            raise ZooError("source='local' needs path: ETTh1.csv (in the moment repo's data/ folder)")
        refuse_unread_files(self, source, locals())
        if task not in ("forecasting", "imputation"):
            raise ZooError(f"unknown task {task!r}: choose 'forecasting' or 'imputation'")
        if task == "forecasting" and forecast_horizon < 1:
            raise ZooError(f"forecast_horizon must be positive, got {forecast_horizon}")
        if min(train_rows, val_rows, test_rows) < 1:
            raise ZooError(f"train_rows, val_rows and test_rows must be positive, got {train_rows}, {val_rows}, "
                           f"{test_rows}")
        if stride < 1 or (eval_stride is not None and eval_stride < 1):
            raise ZooError(f"stride and eval_stride must be >= 1 (eval_stride null: the task's default), got "
                           f"{stride}, {eval_stride}")
        _check_batch(batch_size)
        _check_batch(eval_batch_size, "eval_batch_size")
        self.sets: dict[str, WindowDataset] = {}
        self.rows_read: int | None = None  # rows of the local file, once setup has read it
        self.is_release = False  # whether that file is the released ETTh1.csv

    @property
    def n_channels(self) -> int:
        return len(ETT_COLUMNS) - 1

    @staticmethod
    def released_etth1(df: pd.DataFrame) -> bool:
        """The released ETTh1.csv (the schema is checked by read_ett_csv): 17,420 hourly rows from 2016-07-01."""
        dates = df["date"]
        return (len(df) == ETTH1_ROWS and dates.iloc[0] == ETTH1_START
                and dates.iloc[-1] == ETTH1_START + pd.Timedelta(hours=ETTH1_ROWS - 1))

    def setup(self, stage: str | None = None) -> None:
        if self.sets:
            return
        hp = self.hparams
        if hp.source == "local":
            with reading(hp.path, "ETT CSV"):
                df = read_ett_csv(hp.path)
            self.rows_read, self.is_release = len(df), self.released_etth1(df)
        else:
            df = embedded_ett(hp.n_rows, hp.seed)
        what = f"file {hp.path} (ETT CSV)" if hp.source == "local" else f"embedded seeded series ({hp.n_rows} rows)"
        values = df[list(ETT_COLUMNS[1:])]
        if values.isna().to_numpy().any():
            values = values.interpolate(method="cubic")  # the official loader's gap filling
        data = values.to_numpy(np.float64)
        # an inf, or a gap at either end that interpolation cannot fill, would reach the scaler (sklearn's traceback)
        # or the loss (a nan training loss that names no row)
        bad = ~np.isfinite(data)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise ZooError(f"{what}: non-finite {ETT_COLUMNS[1 + col]} ({data[row, col]}) in data row {row} (line "
                           f"{row + 2}; {bad.any(axis=1).sum()} such row(s)); missing values are interpolated only "
                           "between observed ones")
        tr, va, te = hp.train_rows, hp.val_rows, hp.test_rows
        if tr + va + te > len(data) or tr < SEQ_LEN:
            raise ZooError(f"{what}: {len(data)} rows cannot hold train {tr} + val {va} + test {te} rows (train >= "
                           f"{SEQ_LEN})")
        data = StandardScaler().fit(data[:tr]).transform(data)
        h = hp.forecast_horizon if hp.task == "forecasting" else 0
        eval_stride = hp.eval_stride or (1 if hp.task == "forecasting" else SEQ_LEN)
        self.sets = {
            "train": WindowDataset(data[:tr], h, hp.stride),
            "val": WindowDataset(data[tr - SEQ_LEN: tr + va], h, eval_stride),
            "test": WindowDataset(data[tr + va - SEQ_LEN: tr + va + te], h, eval_stride),
        }
        rank_zero_info(f"[timeseries] ETTh1 source={hp.source}: {what}; {hp.task} windows train/val/test "
                       f"{len(self.sets['train'])}/{len(self.sets['val'])}/{len(self.sets['test'])}, scaler fit on "
                       f"the first {tr} rows")

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "embedded":
            return {"data_source": f"embedded: seeded series in the ETTh1 schema ({hp.n_rows} rows)"}
        if self.is_release:
            return {"datasets": ["ETTh1"], "data_source": f"ETTh1.csv ({hp.task}, local file {hp.path})"}
        rows = "not read yet" if self.rows_read is None else f"{self.rows_read} rows; not the released ETTh1"
        return {"data_source": f"local CSV in the ETTh1 schema: {hp.path} ({rows}; {hp.task})"}


# ================================================================================================ classification
def embedded_classification(n_train: int = 60, n_test: int = 60, n_classes: int = 3, length: int = 96,
                            n_channels: int = 1, seed: int = 0) -> tuple[TSData, TSData]:
    """Seeded shapes in the .ts schema: class k is a bump at a class-specific place plus a class-specific
    oscillation, with random amplitude, shift and noise."""
    if min(n_train, n_test) < 1 or n_classes < 2:
        raise ZooError(f"the embedded classification data needs n_train, n_test >= 1 and n_classes >= 2, got "
                       f"{n_train}, {n_test} and {n_classes}")
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, length)

    def make(n: int) -> TSData:
        labels = rng.integers(0, n_classes, n)
        series = []
        for k in labels:
            centre = (k + 1) / (n_classes + 1) + rng.normal(0, 0.03)
            chans = [rng.uniform(0.8, 1.2) * np.exp(-((t - centre) ** 2) / 0.005)
                     + 0.3 * np.sin(2 * np.pi * (k + 2) * t + c) + rng.normal(0, 0.1, length) for c in range(n_channels)]
            series.append(np.stack(chans))
        return TSData(series, np.array([str(k + 1) for k in labels]), {"problemname": "embedded"})

    return make(n_train), make(n_test)


class ClassificationDataset(Dataset):
    def __init__(self, x: np.ndarray, mask: np.ndarray, labels: np.ndarray):
        self.x = torch.as_tensor(x, dtype=torch.float32)
        self.mask = torch.as_tensor(mask, dtype=torch.float32)
        self.labels = torch.as_tensor(labels, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"x": self.x[i], "input_mask": self.mask[i], "label": self.labels[i]}


def per_timestep_scale(data: TSData) -> list[np.ndarray]:
    """The official classification loaders' scaling: a ``StandardScaler`` over the cases of the split, one mean
    and std per (channel-folded) time step, fit on that split itself."""
    x = data.as_array()
    n, c, length = x.shape
    return list(StandardScaler().fit_transform(x.reshape(-1, length)).reshape(n, c, length))


class UCRClassificationDataModule(_WindowSets):
    """UCR/UEA classification sets from ``.ts`` files, left-padded to 512 steps.

    Args:
        source: ``local`` (``train_path``/``test_path``), ``aeon`` or ``sktime`` (their bundled ``dataset``), or
            ``embedded`` (seeded shapes).
        dataset: the bundled dataset name (GunPoint, ArrowHead, ItalyPowerDemand, BasicMotions).
        scaling: ``per_timestep`` (the official loaders: a StandardScaler per time step over each split's own cases)
            or ``none``.
        val_fraction: share of the training cases held out for validation (0: none).
        embedded_*: sizes of the embedded generator.
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"train_path": ("local",), "test_path": ("local",)}

    def __init__(self, source: Literal["local", "aeon", "sktime", "embedded"] = "local", dataset: str = "ECG5000",
                 train_path: str | None = None, test_path: str | None = None,
                 scaling: Literal["per_timestep", "none"] = "per_timestep", val_fraction: float = 0.0,
                 batch_size: int = 64, eval_batch_size: int = 64, seed: int = 0, num_workers: int = 0,
                 embedded_n_train: int = 60, embedded_n_test: int = 60, embedded_n_classes: int = 3,
                 embedded_length: int = 96, embedded_n_channels: int = 1):
        super().__init__()
        self.save_hyperparameters()
        if source not in ("local", "aeon", "sktime", "embedded"):
            raise ZooError(f"unknown classification source {source!r}: choose local, aeon, sktime or embedded")
        if source == "local" and not (train_path and test_path):
            raise ZooError("source='local' needs train_path and test_path (<name>_TRAIN.ts, <name>_TEST.ts)")
        refuse_unread_files(self, source, locals())
        if scaling not in ("per_timestep", "none"):
            raise ZooError(f"unknown scaling {scaling!r}: choose 'per_timestep' or 'none'")
        if not 0.0 <= val_fraction < 1.0:
            raise ZooError(f"val_fraction must be in [0, 1), got {val_fraction}")
        _check_batch(batch_size)
        _check_batch(eval_batch_size, "eval_batch_size")
        self.sets: dict[str, ClassificationDataset] = {}
        self.classes: list[str] = []
        self.n_channels = 0
        self.problem: str | None = None  # the local files' own @problemName, once setup has read them
        self.release: str | None = None  # the UCR/UEA release those files are, if they are one

    @staticmethod
    def released_as(train: TSData, test: TSData) -> str | None:
        """The UCR/UEA release the loaded local files are: their own @problemName, if both files carry it, the zoo
        knows that release's shapes (cases per split, univariate length, classes) and the files have them."""
        name = train.meta.get("problemname")
        shapes = UCR_RELEASES.get(name)
        if shapes is None or test.meta.get("problemname") != name:
            return None
        n_train, n_test, length, n_classes = shapes
        ok = (len(train.series) == n_train and len(test.series) == n_test
              and all(s.shape == (1, length) for s in [*train.series, *test.series])
              and len(set(train.labels.tolist())) == n_classes)
        return name if ok else None

    def read(self) -> tuple[TSData, TSData, str]:
        hp = self.hparams
        if hp.source == "embedded":
            tr, te = embedded_classification(hp.embedded_n_train, hp.embedded_n_test, hp.embedded_n_classes,
                                             hp.embedded_length, hp.embedded_n_channels, hp.seed)
            return tr, te, f"embedded seeded shapes ({hp.embedded_n_classes} classes)"
        if hp.source == "local":
            data = []
            for path in (hp.train_path, hp.test_path):
                with reading(path, ".ts file (UTF-8 text)"):
                    data.append(read_ts(path))
            return data[0], data[1], f"files {hp.train_path}, {hp.test_path} (.ts)"
        folder = bundled_dir(hp.source, hp.dataset)
        return (read_ts(folder / f"{hp.dataset}_TRAIN.ts"), read_ts(folder / f"{hp.dataset}_TEST.ts"),
                f"{hp.source}'s bundled {hp.dataset} (.ts, read by zoo.moment.formats.read_ts)")

    def setup(self, stage: str | None = None) -> None:
        if self.sets:
            return
        hp = self.hparams
        train, test, what = self.read()
        # '?' and nan are missing steps (masked); an inf would reach the scaler (sklearn's traceback) or, unscaled,
        # be padded in as 1.8e308
        where = {"train": hp.train_path, "test": hp.test_path} if hp.source == "local" else {}
        for split, data in (("train", train), ("test", test)):
            bad = [i for i, s in enumerate(data.series) if np.isinf(s).any()]
            if bad:
                raise ZooError(f"{where.get(split, split)}: case {bad[0]} holds an infinite value ({len(bad)} such "
                               "case(s)); write a missing step as '?'")
            # a step is observed when every channel has it (`left_pad`): a case without one is all padding, which
            # the encoder refuses mid-run naming only a batch position
            empty = [i for i, s in enumerate(data.series) if np.isnan(s).any(0).all()]
            if empty:
                raise ZooError(f"{where.get(split, split)}: case {empty[0]} (counting from 0 after @data) has no "
                               f"observed step: every value is '?' or nan in some channel ({len(empty)} such "
                               "case(s)); a case needs at least one step observed in all its channels")
            lengths = sorted({s.shape[1] for s in data.series})
            if hp.scaling == "per_timestep" and len(lengths) > 1:
                raise ZooError(f"{where.get(split, split)}: cases of unequal lengths {lengths[:5]}; scaling="
                               "per_timestep scales each time step across cases, so it needs equal lengths: pass "
                               "--data.init_args.scaling none")
        self.classes = sorted(set(train.labels.tolist()))
        unknown = sorted(set(test.labels.tolist()) - set(self.classes))
        if len(self.classes) < 2 or None in self.classes:  # a file with @classLabel false reads as one class None
            raise ZooError(f"{where.get('train', 'train')}: {len(self.classes)} class label(s) {self.classes[:5]}; "
                           "classification needs cases of at least 2 classes")
        if unknown:
            raise ZooError(f"test labels {unknown[:5]} do not occur in the training set")
        if train.n_channels != test.n_channels:
            raise ZooError(f"train has {train.n_channels} channels, test {test.n_channels}")
        self.n_channels = train.n_channels
        if hp.source == "local":
            self.problem = train.meta.get("problemname")
            self.release = self.released_as(train, test)
        index = {c: i for i, c in enumerate(self.classes)}

        def to_set(data: TSData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            series = per_timestep_scale(data) if hp.scaling == "per_timestep" else data.series
            padded = [left_pad(s) for s in series]
            return (np.stack([p[0] for p in padded]), np.stack([p[1] for p in padded]),
                    np.array([index[lab] for lab in data.labels]))

        x, m, y = to_set(train)
        n_val = int(round(hp.val_fraction * len(y)))
        order = np.random.default_rng(hp.seed).permutation(len(y))
        tr, va = np.sort(order[n_val:]), np.sort(order[:n_val])  # the file's order within each part
        if not len(tr):
            raise ZooError(f"val_fraction={hp.val_fraction} of {len(y)} training cases leaves none to train on")
        self.sets = {"train": ClassificationDataset(x[tr], m[tr], y[tr]),
                     "val": ClassificationDataset(x[va], m[va], y[va]),
                     "test": ClassificationDataset(*to_set(test))}
        rank_zero_info(f"[timeseries] classification source={hp.source}: {what}; {len(tr)} train / {n_val} val / "
                       f"{len(self.sets['test'])} test cases, {len(self.classes)} classes, {self.n_channels} "
                       f"channel(s), scaling={hp.scaling}")

    @property
    def num_class(self) -> int:
        return len(self.classes)

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "embedded":
            return {"data_source": "embedded: seeded class-shaped series (.ts schema)"}
        if hp.source != "local":  # the copy bundled with aeon/sktime, read by its name
            return {"datasets": [f"UCR/UEA {hp.dataset}"],
                    "data_source": f"UCR/UEA {hp.dataset} (copy bundled with {hp.source})"}
        files = f"{hp.train_path}, {hp.test_path}"
        if self.release:
            return {"datasets": [f"UCR/UEA {self.release}"],
                    "data_source": f"UCR/UEA {self.release} (local .ts files {files})"}
        what = "not read yet" if not self.classes else \
            f"@problemName {self.problem!r}; not a UCR/UEA release the zoo recognises"
        return {"data_source": f"local .ts files {files} ({what})"}


# ================================================================================================ anomaly detection
def embedded_anomaly(n: int = 4096, train_end: int = 1536, seed: int = 0) -> AnomalySeries:
    """A seeded quasi-periodic series with one anomalous segment (a frequency change) after ``train_end``."""
    if train_end < 1 or n < train_end + 501:  # a training part, then 200 normal steps, the segment and 300 more
        raise ZooError(f"the embedded anomaly series needs 1 <= train_end and length >= train_end + 501, got "
                       f"train_end {train_end}, length {n}")
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    values = np.sin(2 * np.pi * t / 50) + 0.3 * np.sin(2 * np.pi * t / 13) + rng.normal(0, 0.05, n)
    begin = int(rng.integers(train_end + 200, n - 300))
    end = begin + 60
    values[begin:end] = np.sin(2 * np.pi * t[begin:end] / 11) + rng.normal(0, 0.05, end - begin)
    labels = np.zeros(n, dtype=int)
    labels[begin:end] = 1
    return AnomalySeries("embedded", values, labels, train_end)


class AnomalyWindows(Dataset):
    """Non-overlapping 512-step windows of a [T] series, the last one aligned to the end (official
    ``AnomalyDetectionDataset``); a part shorter than 512 is left-padded."""

    def __init__(self, values: np.ndarray, labels: np.ndarray, stride: int = SEQ_LEN, seq_len: int = SEQ_LEN):
        self.length = len(values)
        if self.length < seq_len:
            x, mask = left_pad(values[None], seq_len)
            lab = np.zeros(seq_len, dtype=int)
            lab[seq_len - self.length:] = labels
            self.windows = [(x, mask, lab, -(seq_len - self.length))]
        else:
            starts = list(range(0, self.length - seq_len + 1, stride))
            if starts[-1] + seq_len < self.length:
                starts.append(self.length - seq_len)
            self.windows = [(values[None, s:s + seq_len], np.ones(seq_len), labels[s:s + seq_len], s) for s in starts]

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict:
        x, mask, lab, start = self.windows[i]
        return {"x": torch.as_tensor(x, dtype=torch.float32), "input_mask": torch.as_tensor(mask, dtype=torch.float32),
                "labels": torch.as_tensor(lab, dtype=torch.long), "start": start, "length": self.length}


class UCRAnomalyDataModule(_WindowSets):
    """A UCR anomaly series: a scaler fit on the (normal) training part, windows of 512 over the training part
    (for fine-tuning) and over the test part (scored: reconstruction error, adjusted best F1).

    Args:
        source: ``local`` (``path`` = a UCR ``.txt`` or TSB-UAD ``.out`` file), ``aeon`` (its bundled
            ``dataset``, KDD-TSAD_135) or ``embedded`` (a seeded series with one anomaly).
        train_stride: step between training windows (official anomaly loader: 512).
    """

    # the series' test part is all that is scored
    EVAL_SPLITS: ClassVar[dict[str, str]] = {"val": "test", "test": "test", "predict": "test"}
    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("local",)}

    def __init__(self, source: Literal["local", "aeon", "embedded"] = "local", path: str | None = None,
                 dataset: str = "KDD-TSAD_135", train_stride: int = SEQ_LEN, batch_size: int = 64,
                 eval_batch_size: int = 64, seed: int = 0, num_workers: int = 0, embedded_length: int = 4096,
                 embedded_train_end: int = 1536):
        super().__init__()
        self.save_hyperparameters()
        if source not in ("local", "aeon", "embedded"):
            raise ZooError(f"unknown anomaly source {source!r}: choose local, aeon or embedded")
        refuse_unread_files(self, source, locals())
        if source == "local" and not path:
            raise ZooError("source='local' needs path: a UCR anomaly .txt (or TSB-UAD .out) file")
        if source == "aeon" and dataset not in AEON_ANOMALY:
            raise ZooError(f"aeon bundles the anomaly sets {list(AEON_ANOMALY)}, not {dataset!r}")
        if train_stride < 1:
            raise ZooError(f"train_stride must be positive, got {train_stride}")
        _check_batch(batch_size)
        _check_batch(eval_batch_size, "eval_batch_size")
        self.sets: dict[str, AnomalyWindows] = {}

    def read(self) -> tuple[AnomalySeries, str]:
        hp = self.hparams
        if hp.source == "embedded":
            return embedded_anomaly(hp.embedded_length, hp.embedded_train_end, hp.seed), "embedded seeded series"
        if hp.source == "local":
            with reading(hp.path, "UCR anomaly file"):
                return read_ucr_anomaly(hp.path), f"file {hp.path}"
        return (read_kdd_tsad_csv(bundled_dir("aeon", hp.dataset), AEON_ANOMALY[hp.dataset]),
                f"aeon's bundled {hp.dataset} (CSV)")

    def setup(self, stage: str | None = None) -> None:
        if self.sets:
            return
        series, what = self.read()
        k = series.train_end
        # the archive marks one anomaly after the training part; without one the adjusted F1 is 0 whatever the
        # scores (a TSB-UAD .out file carries its own label column, which may disagree with its name)
        if not series.labels[k:].any():
            raise ZooError(f"{what}: the test part (points {k}..{len(series.values) - 1}) holds no anomalous point "
                           "(label 1): there is nothing to detect and the adjusted F1 would be 0 whatever the scores; "
                           "the archive's series have their anomaly after the training part")
        scaler = StandardScaler().fit(series.values[:k, None])
        values = scaler.transform(series.values[:, None])[:, 0]
        self.series = series
        self.sets = {"train": AnomalyWindows(values[:k], series.labels[:k], self.hparams.train_stride),
                     "test": AnomalyWindows(values[k:], series.labels[k:])}
        rank_zero_info(f"[timeseries] anomaly source={self.hparams.source}: {what}; {series.name}, {len(values)} "
                       f"points, train part {k}, {int(series.labels[k:].sum())} anomalous test points, "
                       f"{len(self.sets['test'])} test windows")

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "embedded":
            return {"data_source": "embedded: seeded periodic series with one anomalous segment"}
        if hp.source == "aeon":
            return {"datasets": ["UCR Time Series Anomaly Archive"],
                    "data_source": f"UCR anomaly {hp.dataset} (copy bundled with aeon)"}
        # a local file must carry the archive's naming (NNN_UCR_Anomaly_<name>_<trainEnd>_<begin>_<end>) to be read
        # at all, so a user's own series has it too: the name cannot tell the release, and the card names the path
        return {"data_source": f"a series in the UCR anomaly archive's format and naming: {hp.path}"}


# ================================================================================================ pre-training
class PretrainingDataModule(_WindowSets):
    """A small, offline stand-in for the Time Series Pile: univariate 512-step windows (channels split, short
    series left-padded, long ones cut into windows of 512) from the *training* parts of bundled and embedded
    series, so that the evaluation splits stay unseen.

    Args:
        sources: entries ``aeon:<classification set>``, ``aeon:KDD-TSAD_135``, ``aeon:Airline``,
            ``embedded:ett``, ``embedded:classification``, ``embedded:anomaly``.
        val_fraction: windows held out for validation (seeded).
    """

    # the held-out pre-training windows are the only evaluation split
    EVAL_SPLITS: ClassVar[dict[str, str]] = {"val": "val", "test": "val", "predict": "val"}
    # `sources` names bundled and embedded series only: no file option
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, sources: list[str] = ("embedded:ett", "embedded:classification", "embedded:anomaly"),
                 val_fraction: float = 0.1, batch_size: int = 64, eval_batch_size: int = 64, seed: int = 0,
                 num_workers: int = 0, embedded_ett_rows: int = 2048):
        super().__init__()
        self.save_hyperparameters()
        if not sources:
            raise ZooError("sources is empty: name at least one series source")
        for s in sources:
            self._kind(s)
        if not 0.0 <= val_fraction < 1.0:
            raise ZooError(f"val_fraction must be in [0, 1), got {val_fraction}")
        _check_batch(batch_size)
        _check_batch(eval_batch_size, "eval_batch_size")
        self.sets: dict[str, Dataset] = {}

    @staticmethod
    def _kind(source: str) -> tuple[str, str]:
        where, _, name = source.partition(":")
        ok = (where == "embedded" and name in ("ett", "classification", "anomaly")) or \
             (where == "aeon" and name in ("GunPoint", "ArrowHead", "ItalyPowerDemand", "BasicMotions", "Airline",
                                           *AEON_ANOMALY))
        if not ok:
            raise ZooError(f"unknown pre-training source {source!r}: use aeon:<GunPoint|ArrowHead|ItalyPowerDemand|"
                           "BasicMotions|Airline|KDD-TSAD_135> or embedded:<ett|classification|anomaly>")
        return where, name

    def _series(self, source: str) -> list[np.ndarray]:
        """The univariate training series of a source (each a 1-D array)."""
        where, name = self._kind(source)
        seed = self.hparams.seed
        if where == "embedded" and name == "ett":
            df = embedded_ett(self.hparams.embedded_ett_rows, seed)
            return [df[c].to_numpy() for c in ETT_COLUMNS[1:]]
        if where == "embedded" and name == "classification":
            return [ch for s in embedded_classification(seed=seed)[0].series for ch in s]
        if where == "embedded":
            a = embedded_anomaly(seed=seed)
            return [a.values[: a.train_end]]
        if name == "Airline":
            df = pd.read_csv(bundled_dir("aeon", "Airline") / "Airline.csv")
            return [df["Passengers"].to_numpy(np.float64)]
        if name in AEON_ANOMALY:
            a = read_kdd_tsad_csv(bundled_dir("aeon", name), AEON_ANOMALY[name])
            return [a.values[: a.train_end]]
        data = read_ts(bundled_dir("aeon", name) / f"{name}_TRAIN.ts")
        return [ch for s in data.series for ch in s]

    def setup(self, stage: str | None = None) -> None:
        if self.sets:
            return
        xs, masks, counts = [], [], {}
        for source in self.hparams.sources:
            n0 = len(xs)
            for s in self._series(source):
                s = (s - np.nanmean(s)) / (np.nanstd(s) + 1e-8)
                if len(s) <= SEQ_LEN:
                    x, m = left_pad(s[None])
                    xs.append(x), masks.append(m)
                else:
                    w = AnomalyWindows(s, np.zeros(len(s), dtype=int))
                    for x, m, _, _ in w.windows:
                        xs.append(x), masks.append(m)
            counts[source] = len(xs) - n0
        x, m = np.stack(xs), np.stack(masks)
        order = np.random.default_rng(self.hparams.seed).permutation(len(x))
        n_val = int(round(self.hparams.val_fraction * len(x)))
        labels = np.zeros(len(x), dtype=int)
        self.sets = {"train": ClassificationDataset(x[order[n_val:]], m[order[n_val:]], labels[n_val:]),
                     "val": ClassificationDataset(x[order[:n_val]], m[order[:n_val]], labels[:n_val])}
        rank_zero_info(f"[timeseries] pre-training windows by source: {counts}; {len(x) - n_val} train / {n_val} val")

    def card_metadata(self) -> dict:
        # "embedded" first when every source is the zoo's own, so the card's model-index says so
        own = all(s.startswith("embedded") for s in self.hparams.sources)
        return {"data_source": ("embedded: " if own else "") + "pre-training mix: " + ", ".join(self.hparams.sources)
                + " (training parts only)"}


__all__ = ["ETTh1DataModule", "PretrainingDataModule", "UCRAnomalyDataModule", "UCRClassificationDataModule"]
