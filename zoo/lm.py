"""Causal-LM helpers shared by the language-model papers (rosa, iml, cruxeval, unlearning).

Models come either from the Hub / a local directory (a name) or from a config dict with random weights
(`{"model_type": "llama", "hidden_size": 64, ...}`), which is what smoke configs and tests use offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from zoo.errors import ZooError

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}
# the settings' type, so the parser (and `zoo sweep` before anything runs) refuses another name
DType = Literal[tuple(_DTYPES)]


def resolve_dtype(name: str | torch.dtype | None) -> torch.dtype | None:
    if name is None or isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ZooError(f"unknown dtype {name!r}; use one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def config_errors() -> tuple[type[Exception], ...]:
    """What building a transformers model from config values raises on a bad value: ValueError or KeyError (an
    activation name), torch's RuntimeError (a negative rotary share), and, for the config classes that validate
    themselves, huggingface_hub's strict-dataclass error (not a ValueError)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # huggingface_hub before strict dataclasses
        return ValueError, KeyError, RuntimeError
    return ValueError, KeyError, RuntimeError, StrictDataclassError


def load_tokenizer(name: str):
    """`"byt5"` gives the file-free byte tokenizer; anything else goes through `AutoTokenizer`."""
    from transformers import AutoTokenizer, ByT5Tokenizer

    if name == "byt5":
        tok = ByT5Tokenizer()
    else:
        try:
            tok = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise ZooError(f"tokenizer {name!r} not found locally or on the Hub ({type(e).__name__})") from e
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def build_causal_lm(model: str | dict[str, Any], torch_dtype: str | None = None, **kwargs):
    """A causal LM from a Hub name / local path (pretrained) or a config dict (random init)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = resolve_dtype(torch_dtype)
    if isinstance(model, dict):
        cfg = dict(model)
        model_type = cfg.pop("model_type", None)
        if model_type is None:
            raise ZooError("a model config dict needs 'model_type' (e.g. 'llama', 'gpt_neox', 'gpt_neo')")
        try:
            config = AutoConfig.for_model(model_type, **cfg)
            # building random weights fails only on the config's values (an activation name, a rotary share < 0)
            lm = AutoModelForCausalLM.from_config(config, **kwargs)
        except config_errors() as e:
            raise ZooError(f"bad model config for {model_type!r}: {type(e).__name__}: {e}") from e
        return lm.to(dtype) if dtype is not None else lm
    try:
        lm = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, **kwargs)
    except (OSError, ValueError) as e:
        raise ZooError(f"base model {model!r} not found locally, in the HF cache or on the Hub "
                       f"({type(e).__name__}); download it first or use a config dict") from e
    # from_pretrained returns the model in eval mode and Lightning keeps a module's mode when a fit starts, so a
    # fine-tune would run without the base's dropout; train mode is what from_config gives and what a fit expects
    # (Lightning's evaluation loops switch to eval mode themselves).
    return lm.train()


def truncate_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    return text[:cut]


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, do_sample: bool = False,
             temperature: float = 1.0, top_p: float = 1.0, num_return_sequences: int = 1,
             stop: Sequence[str] = (), add_special_tokens: bool = True, top_k: int | None = None) -> list[list[str]]:
    """Batched generation; returns, per prompt, `num_return_sequences` completions (new text only,
    cut at the first stop string). Left padding keeps every prompt's last token adjacent to the new ones.
    `add_special_tokens`: encode the prompts with the tokenizer's special tokens (Llama's BOS), or without them
    (as lm-eval-harness encodes a causal LM's contexts). `top_k` when sampling: None keeps the model's
    generation config (transformers' default 50 where it sets none), 0 turns the cut-off off."""
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
    finally:
        tokenizer.padding_side = side
    eos = tokenizer.eos_token_id
    if eos is not None and enc["input_ids"].shape[1] > 1 and bool((enc["input_ids"][:, -1] == eos).all()):
        # tokenizers that append EOS to every text (ByT5) would tell a decoder-only LM the prompt is over
        enc = {k: v[:, :-1] for k, v in enc.items()}
    device = next(model.parameters()).device
    enc = {k: v.to(device) for k, v in enc.items()}
    gen_kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample,
                                      num_return_sequences=num_return_sequences,
                                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    if do_sample:
        gen_kwargs.update(temperature=temperature, top_p=top_p)
        if top_k is not None:
            gen_kwargs["top_k"] = top_k
    else:  # silence generation_config sampling defaults of pretrained models
        gen_kwargs.update(temperature=None, top_p=None, top_k=None)
    if stop:
        gen_kwargs.update(stop_strings=list(stop), tokenizer=tokenizer)
    was_training = model.training
    model.eval()
    out = model.generate(**enc, **gen_kwargs)
    model.train(was_training)
    new = out[:, enc["input_ids"].shape[1]:]
    texts = tokenizer.batch_decode(new, skip_special_tokens=True)
    texts = [truncate_at_stop(t, stop) for t in texts]
    k = num_return_sequences
    return [texts[i * k:(i + 1) * k] for i in range(len(prompts))]


def right_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of token lists, right-padded with `pad_id` to the longest (long tensors)."""
    ids = torch.full((len(rows), max((len(r) for r in rows), default=0)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        mask[i, :len(r)] = 1
    return ids, mask


def linear_warmup_decay(warmup_steps: int, total_steps: int, decay: bool = True):
    """A LambdaLR factor: linear warm-up over `warmup_steps`, then linear decay to 0 at `total_steps` (composer's
    `LinearWithWarmupScheduler` with alpha_f=0, RoSA's schedule; the HF Trainer's `linear` schedule, IML's), or
    constant when `decay` is False (HF's `constant_with_warmup`). Both start at step/warmup_steps, so the first
    optimiser step runs at lr 0, as theirs do (tests/framework/test_lm.py checks it against transformers)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / warmup_steps
        if not decay:
            return 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor
