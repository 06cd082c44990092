"""Sequential recommendation data: MovieLens-1M, Amazon reviews (2014/2018/2023 releases) or a seeded synthetic source.

Each user is one sample (the DP unit). Leave-one-out split as in SASRec: the last item is the test
target, the second-to-last the validation target, the rest is the training sequence, on which every
position predicts the next item. Items are re-indexed 1..M (0 = padding); sequences are left-padded
to `max_len`. With `poisson_sampling`, the train loader draws each user independently with
probability q = batch_size / N (Opacus `UniformWithReplacementSampler`), as DP-SGD accounting needs.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import re
import zipfile
from functools import partial
from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from zoo.data import reading, refuse_unread_files, train_loader
from zoo.errors import ZooError

_HOW_TO_GET = {
    "movielens": "download ml-1m.zip from https://grouplens.org/datasets/movielens/1m/ and pass path=<dir>/ml-1m "
                 "(the folder, its ratings.dat, or the zip)",
    "amazon": "download a category's ratings or 5-core reviews, e.g. ratings_Beauty.csv or reviews_Beauty_5.json.gz "
              "(2014, https://jmcauley.ucsd.edu/data/amazon/), Beauty.csv or Beauty_5.json.gz (2018, "
              "https://nijianmo.github.io/amazon/) or Beauty_and_Personal_Care.csv.gz (2023, "
              "https://amazon-reviews-2023.github.io/), and pass path=<file>",
}
AMAZON_COLUMNS = ("user,item,rating,timestamp", "item,user,rating,timestamp")
_COLUMNS_OPTION = ("set data.init_args.columns to 'user,item,rating,timestamp' (Amazon 2014 ratings-only files, "
                   "ratings_<Category>.csv) or 'item,user,rating,timestamp' (Amazon 2018 ratings-only files, "
                   "<Category>.csv)")
_ASIN = re.compile(r"[0-9A-Z]{10}")  # Amazon Standard Identification Number (ISBN-10 for books)

Rows = list[tuple[str, str, int]]


def open_text(path: Path, encoding: str = "utf-8") -> tuple[io.TextIOBase, str]:
    """A text stream of ``path``, gunzipped when its first bytes are gzip's magic (whatever its name says)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(path, "rt", encoding=encoding, newline=""), "gzip"
    return open(path, encoding=encoding, newline=""), "plain"


def movielens_ratings_file(path: Path) -> Path:
    """``ratings.dat`` itself, or the ``ml-1m`` folder that holds it."""
    if path.is_dir():
        if (path / "ratings.dat").is_file():
            return path / "ratings.dat"
        raise ZooError(f"SeqRecDataModule: folder {path} holds no ratings.dat; {_HOW_TO_GET['movielens']}")
    return path


def read_movielens(path: Path) -> tuple[Rows, str]:
    """MovieLens-1M ``ratings.dat`` (Latin-1): ``UserID::MovieID::Rating::Timestamp`` per line, no header; also
    the ``ml-1m`` folder or ``ml-1m.zip`` (member ``ml-1m/ratings.dat``). Returns (user, item, time) rows."""
    if path.suffix.lower() == ".zip":
        with reading(path, "zip archive (ml-1m.zip)"), zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith("ratings.dat")]
            if not names:
                raise ZooError(f"SeqRecDataModule: {path} holds no ratings.dat; {_HOW_TO_GET['movielens']}")
            text = io.TextIOWrapper(z.open(names[0]), encoding="latin-1")
            return _movielens_lines(text, f"{path}:{names[0]}"), f"movielens ratings.dat in zip ({names[0]})"
    path = movielens_ratings_file(path)
    with open(path, encoding="latin-1") as f:
        return _movielens_lines(f, str(path)), "movielens ratings.dat"


def _movielens_lines(lines, where: str) -> Rows:
    rows = []
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.strip().split("::")
        if len(parts) != 4:
            raise ZooError(f"{where}:{k}: expected UserID::MovieID::Rating::Timestamp, got {line.strip()[:80]!r}")
        # an empty ID would group the row under a user (or item) "" that the file never names
        for name, value in (("UserID", parts[0]), ("MovieID", parts[1])):
            if not value.strip():
                raise ZooError(f"{where}:{k}: the {name} is empty (expected UserID::MovieID::Rating::Timestamp, "
                               "the IDs integers)")
        try:
            rows.append((parts[0], parts[1], int(parts[3])))
        except ValueError as e:
            raise ZooError(f"{where}:{k}: the Timestamp {parts[3][:40]!r} is not an integer") from e
    return rows


_USER_COLS = ("user_id", "userid", "reviewerid", "user")
_ITEM_COLS = ("parent_asin", "asin", "item_id", "itemid", "item", "product_id")
_TIME_COLS = ("timestamp", "unixreviewtime", "time")
# JSON-lines keys: 2014/2018 5-core reviews (reviewerID, asin, overall, unixReviewTime) and 2023 reviews
# (user_id, parent_asin, rating, timestamp in ms); parent_asin first, as the 2023 benchmark groups variants by it.
_JSON_USER, _JSON_ITEM, _JSON_TIME = ("reviewerID", "user_id"), ("parent_asin", "asin"), ("unixReviewTime", "timestamp")


def read_amazon(path: Path, columns: str | None = None) -> tuple[Rows, str]:
    """Amazon reviews in any of their released forms, plain or gzipped (detected from the bytes):

    * ratings-only csv with a header naming user/item/timestamp columns: the 2023 files
      (``user_id,parent_asin,rating,timestamp[,history]``, timestamps in ms);
    * header-less ratings-only csv: 2014 ``ratings_<Category>.csv`` = ``user,item,rating,timestamp``, 2018
      ``<Category>.csv`` = ``item,user,rating,timestamp``. ``columns`` names the order; without it the order is
      read off the ID shapes (an item column is all ASINs, 10 characters [0-9A-Z]; Amazon user IDs are not) and an
      undecidable file is an error naming ``columns``;
    * JSON lines (first character ``{``): 2014 ``reviews_<Category>_5.json`` / 2018 ``<Category>_5.json``
      (``reviewerID`` -> user, ``asin`` -> item, ``unixReviewTime`` -> time) and 2023 ``<Category>.jsonl``
      (``user_id``, ``parent_asin`` or else ``asin``, ``timestamp``).

    Returns the (user, item, time) rows and a one-line description of the format used (for the log)."""
    stream, compression = open_text(path)
    with stream:
        try:
            first, skipped = "", 0
            for first in stream:
                if first.strip():
                    break
                skipped += 1
            if not first.strip():
                raise ZooError(f"{path} is empty")
            rest = itertools.chain([first], stream)
            if first.lstrip().startswith("{"):
                if columns:
                    raise ZooError(f"{path} is JSON lines (keys name the fields): remove data.init_args.columns")
                rows, fmt = _amazon_jsonl(path, rest, 1 + skipped)
            else:
                rows, fmt = _amazon_csv(path, rest, columns, 1 + skipped)
        except UnicodeDecodeError as e:
            raise ZooError(f"{path} is not UTF-8 text ({compression}): {e.reason} at byte {e.start}; "
                           "Amazon dumps are UTF-8 csv or JSON lines, optionally gzipped") from e
        except (OSError, EOFError) as e:  # gzip: truncated or damaged stream
            raise ZooError(f"cannot read {path} ({compression}): {e}") from e
    return rows, f"amazon {fmt}, {compression}"


def _amazon_jsonl(path: Path, lines, first_line: int = 1) -> tuple[Rows, str]:
    rows, keys = [], None
    for k, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise ZooError(f"{path}:{k}: not a JSON object ({e.msg} at column {e.colno}); expected one review per "
                           "line as in reviews_<Category>_5.json (meta_*.json item metadata holds no ratings)") from e
        if not isinstance(r, dict):
            raise ZooError(f"{path}:{k}: a JSON {type(r).__name__}, not a review object")
        if keys is None:
            keys = tuple(next((c for c in cands if c in r), None) for cands in (_JSON_USER, _JSON_ITEM, _JSON_TIME))
            if None in keys:
                raise ZooError(f"{path}:{k}: a review needs a user ({'/'.join(_JSON_USER)}), item "
                               f"({'/'.join(_JSON_ITEM)}) and time ({'/'.join(_JSON_TIME)}) key; it has "
                               f"{sorted(r)}")
        try:
            user, item, time = r[keys[0]], r[keys[1]], int(float(r[keys[2]]))
        except KeyError as e:
            raise ZooError(f"{path}:{k}: review lacks key {e.args[0]!r} (the first review has "
                           f"{', '.join(keys)}); it has {sorted(r)}") from e
        except (TypeError, ValueError, OverflowError) as e:  # OverflowError: an infinite time (JSON Infinity)
            raise ZooError(f"{path}:{k}: {keys[2]} is not a finite number: {str(r.get(keys[2]))[:40]!r} (Unix time "
                           "expected)") from e
        rows.append((_json_id(user, keys[0], path, k), _json_id(item, keys[1], path, k), time))
    return rows, f"JSON lines ({keys[0]} -> user, {keys[1]} -> item, {keys[2]} -> time)"


def _json_id(value, key: str, path: Path, k: int) -> str:
    """A review's user or item ID: a non-empty string (a number is taken as its digits); str() of a null, a list or
    an object would group reviews under an ID such as 'None' that the file never names."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        shown = "null" if value is None else repr(value)[:40]
        raise ZooError(f"{path}:{k}: {key} is {shown}; expected a non-empty ID string")
    return str(value)


def _amazon_csv(path: Path, lines, columns: str | None, first_line: int = 1) -> tuple[Rows, str]:
    reader = csv.reader(lines)
    first = next(reader)
    low = [c.strip().lower() for c in first]
    header = any(c in low for c in _USER_COLS)
    if header:
        if columns:
            raise ZooError(f"{path} has a header {first}: its names set the columns; remove data.init_args.columns")
        try:
            ui = next(low.index(c) for c in _USER_COLS if c in low)
            ii = next(low.index(c) for c in _ITEM_COLS if c in low)
            ti = next(low.index(c) for c in _TIME_COLS if c in low)
        except StopIteration as e:
            raise ZooError(f"{path}: header {first} lacks a user, item or timestamp column") from e
        body, start = list(reader), first_line + 1
        how = f"csv with header ({first[ui]} -> user, {first[ii]} -> item, {first[ti]} -> time)"
    else:
        body, start = [first, *reader], first_line
    # blank lines (a hand-written file's trailing newline) are skipped, as in the JSON lines and ratings.dat readers;
    # csv.reader yields them as [] and they failed as rows of 0 fields
    numbered = [(k, r) for k, r in enumerate(body, start) if any(c.strip() for c in r)]
    body = [r for _, r in numbered]
    if not header:
        if columns is None:
            columns, why = _detect_columns(path, body), "detected: only the item column holds ASINs"
        elif columns not in AMAZON_COLUMNS:
            raise ZooError(f"columns={columns!r} is not a known order; {_COLUMNS_OPTION}")
        else:
            why = "data.init_args.columns"
        ui, ii, ti = (0, 1, 3) if columns == AMAZON_COLUMNS[0] else (1, 0, 3)
        how = f"header-less csv, columns {columns} ({why})"
    rows = []
    for k, r in numbered:
        try:
            rows.append((r[ui], r[ii], int(float(r[ti]))))
        except IndexError as e:
            raise ZooError(f"{path}:{k}: expected {len(low) if header else 4} fields with a numeric "
                           f"timestamp ({how}), got {len(r)} field(s)") from e
        except (ValueError, OverflowError) as e:  # a date string, nan, inf: items are ordered by numeric time
            raise ZooError(f"{path}:{k}: the timestamp {r[ti][:40]!r} is not a number (Unix time expected; {how})"
                           ) from e
        for what, value in (("user", r[ui]), ("item", r[ii])):
            if not value.strip():  # else grouped under an ID "" that the file never names
                raise ZooError(f"{path}:{k}: the {what} ID is empty ({how})")
    return rows, how


def _detect_columns(path: Path, body: list[list[str]]) -> str:
    def all_asins(col: int) -> bool:
        return all(len(r) > col and _ASIN.fullmatch(r[col]) for r in body)

    first, second = all_asins(0), all_asins(1)
    if second and not first:
        return AMAZON_COLUMNS[0]
    if first and not second:
        return AMAZON_COLUMNS[1]
    raise ZooError(f"{path} has no header naming a user column ({', '.join(_USER_COLS)}) and its column order cannot "
                   f"be told from its IDs ({'both' if first else 'neither'} of its first two columns hold only ASINs); "
                   f"{_COLUMNS_OPTION}")


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
    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("movielens", "amazon")}

    def __init__(
        self,
        source: Literal["movielens", "amazon", "embedded"] = "embedded",
        path: Optional[str] = None,
        columns: Optional[Literal["user,item,rating,timestamp", "item,user,rating,timestamp"]] = None,
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
            source: "movielens" (ml-1m ratings.dat), "amazon" (ratings csv or 5-core JSON lines, see
                `read_amazon`) from `path`, or "embedded" (seeded Zipf + Markov synthetic sequences of
                `synthetic_users` users over `synthetic_items` items).
            path: local file for the movielens/amazon sources (plain or gzipped; for movielens also the ml-1m
                folder or ml-1m.zip).
            columns: column order of a header-less Amazon ratings csv: "user,item,rating,timestamp" (2014
                ratings_<Category>.csv) or "item,user,rating,timestamp" (2018 <Category>.csv). None: read it off
                the IDs (only the item column holds ASINs); a file where that cannot be told is an error.
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
        refuse_unread_files(self, source, locals())
        if source != "embedded" and not path:
            raise ZooError(f"SeqRecDataModule: source={source} needs path=...; {_HOW_TO_GET[source]}")
        if batch_size < 1 or eval_batch_size < 1 or max_len < 2:
            raise ZooError(f"SeqRecDataModule: batch_size >= 1, eval_batch_size >= 1 and max_len >= 2 needed, got "
                           f"{batch_size}, {eval_batch_size}, {max_len}")
        if columns is not None and columns not in AMAZON_COLUMNS:
            raise ZooError(f"SeqRecDataModule: columns={columns!r} is not a known order; {_COLUMNS_OPTION}")
        if columns is not None and source != "amazon":
            raise ZooError(f"SeqRecDataModule: columns applies to source=amazon csv files, not source={source}")
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
            if not (p.is_file() or (hp.source == "movielens" and p.is_dir())):
                raise ZooError(f"SeqRecDataModule: {hp.source} file not found: {p}; {_HOW_TO_GET[hp.source]}")
            rows, fmt = read_movielens(p) if hp.source == "movielens" else read_amazon(p, hp.columns)
            rank_zero_info(f"SeqRecDataModule: {p}: {fmt}, {len(rows)} interactions")
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

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "embedded":
            return {"data_source": "embedded: seeded Zipf + Markov interaction generator (not MovieLens or Amazon)"}
        name = ("ratings in the MovieLens-1M format" if hp.source == "movielens"
                else "reviews in an Amazon release format")
        return {"data_source": f"{name} from {hp.path}"}

    def train_dataloader(self) -> DataLoader:
        n, hp = len(self.train_set), self.hparams
        col = partial(collate, template=self.train_set.t)
        if hp.poisson_sampling:
            from opacus.utils.uniform_sampler import UniformWithReplacementSampler

            # Poisson batches from one generator: a resume inside epoch 0 replays exactly; later epochs draw fresh
            # Poisson batches (the privacy accounting, per step, is unaffected)
            gen = torch.Generator().manual_seed(hp.seed)
            sampler = UniformWithReplacementSampler(num_samples=n, sample_rate=min(1.0, hp.batch_size / n), generator=gen)
            return train_loader(self.train_set, None, batch_sampler=sampler, collate_fn=col, num_workers=hp.num_workers)
        return train_loader(self.train_set, hp.batch_size, shuffle=True, seed=hp.seed, collate_fn=col,
                            num_workers=hp.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.eval_batch_size, num_workers=self.hparams.num_workers)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.eval_batch_size, num_workers=self.hparams.num_workers)
