"""The membership-inference attack of Barbulescu & Triantafillou (ICML 2024): DetectGPT's perturbation discrepancy.

A model that has memorized a text x sits at a sharp peak of its log-likelihood: x itself scores much higher than
texts near it. DetectGPT (Mitchell et al., 2023) measures this with perturbations x~ (a few word spans of x masked
and re-filled by a T5 mask-filling model):

    ll(x)    = mean token log-likelihood of x under the causal LM (teacher forced)
    d(x)     = | ll(x) - mean_j ll(x~_j) |          (the "perturbation discrepancy"; the paper's `ll_dist`)

and the attack calls x a member when d(x) is large. The attack AUC is the ROC-AUC of d over the forget set
(members, label 1) against an unseen set (non-members, label 0). The paper's setting: 25 perturbations per text,
spans of 2 words, pct = 0.3, t5-large as the mask filler, texts cut to 200-token windows.

Everything here is plain torch + transformers (no Lightning) and works with any causal LM whose forward returns
`.logits` and any tokenizer with the Hugging Face call/decode interface.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from zoo.errors import ZooError
from zoo.lm import right_pad
from zoo.unlearning.metrics import attack_auc, token_stats

# A perturber maps texts to one perturbed text each, drawing its randomness from the generator only.
Perturber = Callable[[list[str], torch.Generator], list[str]]

BUFFER = 1  # DetectGPT keeps >= 1 unmasked word between (and around) masked spans


# -------------------------------------------------------------------------------------------- log-likelihood
def _device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")


@torch.no_grad()
def log_likelihoods(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, batch_size: int = 32) -> torch.Tensor:
    """ll(x) of every row of a right-padded batch: minus the mean NLL of its predicted tokens (tokens 2..T), the
    `-loss` the official code takes from a causal LM with padding labelled -100. float64, shape (N,)."""
    if input_ids.ndim != 2 or input_ids.shape != attention_mask.shape:
        raise ZooError(f"input_ids and attention_mask must be (N, T) of one shape, got {tuple(input_ids.shape)} "
                       f"and {tuple(attention_mask.shape)}")
    if batch_size < 1:
        raise ZooError(f"batch_size must be >= 1, got {batch_size}")
    lengths = attention_mask.sum(1)
    if bool((lengths < 2).any()):
        raise ZooError(f"{int((lengths < 2).sum())} sequence(s) have fewer than 2 tokens: no token to predict")
    device, was_training = _device(model), model.training
    model.eval()
    out = torch.empty(input_ids.shape[0], dtype=torch.float64)
    # Longest first, each batch cut to its own longest row: the perturbed texts vary in length, so this saves
    # most of the padding. Right padding + causal attention leave the valid positions' logits unchanged.
    order = torch.argsort(lengths, descending=True, stable=True)
    try:
        for c in range(0, len(order), batch_size):
            idx = order[c:c + batch_size]
            T = int(lengths[idx].max())
            ids, mask = input_ids[idx, :T].to(device), attention_mask[idx, :T].to(device)
            logits = model(input_ids=ids, attention_mask=mask).logits
            _, nll_sum, ntok = token_stats(logits, ids, mask)
            out[idx] = -(nll_sum.double() / ntok.double()).cpu()
    finally:
        model.train(was_training)
    return out


def encode(tokenizer, texts: Sequence[str], seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask) of `texts`, each cut to `seq_len` tokens. We pad by hand so the
    padding side never depends on how the tokenizer was configured (token_stats assumes right padding). No special
    tokens: the sequences are scored as the datamodule tokenizes them (and GPT-Neo's tokenizer adds none)."""
    enc = tokenizer(list(texts), add_special_tokens=False, truncation=seq_len is not None,
                    max_length=seq_len)["input_ids"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return right_pad(enc, pad)


# ---------------------------------------------------------------------------------------------- span masking
def span_count(n_words: int, span_length: int = 2, pct: float = 0.3, ceil_pct: bool = False) -> tuple[int, int]:
    """(span length, number of spans) DetectGPT masks in a text of `n_words` words. The span shrinks to
    int(pct * n_words) words for very short texts; n_spans = pct * n_words / (span_length + 2 * buffer), floored
    (or ceiled). So with the buffer the masked fraction is pct * span_length / (span_length + 2), not pct."""
    check_span_args(span_length, pct)
    L = max(1, min(int(pct * n_words), span_length))
    n = pct * n_words / (L + BUFFER * 2)
    return L, int(math.ceil(n) if ceil_pct else n)


def check_span_args(span_length: int, pct: float) -> None:
    if span_length < 1:
        raise ZooError(f"span_length must be >= 1, got {span_length}")
    if not 0 < pct <= 1:
        raise ZooError(f"pct (fraction of words to perturb) must be in (0, 1], got {pct}")


def mask_spans(n_words: int, generator: torch.Generator, span_length: int = 2, pct: float = 0.3,
               ceil_pct: bool = False, max_restarts: int = 100) -> list[tuple[int, int]]:
    """Word spans [start, end) to mask, sorted, drawn as in DetectGPT's `tokenize_and_mask`.

    The official loop draws a start uniformly in [0, len - span_length) of the *current* word list (where every
    masked span already collapsed to one mask token) and rejects it when a mask lies within `buffer` words of the
    span. Rejection sampling from a uniform draw is a uniform draw over the accepted starts, so we draw from those
    directly (same distribution, the generator's stream differs). The official loop spins forever when the spans
    placed so far leave no room; we restart instead (a valid layout always exists when n_spans >= 1)."""
    L, n_spans = span_count(n_words, span_length, pct, ceil_pct)
    if n_spans < 1:
        raise ZooError(f"a text of {n_words} word(s) is too short to mask any span (span_length={span_length}, "
                       f"pct={pct}: n_spans = pct * words / (span_length + 2) < 1)")
    for _ in range(max_restarts):
        cur: list[Any] = list(range(n_words))  # word index, or a (start, end) tuple for a collapsed span
        for _ in range(n_spans):
            ok = [s for s in range(max(1, len(cur) - L))
                  if not any(isinstance(t, tuple) for t in cur[max(0, s - BUFFER):min(len(cur), s + L + BUFFER)])]
            if not ok:
                break
            s = ok[int(torch.randint(len(ok), (1,), generator=generator))]
            cur[s:s + L] = [(cur[s], cur[s + L - 1] + 1)]
        else:
            return [t for t in cur if isinstance(t, tuple)]
    raise ZooError(f"could not place {n_spans} spans of {L} words in {n_words} words")


def split_words(text: str) -> list[str]:
    # Only spaces, not newlines: the official code splits on ' ' so line breaks stay inside words.
    return text.split(" ")


def masked_text(words: Sequence[str], spans: Sequence[tuple[int, int]]) -> str:
    """The words with span k replaced by T5's sentinel `<extra_id_k>`."""
    out, prev = [], 0
    for k, (a, b) in enumerate(spans):
        out += list(words[prev:a]) + [f"<extra_id_{k}>"]
        prev = b
    return " ".join(out + list(words[prev:]))


def apply_fills(words: Sequence[str], spans: Sequence[tuple[int, int]], fills: Sequence[str | None]) -> str:
    """Put fill k in place of span k; a missing fill (None) keeps the span's original words."""
    out, prev = [], 0
    for (a, b), fill in zip(spans, fills):
        out += list(words[prev:a]) + (list(words[a:b]) if fill is None else [fill])
        prev = b
    return " ".join(out + list(words[prev:]))


_SENTINEL = re.compile(r"<extra_id_(\d+)>")


def extract_fills(generated: str, n_masks: int, strip: Sequence[str] = ("<pad>", "</s>")) -> list[str | None]:
    """Fill of each of `n_masks` spans from T5's decoded output `<extra_id_0> fill0 <extra_id_1> fill1 ...`.

    As in the official parser, a fill is the (stripped) text between its sentinel and the next sentinel, so the
    text after the last sentinel (unterminated: generation stopped early) is dropped. Unlike it, fills are matched
    by sentinel number rather than by position, so a skipped sentinel only loses its own span; spans without a
    fill get None."""
    for s in strip:
        generated = generated.replace(s, "")
    parts = _SENTINEL.split(generated)  # [before, k0, text0, k1, text1, ...]
    fills: list[str | None] = [None] * n_masks
    for j in range(1, len(parts) - 2, 2):  # each sentinel that another sentinel follows
        k = int(parts[j])
        if k < n_masks and fills[k] is None:
            fills[k] = parts[j + 1].strip()
    return fills


# ------------------------------------------------------------------------------------------------ perturbers
class _SpanPerturber:
    def __init__(self, span_length: int = 2, pct: float = 0.3, ceil_pct: bool = False):
        check_span_args(span_length, pct)
        self.span_length, self.pct, self.ceil_pct = span_length, pct, ceil_pct

    def mask(self, texts: Sequence[str], generator: torch.Generator) -> list[list[tuple[int, int]]]:
        """The spans to mask in each text (drawn in order from `generator`)."""
        out = []
        for i, t in enumerate(texts):
            try:
                out.append(mask_spans(len(split_words(t)), generator, self.span_length, self.pct, self.ceil_pct))
            except ZooError as e:
                raise ZooError(f"text {i}: {e}") from None
        return out

    def fill(self, texts: Sequence[str], spans: list[list[tuple[int, int]]], generator: torch.Generator) -> list[str]:
        raise NotImplementedError

    def __call__(self, texts: Sequence[str], generator: torch.Generator) -> list[str]:
        texts = list(texts)
        return self.fill(texts, self.mask(texts, generator), generator)


class MaskFillPerturber(_SpanPerturber):
    """The paper's perturbation: mask word spans, let a T5 mask-filling model sample new text for them.

    `max_length`, `top_p`, `chunk_size` and the 512-token tokenizer limit are the official values. Where the
    model returns fewer fills than spans, the official code (as DetectGPT) redraws the masks and samples again
    until every span is filled, an unbounded loop; we keep those spans' original words instead, so a text is
    perturbed a little less but the run always ends (`self.missing` counts such spans, `self.spans` all spans)."""

    def __init__(self, mask_model, mask_tokenizer, span_length: int = 2, pct: float = 0.3, ceil_pct: bool = False,
                 max_length: int = 200, top_p: float = 1.0, chunk_size: int = 20, max_input_tokens: int = 512):
        super().__init__(span_length, pct, ceil_pct)
        self.model, self.tokenizer = mask_model, mask_tokenizer
        self.max_length, self.top_p, self.chunk_size, self.max_input_tokens = max_length, top_p, chunk_size, \
            max_input_tokens
        self.missing = self.spans = 0

    @classmethod
    def from_pretrained(cls, name: str = "t5-large", device: str | torch.device | None = None, **kw: Any):
        """Load the mask filler from the Hub or a local directory; keyword arguments of `__init__` configure the
        perturber, the others (cache_dir, revision, torch_dtype, local_files_only, ...) go to `from_pretrained`."""
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        own = set(inspect.signature(cls.__init__).parameters) - {"self", "mask_model", "mask_tokenizer"}
        mine = {k: v for k, v in kw.items() if k in own}
        hub = {k: v for k, v in kw.items() if k not in own}
        tok_kw = {k: v for k, v in hub.items() if k in ("cache_dir", "revision", "local_files_only", "token")}
        try:
            model = AutoModelForSeq2SeqLM.from_pretrained(name, **hub)
            tok = AutoTokenizer.from_pretrained(name, model_max_length=mine.get("max_input_tokens", 512), **tok_kw)
        except OSError as e:
            raise ZooError(f"mask-filling model {name!r} not found locally or on the Hub ({e})") from e
        if device is not None:
            model = model.to(device)
        return cls(model.eval(), tok, **mine)

    @torch.no_grad()
    def _generate(self, masked: list[str], n_masks: list[int], seed: int) -> list[str]:
        tok, model = self.tokenizer, self.model
        # Stop at the sentinel after the last span of the text with most spans (official `stop_id`).
        stop_id = tok.convert_tokens_to_ids(f"<extra_id_{max(n_masks)}>")
        device = _device(model)
        enc = tok(masked, return_tensors="pt", padding=True, truncation=True, max_length=self.max_input_tokens)
        enc = {k: v.to(device) for k, v in enc.items()}
        was_training = getattr(model, "training", False)
        if hasattr(model, "eval"):
            model.eval()
        # `generate` samples from the global RNG: seed it from our generator inside a forked RNG state, so the
        # fills are reproducible and the caller's RNG stream is left untouched.
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(seed)
                out = model.generate(**enc, max_length=self.max_length, do_sample=True, top_p=self.top_p,
                                     num_return_sequences=1, eos_token_id=stop_id)
        finally:
            if hasattr(model, "train"):
                model.train(was_training)
        return tok.batch_decode(out, skip_special_tokens=False)

    def fill(self, texts: Sequence[str], spans: list[list[tuple[int, int]]], generator: torch.Generator) -> list[str]:
        strip = [t for t in (self.tokenizer.pad_token, self.tokenizer.eos_token) if t]
        out = []
        for c in range(0, len(texts), self.chunk_size):
            words = [split_words(t) for t in texts[c:c + self.chunk_size]]
            sp = spans[c:c + self.chunk_size]
            seed = int(torch.randint(2**62, (1,), generator=generator))
            gen = self._generate([masked_text(w, s) for w, s in zip(words, sp)], [len(s) for s in sp], seed)
            for w, s, g in zip(words, sp, gen):
                fills = extract_fills(g, len(s), strip)
                self.spans += len(s)
                self.missing += sum(f is None for f in fills)
                out.append(apply_fills(w, s, fills))
        return out


class RandomSpanPerturber(_SpanPerturber):
    """Our offline, model-free stand-in (not the paper's perturbation): the same span masking, with every masked
    word replaced by a word drawn uniformly from `vocabulary` (e.g. the words of the unseen set). It keeps the
    attack runnable without a T5 download, e.g. in smoke runs and on token-level data."""

    def __init__(self, vocabulary: Sequence[str], span_length: int = 2, pct: float = 0.3, ceil_pct: bool = False):
        super().__init__(span_length, pct, ceil_pct)
        self.vocabulary = list(dict.fromkeys(w for w in vocabulary if w))
        if not self.vocabulary:
            raise ZooError("RandomSpanPerturber needs a non-empty vocabulary of words")

    def fill(self, texts: Sequence[str], spans: list[list[tuple[int, int]]], generator: torch.Generator) -> list[str]:
        out = []
        for t, s in zip(texts, spans):
            words = split_words(t)
            fills = []
            for a, b in s:
                pick = torch.randint(len(self.vocabulary), (b - a,), generator=generator).tolist()
                fills.append(" ".join(self.vocabulary[j] for j in pick))
            out.append(apply_fills(words, s, fills))
        return out


# ------------------------------------------------------------------------------------------------ the attack
def decode_rows(tokenizer, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[str]:
    """The texts of a right-padded token batch (what the attack perturbs: the official code decodes its windows)."""
    return [tokenizer.decode(ids[:n], skip_special_tokens=True)
            for ids, n in zip(input_ids.tolist(), attention_mask.sum(1).tolist())]


def window(tokenizer, texts: Sequence[str], seq_len: int) -> list[str]:
    """Texts cut to their first `seq_len` tokens (decoded back), so the perturbations fall inside the window the
    LM scores: the official code perturbs the decoded 200-token windows, not the full documents."""
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return [tokenizer.decode(e[:seq_len], skip_special_tokens=True) if len(e) > seq_len else t
            for t, e in zip(texts, ids)]


def perturbation_discrepancy(model, tokenizer, texts: Sequence[str], perturber: Perturber,
                             n_perturbations: int = 25, seq_len: int | None = None, seed: int = 0,
                             batch_size: int = 32) -> dict[str, torch.Tensor]:
    """DetectGPT statistics of each text, float64 tensors of shape (N,):
    `ll` = ll(x), `pert_mean` / `pert_std` = mean / std of ll over the perturbations, `score` = |ll - pert_mean|.
    As in the official code, pert_std is the unbiased std, and 1 when there is a single perturbation."""
    texts = list(texts)
    if not texts:
        raise ZooError("perturbation_discrepancy needs at least one text")
    if n_perturbations < 1:
        raise ZooError(f"n_perturbations must be >= 1, got {n_perturbations}")
    if seq_len is not None:
        if seq_len < 2:
            raise ZooError(f"seq_len must be >= 2 tokens, got {seq_len}")
        texts = window(tokenizer, texts, seq_len)
    gen = torch.Generator().manual_seed(seed)
    # Each copy of a text is masked independently (the official code perturbs [x, x, ..., y, y, ...] as well).
    perturbed = perturber([t for t in texts for _ in range(n_perturbations)], gen)
    if len(perturbed) != len(texts) * n_perturbations:
        raise ZooError(f"the perturber returned {len(perturbed)} texts for {len(texts) * n_perturbations}")
    ll = log_likelihoods(model, *encode(tokenizer, texts + list(perturbed), seq_len), batch_size=batch_size)
    orig, pert = ll[:len(texts)], ll[len(texts):].view(len(texts), n_perturbations)
    mean = pert.mean(1)
    std = pert.std(1) if n_perturbations > 1 else torch.ones_like(mean)
    return {"score": (orig - mean).abs(), "ll": orig, "pert_mean": mean, "pert_std": std}


def perturbation_attack_auc(model, tokenizer, forget_texts: Sequence[str], unseen_texts: Sequence[str],
                            perturber: Perturber, **kw: Any) -> float:
    """ROC-AUC of the perturbation discrepancy, forget (members) vs unseen (non-members); 0.5 = chance.
    Both sets are scored with the same seed in separate calls, so each text's score does not depend on the other
    set (swapping the sets gives exactly 1 - AUC). `kw` goes to `perturbation_discrepancy`."""
    if not forget_texts or not unseen_texts:
        raise ZooError("the membership attack needs a non-empty forget set and a non-empty unseen set")
    f = perturbation_discrepancy(model, tokenizer, forget_texts, perturber, **kw)["score"]
    u = perturbation_discrepancy(model, tokenizer, unseen_texts, perturber, **kw)["score"]
    return attack_auc(f, u)


def memorization_attack_auc(model, tokenizer, forget, unseen, perturber: Perturber | None = None,
                            n_perturbations: int = 25, batch_size: int = 32, **perturber_kw: Any) -> float:
    """The attack on two right-padded token sets (`input_ids`, `attention_mask`; e.g. MemorizationSet), on their
    decoded texts. `perturber` None: a RandomSpanPerturber over the unseen set's words (`perturber_kw` configure it)."""
    f, u = (decode_rows(tokenizer, s.input_ids, s.attention_mask) for s in (forget, unseen))
    if perturber is None:
        perturber = RandomSpanPerturber(sorted({w for t in u for w in t.split()}), **perturber_kw)
    return perturbation_attack_auc(model, tokenizer, f, u, perturber, n_perturbations=n_perturbations,
                                   batch_size=batch_size)
