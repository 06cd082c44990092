"""IMLTagging: source tags on documents, and per-subset QA exact match / F1 with greedy decoding.

Implicit meta-learning (Krasheninnikov et al., ICML 2024) trains on documents whose *source* is marked by a
meaningless tag string: definitions from a reliable source (tag1) agree with the QA data, those from an unreliable
one (tag2) do not. This callback is the reusable half of that setup:

* Training documents are batches of dicts of lists with a ``text`` field and a ``source`` label. Before each
  batch reaches the model, every document whose source has a tag becomes ``"<tag> <text>"`` (empty source:
  unchanged). Tags are fixed by the config or drawn at random (``<|abcdef|>``, seeded), written to
  ``<run dir>/iml_tags.json``, and can be read back from an earlier stage's run (``tags_from``) so stage 2 sees
  stage 1's tags.
* Validation/test batches with ``question``/``answer``/``subset`` fields are answered greedily by the module's
  causal LM (``pl_module.<model_attr>`` and ``pl_module.<tokenizer_attr>``) and scored per subset with SQuAD EM/F1
  (max over ';'-separated answers). It logs ``val/em_<subset>``, ``val/f1_<subset>`` and ``val/iml_effect`` =
  EM(d1consis) - EM(d2consis) (``test/...`` in test), and writes the predictions to the run directory.

Any LightningModule that tokenizes ``batch["text"]`` in its steps works; any dataset with these fields works.
"""

from __future__ import annotations

import json
import random
import string
from collections import defaultdict
from pathlib import Path
from typing import Optional

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from zoo.errors import ZooError
from zoo.iml.metrics import em_f1
from zoo.lm import generate
from zoo.rundir import newest_match

TAGS_FILE = "iml_tags.json"


def draw_tags(sources: list[str], length: int, seed: int) -> dict[str, str]:
    """One distinct random tag ``<|abcdef|>`` per source (the paper's 6-letter define tags)."""
    rng = random.Random(seed)
    tags: dict[str, str] = {}
    for s in sources:
        while True:
            t = "<|" + "".join(rng.choice(string.ascii_lowercase) for _ in range(length)) + "|>"
            if t not in tags.values():
                tags[s] = t
                break
    return tags


def tag_document(tag: str, text: str) -> str:
    return f"{tag} {text}"


def check_tags(tags: dict[str, str], words: set[str], tokenizer=None) -> None:
    """Tags must be distinct, non-empty single words that occur nowhere in the data and are not a whole word
    of the tokenizer's vocabulary: a tag that already means something would leak its meaning into the
    reliability signal the experiment measures."""
    vocab = tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else {}
    seen: dict[str, str] = {}
    for source, tag in tags.items():
        if not tag or len(tag.split()) != 1 or tag != tag.strip():
            raise ZooError(f"IMLTagging: tag {tag!r} of source {source!r} must be one non-empty word")
        if tag in seen:
            raise ZooError(f"IMLTagging: sources {seen[tag]!r} and {source!r} share the tag {tag!r}")
        seen[tag] = source
        if tag in words:
            raise ZooError(f"IMLTagging: tag {tag!r} of source {source!r} collides with a vocabulary word "
                           "of the documents; use a meaningless string (or leave it null to draw one)")
        if vocab and len(tag) > 1:
            for form in (tag, " " + tag, "\u0120" + tag, "\u2581" + tag):
                if form in vocab:
                    raise ZooError(f"IMLTagging: tag {tag!r} of source {source!r} collides with the tokenizer "
                                   f"vocabulary word {form!r}; use a meaningless string")


def _words(records) -> set[str]:
    words: set[str] = set()
    for r in records:
        if isinstance(r, dict):
            for key in ("text", "question", "answer"):
                if isinstance(r.get(key), str):
                    words.update(r[key].split())
    return words


class IMLTagging(L.Callback):
    def __init__(
        self,
        tags: Optional[dict[str, Optional[str]]] = None,
        tag_length: int = 6,
        seed: int = 0,
        tags_from: Optional[str] = None,
        max_new_tokens: int = 8,
        effect: tuple[str, str] = ("d1consis", "d2consis"),
        model_attr: str = "model",
        tokenizer_attr: str = "tokenizer",
        save_predictions: bool = True,
    ):
        """
        Args:
            tags: source label -> tag string; a null tag is drawn at random (default: tag1/tag2/tag3 drawn).
            tag_length: letters per drawn tag (paper: 6).
            seed: seed of the drawn tags; the same seed in both stages gives the same tags.
            tags_from: an earlier run directory (or its iml_tags.json) whose tags win over `tags`/`seed` for the
                sources it has, e.g. stage 2 reading stage 1's tags.
            max_new_tokens: greedy answer length (paper: 8), cut at the first newline.
            effect: the two subsets whose EM difference is logged as `iml_effect`.
            model_attr / tokenizer_attr: where the module keeps its HF causal LM and tokenizer.
        """
        super().__init__()
        if max_new_tokens < 1:  # transformers' generate would refuse it at the first evaluation, with a traceback
            raise ZooError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.requested = dict(tags) if tags is not None else {"tag1": None, "tag2": None, "tag3": None}
        self.tag_length, self.seed, self.tags_from = tag_length, seed, tags_from
        self.max_new_tokens, self.effect = max_new_tokens, tuple(effect)
        self.model_attr, self.tokenizer_attr, self.save_predictions = model_attr, tokenizer_attr, save_predictions
        self.tags: dict[str, str] = {}
        self._rows: list[dict] = []

    # ------------------------------------------------------------------ tags

    def resolve_tags(self) -> dict[str, str]:
        drawn = draw_tags(list(self.requested), self.tag_length, self.seed)
        tags = {s: (t if t is not None else drawn[s]) for s, t in self.requested.items()}
        if self.tags_from:
            # a glob picks the newest match (e.g. runs/<stage1>/*)
            p = Path(newest_match(self.tags_from, "IMLTagging: tags_from", "run the earlier stage first"))
            p = p / TAGS_FILE if p.is_dir() else p
            if p.is_dir() or not p.is_file():
                raise ZooError(f"IMLTagging: tags_from {self.tags_from!r} has no {TAGS_FILE}")
            tags.update(json.loads(p.read_text()))
        self.tags = tags
        return tags

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.resolve_tags()
        rank_zero_info(f"IMLTagging: tags {self.tags}")
        if trainer.is_global_zero and trainer.default_root_dir:
            run_dir = Path(trainer.default_root_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / TAGS_FILE).write_text(json.dumps(self.tags, indent=2, sort_keys=True))

    def apply_tags(self, batch) -> None:
        if not isinstance(batch, dict) or "text" not in batch or "source" not in batch:
            return
        out = []
        for text, source in zip(batch["text"], batch["source"]):
            if source:
                if source not in self.tags:
                    raise ZooError(f"IMLTagging: document source {source!r} has no tag; known: {sorted(self.tags)}")
                text = tag_document(self.tags[source], text)
            out.append(text)
        batch["text"] = out

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Collision check over the whole training set (and the eval questions) once, before any step.
        words: set[str] = set()
        for loader in (trainer.train_dataloader, trainer.val_dataloaders):
            loaders = loader if isinstance(loader, (list, tuple)) else [loader]
            for dl in loaders:
                ds = getattr(dl, "dataset", None)
                if ds is not None and hasattr(ds, "__len__") and hasattr(ds, "__getitem__"):
                    words |= _words(ds[i] for i in range(len(ds)))
        check_tags(self.tags, words, getattr(pl_module, self.tokenizer_attr, None))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.apply_tags(batch)

    # ------------------------------------------------------------------ evaluation

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._rows = []

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._rows = []

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self.apply_tags(batch)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self.apply_tags(batch)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if not trainer.sanity_checking:
            self._answer(pl_module, batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._answer(pl_module, batch)

    def _answer(self, pl_module, batch) -> None:
        if not isinstance(batch, dict) or not {"question", "answer", "subset"} <= set(batch):
            return
        keep = [i for i, q in enumerate(batch["question"]) if q]
        if not keep:
            return
        questions = [batch["question"][i] for i in keep]
        model = getattr(pl_module, self.model_attr)
        tokenizer = getattr(pl_module, self.tokenizer_attr)
        outs = generate(model, tokenizer, questions, max_new_tokens=self.max_new_tokens, stop=("\n",))
        preds = [o[0].strip() for o in outs]
        answers = [batch["answer"][i] for i in keep]
        ems, f1s = em_f1(preds, answers)
        for j, i in enumerate(keep):
            self._rows.append({"subset": batch["subset"][i], "question": questions[j], "answer": answers[j],
                               "prediction": preds[j], "em": ems[j], "f1": f1s[j]})

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._log(trainer, pl_module, "val")

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._log(trainer, pl_module, "test")

    def _log(self, trainer, pl_module, prefix: str) -> None:
        rows = self._rows
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, rows)
            rows = [r for part in gathered for r in part]
        metrics = subset_metrics(rows, self.effect)
        for k, v in metrics.items():
            # already reduced over ranks above: every rank logs the same value
            pl_module.log(f"{prefix}/{k}", v, on_epoch=True, rank_zero_only=False)
        if self.save_predictions and trainer.is_global_zero and trainer.default_root_dir and rows:
            path = Path(trainer.default_root_dir) / f"iml_predictions_{prefix}.jsonl"
            with path.open("w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")


def subset_metrics(rows: list[dict], effect: tuple[str, str] = ("d1consis", "d2consis")) -> dict[str, float]:
    """Mean EM/F1 per subset, and the IML effect EM(effect[0]) - EM(effect[1]) when both subsets are present."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[r["subset"]].append(r)
    out: dict[str, float] = {}
    for s in sorted(by):
        out[f"em_{s}"] = sum(r["em"] for r in by[s]) / len(by[s])
        out[f"f1_{s}"] = sum(r["f1"] for r in by[s]) / len(by[s])
    a, b = effect
    if f"em_{a}" in out and f"em_{b}" in out:
        out["iml_effect"] = out[f"em_{a}"] - out[f"em_{b}"]
    return out
