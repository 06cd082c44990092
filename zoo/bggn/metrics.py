"""Evaluation of a generator of sensitive vectors (paper Sec. 5; official ``utils/evaluation_utils.py``).

Generated samples are deduplicated; the unique a's are ranked by the *predicted* bias L̂ (the model cannot know
the truth), split into seen (training) and unseen (held-out) combinations, and scored against the ground-truth
bias L_f with the relevance threshold τ (official ``vae_eval_bias_thresh: 0.3``):

* precision@k: share of the top-k ranked a's whose true bias exceeds τ;
* recall@k: high-bias a's in the top-k over all high-bias a's of that split;
* DCG@k: Σ_{i≤k} L_f(a_(i)) / log2(i + 1), linear gains (official ``dcg_gains: linear``);
* RR@k (official ``rr_at_k``): share of the split's true top-k found among the generated a's (``rr_hit``) and
  Σ exp(−|rank_pred − rank_true|) over them (``rr_score``); ``reciprocal_rank`` is 1/rank of the true top-1.

Ties in L̂ are broken by the code, descending (`rank_by_prediction`: the official sort key (pred, a string)
reversed; the string of 0/1 values compares as the big-endian code), never by the true bias.

The cut-offs above are fixed (``precision_k`` etc.). The official ``evaluate_seen`` overwrites its configured
``precision_k``, ``recall_k`` and ``rr_k`` with data-derived ones; those are reported too, as ``*_official``:

* ``precision_official``: over the split's generated *samples* (repeats kept) ranked by L̂, k = ⌊1.5 × (the split's
  share of high-bias combinations) × (the split's generated samples)⌋;
* ``recall_official``: k = the split's number of high-bias combinations;
* ``rr_official`` / ``rr_score_official``: k = max(1, ⌊0.05 × that number⌋) (official ``rr_k_ratio: 0.05``).
"""

from __future__ import annotations

import numpy as np


def rank_by_prediction(codes, pred) -> np.ndarray:
    """Indices ordering combinations by predicted bias, descending; ties by code, descending (the official sort key
    (pred, a string) reversed). Never by the true bias, which the ranking must not see."""
    codes = np.asarray(codes, dtype=np.int64)
    return np.lexsort((-codes, -np.asarray(pred, dtype=np.float64))) if len(codes) else np.array([], dtype=int)


def precision_at_k(true_ranked: np.ndarray, k: int, threshold: float) -> float:
    """Share of the first k ranked items whose true bias exceeds the threshold (k counts even past the list's end,
    as the official ``n_relevant / k``; nan for k = 0, where the official divides by zero)."""
    if k < 1:
        return float("nan")
    return float(np.sum(np.asarray(true_ranked)[:k] > threshold)) / k


def recall_at_k(true_ranked: np.ndarray, k: int, threshold: float, n_relevant: int) -> float:
    """High-bias items among the first k ranked over all ``n_relevant`` high-bias items of the split."""
    if n_relevant == 0:
        return float("nan")
    return float(np.sum(np.asarray(true_ranked)[:k] > threshold)) / n_relevant


def dcg_at_k(true_ranked: np.ndarray, k: int = 20) -> float:
    """Σ_{i=1..k} gain_i / log2(i + 1) with linear gains = the true bias of the i-th ranked item."""
    g = np.asarray(true_ranked, dtype=np.float64)[:k]
    return float(np.sum(g / np.log2(np.arange(len(g)) + 2)))


def rr_at_k(true_top_ids: list, pred_ranked_ids: list, k: int = 5) -> tuple[float, float]:
    """(hit share, score) of the split's true top-k among the predicted ranking (official ``rr_at_k``)."""
    pos = {x: i for i, x in enumerate(pred_ranked_ids)}
    score, hits = 0.0, 0
    for true_rank, x in enumerate(true_top_ids[:k]):
        if x in pos:
            score += float(np.exp(-abs(pos[x] - true_rank)))
            hits += 1
    return hits / k, score


def reciprocal_rank(true_top_id, pred_ranked_ids: list) -> float:
    """1/rank of the split's highest-bias item in the predicted ranking, 0 if it was not generated (official ``rr``)."""
    for i, x in enumerate(pred_ranked_ids):
        if x == true_top_id:
            return 1.0 / (i + 1)
    return 0.0


def evaluate_generation(a_codes: np.ndarray, pred_of_code: dict, table_codes: np.ndarray, table_bias: np.ndarray,
                        table_seen: np.ndarray, threshold: float = 0.3, precision_k: int = 100, recall_k: int = 200,
                        dcg_k: int = 20, rr_k: int = 5, true_top_k: int = 20, rr_k_ratio: float = 0.05
                        ) -> dict[str, float]:
    """Metrics of one generated set. ``a_codes``: codes of every generated sample (repeats included);
    ``pred_of_code``: predicted bias per unique code; the table holds every known combination with its true bias
    and split. A generated code that is not in the table is "new" (true bias 0, as the official code)."""
    a_codes = np.asarray(a_codes)
    index = {int(c): i for i, c in enumerate(table_codes)}
    rows = np.array([index.get(int(c), -1) for c in a_codes])
    true_x = np.where(rows >= 0, table_bias[np.maximum(rows, 0)], 0.0)
    out: dict[str, float] = {"samples": float(len(a_codes)), "mean_true_bias": float(true_x.mean()),
                             "high_bias_sample_share": float(np.mean(true_x > threshold))}
    uniq = np.unique(a_codes)
    out["unique"] = float(len(uniq))
    out["unique_new"] = float(sum(int(c) not in index for c in uniq))
    for split, want in (("seen", True), ("unseen", False)):
        in_split = [int(c) for c in uniq if int(c) in index and bool(table_seen[index[int(c)]]) == want]
        true = np.array([table_bias[index[c]] for c in in_split], dtype=np.float64)
        pred = np.array([pred_of_code[c] for c in in_split], dtype=np.float64)
        order = rank_by_prediction(in_split, pred)
        ids = [in_split[i] for i in order]
        true_ranked = true[order] if len(in_split) else true
        split_rows = np.nonzero(table_seen == want)[0]
        split_bias = table_bias[split_rows]
        n_rel = int(np.sum(split_bias > threshold))
        true_order = split_rows[np.lexsort((table_codes[split_rows], -split_bias))]
        true_ids = [int(table_codes[r]) for r in true_order]
        out[f"{split}_unique"] = float(len(in_split))
        out[f"{split}_high_bias"] = float(np.sum(true > threshold))
        out[f"{split}_high_bias_total"] = float(n_rel)
        out[f"{split}_precision@{precision_k}"] = precision_at_k(true_ranked, precision_k, threshold)
        out[f"{split}_recall@{recall_k}"] = recall_at_k(true_ranked, recall_k, threshold, n_rel)
        out[f"{split}_dcg@{dcg_k}"] = dcg_at_k(true_ranked, dcg_k)
        hit, score = rr_at_k(true_ids, ids, rr_k)
        out[f"{split}_rr@{rr_k}"] = hit
        out[f"{split}_rr_score@{rr_k}"] = score
        out[f"{split}_reciprocal_rank"] = reciprocal_rank(true_ids[0], ids) if true_ids else float("nan")
        # the official data-derived cut-offs (evaluate_seen); precision over the samples, repeats kept
        x_rows = rows[(rows >= 0) & (table_seen[np.maximum(rows, 0)] == want)]
        x_codes = table_codes[x_rows]
        x_pred = np.array([pred_of_code[int(c)] for c in x_codes], dtype=np.float64)
        x_true = table_bias[x_rows][rank_by_prediction(x_codes, x_pred)]
        k_prec = int(n_rel / max(len(split_rows), 1) * 1.5 * len(x_rows))
        k_rr = max(1, int(rr_k_ratio * n_rel))
        hit, score = rr_at_k(true_ids, ids, k_rr)
        out.update({f"{split}_precision_official": precision_at_k(x_true, k_prec, threshold),
                    f"{split}_precision_official_k": float(k_prec),
                    f"{split}_recall_official": recall_at_k(true_ranked, n_rel, threshold, n_rel),
                    f"{split}_rr_official": hit, f"{split}_rr_score_official": score,
                    f"{split}_rr_official_k": float(k_rr)})
    # against the enumerated truth over every known combination (the synthetic benchmark knows all of them)
    top = np.lexsort((table_codes, -table_bias))[:true_top_k]
    out[f"true_top{true_top_k}_found"] = float(np.mean(np.isin(table_codes[top], uniq)))
    return out
