"""The evaluation against the official ``utils/evaluation*.py`` rules, transcribed here on strings as the official
code keys combinations ("0 1 0 ..."): the held-out count of the seen/unseen split, the tie-break of the predicted
ranking, and the data-derived cut-offs of precision, recall and RR (reported as ``*_official``)."""

import math

import numpy as np
import pytest
import torch

from zoo.bggn.bias import decode, split_seen_unseen
from zoo.bggn.metrics import evaluate_generation


@pytest.mark.parametrize("n", [5, 15, 17, 100, 1024])
def test_split_holds_out_the_official_floor(n):
    # official regroup_a_bias_df: sample(keys, int(te_par * len(keys)))
    assert int((~split_seen_unseen(n, 0.3, seed=0)).sum()) == int(0.3 * n)


def test_ties_in_the_prediction_are_broken_by_the_combination_not_the_truth():
    table_codes = np.arange(4)
    bias = np.array([0.1, 0.9, 0.2, 0.05])
    seen = np.ones(4, dtype=bool)
    pred = {c: 0.5 for c in range(4)}  # all tied: the official order is the a string descending = code 3, 2, 1, 0
    m = evaluate_generation(np.arange(4), pred, table_codes, bias, seen, threshold=0.3, precision_k=1, recall_k=1,
                            dcg_k=2, rr_k=1, true_top_k=1)
    assert m["seen_precision@1"] == 0.0  # code 3 (0.05) first, not the true best (code 1)
    assert m["seen_dcg@2"] == pytest.approx(0.05 + 0.2 / math.log2(3))
    assert m["seen_reciprocal_rank"] == pytest.approx(1 / 3)


def _official_seen(gen_codes, pred_of, table_codes, bias, in_split, tau, d, rr_k_ratio=0.05):
    """A transcription of the official evaluate_seen / bias_num_ratio / precision_at_k / recall_at_k / rr_at_k for
    one split, with the official string keys and sort keys."""
    key = {int(c): " ".join(map(str, decode(torch.tensor([int(c)]), d)[0].tolist())) for c in table_codes}
    split = {key[int(c)]: float(b) for c, b, s in zip(table_codes, bias, in_split) if s}
    x_list, a_list, first = [], [], set()
    for c in gen_codes:
        k = key.get(int(c))
        if k is None or k not in split:
            continue
        x_list.append((k, pred_of[int(c)], split[k]))
        if k not in first:
            first.add(k)
            a_list.append((k, pred_of[int(c)], split[k]))
    a_sorted = sorted(a_list, key=lambda t: (t[1], t[0], t[2]), reverse=True)
    x_sorted = sorted(x_list, key=lambda t: (t[1], t[0], t[2]), reverse=True)
    data = sorted(((k, b, 1) for k, b in split.items()), key=lambda t: (t[1], t[2], t[0]), reverse=True)
    n_rel = sum(b > tau for _, b, _ in data)
    rr_k = int(rr_k_ratio * n_rel) or 1
    precision_k = int(n_rel / len(data) * 1.5 * len(x_sorted))
    precision = sum(t[2] > tau for t in x_sorted[:precision_k]) / precision_k
    y_gen = [t[2] > tau for t in a_sorted]
    recall = (sum(y_gen[:n_rel]) if len(y_gen) > n_rel else sum(y_gen)) / n_rel
    a_strs = [t[0] for t in a_sorted]
    score, found = 0.0, 0.0
    for gt_idx, (k, _, _) in enumerate(data[:rr_k]):
        if k in a_strs:
            score += math.exp(-abs(a_strs.index(k) + 1 - gt_idx - 1))
            found += 1
    return {"precision": precision, "precision_k": precision_k, "recall": recall, "rr": found / rr_k,
            "rr_score": score, "rr_k": rr_k}


def test_official_cutoffs_match_a_transcription_of_evaluate_seen():
    rng = np.random.default_rng(3)
    d = 8
    table_codes = np.sort(rng.choice(2**d, 200, replace=False))
    bias = rng.random(200)  # distinct: the true order has no ties
    seen = split_seen_unseen(200, 0.3, seed=1).numpy()
    weights = rng.random(2**d) ** 4
    gen = rng.choice(2**d, 3000, p=weights / weights.sum())  # repeats, and codes outside the table ("new")
    pred = {int(c): round(float(v), 1) for c, v in zip(range(2**d), rng.random(2**d))}  # many ties in L̂
    m = evaluate_generation(gen, pred, table_codes, bias, seen, threshold=0.3)
    for split, in_split in (("seen", seen), ("unseen", ~seen)):
        ref = _official_seen(gen, pred, table_codes, bias, in_split, 0.3, d)
        assert ref["rr_k"] > 1 and ref["precision_k"] > 100  # the cut-offs are data-derived, not the configured ones
        assert m[f"{split}_precision_official_k"] == ref["precision_k"]
        assert m[f"{split}_precision_official"] == pytest.approx(ref["precision"], abs=1e-12)
        assert m[f"{split}_recall_official"] == pytest.approx(ref["recall"], abs=1e-12)
        assert m[f"{split}_rr_official_k"] == ref["rr_k"]
        assert m[f"{split}_rr_official"] == pytest.approx(ref["rr"], abs=1e-12)
        assert m[f"{split}_rr_score_official"] == pytest.approx(ref["rr_score"], abs=1e-12)
