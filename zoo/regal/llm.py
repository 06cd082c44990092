"""LLM clients for ReGAL: any HF causal LM (optionally 4-bit) or an OpenAI-compatible endpoint, behind a response
cache in the run directory, so an interrupted run resumes and a finished one replays without any model.

A client is described by a plain dict (the config schema, checked by `check_spec`):

    {backend: hf, model: codellama/CodeLlama-13b-Instruct-hf, load_in_4bit: true, temperature: 0.2, top_p: 0.9,
     max_new_tokens: 500}
    {backend: openai, model: gpt-3.5-turbo, base_url: https://..., api_key_env: OPENAI_API_KEY,
     temperature: 0.2, max_new_tokens: 2000}
    {backend: hf, model: {model_type: llama, hidden_size: 32, ...}, tokenizer: byt5, max_prompt_tokens: 512}

The model is built on the first cache miss only. Responses are keyed by (client, sampling settings, prompt) and
by how many times that same key was asked before in the run, so a replay returns them in the same order.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

from zoo.errors import ZooError

SPEC_KEYS = {"backend", "model", "tokenizer", "load_in_4bit", "torch_dtype", "device", "temperature", "top_p",
             "max_new_tokens", "max_prompt_tokens", "base_url", "api_key_env", "timeout", "max_retries",
             "init_seed"}
DEFAULTS = {"tokenizer": None, "load_in_4bit": False, "torch_dtype": None, "device": "auto", "temperature": 0.2,
            "top_p": 1.0, "max_new_tokens": 500, "max_prompt_tokens": None, "base_url": None,
            "api_key_env": "OPENAI_API_KEY", "timeout": 120.0, "max_retries": 2, "init_seed": 0}


def check_spec(spec: Optional[dict[str, Any]], role: str) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ZooError(f"{role} must be a mapping with at least 'backend' and 'model', got {spec!r}")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ZooError(f"{role}: unknown key(s) {sorted(unknown)}; allowed: {sorted(SPEC_KEYS)}")
    if spec.get("backend") not in ("hf", "openai"):
        raise ZooError(f"{role}.backend must be 'hf' or 'openai', got {spec.get('backend')!r}")
    if not spec.get("model"):
        raise ZooError(f"{role}.model is required (a Hub name, a local path, or a config dict for backend hf)")
    out = {**DEFAULTS, **spec}
    if out["backend"] == "openai" and not isinstance(out["model"], str):
        raise ZooError(f"{role}.model must be a model name for backend openai, got {out['model']!r}")
    if out["backend"] == "hf" and isinstance(out["model"], dict) and not out["tokenizer"]:
        raise ZooError(f"{role}: a config-dict model needs an explicit tokenizer (e.g. 'byt5')")
    if not 0 <= float(out["temperature"]) or not 0 < float(out["top_p"]) <= 1 or int(out["max_new_tokens"]) < 1:
        raise ZooError(f"{role}: need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1, got "
                       f"{out['temperature']}, {out['top_p']}, {out['max_new_tokens']}")
    return out


def spec_id(spec: dict[str, Any]) -> str:
    """What identifies a client's answers in the cache (model and sampling, not where it runs)."""
    keep = {k: spec[k] for k in ("backend", "model", "tokenizer", "load_in_4bit", "temperature", "top_p",
                                 "max_new_tokens", "max_prompt_tokens", "init_seed")}
    return json.dumps(keep, sort_keys=True, default=str)


class ResponseCache:
    """Append-only jsonl of responses; every line is flushed, so whatever was answered survives a crash."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._stored: dict[str, list[str]] = {}
        self._asked: dict[str, int] = {}
        if self.path.exists():
            for n, line in enumerate(self.path.read_text().splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self._stored.setdefault(row["key"], []).append(row["response"])
                except (ValueError, KeyError, TypeError) as e:
                    raise ZooError(f"LLM cache {self.path} line {n} is not a cache record ({type(e).__name__})") from e

    def __len__(self) -> int:
        return sum(len(v) for v in self._stored.values())

    @staticmethod
    def key(client: str, prompt: str) -> str:
        return hashlib.sha256(json.dumps([client, prompt]).encode()).hexdigest()

    def next(self, key: str) -> Optional[str]:
        """The cached answer for this key's next occurrence, or None (then `put` the new one)."""
        n = self._asked.get(key, 0)
        self._asked[key] = n + 1
        stored = self._stored.get(key, [])
        return stored[n] if n < len(stored) else None

    def put(self, key: str, response: str, meta: Optional[dict[str, Any]] = None) -> None:
        self._stored.setdefault(key, []).append(response)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            fh.write(json.dumps({"key": key, "response": response, **(meta or {})}) + "\n")
            fh.flush()


class HFClient:
    """A local causal LM: pretrained (optionally 4-bit NF4 with double quantisation and fp16 compute, the
    official `HFModel` setting) or random-init from a config dict (built under ``init_seed``, so every process
    gets the same weights)."""

    def __init__(self, spec: dict[str, Any]):
        import torch

        from zoo.lm import build_causal_lm, load_tokenizer

        self.spec = spec
        model = spec["model"]
        kwargs: dict[str, Any] = {}
        if spec["load_in_4bit"]:
            from transformers import BitsAndBytesConfig

            kwargs = dict(quantization_config=BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float16,
                bnb_4bit_use_double_quant=True), device_map="auto")
        if isinstance(model, dict):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(spec["init_seed"]))
                self.lm = build_causal_lm(model, spec["torch_dtype"])
        else:
            self.lm = build_causal_lm(model, spec["torch_dtype"], **kwargs)
        if not spec["load_in_4bit"]:
            device = spec["device"]
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self.lm.to(device)
        self.lm.eval()
        self.tokenizer = load_tokenizer(spec["tokenizer"] or model)

    def __call__(self, prompt: str) -> str:
        from zoo.lm import generate

        spec = self.spec
        if spec["max_prompt_tokens"]:  # keep the end of the prompt: the query and its answer format are there
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            prompt = self.tokenizer.decode(ids[-int(spec["max_prompt_tokens"]):])
        sample = float(spec["temperature"]) > 0
        return generate(self.lm, self.tokenizer, [prompt], int(spec["max_new_tokens"]), do_sample=sample,
                        temperature=float(spec["temperature"]), top_p=float(spec["top_p"]))[0][0]


class OpenAIClient:
    """An OpenAI-compatible chat endpoint (official `OpenAIModel`: one user message, temperature 0.2)."""

    def __init__(self, spec: dict[str, Any]):
        try:
            import openai
        except ImportError as e:
            raise ZooError("backend openai needs the openai package: pip install -e '.[regal]'") from e
        self.spec = spec
        self.openai = openai
        key = os.environ.get(spec["api_key_env"]) or "no-key"  # local servers ignore it; remote ones reject it
        self.client = openai.OpenAI(base_url=spec["base_url"], api_key=key, timeout=float(spec["timeout"]),
                                    max_retries=int(spec["max_retries"]))

    def __call__(self, prompt: str) -> str:
        spec = self.spec
        try:
            out = self.client.chat.completions.create(
                model=spec["model"], messages=[{"role": "user", "content": prompt}], n=1,
                temperature=float(spec["temperature"]), top_p=float(spec["top_p"]),
                max_tokens=int(spec["max_new_tokens"]))
        except (self.openai.APIConnectionError, self.openai.APITimeoutError) as e:
            raise ConnectionError(f"endpoint {spec['base_url'] or 'api.openai.com'} unreachable "
                                  f"({type(e).__name__})") from e
        except self.openai.APIStatusError as e:
            raise ConnectionError(f"endpoint {spec['base_url'] or 'api.openai.com'} answered HTTP "
                                  f"{e.status_code}") from e
        return out.choices[0].message.content or ""


class CachedLLM:
    """A client behind the cache; the client itself is built on the first miss."""

    def __init__(self, spec: dict[str, Any], cache: ResponseCache, role: str, replay_only: bool = False):
        self.spec, self.cache, self.role, self.replay_only = spec, cache, role, replay_only
        self.client_id = spec_id(spec)
        self._client = None
        self.calls = self.misses = 0

    @property
    def name(self) -> str:
        m = self.spec["model"]
        return m if isinstance(m, str) else f"random-init {m.get('model_type', 'model')} (config)"

    def _build(self):
        if self._client is None:
            self._client = (OpenAIClient if self.spec["backend"] == "openai" else HFClient)(self.spec)
        return self._client

    def __call__(self, prompt: str) -> str:
        self.calls += 1
        key = ResponseCache.key(self.client_id, prompt)
        hit = self.cache.next(key)
        if hit is not None:
            return hit
        if self.replay_only:
            raise ZooError(f"{self.role}: no cached response for this prompt in {self.cache.path} (replay_only)")
        self.misses += 1
        try:
            text = self._build()(prompt)
        except ConnectionError as e:
            raise ZooError(f"{self.role}: {e}; the {len(self.cache)} cached responses are kept in "
                           f"{self.cache.path}, rerun to resume") from e
        self.cache.put(key, text, {"role": self.role})
        return text
