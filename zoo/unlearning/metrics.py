"""Memorization metrics of memorized-data unlearning, in plain torch (no Lightning).

Definitions follow Jang et al. (2023), "Knowledge Unlearning" (the protocol Barbulescu & Triantafillou, ICML 2024,
build on), for a sequence x of T tokens:

* memorization accuracy  MA(x) = 1/(T-1) * sum_{t=1}^{T-1} 1[argmax p(. | x_<t) = x_t]
  (teacher-forced greedy next-token accuracy; this is also the paper's per-sequence memorization score g(x)).
* extraction likelihood  EL_n(x) = 1/(T-n) * sum_{t=1}^{T-1} OVERLAP_n(greedy_{T-t}(x_<t), x_>=t)
  with OVERLAP_n(a, b) = #{n-grams of a that occur among the n-grams of b} / #n-grams of b, and the term
  skipped when b has fewer than n tokens (as the reference code does).
* unseen threshold gamma: mean (+ k std) of a score over sequences the model never trained on (the level the
  stopping rule drives the forget set's mean to).
* outlier band [low, high] of the unseen MA distribution, and c(D_f): the number of forget sequences outside it,
  i.e. still memorized (MA >= high) or unlearned too far (MA <= low). Both stand out from never-seen text, which is
  what the paper's attack exploits; its official analysis counts MA >= 0.60 and MA <= 0.15 for GPT-Neo on the Pile.
* attack AUC: ROC-AUC of "forget (member) vs unseen (non-member)" from a per-sequence score.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from zoo.errors import ZooError


# ----------------------------------------------------------------------------------------------------- n-grams
def ngrams(tokens: Sequence[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def overlap_n(pred: Sequence[int], label: Sequence[int], n: int) -> float | None:
    """Fraction of `label`'s n-grams matched by `pred`'s n-grams (pred n-grams counted with multiplicity);
    None when `label` has no n-gram."""
    lab = ngrams(label, n)
    if not lab:
        return None
    lab_set = set(lab)
    return sum(g in lab_set for g in ngrams(pred, n)) / len(lab)


def extraction_likelihood(tokens: Sequence[int], continuations: Sequence[Sequence[int]], n: int) -> float:
    """EL_n of one sequence given its greedy continuations: `continuations[t-1]` continues `tokens[:t]`
    and has length `len(tokens) - t` (t = 1..T-1)."""
    T = len(tokens)
    check_window([T], n)
    if len(continuations) != T - 1:
        raise ZooError(f"need {T - 1} continuations (one per prefix length), got {len(continuations)}")
    total = 0.0
    for t in range(1, T):
        ov = overlap_n(continuations[t - 1], tokens[t:], n)
        total += ov if ov is not None else 0.0
    return total / (T - n)


# ------------------------------------------------------------------------------------------------ bad input
def check_el_n(n: int) -> None:
    """EL_n averages over suffixes of n >= 1 tokens (checked where a module or callback is built: a 0 reached the
    scoring of a test run)."""
    if n < 1:
        raise ZooError(f"el_n must be >= 1, got {n}")


def check_window(lengths: Sequence[int], n: int, doc_ids: Sequence[str] | None = None, what: str = "forget") -> None:
    """EL_n needs at least one suffix with n tokens: every sequence must have more than n tokens."""
    check_el_n(n)
    short = [i for i, L in enumerate(lengths) if int(L) <= n]
    if short:
        i = short[0]
        name = doc_ids[i] if doc_ids is not None else i
        raise ZooError(f"{what} set: {len(short)} sequence(s) have <= {n} tokens, shorter than the EL_{n} window "
                       f"(first: doc_id {name}, {int(lengths[i])} tokens)")


def overlap(rows: Sequence[Sequence[int]], other: Sequence[Sequence[int]]) -> list[int]:
    """The indices of `rows` whose token sequence is also in `other`."""
    seen = {tuple(s) for s in other}
    return [i for i, s in enumerate(rows) if tuple(s) in seen]


def check_disjoint(forget: Sequence[Sequence[int]], unseen: Sequence[Sequence[int]],
                   forget_ids: Sequence[str] | None = None) -> None:
    """The unseen (never-trained) set must not contain any forget sequence."""
    both = overlap(forget, unseen)
    if both:
        name = forget_ids[both[0]] if forget_ids is not None else both[0]
        raise ZooError(f"forget set overlaps the unseen set: {len(both)} sequence(s) in both (first: doc_id {name}); "
                       "unseen sequences must never have been trained on")


# --------------------------------------------------------------------------------------------- thresholds etc.
def unseen_threshold(unseen_scores: Sequence[float] | torch.Tensor, num_std: float = 0.0) -> float:
    """Mean (+ num_std standard deviations) of a score over the unseen set (Jang et al.'s forgetting threshold
    is the mean; num_std > 0 gives the stricter outlier cut-off)."""
    s = torch.as_tensor(unseen_scores, dtype=torch.float64).flatten()
    if s.numel() == 0:
        raise ZooError("cannot compute memorization thresholds from an empty unseen set")
    std = s.std(unbiased=False) if s.numel() > 1 else torch.zeros((), dtype=torch.float64)
    return float(s.mean() + num_std * std)


def outlier_band(unseen_scores: Sequence[float] | torch.Tensor, num_std: float = 2.0) -> tuple[float, float]:
    """(low, high) = unseen mean -/+ num_std standard deviations. Our default band: the paper's analysis uses fixed
    MA levels for GPT-Neo (0.15 and 0.60, about half and twice the unseen mean 0.30 of GPT-Neo 125M), which do not
    carry over to other models and data; set them with `outlier_low` / `outlier_high` to reproduce it."""
    return unseen_threshold(unseen_scores, -num_std), unseen_threshold(unseen_scores, num_std)


def unseen_thresholds(unseen: SequenceScores, num_std: float = 0.0, band_std: float = 2.0) -> dict[str, float]:
    """gamma_MA and gamma_EL of a scored unseen set (scored with EL), and the MA outlier band (`low`, `high`)."""
    if unseen.el is None:
        raise ZooError("thresholds need the unseen set scored with EL")
    low, high = outlier_band(unseen.ma, band_std)
    return {"ma": unseen_threshold(unseen.ma, num_std), "el": unseen_threshold(unseen.el, num_std),
            "low": low, "high": high}


def outlier_sides(scores: Sequence[float] | torch.Tensor, high: float, low: float | None = None) -> list[str]:
    """Per sequence: "high" (still memorized: score >= high), "low" (unlearned too far: score <= low) or "";
    the official analysis uses >= / <=."""
    return ["high" if v >= high else "low" if low is not None and v <= low else ""
            for v in torch.as_tensor(scores, dtype=torch.float64).flatten().tolist()]


def outlier_counts(forget_scores: Sequence[float] | torch.Tensor, high: float,
                   low: float | None = None) -> tuple[int, int]:
    """(still memorized, unlearned too far) among the forget sequences (see `outlier_sides`)."""
    sides = outlier_sides(forget_scores, high, low)
    return sides.count("high"), sides.count("low")


def count_outliers(forget_scores: Sequence[float] | torch.Tensor, high: float, low: float | None = None) -> int:
    """c(D_f): forget sequences outside the unseen band (above `high`, or below `low` when given)."""
    return sum(outlier_counts(forget_scores, high, low))


def attack_auc(forget_scores: Sequence[float] | torch.Tensor, unseen_scores: Sequence[float] | torch.Tensor) -> float:
    """Membership-inference AUC: members (forget) labelled 1, non-members (unseen) 0, higher score = member.
    0.5 = the attacker cannot tell them apart."""
    from sklearn.metrics import roc_auc_score

    f = torch.as_tensor(forget_scores, dtype=torch.float64).flatten().tolist()
    u = torch.as_tensor(unseen_scores, dtype=torch.float64).flatten().tolist()
    if not f or not u:
        raise ZooError("the membership attack needs a non-empty forget set and a non-empty unseen set")
    return float(roc_auc_score([1] * len(f) + [0] * len(u), f + u))


def perplexity(nll_sum: float, num_tokens: int) -> float:
    if num_tokens <= 0:
        raise ZooError("perplexity of an empty text")
    return math.exp(nll_sum / num_tokens)


# --------------------------------------------------------------------------------------- model-based scores
def _logits(model: Callable, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kw: Any) -> torch.Tensor:
    return model(input_ids=input_ids, attention_mask=attention_mask, **kw).logits


def token_stats(logits: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """Per-sequence (MA, summed NLL, number of predicted tokens) from teacher-forced logits of a right-padded batch.
    Greedy next-token prediction from x_<t is the argmax of the logits at t-1, so MA needs no generation."""
    logits = logits[:, :-1].float()
    target = input_ids[:, 1:]
    valid = attention_mask[:, 1:].bool()
    ntok = valid.sum(1)
    correct = (logits.argmax(-1) == target) & valid
    ma = correct.sum(1).double() / ntok.clamp(min=1)
    nll = F.cross_entropy(logits.transpose(1, 2), target, reduction="none") * valid
    return ma, nll.sum(1), ntok


def _cache_kwarg(model: Callable) -> str:
    """The name under which `model` takes its KV cache back: transformers 5 renamed `past_key_values` to `cache`
    (the old name warns and goes in 5.40); older models, and callables without a signature, use the old one."""
    try:
        params = inspect.signature(getattr(model, "forward", model)).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


@torch.no_grad()
def greedy_decode(model: Callable, prefix_ids: torch.Tensor, prefix_mask: torch.Tensor, max_new_tokens: int,
                  use_cache: bool = True) -> torch.Tensor:
    """Greedy continuation of left-padded prefixes, (R, max_new_tokens). Uses the KV cache when the model returns
    one; otherwise recomputes the whole sequence each step (any callable returning `.logits` works)."""
    mask = prefix_mask.long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=prefix_ids, attention_mask=mask, position_ids=pos, use_cache=use_cache)
    past = _cache_of(out) if use_cache else None
    cache_kwarg = _cache_kwarg(model)
    ids, new = prefix_ids, []
    for k in range(max_new_tokens):
        nxt = out.logits[:, -1].argmax(-1)
        new.append(nxt)
        if k == max_new_tokens - 1:
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
        if past is not None:
            pos = pos[:, -1:] + 1
            out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                        **{cache_kwarg: past})
            past = _cache_of(out)
        else:
            ids = torch.cat([ids, nxt[:, None]], 1)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
    return torch.stack(new, 1) if new else prefix_ids.new_zeros(prefix_ids.shape[0], 0)


def _chunks(order: list[int], lengths: list[int], needs: list[int], max_rows: int, waste: float,
            limit: int | None) -> list[list[int]]:
    """Rows sorted by continuation length, cut into decodes of at most `max_rows` rows. Every row of a decode runs
    as long as its longest continuation, after left padding to its longest prefix, so a decode also ends where
    (a) its shortest continuation would be below (1 - waste) of the longest (bounds the wasted steps), or
    (b) longest prefix + longest continuation would pass `limit`, the model's position table (GPT-Neo's causal
    mask has exactly that many positions)."""
    chunks: list[list[int]] = []
    longest = 0
    for r in order:
        if needs[r] <= 0:
            continue
        if (not chunks or len(chunks[-1]) == max_rows or needs[r] < (1 - waste) * needs[chunks[-1][0]]
                or (limit is not None and max(longest, lengths[r]) + needs[chunks[-1][0]] > limit)):
            chunks.append([])
            longest = 0
        chunks[-1].append(r)
        longest = max(longest, lengths[r])
    return chunks


def _decode_rows(model, prefixes: list[list[int]], needs: list[int], max_rows: int, use_cache: bool, device,
                 waste: float = 0.25):
    """Greedy continuations (each `needs[r]` tokens) of unpadded prefixes, batched as left-padded rows sorted by
    length of the continuation (see `_chunks`)."""
    order = sorted(range(len(prefixes)), key=lambda r: needs[r], reverse=True)
    out: list[list[int]] = [[] for _ in prefixes]
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    limit = limit if isinstance(limit, int) else None
    for chunk in _chunks(order, [len(p) for p in prefixes], needs, max_rows, waste, limit):
        P = max(len(prefixes[r]) for r in chunk)
        ids = torch.zeros(len(chunk), P, dtype=torch.long)  # filled on the host, moved once
        mask = torch.zeros(len(chunk), P, dtype=torch.long)
        for k, r in enumerate(chunk):
            L = len(prefixes[r])
            ids[k, P - L:] = torch.tensor(prefixes[r], dtype=torch.long)
            mask[k, P - L:] = 1
        gen = greedy_decode(model, ids.to(device), mask.to(device), max(needs[r] for r in chunk),
                            use_cache=use_cache).tolist()
        for k, r in enumerate(chunk):
            out[r] = gen[k][:needs[r]]
    return out


@torch.no_grad()
def greedy_continuations(model: Callable, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         max_rows: int = 1024, use_cache: bool = True, shortcut: bool = True,
                         pred: torch.Tensor | None = None) -> list[list[list[int]]]:
    """For every sequence i of a right-padded batch and every prefix length t = 1..L_i-1, the greedy continuation
    of x_<t with L_i - t tokens (`out[i][t-1]`).

    `shortcut=False` decodes every prefix (what the reference code does, one `generate` per prefix length).
    `shortcut=True` gives the same continuations with far less decoding: greedy decoding from x_<t reproduces
    x_t, x_t+1, ... for as long as the teacher-forced argmax predictions are right, so it only departs from x at
    the first teacher-forced mistake m >= t, and from there on it is the same for every t <= m. One decode per
    mistake position (from x_<m followed by the wrong token) serves all those prefixes.

    `pred` (B, T-1): the teacher-forced argmax of a forward pass the caller already made (skips that pass)."""
    lengths = attention_mask.sum(1).tolist()
    seqs = [input_ids[i, :L].tolist() for i, L in enumerate(lengths)]
    dev = input_ids.device
    if not shortcut:
        rows = [(i, t) for i, L in enumerate(lengths) for t in range(1, L)]
        gen = _decode_rows(model, [seqs[i][:t] for i, t in rows], [lengths[i] - t for i, t in rows], max_rows,
                           use_cache, dev)
        out: list[list[list[int]]] = [[] for _ in seqs]
        for (i, t), g in zip(rows, gen):
            out[i].append(g)
        return out
    if pred is None:
        pred = _logits(model, input_ids, attention_mask)[:, :-1].argmax(-1)
    pred = pred.tolist()  # pred[i][j-1] = greedy next token after x_<j
    mistakes = [[j for j in range(1, L) if pred[i][j - 1] != seqs[i][j]] for i, L in enumerate(lengths)]
    rows = [(i, m) for i in range(len(seqs)) for m in mistakes[i]]
    tails = _decode_rows(model, [seqs[i][:m] + [pred[i][m - 1]] for i, m in rows],
                         [lengths[i] - m - 1 for i, m in rows], max_rows, use_cache, dev)
    tail = {row: g for row, g in zip(rows, tails)}
    out = []
    for i, L in enumerate(lengths):
        conts, nxt = [], None
        ms = mistakes[i]
        k = len(ms) - 1
        for t in range(L - 1, 0, -1):  # walk prefixes backwards to track the next mistake m >= t
            while k >= 0 and ms[k] >= t:
                nxt = ms[k]
                k -= 1
            if nxt is None:
                conts.append(seqs[i][t:L])
            else:
                conts.append(seqs[i][t:nxt] + [pred[i][nxt - 1]] + tail[(i, nxt)])
        out.append(conts[::-1])
    return out


@torch.no_grad()
def extraction_likelihoods(model: Callable, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int = 10,
                           max_rows: int = 1024, use_cache: bool = True, shortcut: bool = True,
                           pred: torch.Tensor | None = None) -> torch.Tensor:
    """EL_n of every sequence of a right-padded batch (float64, (B,)); `pred` as in `greedy_continuations`."""
    lengths = attention_mask.sum(1).tolist()
    check_window(lengths, n)
    conts = greedy_continuations(model, input_ids, attention_mask, max_rows, use_cache, shortcut, pred)
    return torch.tensor([extraction_likelihood(input_ids[i, :L].tolist(), conts[i], n) for i, L in enumerate(lengths)],
                        dtype=torch.float64)


@dataclass
class SequenceScores:
    """Per-sequence scores of one set (all float64 tensors of length N; `el` None when not computed)."""

    ma: torch.Tensor
    nll: torch.Tensor  # mean NLL per predicted token
    ntok: torch.Tensor
    el: torch.Tensor | None = None

    @property
    def perplexity(self) -> float:
        return perplexity(float((self.nll * self.ntok).sum()), int(self.ntok.sum()))


@torch.no_grad()
def score_sequences(model: Callable, input_ids: torch.Tensor, attention_mask: torch.Tensor, el_n: int | None = 10,
                    batch_size: int = 32, max_rows: int = 256) -> SequenceScores:
    """MA, NLL and (if `el_n`) EL_n of every sequence of a right-padded (N, T) tensor, in eval mode."""
    module = model if isinstance(model, torch.nn.Module) else None
    was_training = module.training if module is not None else False
    if module is not None:
        module.eval()
        dev = next(module.parameters()).device
    else:
        dev = input_ids.device
    mas, nlls, ntoks, els = [], [], [], []
    try:
        for s in range(0, input_ids.shape[0], batch_size):
            ids = input_ids[s:s + batch_size].to(dev)
            mask = attention_mask[s:s + batch_size].to(dev)
            logits = _logits(model, ids, mask)
            ma, nll, ntok = token_stats(logits, ids, mask)
            pred = logits[:, :-1].argmax(-1) if el_n else None  # EL_n's teacher-forced greedy tokens: same pass
            del logits
            mas.append(ma.cpu())
            nlls.append((nll.double() / ntok.clamp(min=1)).cpu())
            ntoks.append(ntok.cpu())
            if el_n:
                els.append(extraction_likelihoods(model, ids, mask, el_n, max_rows=max_rows, pred=pred).cpu())
    finally:
        if module is not None:
            module.train(was_training)
    if not mas:
        empty = torch.zeros(0, dtype=torch.float64)
        return SequenceScores(empty, empty, torch.zeros(0, dtype=torch.long), empty if el_n else None)
    return SequenceScores(torch.cat(mas), torch.cat(nlls), torch.cat(ntoks), torch.cat(els) if el_n else None)
