"""Forget / unseen / held-out sequences for memorized-data unlearning.

`source="local"`: the extraction-benchmark format of Jang et al. (2023) — CSV files with columns
`doc_id, corpus, text` (e.g. `lm_extraction_32_0.csv`, 200-token Pile sequences), one file per set. Get them from
github.com/joeljang/knowledge-unlearning (`data/main/`); they are not shipped with zoo.

`source="embedded"`: a seeded synthetic corpus (a word-level Markov "language") plus a *memorize* phase: a fresh copy
of the module's (tiny) LM is trained on background text in which the forget sequences recur at graded rates
(`max_repeat` times more often for the most repeated one than for the least), so that they end up memorized to
graded degrees, while unseen and held-out sequences of the same language are never trained on. The memorized
weights are cached (keyed by data settings and model config) under `cache_dir`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from zoo.errors import ZooError
from zoo.lm import right_pad
from zoo.unlearning.metrics import check_disjoint

CSV_FIELDS = ("doc_id", "corpus", "text")


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
    def __init__(self, s: MemorizationSet):
        self.s = s

    def __len__(self) -> int:
        return len(self.s)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.s.input_ids[i], "attention_mask": self.s.attention_mask[i]}


def read_extraction_csv(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"{path} not found: get the extraction-benchmark CSVs (doc_id,corpus,text) from "
                       "github.com/joeljang/knowledge-unlearning data/main/ (e.g. lm_extraction_32_0.csv), or use "
                       "source: embedded")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CSV_FIELDS if c not in (reader.fieldnames or [])]
        if missing:
            raise ZooError(f"{path}: missing column(s) {missing}; expected {list(CSV_FIELDS)}")
        return [{k: row[k] for k in CSV_FIELDS} for row in reader]


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


class MemorizationDataModule(L.LightningDataModule):
    """Forget / unseen / held-out sets; train loader = the forget set (with its index, for selective methods)."""

    def __init__(
        self,
        source: Literal["local", "embedded"] = "embedded",
        forget_path: Optional[str] = None,
        unseen_path: Optional[str] = None,
        heldout_path: Optional[str] = None,
        tokenizer: str = "byt5",
        seq_len: int = 200,
        batch_size: int = 32,
        eval_batch_size: int = 32,
        seed: int = 0,
        num_forget: int = 32,
        num_unseen: int = 32,
        num_heldout: int = 32,
        num_background: int = 256,
        memorize: bool = True,
        memorize_steps: int = 300,
        memorize_lr: float = 3e-3,
        memorize_batch_size: int = 16,
        forget_fraction: float = 0.5,
        max_repeat: float = 16.0,
        cache_dir: Optional[str] = None,
    ):
        """
        Args:
            source: "local" (CSV files at the paths below) or "embedded" (seeded corpus + memorize phase).
            forget_path / unseen_path: extraction-benchmark CSVs (doc_id, corpus, text), local source.
            heldout_path: CSV of held-out text for the utility perplexity; default (local): the unseen set.
            tokenizer: a Hub tokenizer name or "byt5" (file-free).
            seq_len: tokens kept per sequence (the benchmark's sequences are 200 GPT-Neo tokens).
            batch_size: forget-set batch per unlearning step (Jang et al.: the whole forget set, 32).
            num_forget / num_unseen / num_heldout / num_background: embedded set sizes.
            memorize: run the memorize phase (embedded source) before unlearning.
            memorize_steps / memorize_lr / memorize_batch_size: memorize-phase training (AdamW).
            forget_fraction: share of memorize-phase batch rows drawn from the forget set; 0 trains on the
                background alone, i.e. the model retrained without the forget set (the ideal unlearning reference).
            max_repeat: the most-repeated forget sequence is drawn `max_repeat` times as often as the least
                (geometric grades in between): graded degrees of memorization.
            cache_dir: where memorized weights are cached (default $ZOO_CACHE or ~/.cache/zoo/memorization).
        """
        super().__init__()
        self.save_hyperparameters()
        if source not in ("local", "embedded"):
            raise ZooError(f"source must be 'local' or 'embedded', got {source!r}")
        if seq_len < 2:
            raise ZooError(f"seq_len must be >= 2, got {seq_len}")
        if not 0.0 <= forget_fraction <= 1.0:
            raise ZooError(f"forget_fraction must lie in [0, 1], got {forget_fraction}")
        self.forget_set: MemorizationSet | None = None
        self.unseen_set: MemorizationSet | None = None
        self.heldout_set: MemorizationSet | None = None
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
        lang = MarkovLanguage(h.seed)
        rng = np.random.default_rng(h.seed + 1)
        # a byte tokenizer needs seq_len characters; subword tokenizers fewer: generate generously, truncate later
        chars = h.seq_len if h.tokenizer == "byt5" else 6 * h.seq_len
        sizes = {"forget": h.num_forget, "unseen": h.num_unseen, "heldout": h.num_heldout,
                 "background": h.num_background}
        out, seen = {}, set()
        for name, k in sizes.items():
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
            rank_zero_info(f"MemorizationDataModule: source=local forget={h.forget_path} unseen={h.unseen_path} "
                           f"heldout={h.heldout_path or '(unseen set)'}")
        else:
            rows = self._embedded_rows()
            self._background = rows.pop("background")
            rank_zero_info(f"MemorizationDataModule: source=embedded (seed {h.seed}): {h.num_forget} forget, "
                           f"{h.num_unseen} unseen, {h.num_heldout} held-out sequences of {h.seq_len} tokens")
        for name in ("forget", "unseen"):
            if not rows[name]:
                raise ZooError(f"the {name} set is empty")
        self.forget_set = tokenize_rows(self.tokenizer, rows["forget"], h.seq_len)
        self.unseen_set = tokenize_rows(self.tokenizer, rows["unseen"], h.seq_len)
        self.heldout_set = tokenize_rows(self.tokenizer, rows["heldout"], h.seq_len)
        check_disjoint(self.forget_set.sequences(), self.unseen_set.sequences(), self.forget_set.doc_ids)

    def export_csv(self, directory: str | Path) -> dict[str, Path]:
        """Write the sets in the extraction-benchmark CSV format (what `source: local` reads)."""
        self.setup()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name in ("forget", "unseen", "heldout"):
            s = getattr(self, f"{name}_set")
            paths[name] = directory / f"{name}.csv"
            write_extraction_csv(paths[name], [{"doc_id": d, "corpus": "embedded-markov", "text": t}
                                               for d, t in zip(s.doc_ids, s.texts)])
        return paths

    # ---------------------------------------------------------------------------------------- memorize
    def memorize(self, model: torch.nn.Module) -> bool:
        """Embedded source: load into `model` the weights of the memorize phase (trained once, then cached).
        Returns False (and leaves the model alone) for the local source or `memorize: false`."""
        h = self.hparams
        if h.source != "embedded" or not h.memorize:
            return False
        self.setup()
        key = self._cache_key(model)
        root = Path(h.cache_dir or os.environ.get("ZOO_CACHE", Path.home() / ".cache" / "zoo")) / "memorization"
        path = root / f"{key}.safetensors"
        from zoo.hub import load_state_dict_file, save_state_dict

        if path.is_file():
            rank_zero_info(f"MemorizationDataModule: memorized weights from cache {path}")
            state = load_state_dict_file(path)
        else:
            state = self._train_memorized(model)
            root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
            os.close(fd)
            save_state_dict(state, Path(tmp))
            os.replace(tmp, path)  # atomic: concurrent runs never read a half-written file
        model.load_state_dict(state)
        return True

    def _cache_key(self, model: torch.nn.Module) -> str:
        h = dict(self.hparams)
        for k in ("cache_dir", "batch_size", "eval_batch_size", "forget_path", "unseen_path", "heldout_path",
                  "memorize"):
            h.pop(k, None)
        cfg = model.config.to_dict() if hasattr(model, "config") else {}
        cfg = {k: v for k, v in cfg.items() if k not in ("transformers_version", "_name_or_path", "dtype",
                                                         "torch_dtype")}
        blob = json.dumps({"data": h, "model": cfg, "torch": torch.__version__.split("+")[0]}, sort_keys=True,
                          default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def _train_memorized(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Train a fresh copy of the model's architecture from a seeded init: background text plus forget
        sequences drawn with graded probabilities (geometric from 1 to max_repeat)."""
        from transformers import AutoModelForCausalLM

        h = self.hparams
        rank_zero_info(f"MemorizationDataModule: memorize phase ({h.memorize_steps} steps)")
        gen = torch.Generator().manual_seed(h.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(h.seed)
            lm = AutoModelForCausalLM.from_config(model.config).float()
        lm.train()
        bg = tokenize_rows(self.tokenizer, self._background, h.seq_len)
        f = self.forget_set
        nf = len(f)
        grades = torch.logspace(0, float(np.log10(h.max_repeat)), nf, dtype=torch.float64) if nf > 1 else \
            torch.ones(1, dtype=torch.float64)
        grades = grades[torch.randperm(nf, generator=gen)]  # degree not tied to doc order
        opt = torch.optim.AdamW(lm.parameters(), lr=h.memorize_lr, weight_decay=0.0)
        k_f = max(1, round(h.forget_fraction * h.memorize_batch_size)) if h.forget_fraction > 0 else 0
        k_b = max(0, h.memorize_batch_size - k_f)
        if k_f == 0 and (k_b == 0 or len(bg) == 0):
            raise ZooError("the memorize phase has nothing to train on: forget_fraction=0 needs background text "
                           "(num_background > 0)")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny LM: more intra-op threads only contend (10-20x slower on a busy CPU)
        try:
            self._memorize_loop(lm, opt, f, bg, grades, gen, k_f, k_b)
        finally:
            torch.set_num_threads(threads)
        dtype = next(model.parameters()).dtype
        return {k: v.to(dtype) for k, v in lm.state_dict().items()}

    def _memorize_loop(self, lm, opt, f, bg, grades, gen, k_f: int, k_b: int) -> None:
        h = self.hparams
        for _ in range(h.memorize_steps):
            parts = []
            if k_f:
                fi = torch.multinomial(grades, k_f, replacement=True, generator=gen)
                parts.append((f.input_ids[fi], f.attention_mask[fi]))
            if k_b and len(bg):
                bi = torch.randint(len(bg), (k_b,), generator=gen)
                parts.append((bg.input_ids[bi], bg.attention_mask[bi]))
            T = max(p[0].shape[1] for p in parts)
            ids = torch.cat([torch.nn.functional.pad(p[0], (0, T - p[0].shape[1])) for p in parts])
            mask = torch.cat([torch.nn.functional.pad(p[1], (0, T - p[1].shape[1])) for p in parts])
            labels = ids.masked_fill(mask == 0, -100)
            loss = lm(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    # ------------------------------------------------------------------------------------------ loaders
    def train_dataloader(self) -> DataLoader:
        self.setup()
        # shuffled as the official code (RandomSampler); with batch = the whole forget set order is moot
        return DataLoader(_Rows(self.forget_set), batch_size=self.hparams.batch_size, shuffle=True)

    def test_dataloader(self) -> DataLoader:
        self.setup()
        return DataLoader(_Rows(self.forget_set), batch_size=self.hparams.eval_batch_size, shuffle=False)
