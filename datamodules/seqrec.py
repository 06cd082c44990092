"""Sequential recommendation data: MovieLens-1M, Amazon reviews (csv) or a seeded synthetic source.

Each user is one sample (the DP unit). Leave-one-out split as in SASRec: the last item is the test
target, the second-to-last the validation target, the rest is the training sequence, on which every
position predicts the next item. Items are re-indexed 1..M (0 = padding); sequences are left-padded
to `max_len`. With `poisson_sampling`, the train loader draws each user independently with
probability q = batch_size / N (Opacus `UniformWithReplacementSampler`), as DP-SGD accounting needs.
"""

from __future__ import annotations

import csv
from functools import partial
from pathlib import Path
from typing import Literal, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from zoo.errors import ZooError

_HOW_TO_GET = {
    "movielens": "download ml-1m.zip from https://grouplens.org/datasets/movielens/1m/ and pass path=<dir>/ml-1m/ratings.dat",
    "amazon": "download a ratings csv (user,item,rating,timestamp), e.g. ratings_Beauty.csv from "
              "https://jmcauley.ucsd.edu/data/amazon/ and pass path=<file>",
}


def read_movielens(path: Path) -> list[tuple[str, str, int]]:
    """ratings.dat: `UserID::MovieID::Rating::Timestamp` per line."""
    rows = []
    with open(path, encoding="latin-1") as f:
        for k, line in enumerate(f, 1):
            parts = line.strip().split("::")
            if not line.strip():
                continue
            if len(parts) != 4:
                raise ZooError(f"{path}:{k}: expected UserID::MovieID::Rating::Timestamp, got {line.strip()!r}")
            rows.append((parts[0], parts[1], int(parts[3])))
    return rows


_USER_COLS = ("user_id", "userid", "reviewerid", "user")
_ITEM_COLS = ("parent_asin", "asin", "item_id", "itemid", "item", "product_id")
_TIME_COLS = ("timestamp", "unixreviewtime", "time")


def read_amazon_csv(path: Path) -> list[tuple[str, str, int]]:
    """Amazon ratings csv: with a header naming user/item/timestamp columns (2018/2023 dumps), or
    header-less `user,item,rating,timestamp` (the 2014 "ratings only" files)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        first = next(reader, None)
        if first is None:
            raise ZooError(f"{path} is empty")
        low = [c.strip().lower() for c in first]
        if any(c in low for c in _USER_COLS):
            try:
                ui = next(low.index(c) for c in _USER_COLS if c in low)
                ii = next(low.index(c) for c in _ITEM_COLS if c in low)
                ti = next(low.index(c) for c in _TIME_COLS if c in low)
            except StopIteration as e:
                raise ZooError(f"{path}: header {first} lacks a user, item or timestamp column") from e
            body = reader
        else:
            ui, ii, ti = 0, 1, 3
            body = [first, *reader]
        rows = []
        for k, r in enumerate(body, 1):
            try:
                rows.append((r[ui], r[ii], int(float(r[ti]))))
            except (IndexError, ValueError) as e:
                raise ZooError(f"{path}: row {k} is not user,item,rating,timestamp: {r}") from e
    return rows


def synthetic_sequences(num_users: int, num_items: int, seed: int, zipf_a: float = 1.1,
                        markov_p: float = 0.7, min_len: int = 5, max_len: int = 30) -> list[list[int]]:
    """Zipf item popularity + a sparse Markov chain (each item has 3 likely successors)."""
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, num_items + 1) ** zipf_a
    pop /= pop.sum()
    succ = rng.choice(num_items, size=(num_items, 3), p=pop) + 1
    seqs = []
    for _ in range(num_users):
        length = int(rng.integers(min_len, max_len + 1))
        s = [int(rng.choice(num_items, p=pop)) + 1]
        for _ in range(length - 1):
            s.append(int(succ[s[-1] - 1, rng.integers(3)]) if rng.random() < markov_p
                     else int(rng.choice(num_items, p=pop)) + 1)
        seqs.append(s)
    return seqs


def sequences_from_rows(rows, min_user_len: int = 3, min_item_count: int = 1):
    """Group by user in time order, drop rare items and short users, re-index items 1..M."""
    counts: dict[str, int] = {}
    for _, i, _ in rows:
        counts[i] = counts.get(i, 0) + 1
    by_user: dict[str, list[tuple[int, str]]] = {}
    for u, i, t in rows:
        if counts[i] >= min_item_count:
            by_user.setdefault(u, []).append((t, i))
    item_ids: dict[str, int] = {}
    seqs = []
    for u in sorted(by_user):
        events = [i for _, i in sorted(by_user[u], key=lambda e: e[0])]  # stable: ties keep file order
        if len(events) < min_user_len:
            continue
        seqs.append([item_ids.setdefault(i, len(item_ids) + 1) for i in events])
    return seqs, len(item_ids)


def left_pad(seqs: list[list[int]], length: int) -> torch.Tensor:
    out = torch.zeros(len(seqs), length, dtype=torch.long)
    for k, s in enumerate(seqs):
        s = s[-length:]
        if s:
            out[k, length - len(s):] = torch.tensor(s)
    return out


class _TensorDict(Dataset):
    def __init__(self, **tensors):
        self.t = tensors
        self.n = len(next(iter(tensors.values())))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.t.items()}


def collate(items: list[dict], template: dict) -> dict:
    """Stacks samples; a Poisson batch may be empty, then tensors of batch size 0 are returned."""
    if not items:
        return {k: v[:0] for k, v in template.items()}
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


class SeqRecDataModule(pl.LightningDataModule):
    def __init__(
        self,
        source: Literal["movielens", "amazon", "embedded"] = "embedded",
        path: Optional[str] = None,
        max_len: int = 50,
        batch_size: int = 128,
        eval_batch_size: int = 256,
        poisson_sampling: bool = False,
        min_item_count: int = 1,
        synthetic_users: int = 500,
        synthetic_items: int = 200,
        seed: int = 0,
        num_workers: int = 0,
    ):
        """
        Args:
            source: "movielens" (ratings.dat), "amazon" (ratings csv) from `path`, or "embedded"
                (seeded Zipf + Markov synthetic sequences of `synthetic_users` users over `synthetic_items` items).
            path: local file for the movielens/amazon sources.
            max_len: sequence length L (the most recent L items).
            batch_size: expected batch size; the Poisson sample rate is batch_size / N.
            poisson_sampling: Poisson-sampled train batches (required by DPClipping).
            min_item_count: drop items with fewer interactions (5 for the 5-core Amazon setting).
            synthetic_users, synthetic_items: size of the embedded source.
            seed: seed of the embedded source and of the Poisson sampler.
        """
        super().__init__()
        if source not in ("movielens", "amazon", "embedded"):
            raise ZooError(f"SeqRecDataModule: source must be movielens, amazon or embedded, got {source!r}")
        if source != "embedded" and not path:
            raise ZooError(f"SeqRecDataModule: source={source} needs path=...; {_HOW_TO_GET[source]}")
        if batch_size < 1 or max_len < 2:
            raise ZooError(f"SeqRecDataModule: batch_size >= 1 and max_len >= 2 needed, got {batch_size}, {max_len}")
        self.save_hyperparameters()
        self.sequences: list[list[int]] | None = None
        self.num_items = synthetic_items if source == "embedded" else None

    def prepare_sequences(self) -> None:
        if self.sequences is not None:
            return
        hp = self.hparams
        if hp.source == "embedded":
            seqs = synthetic_sequences(hp.synthetic_users, hp.synthetic_items, hp.seed)
            m = hp.synthetic_items
        else:
            p = Path(hp.path).expanduser()
            if not p.is_file():
                raise ZooError(f"SeqRecDataModule: {hp.source} file not found: {p}; {_HOW_TO_GET[hp.source]}")
            rows = read_movielens(p) if hp.source == "movielens" else read_amazon_csv(p)
            seqs, m = sequences_from_rows(rows, 3, hp.min_item_count)
            if not seqs:
                raise ZooError(f"SeqRecDataModule: no user with >= 3 interactions in {p}")
        rank_zero_info(f"SeqRecDataModule: source={hp.source} users={len(seqs)} items={m}")
        self.sequences, self.num_items = seqs, m

    @property
    def item_frequency(self) -> torch.Tensor:
        """Occurrences of each item per training sequence (p_i for Re-Attention); index 0 = padding."""
        self.prepare_sequences()
        items = torch.tensor([i for s in self.sequences for i in s[:-2]], dtype=torch.long)
        counts = torch.bincount(items, minlength=self.num_items + 1).float()
        # An item unseen in training counts as seen once: its noise variance stays finite.
        return counts.clamp_min(1.0) / len(self.sequences)

    def setup(self, stage: str | None = None) -> None:
        self.prepare_sequences()
        L, seqs = self.hparams.max_len, self.sequences
        train = [s[:-2] for s in seqs]
        self.train_set = _TensorDict(seq=left_pad([s[:-1] for s in train], L), target=left_pad([s[1:] for s in train], L))
        self.val_set = _TensorDict(seq=left_pad(train, L), target=torch.tensor([s[-2] for s in seqs]))
        self.test_set = _TensorDict(seq=left_pad([s[:-1] for s in seqs], L), target=torch.tensor([s[-1] for s in seqs]))

    def train_dataloader(self) -> DataLoader:
        n, hp = len(self.train_set), self.hparams
        col = partial(collate, template=self.train_set.t)
        if hp.poisson_sampling:
            from opacus.utils.uniform_sampler import UniformWithReplacementSampler

            gen = torch.Generator().manual_seed(hp.seed)
            sampler = UniformWithReplacementSampler(num_samples=n, sample_rate=min(1.0, hp.batch_size / n), generator=gen)
            return DataLoader(self.train_set, batch_sampler=sampler, collate_fn=col, num_workers=hp.num_workers)
        return DataLoader(self.train_set, batch_size=hp.batch_size, shuffle=True, collate_fn=col,
                          num_workers=hp.num_workers, generator=torch.Generator().manual_seed(hp.seed))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.eval_batch_size, num_workers=self.hparams.num_workers)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.eval_batch_size, num_workers=self.hparams.num_workers)
