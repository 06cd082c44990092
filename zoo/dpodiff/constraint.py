"""The attack's semantic constraint: sentence-T5 cosine between the rewritten and the original prompt ≥ 0.9
(official `get_constraint_fn('cos_t5')` with sentence-transformers/sentence-t5-base).

A Hub name loads the sentence-transformers model; a dict builds a tiny random T5 encoder (byte tokenizer, mean
pooling, unit norm: sentence-T5's pooling without its dense layer) for offline smoke runs.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from zoo.errors import ZooError


class SentenceSimilarity:
    def __init__(self, spec: str | dict[str, Any], device: str | torch.device = "cpu"):
        self.spec = spec
        if isinstance(spec, str):
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as e:  # pragma: no cover
                raise ZooError(f"the attack constraint needs sentence-transformers (pip install 'zoo[dpodiff]'): {e}") from e
            try:
                self.st = SentenceTransformer(spec, device=str(device))
            except OSError as e:
                raise ZooError(f"cannot load the constraint model {spec!r} from the Hub or its cache: {e}") from e
        elif isinstance(spec, dict):
            from transformers import ByT5Tokenizer, T5Config, T5EncoderModel

            seed = int(spec.get("seed", 0))
            cfg = {k: v for k, v in spec.items() if k != "seed"}
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                self.encoder = T5EncoderModel(T5Config(**cfg)).eval().requires_grad_(False)
            self.tokenizer = ByT5Tokenizer()
            self.st = None
        else:
            raise ZooError(f"constraint_model must be a Hub id or a T5 config dict, got {type(spec).__name__}")

    @torch.no_grad()
    def embed(self, sentences: Sequence[str]) -> torch.Tensor:
        if self.st is not None:
            return torch.as_tensor(self.st.encode(list(sentences), normalize_embeddings=True))
        tok = self.tokenizer(list(sentences), padding=True, return_tensors="pt")
        h = self.encoder(input_ids=tok.input_ids, attention_mask=tok.attention_mask).last_hidden_state
        m = tok.attention_mask.unsqueeze(-1).to(h.dtype)
        return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)

    def cosine(self, original: str, candidates: Sequence[str]) -> list[float]:
        e = self.embed([original, *candidates]).double()
        return (e[1:] @ e[0]).tolist()
