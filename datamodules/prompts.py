"""Prompts for DPO-Diff: DiffusionDB metadata, COCO captions, a text file, or the project's embedded list.

Sources (``source``):
- ``diffusiondb``: DiffusionDB's ``metadata.parquet`` (columns image_name, prompt, part_id, seed, step, cfg,
  sampler, width, height, user_name, timestamp, image_nsfw, prompt_nsfw), from ``path`` or downloaded from the
  Hub dataset ``poloclub/diffusiondb`` through huggingface_hub's cache; column ``prompt``, duplicates dropped.
- ``coco``: a COCO captions file (``captions_train2017.json`` / ``captions_val2014.json``: ``annotations`` with
  ``image_id``, ``id``, ``caption``) at ``path``.
- ``text``: one prompt per line at ``path``.
- ``embedded``: :data:`zoo.dpodiff.embedded.EMBEDDED_PROMPTS`, written by the project.

The paper keeps prompts whose original spherical CLIP loss is above 0.85 for improvement and below it for
attacks. That score needs the SD stack, so it is a preprocessing run: ``zoo test`` with the module writes
``scores.json`` (prompt -> loss) into its run dir; pass it as ``scores_path`` with ``filter: above|below``.
Batches are lists of ``{"id", "prompt"}`` dicts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from zoo.data import reading, refuse_unread_files
from zoo.dpodiff.embedded import EMBEDDED_PROMPTS
from zoo.errors import ZooError, flat

DIFFUSIONDB = "poloclub/diffusiondb"
# What the released metadata tables look like, so that a card names DiffusionDB only for them (a user's own prompts in
# its format are named by their path): metadata.parquet (2M) and metadata-large.parquet (Large) have one row per image
# and at least the first release's seven columns.
DIFFUSIONDB_ROWS = frozenset({2_000_000, 14_000_000})
DIFFUSIONDB_COLUMNS = frozenset({"image_name", "prompt", "part_id", "seed", "step", "cfg", "sampler"})


def read_diffusiondb(path: str | Path) -> list[str]:
    import pandas as pd

    try:
        df = pd.read_parquet(path, columns=["prompt"])
    except (KeyError, ValueError) as e:
        raise ZooError(f"{path} is not DiffusionDB metadata (a parquet file with a 'prompt' column): {e}") from e
    prompts = df["prompt"].dropna()  # a null is no prompt, not 'None'
    # a column of numbers (or lists) would become prompts such as '7' through astype(str): the release's is text
    bad = prompts[~prompts.map(lambda v: isinstance(v, str))]
    if len(bad):
        value = bad.iloc[0].tolist() if isinstance(bad.iloc[0], (np.generic, np.ndarray)) else bad.iloc[0]
        raise ZooError(f"{path}: prompt in row {bad.index[0]} is {value!r} ({type(value).__name__}), not text; "
                       f"DiffusionDB's metadata has one prompt string per row ({len(bad)} such row(s))")
    return [p for p in prompts if p.strip()]


def is_diffusiondb_release(path: str | Path) -> bool:
    """A released DiffusionDB metadata table: its row count and columns, read from the parquet footer only."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except (OSError, ValueError):
        return False
    return meta.num_rows in DIFFUSIONDB_ROWS and DIFFUSIONDB_COLUMNS <= set(meta.schema.names)


def read_coco_captions(path: str | Path) -> list[str]:
    try:
        data = json.loads(Path(path).read_bytes())  # bytes: json detects UTF-8/16/32; others are a ValueError
        annotations = data["annotations"]
    except (ValueError, OSError, KeyError, TypeError) as e:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise ZooError(f"{path} is not a COCO captions file (JSON with annotations[].caption): {e}") from e
    if not isinstance(annotations, list):
        raise ZooError(f"{path}: annotations is a JSON {type(annotations).__name__}, not a list of objects with "
                       "image_id, id and caption (a COCO captions file)")
    captions = []
    for i, a in enumerate(annotations):
        # str() of a null or a number would be the prompt 'None' or '7'
        caption = a.get("caption") if isinstance(a, dict) else None
        if not isinstance(caption, str):
            got = f"a JSON {type(a).__name__}" if not isinstance(a, dict) else (
                "no caption" if "caption" not in a else f"caption {caption!r}")
            raise ZooError(f"{path}: annotations[{i}] has {got}; each annotation is an object whose caption is a "
                           "string (a COCO captions file)")
        captions.append(caption.strip())
    return [c for c in captions if c]  # a blank caption is no prompt (as a blank line of a text file)


def read_text(path: str | Path) -> list[str]:
    with reading(path, "text file of prompts (one per line)"):
        text = Path(path).read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


def collate_rows(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(batch)


class PromptsDataModule(L.LightningDataModule):
    """Prompts to optimise, evaluation only (test / predict / validation loaders).

    Args:
        source: ``diffusiondb``, ``coco``, ``text`` or ``embedded`` (see the module docstring).
        path: the local file (DiffusionDB: optional, else the Hub's metadata.parquet).
        max_prompts: keep this many (a seeded random subset), None for all.
        seed: the subset's seed.
        scores_path: a run's ``scores.json`` (prompt -> original spherical CLIP loss) for the paper's filter.
        filter: ``above`` (improvement: loss > threshold), ``below`` (attack: loss < threshold) or ``none``.
        threshold: the filter's loss threshold (paper: 0.85).
        batch_size: prompts per step.
    """

    # the file options and the sources that read them (`refuse_unread_files`; scores_path is read by all)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("diffusiondb", "coco", "text")}

    def __init__(self, source: Literal["diffusiondb", "coco", "text", "embedded"] = "embedded",
                 path: Optional[str] = None, max_prompts: Optional[int] = None, seed: int = 0,
                 scores_path: Optional[str] = None, filter: Literal["none", "above", "below"] = "none",
                 threshold: float = 0.85, batch_size: int = 1):
        super().__init__()
        self.save_hyperparameters()
        if source not in ("diffusiondb", "coco", "text", "embedded"):
            raise ZooError(f"source must be 'diffusiondb', 'coco', 'text' or 'embedded', got {source!r}")
        refuse_unread_files(self, source, locals())
        if filter not in ("none", "above", "below"):
            raise ZooError(f"filter must be 'none', 'above' or 'below', got {filter!r}")
        if filter != "none" and not scores_path:
            raise ZooError("filter above/below needs scores_path (the scores.json a dpodiff run wrote)")
        if source in ("coco", "text") and not path:
            raise ZooError(f"source {source!r} needs path (COCO: captions_*.json from cocodataset.org; text: one "
                           f"prompt per line)")
        if batch_size < 1 or (max_prompts is not None and max_prompts < 1):
            raise ZooError(f"need batch_size >= 1 and max_prompts >= 1, got {batch_size}, {max_prompts}")
        self.rows: list[dict[str, Any]] = []

    def _read(self) -> list[str]:
        hp = self.hparams
        if hp.source == "embedded":
            return list(EMBEDDED_PROMPTS)
        if hp.path is not None and not Path(hp.path).is_file():
            how = {"diffusiondb": f"metadata.parquet of the Hub dataset {DIFFUSIONDB}",
                   "coco": "captions_train2017.json or captions_val2014.json from cocodataset.org annotations",
                   "text": "a text file with one prompt per line"}[hp.source]
            raise ZooError(f"{hp.path} does not exist: {hp.source} needs {how}")
        if hp.source == "diffusiondb":
            path = hp.path
            if path is None:
                from huggingface_hub import hf_hub_download

                try:
                    path = hf_hub_download(DIFFUSIONDB, "metadata.parquet", repo_type="dataset")
                except Exception as e:  # offline / no cache: say how to get it
                    raise ZooError(f"cannot get metadata.parquet of {DIFFUSIONDB} ({type(e).__name__}); download "
                                   f"it and pass path") from e
            return read_diffusiondb(path)
        return read_coco_captions(hp.path) if hp.source == "coco" else read_text(hp.path)

    def setup(self, stage: Optional[str] = None) -> None:
        hp = self.hparams
        prompts = list(dict.fromkeys(self._read()))
        n_read = len(prompts)
        if hp.filter != "none":
            p = Path(hp.scores_path)
            if not p.is_file():
                raise ZooError(f"scores_path {p} does not exist (a dpodiff run writes scores.json)")
            with reading(p, "scores JSON"):
                scores = json.loads(p.read_bytes())
            if not isinstance(scores, dict):
                raise ZooError(f"scores_path {p} holds a JSON {type(scores).__name__}, not an object prompt -> score "
                               "(a dpodiff run writes scores.json)")
            keep = (lambda s: s > hp.threshold) if hp.filter == "above" else (lambda s: s < hp.threshold)
            prompts = [q for q in prompts if q in scores and keep(self._score(p, q, scores[q]))]
        if hp.max_prompts is not None and len(prompts) > hp.max_prompts:
            idx = np.sort(np.random.default_rng(hp.seed).choice(len(prompts), hp.max_prompts, replace=False))
            prompts = [prompts[i] for i in idx]
        if not prompts:
            where = f" ({hp.path})" if hp.path else ""
            raise ZooError(f"no prompts left from source {hp.source!r}{where} (read {n_read}, filter {hp.filter} "
                           f"{hp.threshold})")
        self.rows = [{"id": i, "prompt": q} for i, q in enumerate(prompts)]
        rank_zero_info(f"dpodiff prompts: source={hp.source} ({self.format_name()}), {n_read} read, "
                       f"{len(self.rows)} kept (filter {hp.filter}{'' if hp.filter == 'none' else f' {hp.threshold}'})")

    @staticmethod
    def _score(path: Path, prompt: str, value: Any) -> float:
        """A prompt's score in scores.json: its original spherical CLIP loss, a number in [0, pi^2/2]. A NaN would
        fail both filters (the prompt silently dropped) and an inf or a negative one pass one of them."""
        try:
            score = float(value)
        except (TypeError, ValueError) as e:
            raise ZooError(f"scores_path {path}: the score of {prompt!r} is {value!r}, not a number ({flat(e)})") from e
        if not math.isfinite(score) or score < 0:
            raise ZooError(f"scores_path {path}: the score of {prompt!r} is {score}; a score is a prompt's spherical "
                           "CLIP loss, finite and >= 0 (a dpodiff run writes scores.json)")
        return score

    def format_name(self) -> str:
        return {"diffusiondb": "DiffusionDB metadata.parquet", "coco": "COCO captions JSON",
                "text": "text, one prompt per line", "embedded": "the project's prompt list"}[self.hparams.source]

    def _loader(self) -> DataLoader:
        if not self.rows:
            self.setup()
        return DataLoader(self.rows, batch_size=self.hparams.batch_size, shuffle=False, collate_fn=collate_rows)

    def test_dataloader(self) -> DataLoader:
        return self._loader()

    predict_dataloader = val_dataloader = test_dataloader

    def card_metadata(self) -> dict[str, Any]:
        hp = self.hparams
        meta: dict[str, Any] = {"data_source": {
            "diffusiondb": f"DiffusionDB prompts ({hp.path or f'{DIFFUSIONDB} metadata.parquet from the Hub'})",
            "coco": f"COCO captions ({hp.path})",
            "text": f"prompts from {hp.path}",
            "embedded": "embedded: the project's own prompt list (zoo.dpodiff.embedded)"}[hp.source]}
        if hp.source == "diffusiondb" and (hp.path is None or is_diffusiondb_release(hp.path)):
            meta["datasets"] = [DIFFUSIONDB]
        return meta
