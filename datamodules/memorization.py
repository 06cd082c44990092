"""Forget / unseen / held-out / background sequences for memorized-data unlearning: data only, no training.

`source="local"`: the extraction-benchmark format of Jang et al. (2023) — CSV files with columns
`doc_id, corpus, text` (e.g. `lm_extraction_32_0.csv`, 200-token Pile sequences), one file per set. Get them from
github.com/joeljang/knowledge-unlearning (`data/main/`); they are not shipped with zoo.

`source="embedded"`: a seeded synthetic corpus (a word-level Markov "language") with the same schema: disjoint
forget, unseen, held-out and background sequences of one language.

What the training loader serves (`train_set`):
  forget  the forget set D_f, for unlearning (`zoo.unlearning.UnlearningModule`).
  mix     the training mix of the memorize stage (`zoo.unlearning.MemorizeModule`, fitted by `zoo fit` like any
          stage): background text in which the forget sequences recur at graded rates (the most repeated one
          `max_repeat` times as often as the least), so that a model trained on it memorizes them to graded degrees
          while the unseen and held-out sequences stay unseen. `forget_fraction: 0` is the background alone: the
          model retrained without D_f, the reference an ideal unlearner would reach.
The test loader is the forget set; `UnlearningMetrics` reads the sets themselves (`forget_set`, `unseen_set`,
`heldout_set`).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader, Dataset, Sampler

from zoo.data import reading, refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.lm import right_pad
from zoo.unlearning.metrics import check_disjoint, overlap

CSV_FIELDS = ("doc_id", "corpus", "text")
# The Pile's 22 components, compared by letters and digits only (the released CSVs write pile-cc, github,
# openwebtext2, books3, freelaw, enron_emails, ...). A run's card names the Pile only when every row of the sets it
# read says it came from one of them: a file of one's own text in this format is not the Pile.
PILE_COMPONENTS = frozenset({
    "pilecc", "pubmedcentral", "books3", "openwebtext2", "arxiv", "github", "freelaw", "stackexchange",
    "usptobackgrounds", "pubmedabstracts", "gutenbergpg19", "opensubtitles", "wikipediaen", "dmmathematics",
    "ubuntuirc", "bookcorpus2", "europarl", "hackernews", "youtubesubtitles", "philpapers", "nihexporter",
    "enronemails"})


def from_the_pile(rows: list[dict]) -> bool:
    return bool(rows) and all(re.sub(r"[^a-z0-9]", "", r["corpus"].lower()) in PILE_COMPONENTS for r in rows)


@dataclass
class MemorizationSet:
    """Tokenized sequences, right-padded: input_ids / attention_mask (N, T)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    doc_ids: list[str]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def lengths(self) -> list[int]:
        return self.attention_mask.sum(1).tolist()

    def sequences(self) -> list[list[int]]:
        return [self.input_ids[i, :L].tolist() for i, L in enumerate(self.lengths)]


class _Rows(Dataset):
    """Rows of one or more sets, right-padded to a common width (the mix holds forget and background rows)."""

    def __init__(self, *sets: MemorizationSet):
        width = max(s.input_ids.shape[1] for s in sets)
        pad = [(s.input_ids, s.attention_mask) for s in sets]
        self.input_ids = torch.cat([torch.nn.functional.pad(i, (0, width - i.shape[1])) for i, _ in pad])
        self.attention_mask = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1])) for _, m in pad])

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.input_ids[i], "attention_mask": self.attention_mask[i]}


def read_extraction_csv(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"{path} not found: get the extraction-benchmark CSVs (doc_id,corpus,text) from "
                       "github.com/joeljang/knowledge-unlearning data/main/ (e.g. lm_extraction_32_0.csv), or use "
                       "source: embedded")
    with reading(path, "extraction-benchmark CSV (UTF-8)"), path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CSV_FIELDS if c not in (reader.fieldnames or [])]
        if missing:
            raise ZooError(f"{path}: missing column(s) {missing}; expected {list(CSV_FIELDS)}")
        rows = []
        for row in reader:
            if any(row[k] is None for k in CSV_FIELDS):  # a short (e.g. truncated) line: DictReader fills None
                raise ZooError(f"{path}:{reader.line_num}: a row needs {', '.join(CSV_FIELDS)}, got {list(row.values())}")
            # a row without text is no sequence: it would train (background) or be scored (held-out) as zero tokens
            if not row["text"].strip():
                raise ZooError(f"{path}:{reader.line_num}: text is empty (doc_id {row['doc_id']!r}); each row holds "
                               "a sequence of text")
            rows.append({k: row[k] for k in CSV_FIELDS})
        return rows


def shared_sequences(rows: MemorizationSet, other: MemorizationSet) -> list[str]:
    """The doc_ids of `rows` whose sequence (as tokenized: what a model sees) is also in `other`."""
    return [rows.doc_ids[i] for i in overlap(rows.sequences(), other.sequences())]


def write_extraction_csv(path: str | Path, rows: list[dict]) -> None:
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows({k: r[k] for k in CSV_FIELDS} for r in rows)


def tokenize_rows(tokenizer, rows: list[dict], seq_len: int) -> MemorizationSet:
    """First `seq_len` tokens of each text (no special tokens), right-padded with the pad id."""
    ids = [tokenizer(r["text"], add_special_tokens=False)["input_ids"][:seq_len] for r in rows]
    out, mask = right_pad(ids, tokenizer.pad_token_id)
    return MemorizationSet(out, mask, [str(r["doc_id"]) for r in rows], [r["text"] for r in rows])


# -------------------------------------------------------------------------------------- embedded language
class MarkovLanguage:
    """A seeded word-level Markov chain over pseudo-words: learnable structure (spelling, word transitions) plus
    irreducible choice at each word boundary, so unseen text is predictable only in part."""

    SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "da", "fe", "gu", "hi", "jo", "be",
                 "qu", "wy", "xi", "co"]

    def __init__(self, seed: int, num_words: int = 96, branching: int = 4):
        rng = np.random.default_rng(seed)
        words: list[str] = []
        while len(words) < num_words:
            w = "".join(rng.choice(self.SYLLABLES, size=rng.integers(1, 4)))
            if w not in words:
                words.append(w)
        self.words = words
        self.succ = rng.integers(0, num_words, size=(num_words, branching))
        self.prob = rng.dirichlet(np.ones(branching), size=num_words)

    def text(self, rng: np.random.Generator, num_chars: int) -> str:
        w = int(rng.integers(len(self.words)))
        out, k = [], 0
        while sum(len(x) + 1 for x in out) < num_chars:
            out.append(self.words[w] + ("." if k and k % 7 == 0 else ""))
            w = int(self.succ[w][rng.choice(len(self.prob[w]), p=self.prob[w])])
            k += 1
        return " ".join(out)


# ------------------------------------------------------------------------------------------ training mix
class GradedMixSampler(Sampler[int]):
    """Indices into [forget rows..., background rows...], `batch_size` at a time: each batch holds `k_forget` forget
    rows drawn with replacement in proportion to their repeat rates, then `k_background` background rows drawn
    uniformly. The rates are geometric from 1 to `max_repeat`, assigned to the forget rows in a random order (the
    degree of memorization is not tied to doc order).

    One seeded stream (a torch.Generator) gives the rate order first, then the batches, epoch after epoch; epoch e
    (Lightning calls `set_epoch`) replays the stream from the start and skips e epochs, so a resumed fit draws
    exactly the batches an uninterrupted one would."""

    def __init__(self, num_forget: int, num_background: int, k_forget: int, k_background: int, num_batches: int,
                 max_repeat: float, seed: int):
        self.nf, self.nb, self.k_f, self.k_b, self.num_batches = num_forget, num_background, k_forget, k_background, \
            num_batches
        self.epoch = 0
        self._gen = torch.Generator().manual_seed(seed)
        rates = (torch.logspace(0, float(np.log10(max_repeat)), num_forget, dtype=torch.float64) if num_forget > 1
                 else torch.ones(num_forget, dtype=torch.float64))
        self.rates = rates[torch.randperm(num_forget, generator=self._gen)]
        self._start = self._gen.get_state()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_batches * (self.k_f + self.k_b)

    def _batch(self) -> list[int]:
        idx: list[int] = []
        if self.k_f:
            idx += torch.multinomial(self.rates, self.k_f, replacement=True, generator=self._gen).tolist()
        if self.k_b:
            idx += (self.nf + torch.randint(self.nb, (self.k_b,), generator=self._gen)).tolist()
        return idx

    def __iter__(self):
        self._gen.set_state(self._start)
        for _ in range(self.epoch * self.num_batches):
            self._batch()
        for _ in range(self.num_batches):
            yield from self._batch()


class MemorizationDataModule(L.LightningDataModule):
    """Forget / unseen / held-out (/ background) sets; the training loader serves `train_set`."""

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"forget_path": ("local",), "unseen_path": ("local",),
                                                          "heldout_path": ("local",), "background_path": ("local",)}

    def __init__(
        self,
        source: Literal["local", "embedded"] = "embedded",
        forget_path: Optional[str] = None,
        unseen_path: Optional[str] = None,
        heldout_path: Optional[str] = None,
        background_path: Optional[str] = None,
        tokenizer: str = "byt5",
        seq_len: int = 200,
        train_set: Literal["forget", "mix"] = "forget",
        batch_size: int = 32,
        eval_batch_size: int = 32,
        seed: Optional[int] = None,
        num_forget: int = 32,
        num_unseen: int = 32,
        num_heldout: int = 32,
        num_background: int = 256,
        mix_batches: int = 300,
        forget_fraction: float = 0.5,
        max_repeat: float = 16.0,
    ):
        """
        Args:
            source: "local" (CSV files at the paths below) or "embedded" (a seeded synthetic language).
            forget_path / unseen_path: extraction-benchmark CSVs (doc_id, corpus, text), local source.
            heldout_path: CSV of held-out text for the utility perplexity; default (local): the unseen set.
            background_path: CSV of background text for the training mix (local source, `train_set: mix`).
            tokenizer: a Hub tokenizer name or "byt5" (file-free).
            seq_len: tokens kept per sequence (the benchmark's sequences are 200 GPT-Neo tokens).
            train_set: what the training loader serves: "forget" (unlearning) or "mix" (the memorize stage).
            batch_size: training batch (unlearning: one optimizer step per epoch over the whole forget set, as
                Jang et al. and the paper's code, whose loader requires |D_f| = batch x accumulation x GPUs; with
                micro-batches of 8 set the trainer's accumulate_grad_batches to |D_f| / 8; mix: rows per batch,
                forget and background together).
            seed: the embedded language, its sets and the mix's draws; None = the run's seed (`seed_everything`,
                read with `torch.initial_seed()`), so that a sweep's seed axis varies the data as well.
            num_forget / num_unseen / num_heldout / num_background: embedded set sizes.
            mix_batches: batches of the training mix per epoch.
            forget_fraction: share of each mix batch drawn from the forget set; 0 = background alone (the model
                retrained without the forget set, the ideal unlearning reference).
            max_repeat: in the mix, the most repeated forget sequence is drawn `max_repeat` times as often as the
                least (geometric grades in between): graded degrees of memorization.
        """
        super().__init__()
        self.save_hyperparameters()
        if source not in ("local", "embedded"):
            raise ZooError(f"source must be 'local' or 'embedded', got {source!r}")
        refuse_unread_files(self, source, locals())
        if train_set not in ("forget", "mix"):
            raise ZooError(f"train_set must be 'forget' (unlearning) or 'mix' (the memorize stage), got {train_set!r}")
        if seq_len < 2:
            raise ZooError(f"seq_len must be >= 2, got {seq_len}")
        if not 0.0 <= forget_fraction <= 1.0:
            raise ZooError(f"forget_fraction must lie in [0, 1], got {forget_fraction}")
        if max_repeat < 1:
            raise ZooError(f"max_repeat must be >= 1 (the most repeated forget sequence over the least), got "
                           f"{max_repeat}")
        for name in ("batch_size", "eval_batch_size", "mix_batches"):
            if int(getattr(self.hparams, name)) < 1:
                raise ZooError(f"{name} must be >= 1, got {getattr(self.hparams, name)}")
        self.seed = int(torch.initial_seed() if seed is None else seed)
        self.forget_set: MemorizationSet | None = None
        self.pile = False
        self.unseen_set: MemorizationSet | None = None
        self.heldout_set: MemorizationSet | None = None
        self.background_set: MemorizationSet | None = None
        self._tokenizer = None

    # --------------------------------------------------------------------------------------------- sets
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from zoo.lm import load_tokenizer

            self._tokenizer = load_tokenizer(self.hparams.tokenizer)
        return self._tokenizer

    def _embedded_rows(self) -> dict[str, list[dict]]:
        h = self.hparams
        lang = MarkovLanguage(self.seed)
        rng = np.random.default_rng(self.seed + 1)
        # a byte tokenizer needs seq_len characters; subword tokenizers fewer: generate generously, truncate later
        chars = h.seq_len if h.tokenizer == "byt5" else 6 * h.seq_len
        sizes = {"forget": h.num_forget, "unseen": h.num_unseen, "heldout": h.num_heldout,
                 "background": h.num_background}
        out, seen = {}, set()
        for name, k in sizes.items():  # in this order: the first three sets do not depend on num_background
            rows = []
            while len(rows) < k:
                text = lang.text(rng, chars)
                if text in seen:  # sets must be disjoint
                    continue
                seen.add(text)
                rows.append({"doc_id": f"{name}-{len(rows)}", "corpus": "embedded-markov", "text": text})
            out[name] = rows
        return out

    def setup(self, stage: str | None = None) -> None:
        if self.forget_set is not None:
            return
        h = self.hparams
        if h.source == "local":
            if not h.forget_path or not h.unseen_path:
                raise ZooError("source 'local' needs forget_path and unseen_path (extraction-benchmark CSVs)")
            rows = {"forget": read_extraction_csv(h.forget_path), "unseen": read_extraction_csv(h.unseen_path)}
            rows["heldout"] = read_extraction_csv(h.heldout_path) if h.heldout_path else rows["unseen"]
            rows["background"] = read_extraction_csv(h.background_path) if h.background_path else []
            # a file given is a set wanted: a header-only held-out set would score the utility on nothing, and a
            # header-only background would be read as "no background"
            for name in ("forget", "unseen", "heldout", "background"):
                if getattr(h, f"{name}_path") and not rows[name]:
                    raise ZooError(f"the {name} set is empty: {getattr(h, f'{name}_path')} holds no rows, only a "
                                   f"header; expected rows of {', '.join(CSV_FIELDS)}")
            self.pile = from_the_pile([r for name in ("forget", "unseen", "heldout", "background") for r in rows[name]])
            rank_zero_info(f"MemorizationDataModule: source=local (extraction-benchmark CSV doc_id,corpus,text) "
                           f"forget={h.forget_path} unseen={h.unseen_path} heldout={h.heldout_path or '(unseen set)'}"
                           f" background={h.background_path or '(none)'}; train_set={h.train_set}")
        else:
            rows = self._embedded_rows()
            rank_zero_info(f"MemorizationDataModule: source=embedded (Markov language, seed {self.seed}): "
                           f"{h.num_forget} forget, {h.num_unseen} unseen, {h.num_heldout} held-out, "
                           f"{h.num_background} background sequences of {h.seq_len} tokens; train_set={h.train_set}")
        for name in ("forget", "unseen"):
            if not rows[name]:
                raise ZooError(f"the {name} set is empty")
        self.forget_set = tokenize_rows(self.tokenizer, rows["forget"], h.seq_len)
        self.unseen_set = tokenize_rows(self.tokenizer, rows["unseen"], h.seq_len)
        self.heldout_set = tokenize_rows(self.tokenizer, rows["heldout"], h.seq_len)
        self.background_set = (tokenize_rows(self.tokenizer, rows["background"], h.seq_len) if rows["background"]
                               else None)
        check_disjoint(self.forget_set.sequences(), self.unseen_set.sequences(), self.forget_set.doc_ids)
        # the memorize stage trains on the background, so unseen or held-out text in it would silently be trained
        # on (the thresholds and the utility perplexity then measure trained text) and forget text in it repeated
        # beyond its grade: an error
        if self.background_set is not None:
            for other in ("forget", "unseen", "heldout"):
                if both := shared_sequences(self.background_set, getattr(self, f"{other}_set")):
                    raise ZooError(f"the background set shares {len(both)} sequence(s) with the {other} set (first: "
                                   f"doc_id {both[0]}); the background is trained on, so it must be disjoint from the "
                                   "forget, unseen and held-out sets")
        # held-out text (the utility set) that is also forget text is only a warning: the paper's own files (Pile
        # validation against the extraction benchmark's often-duplicated training text) may share some, and it
        # costs only that the utility perplexity moves a little with the forgetting
        if h.heldout_path and (both := shared_sequences(self.heldout_set, self.forget_set)):
            rank_zero_warn(f"the held-out set {h.heldout_path} shares {len(both)} of {len(self.heldout_set.doc_ids)} "
                           f"sequence(s) with the forget set (first: doc_id {both[0]}); its perplexity (utility) "
                           "then also measures forgetting")

    def export_csv(self, directory: str | Path) -> dict[str, Path]:
        """Write the sets in the extraction-benchmark CSV format (what `source: local` reads)."""
        self.setup()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name in ("forget", "unseen", "heldout", "background"):
            s = getattr(self, f"{name}_set")
            if s is None:
                continue
            paths[name] = directory / f"{name}.csv"
            write_extraction_csv(paths[name], [{"doc_id": d, "corpus": "embedded-markov", "text": t}
                                               for d, t in zip(s.doc_ids, s.texts)])
        return paths

    # ------------------------------------------------------------------------------------------ loaders
    def mix_sampler(self) -> GradedMixSampler:
        """The sampler of the training mix over `_Rows(forget_set, background_set)`."""
        self.setup()
        h = self.hparams
        k_f = max(1, round(h.forget_fraction * h.batch_size)) if h.forget_fraction > 0 else 0
        k_b = h.batch_size - k_f
        nb = 0 if self.background_set is None else len(self.background_set)
        if k_b and not nb:
            why = ("forget_fraction=0 needs background text" if k_f == 0 else
                   f"forget_fraction={h.forget_fraction} leaves {k_b} background rows per batch")
            raise ZooError(f"the training mix has nothing to train on: {why} (num_background > 0, or background_path "
                           "for the local source)")
        return GradedMixSampler(len(self.forget_set), nb, k_f, k_b, h.mix_batches, h.max_repeat, self.seed)

    def train_dataloader(self):
        self.setup()
        h = self.hparams
        if h.train_set == "mix":
            sets = [self.forget_set] + ([self.background_set] if self.background_set is not None else [])
            return train_loader(_Rows(*sets), batch_size=h.batch_size, sampler=self.mix_sampler())
        # shuffled as the official code (RandomSampler); with batch = the whole forget set order is moot
        return train_loader(_Rows(self.forget_set), batch_size=h.batch_size, shuffle=True)

    def test_dataloader(self) -> DataLoader:
        self.setup()
        return DataLoader(_Rows(self.forget_set), batch_size=self.hparams.eval_batch_size, shuffle=False)

    def card_metadata(self) -> dict:
        h = self.hparams
        if h.source == "local":
            self.setup()
            files = f"forget {h.forget_path}, unseen {h.unseen_path}"
            # every file read is named (the held-out set measures utility, the background is trained on)
            files += "".join(f", {k} {p}" for k, p in (("heldout", h.heldout_path), ("background", h.background_path))
                             if p)
            if not self.pile:
                return {"data_source": f"local CSVs in the extraction-benchmark format: {files} (not Pile sequences)"}
            return {"datasets": ["EleutherAI/pile"], "data_source": f"local extraction-benchmark CSVs: {files}"}
        mix = (f"; trained on a mix of {h.num_background} background sequences with the forget set repeated at "
               f"graded rates (forget_fraction {h.forget_fraction})" if h.train_set == "mix" else "")
        return {"data_source": f"embedded: seeded synthetic Markov language (seed {self.seed}), {h.num_forget} forget "
                               f"/ {h.num_unseen} unseen sequences of {h.seq_len} tokens{mix}"}
