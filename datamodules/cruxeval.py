"""CRUXEval rows (code / input / output / id, all Python source strings) for evaluation-only runs.

Sources: ``hub`` (``cruxeval-org/cruxeval``, split ``test``, via `datasets`), ``local`` (a jsonl in the
official schema, e.g. ../shared/data/cruxeval.jsonl) or ``embedded`` (``cruxeval_sample.jsonl``: 24 rows
of the project's own functions, built from :data:`SAMPLE_CANDIDATES` by the paper's filters in
`zoo.cruxeval.construct`). Batches are lists of row dicts; malformed rows are kept and later scored as
failures with their reason, so one bad line never stops a run.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from zoo.cruxeval.scoring import hub_rows, load_rows, row_problem
from zoo.data import content_digest, reading, refuse_unread_files
from zoo.errors import ZooError

SAMPLE_PATH = Path(__file__).with_name("cruxeval_sample.jsonl")
HUB_NAME = "cruxeval-org/cruxeval"
# zoo.data.content_digest of the benchmark's 800 rows (code, NUL, input, NUL, output) in facebookresearch/cruxeval
# @ 190faf16 data/cruxeval.jsonl: a local file is CRUXEval on a run's card only when its rows are these.
RELEASE_DIGEST = "2fdb6774c1d8859aa2136c2b62cba1e16f2d1c757135f370d9e3215f3d8ef49d"


def is_release(rows: list[dict[str, Any]]) -> bool:
    return content_digest(f"{r.get('code')}\0{r.get('input')}\0{r.get('output')}" for r in rows) == RELEASE_DIGEST

# Our own candidate functions (not from the benchmark), each with inputs; `build_benchmark` keeps all 24
# (function, input) pairs and computes their outputs. tests/cruxeval checks the shipped jsonl matches.
SAMPLE_CANDIDATES: list[dict[str, Any]] = [
    {"code": "def f(text, sep):\n    parts = text.split(sep)\n    parts.reverse()\n"
             "    return sep.join(p.capitalize() for p in parts)", "inputs": ["'ab-cd-ef', '-'", "'one two', ' '"]},
    {"code": "def f(nums, k):\n    out = []\n    for i, n in enumerate(nums):\n        if i % k == 0:\n"
             "            out.append(n * 2)\n        else:\n            out.insert(0, n)\n    return out",
     "inputs": ["[3, 1, 4, 1, 5], 2", "[7, 8], 3"]},
    {"code": "def f(d, key):\n    counts = dict(d)\n    counts[key] = counts.get(key, 0) + 1\n"
             "    return sorted(counts.items(), key=lambda kv: kv[1])", "inputs": ["{'a': 2, 'b': 0}, 'b'", "{}, 'z'"]},
    {"code": "def f(s):\n    result = ''\n    for ch in s:\n        if ch.isdigit():\n            result += ch\n"
             "        elif ch.isupper():\n            result = ch.lower() + result\n    return result",
     "inputs": ["'a1B2c3D'", "'XYZ'"]},
    {"code": "def f(words, width):\n    lines = []\n    for w in words:\n        lines.append(w.center(width, '*'))\n"
             "    return '|'.join(lines)", "inputs": ["['hi', 'abc'], 3", "['x'], 1"]},
    {"code": "def f(items, target):\n    while target in items:\n        items.remove(target)\n"
             "    items.append(len(items))\n    return items", "inputs": ["[2, 5, 2, 7], 2", "[1], 3"]},
    {"code": "def f(text, old, new):\n    count = text.count(old)\n    return text.replace(old, new, 1) + str(count)",
     "inputs": ["'banana', 'an', 'AN'", "'aaa', 'b', 'c'"]},
    {"code": "def f(pairs):\n    table = {}\n    for k, v in pairs:\n        table.setdefault(v, []).append(k)\n"
             "    return {k: len(v) for k, v in table.items()}", "inputs": ["[('a', 1), ('b', 2), ('c', 1)]", "[]"]},
    {"code": "def f(s, n):\n    s = s.strip('.')\n    if len(s) > n:\n        return s[:n].upper() + s[n:]\n"
             "    return s.zfill(n)", "inputs": ["'..hello..', 2", "'42', 3"]},
    {"code": "def f(nums):\n    evens = [n for n in nums if n % 2 == 0]\n    odds = [n for n in nums if n % 2 == 1]\n"
             "    return odds[::-1] + evens", "inputs": ["[1, 2, 3, 4, 5]", "[6]"]},
    {"code": "def f(text, chars):\n    kept = []\n    for c in text:\n        if c not in chars:\n"
             "            kept.append(c)\n    return ''.join(kept).title()", "inputs": ["'hello world', 'lo'", "'a-b', '-'"]},
    {"code": "def f(d, keys):\n    out = {}\n    for k in keys:\n        if k in d:\n            out[k] = d.pop(k)\n"
             "    return (out, d)", "inputs": ["{1: 'a', 2: 'b', 3: 'c'}, [3, 1, 9]", "{}, []"]},
]


def collate_rows(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(batch)


class CRUXEvalDataModule(L.LightningDataModule):
    """CRUXEval for `test` / `predict` (the benchmark has no training split).

    Args:
        source: ``hub`` | ``local`` | ``embedded``.
        path: the jsonl for ``source: local``.
        hub_name / split: the Hub dataset for ``source: hub``.
        batch_size: rows per generation batch.
        limit: evaluate only the first ``limit`` rows (None: all).
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("local",)}

    def __init__(self, source: Literal["hub", "local", "embedded"] = "hub", path: Optional[str] = None,
                 hub_name: str = HUB_NAME, split: str = "test", batch_size: int = 8,
                 limit: Optional[int] = None):
        super().__init__()
        if source not in ("hub", "local", "embedded"):
            raise ZooError(f"CRUXEval source must be 'hub', 'local' or 'embedded', got {source!r}")
        refuse_unread_files(self, source, locals())
        if source == "local" and not path:
            raise ZooError("CRUXEval source 'local' needs data.path (a jsonl with code/input/output/id)")
        if batch_size < 1:
            raise ZooError(f"batch_size must be >= 1, got {batch_size}")
        self.source, self.path, self.hub_name, self.split = source, path, hub_name, split
        self.batch_size, self.limit = batch_size, limit
        self.rows: list[dict[str, Any]] = []
        self.read_count, self.is_release = 0, source == "hub" and hub_name == HUB_NAME

    def load_rows(self) -> list[dict[str, Any]]:
        if self.source == "embedded":
            rows = load_rows(SAMPLE_PATH)
        elif self.source == "local":
            with reading(self.path, "CRUXEval jsonl (UTF-8 text)"):
                rows = load_rows(self.path)  # a missing file is a one-line ZooError there
            if not rows:
                raise ZooError(f"CRUXEval file {self.path} holds no rows (one JSON object with code/input/output/id "
                               "per line)")
        else:
            rows = hub_rows(self.hub_name, self.split)
        self.read_count = len(rows)
        if self.source == "local":
            self.is_release = is_release(rows)
            # malformed rows stay in the run as failures (one bad line never stops it), but they count in pass@k's
            # denominator: a user's own file with a missing field was only seen in test/failed_rows, with no reason
            bad = [(k, why) for k, r in enumerate(rows, 1) if (why := row_problem(r))]
            if bad:
                k, why = bad[0]
                warnings.warn(f"CRUXEval file {self.path}: {len(bad)} of {len(rows)} rows are malformed and will be "
                              f"scored as failures (test/failed_rows); the first, row {k}: {why}", stacklevel=2)
        return rows[: self.limit] if self.limit is not None else rows

    def setup(self, stage: str | None = None) -> None:
        if not self.rows:
            self.rows = self.load_rows()
            where = {"hub": self.hub_name, "local": self.path, "embedded": str(SAMPLE_PATH)}[self.source]
            rank_zero_info(f"CRUXEval: source={self.source} ({where}), {len(self.rows)} rows")

    def card_metadata(self) -> dict[str, Any]:
        """What data this run used, for its card: the benchmark's Hub id only when CRUXEval itself was read (the
        official Hub dataset, or a local jsonl whose rows are the release's); the embedded sample is the project's
        own, and another file in the same schema is named by its path."""
        if self.source == "embedded":
            return {"data_source": f"embedded: {len(self.rows) or 24} CRUXEval-format rows of the project's own "
                                   "functions (not the CRUXEval benchmark)"}
        if self.source == "hub" and not self.is_release:
            return {"datasets": [self.hub_name], "data_source": f"{self.hub_name} from the Hub, split {self.split}"}
        if self.source == "local" and not self.rows:
            self.setup()
        if not self.is_release:
            return {"data_source": f"local file {self.path} in the CRUXEval format ({self.read_count} rows; not the "
                                   "released benchmark)"}
        where = f"the Hub ({self.hub_name}, split {self.split})" if self.source == "hub" else f"local file {self.path}"
        return {"datasets": [HUB_NAME], "data_source": f"CRUXEval from {where}"}

    def _loader(self) -> DataLoader:
        return DataLoader(self.rows, batch_size=self.batch_size, shuffle=False, collate_fn=collate_rows)

    def test_dataloader(self) -> DataLoader:
        return self._loader()

    def predict_dataloader(self) -> DataLoader:
        return self._loader()

    def val_dataloader(self) -> DataLoader:
        return self._loader()
