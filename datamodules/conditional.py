"""Conditional-distribution data for GENTLE: y | x samples grouped by distinct covariate.

Datasets and their files (the official `datasets/<name>/{train,val,test}.csv` layout: comma-separated, one header
row, one observation per row, columns by name):
* ``cps`` (LDW-CPS, Lalonde-Dehejia-Wahba with CPS controls, as split by the GENTLE authors): columns
  ``t,age,education,black,hispanic,married,nodegree,re74,re75,re78``; y = re78 (>= 0), x = t, age, education,
  re74, re75, black, hispanic, married, nodegree (the official `data_preparation` order).
* ``ecm`` (esophageal-cancer Markov model): ``Barrett,aspirinEffect,statinEffect,drugIndex,initialAge,QALY``.
* ``toy1``: ``x1,x2,x3,y``;  ``toy2``: ``x1,x2,y``.

Sources (explicit in the config, logged, never a silent fallback):
* ``local``: read the three CSVs from ``data_dir``.
* ``embedded``: seeded draws. ecm/toy1/toy2 come from the paper's simulators (`zoo.gentle.simulators`): training
  covariates with ``n_train_samples`` draws each, validation/test covariates with ``n_eval_draws`` draws each.
  cps has no simulator: ``embedded`` gives *synthetic* rows in the LDW-CPS schema (for smoke runs only; not the
  real data, and the card says so).

Everything downstream is standardised with the training frame's mean and standard deviation (+1e-5, as the
official `DataWrapper`), which the model stores to de-standardise its samples. Deviation: the official code builds a
new `DataWrapper` on whatever frame it is given, so evaluation frames would be standardised by their own statistics;
here they use the training ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import lightning.pytorch as L
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset, TensorDataset

from zoo.data import SplitLoaders, refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.gentle import simulators as sim

STD_EPS = 1e-5  # official DataWrapper: std + 1e-5
BALANCE_SEED = 1000  # official: df.sample(..., random_state=1000)
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Schema:
    x: tuple[str, ...]
    y: str
    y_lower: float = -np.inf
    file_columns: tuple[str, ...] = ()  # the released files' column order (documentation and writers)
    binary: tuple[str, ...] = ()  # covariates that are 0/1 indicators
    nonnegative: tuple[str, ...] = ()  # covariates that cannot be negative (ages, years, earnings)


SCHEMAS = {
    "cps": Schema(("t", "age", "education", "re74", "re75", "black", "hispanic", "married", "nodegree"), "re78", 0.0,
                  ("t", "age", "education", "black", "hispanic", "married", "nodegree", "re74", "re75", "re78"),
                  # t is released 0/1 too, but only balance=True needs it so (`_balance` checks it there; without
                  # balance a t of 2 is read, tests/gentle's test_balance_needs_a_binary_treatment_with_both_groups)
                  binary=("black", "hispanic", "married", "nodegree"),
                  nonnegative=("t", "age", "education", "re74", "re75")),
    "ecm": Schema(("Barrett", "aspirinEffect", "statinEffect", "drugIndex", "initialAge"), "QALY",
                  file_columns=("Barrett", "aspirinEffect", "statinEffect", "drugIndex", "initialAge", "QALY")),
    "toy1": Schema(("x1", "x2", "x3"), "y", file_columns=("x1", "x2", "x3", "y")),
    "toy2": Schema(("x1", "x2"), "y", file_columns=("x1", "x2", "y")),
}
SIMULATORS = {
    "toy1": (sim.toy1_covariates, sim.toy1_sample),
    "toy2": (sim.toy2_covariates, sim.toy2_sample),
    "ecm": (lambda n, rng: sim.ecm_covariates((n + 1) // 2, rng)[:n], sim.ecm_sample),
}


def synthetic_cps_covariates(n: int, rng: np.random.Generator) -> np.ndarray:
    """Seeded stand-ins in the LDW-CPS x order (t, age, education, re74, re75, black, hispanic, married,
    nodegree), for smoke runs only."""
    t = rng.random(n) < 0.1
    age = rng.integers(17, 56, n)
    educ = rng.integers(3, 19, n)
    earn = lambda: np.where(rng.random(n) < 0.2, 0.0, np.round(rng.gamma(2.0, 7000.0, n), 1))
    black, hisp = rng.random(n) < 0.1, rng.random(n) < 0.07
    return np.column_stack([t, age, educ, earn(), earn(), black, hisp, rng.random(n) < 0.7, educ < 12]).astype(float)


def synthetic_cps_sample(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """re78 draws: zero with probability 0.15, else a gamma around a mix of past earnings (>= 0 as re78)."""
    mean = 2000 + 0.4 * x[:, 3] + 0.4 * x[:, 4] + 300 * (x[:, 2] - 10) + 1500 * x[:, 0]
    y = rng.gamma(2.0, np.maximum(mean, 500.0)[:, None] / 2.0, size=(len(x), n))
    return np.where(rng.random((len(x), n)) < 0.15, 0.0, np.round(y, 3))


def frame_from_draws(schema: Schema, x: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    """Rows (x_c, y_ck) for covariates x (n_cov, d) and draws y (n_cov, k), in the released files' column order."""
    k = y.shape[1]
    df = pd.DataFrame(np.repeat(x, k, axis=0), columns=list(schema.x))
    df[schema.y] = y.reshape(-1)
    return df[list(schema.file_columns)]


class EvalGroups(Dataset):
    """Distinct evaluation covariates, each with its observed y's (raw units): items (x (d,), y (n_i,))."""

    def __init__(self, x: np.ndarray, groups: list[np.ndarray]):
        self.x = torch.as_tensor(x, dtype=torch.float32)
        self.groups = [torch.as_tensor(g, dtype=torch.float64) for g in groups]

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, i: int):
        return self.x[i], self.groups[i]


def _as_list(batch):
    return list(batch)


def group_by_covariate(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(distinct covariates (N, d), [y's of each]) in lexicographic covariate order, and (N,) the indices of the
    distinct covariates in order of their first appearance in x (the official code's `grouped_by_x` order)."""
    distinct, first, inverse = np.unique(x, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(distinct)))[:-1]
    return distinct, np.split(y[order], bounds), np.argsort(first, kind="stable")


class ConditionalDataModule(SplitLoaders, L.LightningDataModule):
    """Args:
    dataset: ``cps`` | ``ecm`` | ``toy1`` | ``toy2`` (see the module docstring for the file formats).
    source: ``local`` (CSV files in ``data_dir``) or ``embedded`` (seeded simulators; synthetic rows for cps).
    data_dir: folder with ``train.csv``, ``val.csv``, ``test.csv`` (the official ``datasets/<name>/``).
    n_train_covariates, n_train_samples: embedded training set size (distinct covariates x draws each).
    n_val_covariates, n_test_covariates, n_eval_draws: embedded evaluation sets (draws per covariate).
    balance: resample the training frame to 2n rows with weights (1 - t̄) t + t̄ (1 - t), so treated and control
        rows weigh equally (official ``balance=1``, the default of `train_gentle.py`; cps only).
    batch_by: ``covariate`` (batches of distinct-covariate indices, GENTLE) or ``row`` ((y, x) rows, CWGAN).
    batch_size: covariates per step (official ``batch_node`` 1000) or rows per step (ds-wgan run: 4096).
    min_eval_samples: fewest observations an evaluation covariate may have (LDW-CPS val: 21-30, test: > 30).
    eval_batch_size: evaluation covariates per validation/test batch.
    seed: embedded draws (train, val and test use independent streams of it); None = the run's seed (the
        ``seed_everything`` value, which Lightning exports as ``PL_GLOBAL_SEED``), so a sweep's seeds redraw the data.
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"data_dir": ("local",)}

    def __init__(
        self,
        dataset: Literal["cps", "ecm", "toy1", "toy2"] = "toy1",
        source: Literal["local", "embedded"] = "embedded",
        data_dir: str | None = None,
        n_train_covariates: int = 200,
        n_train_samples: int = 5,
        n_val_covariates: int = 20,
        n_test_covariates: int = 50,
        n_eval_draws: int = 1000,
        balance: bool = False,
        batch_by: Literal["covariate", "row"] = "covariate",
        batch_size: int = 1000,
        min_eval_samples: int = 20,
        eval_batch_size: int = 64,
        seed: int | None = None,
        num_workers: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        if dataset not in SCHEMAS:
            raise ZooError(f"unknown dataset {dataset!r}: choose one of {sorted(SCHEMAS)}")
        if source not in ("local", "embedded"):
            raise ZooError(f"unknown data source {source!r}: choose 'local' or 'embedded'")
        refuse_unread_files(self, source, locals())
        if source == "local" and not data_dir:
            raise ZooError(f"source='local' needs data_dir, the folder with {dataset}'s train.csv, val.csv and "
                           f"test.csv (the official repository's datasets/{'cancer' if dataset == 'ecm' else dataset}/)")
        if batch_by not in ("covariate", "row"):
            raise ZooError(f"batch_by must be 'covariate' or 'row', got {batch_by!r}")
        if balance and dataset != "cps":
            raise ZooError(f"balance=True reweights by the treatment column t, which only cps has (dataset={dataset!r})")
        for name in ("n_train_covariates", "n_train_samples", "n_val_covariates", "n_test_covariates",
                     "n_eval_draws", "batch_size", "min_eval_samples", "eval_batch_size"):
            if getattr(self.hparams, name) < 1:
                raise ZooError(f"{name} must be >= 1, got {getattr(self.hparams, name)}")
        self.schema = SCHEMAS[dataset]
        self.frames: dict[str, pd.DataFrame] = {}
        self._ready = False

    @property
    def data_seed(self) -> int:
        if self.hparams.seed is not None:
            return self.hparams.seed
        return int(os.environ.get("PL_GLOBAL_SEED", "0"))

    @property
    def x_dim(self) -> int:
        return len(self.schema.x)

    # ------------------------------------------------------------------------------------------ reading
    def _read(self, split: str) -> pd.DataFrame:
        path = Path(self.hparams.data_dir) / f"{split}.csv"
        if not path.is_file():
            raise ZooError(f"{self.hparams.dataset} {split} file {path} not found: put the official "
                           f"datasets/{'cancer' if self.hparams.dataset == 'ecm' else self.hparams.dataset}/{split}.csv "
                           "of nguyenngocbaocmt02/GENTLE there")
        try:
            df = pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise ZooError(f"{path} is not a readable CSV ({e})") from e
        missing = [c for c in (*self.schema.x, self.schema.y) if c not in df.columns]
        if missing:
            raise ZooError(f"{path} lacks column(s) {missing}; a {self.hparams.dataset} file has "
                           f"{list(self.schema.file_columns)}")
        return df

    def _embedded(self, split: str) -> pd.DataFrame:
        hp = self.hparams
        if hp.dataset == "cps":
            covariates, sample = synthetic_cps_covariates, synthetic_cps_sample
        else:
            covariates, sample = SIMULATORS[hp.dataset]
        rng = np.random.default_rng([self.data_seed, SPLITS.index(split)])
        n_cov = {"train": hp.n_train_covariates, "val": hp.n_val_covariates, "test": hp.n_test_covariates}[split]
        x = covariates(n_cov, rng)
        y = sample(x, hp.n_train_samples if split == "train" else hp.n_eval_draws, rng)
        return frame_from_draws(self.schema, x, y)

    def _check(self, df: pd.DataFrame, split: str) -> pd.DataFrame:
        """The split's columns as float64; a ZooError naming the file, the row (counted from 0 after the header) and
        the column of the first value that is not a finite number in the column's range."""
        hp, cols = self.hparams, [*self.schema.x, self.schema.y]
        where = (f"{hp.dataset} {split} file {Path(hp.data_dir) / f'{split}.csv'}" if hp.source == "local"
                 else f"embedded {hp.dataset} {split} set")
        if len(df) == 0:
            raise ZooError(f"{where} is empty (a header and no rows); every split needs observations")
        at = lambda i: f"in row {i} (rows counted from 0 after the header)"
        for c in cols:
            # a word in a cell makes pandas read the whole column as text: name that cell, not only the column
            words = pd.to_numeric(df[c], errors="coerce").isna() & df[c].notna()
            if words.any():
                i = int(np.flatnonzero(words.to_numpy())[0])
                raise ZooError(f"{where}: {c} is {df[c].iloc[i]!r} {at(i)}, expected a number "
                               f"({int(words.sum())} such row(s))")
        values = df[cols].apply(pd.to_numeric).to_numpy(dtype=np.float64)
        finite = np.isfinite(values)
        checks = [(~finite, lambda c, v: f"non-finite {c} ({v})", "a finite number (an empty cell reads as nan)")]
        # the released LDW-CPS columns: the demographics are 0/1 indicators, t, age, schooling and earnings >= 0 (see
        # SCHEMAS); a -1 there was standardised and trained on without a word
        name = np.array(cols)
        for c in self.schema.binary:
            checks.append((finite & (name == c) & ~np.isin(values, (0.0, 1.0)), lambda c, v: f"{c} is {v:g}",
                           "0 or 1 (an indicator)"))
        for c in self.schema.nonnegative:
            checks.append((finite & (name == c) & (values < 0), lambda c, v: f"{c} is {v:g}", ">= 0"))
        checks.append((finite & (name == self.schema.y) & (values < self.schema.y_lower),
                       lambda c, v: f"{c} below its lower bound {self.schema.y_lower} ({v:g})",
                       f">= {self.schema.y_lower:g}"))
        for bad, what, expected in checks:
            if bad.any():
                row, col = np.argwhere(bad)[0]
                raise ZooError(f"{where}: {what(cols[col], values[row, col])} {at(row)}, expected {expected} "
                               f"({int(bad.any(axis=1).sum())} such row(s))")
        return pd.DataFrame(values, columns=cols)

    def _balance(self, df: pd.DataFrame) -> pd.DataFrame:
        t = df["t"]
        # the weights are only a distribution for a 0/1 t with both groups present (else pandas raises mid-setup)
        if not t.isin((0.0, 1.0)).all() or t.nunique() < 2:
            raise ZooError(f"cps train: balance=True needs t in {{0, 1}} with both treated and control rows, got "
                           f"t values {sorted(t.unique().tolist())[:5]}; pass --data.init_args.balance false")
        share = t.mean()
        return df.sample(2 * len(df), weights=(1 - share) * t + share * (1 - t), replace=True,
                         random_state=BALANCE_SEED).reset_index(drop=True)

    # ------------------------------------------------------------------------------------------ setup
    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        hp = self.hparams
        for split in SPLITS:
            raw = self._read(split) if hp.source == "local" else self._embedded(split)
            self.frames[split] = self._check(raw, split)
        if hp.balance:
            self.frames["train"] = self._balance(self.frames["train"])
        train = self.frames["train"]
        x, y = train[list(self.schema.x)].to_numpy(), train[self.schema.y].to_numpy()
        self.x_mean, self.x_std = x.mean(0), x.std(0, ddof=1) + STD_EPS
        self.y_mean, self.y_std = y.mean(), y.std(ddof=1) + STD_EPS
        self.train_x, self.train_groups_raw, self.train_order = group_by_covariate(x, y)
        if len(self.train_x) < 2:
            raise ZooError(f"{hp.dataset} train: only {len(self.train_x)} distinct covariate(s); the neighbour "
                           "(MST) term needs at least 2")
        self.eval_sets = {split: self._eval_groups(split) for split in ("val", "test")}
        fmt = (f"CSV files in {hp.data_dir}" if hp.source == "local" else
               "synthetic rows in the LDW-CPS schema (not the real data)" if hp.dataset == "cps" else
               f"seeded {hp.dataset} simulator draws (seed {self.data_seed})")
        rank_zero_info(f"[conditional] dataset={hp.dataset} source={hp.source}: {fmt}; train {len(train)} rows over "
                       f"{len(self.train_x)} covariates{' (balanced)' if hp.balance else ''}; "
                       + "; ".join(f"{s} {len(self.frames[s])} rows over {len(self.eval_sets[s])} covariates"
                                   for s in ("val", "test")))
        self._ready = True

    def _eval_groups(self, split: str) -> EvalGroups:
        df = self.frames[split]
        x, groups, _ = group_by_covariate(df[list(self.schema.x)].to_numpy(), df[self.schema.y].to_numpy())
        sizes = np.array([len(g) for g in groups])
        small = np.flatnonzero(sizes < self.hparams.min_eval_samples)
        if small.size:
            i = small[0]
            raise ZooError(f"{self.hparams.dataset} {split}: covariate {dict(zip(self.schema.x, x[i].tolist()))} has "
                           f"{sizes[i]} observation(s), fewer than min_eval_samples={self.hparams.min_eval_samples} "
                           f"({small.size} such covariate(s))")
        return EvalGroups(x, groups)

    # ------------------------------------------------------------------------------------------ for the model
    def standardisation(self) -> dict[str, torch.Tensor]:
        """Training-frame statistics and y's lower bound (raw units), the model's (de-)standardiser."""
        self.setup()
        f = lambda v: torch.as_tensor(np.atleast_1d(v), dtype=torch.float32)
        return {"x_mean": f(self.x_mean), "x_std": f(self.x_std), "y_mean": f(self.y_mean), "y_std": f(self.y_std),
                "y_lower": f(self.schema.y_lower)}

    def train_groups(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """Distinct training covariates and their y's, both standardised (float64)."""
        self.setup()
        xs = (self.train_x - self.x_mean) / self.x_std
        return xs, [(g - self.y_mean) / self.y_std for g in self.train_groups_raw]

    def train_appearance_order(self) -> np.ndarray:
        """(N,) indices into `train_groups`' covariates (lexicographic) in order of their first appearance in the
        training frame, as the official code indexes them (GENTLE's ``pairing: released`` needs its last one)."""
        self.setup()
        return self.train_order

    def train_y(self) -> np.ndarray:
        """All training y's, standardised (the pooled marginal)."""
        self.setup()
        return (self.frames["train"][self.schema.y].to_numpy() - self.y_mean) / self.y_std

    # ------------------------------------------------------------------------------------------ loaders
    def train_dataloader(self):
        self.setup()
        hp = self.hparams
        if hp.batch_by == "covariate":
            ds = TensorDataset(torch.arange(len(self.train_x)))
        else:
            train = self.frames["train"]
            xs = (train[list(self.schema.x)].to_numpy() - self.x_mean) / self.x_std
            ys = (train[self.schema.y].to_numpy() - self.y_mean) / self.y_std
            ds = TensorDataset(torch.as_tensor(ys, dtype=torch.float32), torch.as_tensor(xs, dtype=torch.float32))
        # stateful seeded shuffle (zoo.data): a run resumed mid-epoch continues with the same order
        return train_loader(ds, hp.batch_size, shuffle=True, num_workers=hp.num_workers)

    def eval_loader(self, split: str) -> DataLoader:
        self.setup()
        return DataLoader(self.eval_sets[split], batch_size=self.hparams.eval_batch_size, shuffle=False,
                          collate_fn=_as_list, num_workers=self.hparams.num_workers)

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "local":
            line = f"local {hp.dataset} CSV files ({hp.data_dir})"
        elif hp.dataset == "cps":
            line = "embedded: seeded synthetic rows in the LDW-CPS schema (not the real data)"
        else:
            line = (f"embedded: {hp.dataset} simulator (seed {self.data_seed}), {hp.n_train_covariates} train covariates x "
                    f"{hp.n_train_samples} draws, {hp.n_test_covariates} test covariates x {hp.n_eval_draws}")
        return {"data_source": line + (", balanced by treatment" if hp.balance else "")}
