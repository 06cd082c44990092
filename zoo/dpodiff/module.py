"""`DPODiffModule`: DPO-Diff over a batch of prompts as a Lightning evaluation (nothing is trained).

`zoo test` (or `zoo predict`) searches each prompt's space and logs ``test/loss_original``, ``test/loss_best``
(spherical CLIP distances to the original prompt, full generations), ``test/loss_delta`` (best − original:
negative is better when improving, positive when attacking) and ``test/evaluations``. The run directory receives
``dpodiff_<stage>.jsonl`` (per prompt: best prompts, losses, learned α, top candidates), ``candidates.json`` (the
per-word candidates used, reusable with ``candidates: json``), ``scores.json`` (prompt → original loss, the
datamodule's loss filter reads it) and, with ``save_images``, ``images/<id>_{original,best}.png``.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal, Optional, Union

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from zoo.attached import attached_trainer
from zoo.dpodiff.constraint import SentenceSimilarity
from zoo.dpodiff.optimize import DPOSettings, optimize_prompt
from zoo.dpodiff.spaces import (NPLIB_WORDS, NoCandidates, build_space, llm_candidates, load_candidate_cache,
                                nplib_candidates, wordnet_candidates)
from zoo.dpodiff.stack import build_stack
from zoo.dpodiff.wordnet import open_wordnet
from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.lm import DType
from zoo.records import EvalRecords


def searched(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of prompts that were searched (not skipped for want of candidates)."""
    return [r for r in records if "skipped" not in r]


class DPODiffModule(EvalRecords, HubMixin, L.LightningModule):
    """Discrete prompt optimisation for Stable Diffusion (improvement or attack).

    Args:
        task: ``improve`` (minimise the distance with a negative prompt) or ``attack`` (maximise it by
            rewriting the positive prompt, sentence-T5 cosine >= constraint_threshold).
        space: ``antonym`` / ``nplib`` (negative prompt, improvement) or ``synonym`` (positive prompt, attacks).
        algorithm: ``hybrid`` (paper default: GPO then EPO from the learned α), ``gpo``, ``epo`` or ``random``
            (uniform samples of the same space; a baseline).
        candidates: where per-word candidates come from: ``wordnet`` (offline), ``llm`` (the official questions
            to ``llm_endpoint`` (OpenAI-compatible) or the HF causal LM ``llm_model``) or ``json`` (a
            ``candidates.json`` a run saved, at ``candidates_path``) or ``embedded`` (WordNet's candidates for the
            datamodule's embedded prompts, frozen in `zoo.dpodiff.embedded`; smoke runs).
        nltk_data: NLTK data root holding ``corpora/wordnet`` (default ``$NLTK_DATA`` or ~/.cache/zoo/nltk_data;
            laid out from Debian's wordnet-base + wordnet-sense-index when missing).
        nplib_path: one negative word per line for the NPLib space (default: the project's own list).
        k_candidates: candidates kept per word after the single-token filter (official question: 5).
        stack: Hub id of the SD model (paper: CompVis/stable-diffusion-v1-4) or a dict of
            :func:`zoo.dpodiff.tiny_stack` sizes (random weights, offline).
        clip_model: the scoring CLIP (paper: openai/clip-vit-base-patch32); a tiny stack has its own.
        torch_dtype: SD weights' dtype for a Hub stack (paper: float16).
        constraint_model: sentence-transformers id (paper: sentence-transformers/sentence-t5-base), a T5 config
            dict (tiny, random) or None (no constraint). Used only when attacking.
        constraint_threshold: minimum sentence-T5 cosine of an attack (paper: 0.9).
        num_inference_steps / guidance_scale: sampler (paper: 50 steps, CFG 7.5).
        num_seeds: images per evaluation, seeds ``seed + k`` (official: 1).
        gpo_iters / t_start / t_repeat: GPO iterations and the schedule t_i = t_start + i // t_repeat (20, 15, 2).
        lr / momentum / grad_clip / coeff_min / coeff_max / tau: RMSprop (0.1, 0.5), gradient clip (0.025),
            α clamp ([0, 3]), Gumbel-Softmax temperature (1).
        gpo_samples: prompts sampled from α and evaluated after GPO alone (32).
        epo_*: EPO population 20, top 10, 10 crossovers, 10 mutations at probability 0.1; budget None = 40 (EPO)
            or 32 (Hybrid); explore None = 1 (uniform initial population, EPO) or 0 (from α, Hybrid).
        random_budget: evaluations of the random baseline (40).
        max_evaluations: hard cap on full generations per prompt (equal-budget comparisons), None = none.
        save_images: write the original and best images as PNG.
    """

    def __init__(self, task: Literal["improve", "attack"] = "improve",
                 space: Literal["antonym", "synonym", "nplib"] = "antonym",
                 algorithm: Literal["hybrid", "gpo", "epo", "random"] = "hybrid",
                 candidates: Literal["wordnet", "llm", "json", "embedded"] = "wordnet", candidates_path: Optional[str] = None,
                 llm_model: Optional[str] = None, llm_endpoint: Optional[str] = None,
                 llm_api_key_env: str = "OPENAI_API_KEY", nltk_data: Optional[str] = None,
                 nplib_path: Optional[str] = None, k_candidates: int = 5,
                 stack: Union[str, dict[str, Any]] = "CompVis/stable-diffusion-v1-4",
                 clip_model: str = "openai/clip-vit-base-patch32", torch_dtype: Optional[DType] = "float16",
                 constraint_model: Union[str, dict[str, Any], None] = "sentence-transformers/sentence-t5-base",
                 constraint_threshold: float = 0.9, num_inference_steps: int = 50, guidance_scale: float = 7.5,
                 num_seeds: int = 1, gpo_iters: int = 20, t_start: int = 15, t_repeat: int = 2, lr: float = 0.1,
                 momentum: float = 0.5, grad_clip: float = 0.025, coeff_min: float = 0.0, coeff_max: float = 3.0,
                 tau: float = 1.0, gpo_samples: int = 32, epo_population: int = 20, epo_select: int = 10,
                 epo_crossover: int = 10, epo_mutation: int = 10, epo_m_prob: float = 0.1,
                 epo_budget: Optional[int] = None, epo_explore: Optional[float] = None, random_budget: int = 40,
                 max_evaluations: Optional[int] = None, save_images: bool = True):
        super().__init__()
        self.save_hyperparameters()
        if space not in ("antonym", "synonym", "nplib"):
            raise ZooError(f"space must be 'antonym', 'synonym' or 'nplib', got {space!r}")
        if candidates not in ("wordnet", "llm", "json", "embedded"):
            raise ZooError(f"candidates must be 'wordnet', 'llm', 'json' or 'embedded', got {candidates!r}")
        if candidates == "json" and not candidates_path:
            raise ZooError("candidates: json needs candidates_path (a candidates.json a run saved)")
        if candidates == "llm" and not (llm_model or llm_endpoint):
            raise ZooError("candidates: llm needs llm_model (HF causal LM) or llm_endpoint (OpenAI-compatible URL)")
        # improving may use any space, synonym included: the official loader's 'synoym' typo means that space
        # never loads when improving there, but nothing in the paper forbids it (cards/dpodiff.md)
        if task == "attack" and space != "synonym":
            raise ZooError(f"attacks rewrite the positive prompt: use space 'synonym', not {space!r}")
        if k_candidates < 1:
            raise ZooError(f"k_candidates must be >= 1, got {k_candidates}")
        names = {f.name for f in fields(DPOSettings)}
        self.settings = DPOSettings(**{k: v for k, v in self.hparams.items() if k in names})
        self.settings.check()
        self.sd = build_stack(stack, clip_model, torch_dtype)
        self.similarity = (SentenceSimilarity(constraint_model) if task == "attack" and constraint_model is not None
                           else None)
        self._nplib = self._read_nplib(nplib_path) if space == "nplib" else None
        self.records: list[dict[str, Any]] = []
        self._cache: dict[str, dict[str, dict[str, list[str]]]] = {}
        self._llm = None

    @staticmethod
    def _read_nplib(path: Optional[str]) -> list[str]:
        if path is None:
            return list(NPLIB_WORDS)
        p = Path(path)
        if not p.is_file():
            raise ZooError(f"nplib_path {p} does not exist (one negative word per line)")
        words = [w.strip() for w in p.read_text().splitlines() if w.strip()]
        if len(words) < 4:
            raise ZooError(f"nplib_path {p} has {len(words)} words; NPLib needs at least one per slot (4)")
        return words

    # -- candidates ------------------------------------------------------------------------------------------------
    def _ask(self, question: str) -> str:
        hp = self.hparams
        if hp.llm_endpoint:
            import httpx

            key = os.environ.get(hp.llm_api_key_env, "")
            # temperature 0 for a reproducible space; the official chatgpt.py samples at the API default (1) and
            # re-asks up to 5 times when over 40% of words get a single candidate (cards/dpodiff.md, deviations)
            r = httpx.post(hp.llm_endpoint.rstrip("/") + "/chat/completions", timeout=120,
                           headers={"Authorization": f"Bearer {key}"} if key else {},
                           json={"model": hp.llm_model or "gpt-4", "temperature": 0,
                                 "messages": [{"role": "user", "content": question}]})
            if r.status_code != 200:
                raise ZooError(f"LLM endpoint {hp.llm_endpoint} answered {r.status_code}: {r.text[:200]}")
            return r.json()["choices"][0]["message"]["content"]
        from zoo.lm import build_causal_lm, generate, load_tokenizer

        if self._llm is None:
            self._llm = (build_causal_lm(hp.llm_model).eval(), load_tokenizer(hp.llm_model))  # inference only
        return generate(self._llm[0], self._llm[1], [question], 256)[0][0]

    def word_candidates(self, prompts: list[str]) -> dict[str, dict[str, list[str]]]:
        """prompt -> {word: candidates} for the configured space and source (cached per run)."""
        hp = self.hparams
        kind = hp.space
        if kind == "nplib":
            return {p: nplib_candidates(self._nplib) for p in prompts}
        cache = self._cache.setdefault(kind, {})
        todo = [p for p in prompts if p not in cache]
        if todo and hp.candidates == "json":
            data = load_candidate_cache(hp.candidates_path, kind)
            missing = [p for p in todo if p not in data]
            if missing:
                raise ZooError(f"{hp.candidates_path} has no {kind} candidates for prompt {missing[0]!r}")
            cache.update({p: data[p] for p in todo})
        elif todo and hp.candidates == "embedded":
            from zoo.dpodiff.embedded import EMBEDDED_CANDIDATES

            missing = [p for p in todo if p not in EMBEDDED_CANDIDATES[kind]]
            if missing:
                raise ZooError(f"candidates: embedded covers only the embedded prompts, not {missing[0]!r}")
            cache.update({p: EMBEDDED_CANDIDATES[kind][p] for p in todo})
        elif todo and hp.candidates == "wordnet":
            with open_wordnet(hp.nltk_data) as wn:
                cache.update({p: wordnet_candidates(p, kind, wn, hp.k_candidates) for p in todo})
        elif todo:
            cache.update({p: llm_candidates(p, kind, self._ask) for p in todo})
        return {p: cache[p] for p in prompts}

    # -- Lightning -------------------------------------------------------------------------------------------------
    def score_records(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        hp = self.hparams
        seed = int(os.environ.get("PL_GLOBAL_SEED", "0"))
        cands = self.word_candidates([r["prompt"] for r in batch])
        out = []
        with torch.inference_mode(False), torch.enable_grad():
            for row in batch:
                try:
                    space = build_space(row["prompt"], hp.space, self.sd.tokenizer, cands[row["prompt"]], hp.task,
                                        hp.k_candidates)
                    # an attack's constraint may also leave nothing (no synonym keeps the cosine >= threshold)
                    res = optimize_prompt(self.sd, space, self.settings, seed, self.similarity)
                except NoCandidates as e:  # one such prompt of a dataset's thousands must not end the run
                    rank_zero_warn(f"dpodiff: skipped: {e}")
                    out.append({"id": row["id"], "prompt": row["prompt"], "skipped": str(e)})
                    continue
                res["id"] = row["id"]
                self._save_images(res)
                out.append({k: v for k, v in res.items() if not k.startswith("images_")})
        return out

    def log_records(self, records: list[dict[str, Any]], stage: str) -> None:
        self.log(f"{stage}/skipped_prompts", float(sum("skipped" in r for r in records)), on_step=False,
                 on_epoch=True, reduce_fx="sum", sync_dist=True)
        records = searched(records)
        if not records:
            return
        n = len(records)
        mean = lambda k: sum(float(r[k]) for r in records) / n
        self.log_dict({f"{stage}/loss_original": mean("loss_original"), f"{stage}/loss_best": mean("loss_best"),
                       f"{stage}/loss_delta": sum(r["loss_best"] - r["loss_original"] for r in records) / n,
                       f"{stage}/evaluations": mean("evaluations")},
                      on_step=False, on_epoch=True, batch_size=n, sync_dist=True)

    def _run_dir(self) -> Optional[Path]:
        if attached_trainer(self) is None:
            return None
        run = Path(self.trainer.default_root_dir)
        run.mkdir(parents=True, exist_ok=True)
        return run

    def _save_images(self, res: dict[str, Any]) -> None:
        run = self._run_dir()
        if run is None or not self.hparams.save_images:
            return
        from PIL import Image

        d = run / "images"
        d.mkdir(exist_ok=True)
        for which in ("original", "best"):
            ims = [im[0].float().clamp(0, 1).permute(1, 2, 0).mul(255).round().byte().cpu() for im in res[f"images_{which}"]]
            Image.fromarray(torch.cat(ims, 1).numpy()).save(d / f"{res['id']}_{which}.png")

    def save_records(self, stage: str) -> None:
        run = self._run_dir()
        if run is None or not self.records:
            return
        rank = f"_rank{self.global_rank}" if self.trainer.world_size > 1 else ""
        with (run / f"dpodiff_{stage}{rank}.jsonl").open("w") as fh:
            for r in self.records:
                fh.write(json.dumps(r) + "\n")
        done = searched(self.records)
        (run / f"scores{rank}.json").write_text(json.dumps({r["prompt"]: r["loss_original"] for r in done}, indent=1))
        if self._cache:
            (run / f"candidates{rank}.json").write_text(json.dumps(self._cache, indent=1))
        n, skipped = len(done), len(self.records) - len(done)
        mean = (f", mean loss {sum(r['loss_original'] for r in done) / n:.4f} -> "
                f"{sum(r['loss_best'] for r in done) / n:.4f}") if n else ""
        rank_zero_info(f"dpodiff: {n} prompts searched{mean} ({self.hparams.task}); {skipped} skipped (no candidates)")

    def configure_optimizers(self):
        return None

    # A Hub stack is rebuilt from its name; only a random-init tiny stack publishes weights.
    hub_strict = False

    def hub_state_dict(self):
        return {} if isinstance(self.hparams.stack, str) else self.state_dict()

    def card_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tags": ["dpodiff", "prompt-optimization", "stable-diffusion", "text-to-image"],
                                "base_model": self.hparams.stack if isinstance(self.hparams.stack, str) else None}
        return meta
