"""Training loaders that resume exactly: what every DataModule's `train_dataloader` returns.

Lightning stores the state of a stateful loader in a mid-epoch checkpoint, so a resumed run continues with the
batch after the last one it trained on. A plain `DataLoader(shuffle=True)` has no state: a resumed epoch draws a
new permutation (some examples are seen twice, others never). Two things make the order exact here:

* `StatefulDataLoader` records how many samples of the current epoch were yielded and skips them on resume;
* `EpochSampler` draws epoch e's permutation from `seed + e` (as `DistributedSampler` does; Lightning calls
  `set_epoch` before every epoch, also after a resume). An epoch-end checkpoint holds no loader state at all
  (Lightning saves none once the epoch's iterator is exhausted), and a generator-state sampler would then replay
  epoch 0's order in the next epoch; a permutation that depends only on (seed, epoch) cannot.
"""

from __future__ import annotations

import csv
import hashlib
import inspect
import pickle
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Optional

import numpy as np
import torch
from torch.utils.data import Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from zoo.errors import ZooError, flat

#: What the standard readers raise on a damaged, truncated, empty or wrong-format file: OSError (a folder where a
#: file belongs, a damaged gzip stream, PIL's UnidentifiedImageError), EOFError (an empty .npy/.npz, a truncated gzip),
#: ValueError (UnicodeDecodeError, json/pandas/pyarrow parse errors, numpy's refusal of pickled data), and the
#: container formats' own types. ZooError is a ValueError: `reading` passes it through unchanged.
READ_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, ValueError, zipfile.BadZipFile, tarfile.TarError,
                                                pickle.UnpicklingError, csv.Error)


@contextmanager
def reading(path: Any, what: str, extra: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Parse a user's data file inside ``with reading(path, "CSV"):``; what the reader raises on a damaged file
    (`READ_ERRORS` and ``extra``) becomes the one-line ``ZooError("<path> is not a readable <what> (<error>)")``.
    A ZooError raised inside (a check of the parsed content) passes unchanged."""
    try:
        yield
    except ZooError:
        raise
    except (*READ_ERRORS, *extra) as e:
        raise ZooError(f"{path} is not a readable {what} ({type(e).__name__}: {flat(e)})") from e


def first_non_finite(a: Any) -> tuple[tuple[int, ...], int] | None:
    """The index of the first NaN or inf in array `a` and how many there are (None when every value is finite):
    what a reader's one-line error names."""
    bad = np.argwhere(~np.isfinite(a))
    return (tuple(int(i) for i in bad[0]), len(bad)) if len(bad) else None


def refuse_unread_files(datamodule: Any, source: str, given: dict[str, Any]) -> None:
    """Refuse a file option that the config's ``source`` does not read. ``FILE_OPTIONS`` of the datamodule's class
    maps each file option to the sources that read it, and ``given`` holds the constructor's arguments (its
    ``locals()``); an option left at its default (None, or a default folder such as CIFAR's ``data/cifar``) names no
    file of the user's. The smoke configs name an embedded source: a user who adds only ``--data.init_args.path DIR``
    would otherwise train on the embedded data, silently."""
    cls = type(datamodule)
    params = inspect.signature(cls.__init__).parameters
    unread: dict[tuple[str, ...], list[str]] = {}
    for name, readers in cls.FILE_OPTIONS.items():
        value = given[name]
        if value and value != getattr(params.get(name), "default", None) and source not in readers:
            unread.setdefault(readers, []).append(f"{name}={value!r}")
    if unread:
        what = "; ".join(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} read only with source="
                         f"{' or '.join(map(repr, readers))}" for readers, names in unread.items())
        raise ZooError(f"{what}, but source={source!r}: pass --data.init_args.source "
                       f"{' or '.join(next(iter(unread)))}")


def content_digest(rows: Iterable[str]) -> str:
    """SHA-256 of a multiset of rows, whatever their order and the file that carried them (JSONL, parquet). A run's
    card names a released dataset only when the rows it read have the release's digest: a user's own file in the
    same format is not the release."""
    leaves = sorted(hashlib.sha256(row.encode()).digest() for row in rows)
    return hashlib.sha256(b"".join(leaves)).hexdigest()


class EpochSampler(Sampler[int]):
    """A shuffle whose order in epoch e is `randperm(n)` under the generator seeded with `seed + e`."""

    def __init__(self, data_source, seed: int):
        self.data_source, self.seed, self.epoch = data_source, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def permutation(self, epoch: int) -> list[int]:
        g = torch.Generator()
        g.manual_seed(self.seed + epoch)
        return torch.randperm(len(self.data_source), generator=g).tolist()

    def __iter__(self) -> "_EpochIterator":
        return _EpochIterator(self)

    def __len__(self) -> int:
        return len(self.data_source)


class _EpochIterator:
    """Stateful (epoch, position): a mid-epoch checkpoint restores both. The permutation is drawn at the first
    `next`, not when the iterator is made: Lightning makes a resumed run's first iterator before it calls
    `set_epoch`, and torchdata's batch sampler asks for the index iterator eagerly."""

    def __init__(self, sampler: EpochSampler):
        self.sampler, self.epoch, self.yielded, self.perm = sampler, None, 0, None

    def __iter__(self):
        return self

    def __next__(self) -> int:
        if self.perm is None:
            self.epoch = self.sampler.epoch if self.epoch is None else self.epoch
            self.perm = self.sampler.permutation(self.epoch)
        if self.yielded >= len(self.perm):
            raise StopIteration
        self.yielded += 1
        return self.perm[self.yielded - 1]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.sampler.epoch if self.epoch is None else self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.yielded, self.perm = state["epoch"], state["yielded"], None


def train_loader(dataset, batch_size: Optional[int], shuffle: bool = True, seed: Optional[int] = None,
                 sampler=None, batch_sampler=None, **kwargs: Any) -> StatefulDataLoader:
    """A `StatefulDataLoader` over `dataset`; `shuffle` orders each epoch by `EpochSampler` with `seed` (default:
    drawn from torch's global RNG, i.e. fixed by `seed_everything`). A custom `sampler`/`batch_sampler` passes
    through (it resumes exactly if its order depends only on its epoch, or if it is stateful).

    The loader draws from a `generator` of its own (seeded from `seed`) unless one is given. A DataLoader draws
    its workers' base seed each time an epoch's iterator is made, from the global RNG if it has no generator; a
    resumed fit makes its iterators at other moments than the uninterrupted run (before the RNG states of
    `callbacks.last_checkpoint` are set back), so such draws would shift every random number after a resume."""
    if batch_size is not None and batch_size < 1:
        raise ZooError(f"batch_size must be at least 1, got {batch_size}")
    seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else seed
    kwargs.setdefault("generator", torch.Generator().manual_seed(seed))
    if batch_sampler is not None:
        return StatefulDataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
    if sampler is None and shuffle:
        sampler = EpochSampler(dataset, seed)
    return StatefulDataLoader(dataset, batch_size=batch_size, sampler=sampler, **kwargs)


def flat_loaders(loaders: Any) -> list[Any]:
    """The loaders of a loader, or of a (nested) list/tuple/dict of them, as Lightning accepts them."""
    if isinstance(loaders, (list, tuple)):
        return [x for item in loaders for x in flat_loaders(item)]
    if isinstance(loaders, dict):
        return [x for item in loaders.values() for x in flat_loaders(item)]
    return [loaders]


def is_resumable(loader: Any) -> bool:
    """Whether Lightning can save and restore this loader's position (a stateful loader, or a list/dict of them)."""
    return all(callable(getattr(x, "state_dict", None)) and callable(getattr(x, "load_state_dict", None))
               for x in flat_loaders(loader))


class SplitLoaders:
    """The evaluation hooks of a datamodule whose validation, test and predict loaders differ only in the split
    they read. The datamodule defines `eval_loader(split)`; `EVAL_SPLITS` names the split each stage reads (a family
    without a validation part of its own validates on another). List it before `LightningDataModule` in the bases,
    so that its hooks replace Lightning's defaults."""

    EVAL_SPLITS: ClassVar[dict[str, str]] = {"val": "val", "test": "test", "predict": "test"}

    def eval_loader(self, split: str):
        raise NotImplementedError(f"{type(self).__name__} must define eval_loader(split)")

    def val_dataloader(self):
        return self.eval_loader(self.EVAL_SPLITS["val"])

    def test_dataloader(self):
        return self.eval_loader(self.EVAL_SPLITS["test"])

    def predict_dataloader(self):
        return self.eval_loader(self.EVAL_SPLITS["predict"])
