"""Oracles for the memorization metrics: copy model, brute-force n-gram counts, per-prefix generation."""

from __future__ import annotations

import pytest
import torch

from zoo.errors import ZooError
from zoo.lm import build_causal_lm
from zoo.unlearning.metrics import (attack_auc, greedy_decode, check_disjoint, check_window, count_outliers, outlier_band,
                                    outlier_counts,
                                    extraction_likelihoods, overlap_n, score_sequences, unseen_threshold)


def _batch(seqs, pad=0):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


@pytest.mark.parametrize("shortcut", [True, False])
def test_copy_model_has_ma_and_el_one(copy_model_cls, shortcut):
    g = torch.Generator().manual_seed(0)
    seqs = [[i + 2] + torch.randint(2, 50, (L - 1,), generator=g).tolist() for i, L in enumerate([24, 17, 30])]
    model = copy_model_cls(seqs, vocab=50)
    ids, mask = _batch(seqs)
    s = score_sequences(model, ids, mask, el_n=None)
    assert torch.equal(s.ma, torch.ones(3, dtype=torch.float64))
    el = extraction_likelihoods(model, ids, mask, n=10, shortcut=shortcut)
    assert torch.allclose(el, torch.ones(3, dtype=torch.float64))


def _brute_el(model, seq, n):
    """Jang et al.'s definition, literally: greedy-generate from every prefix (no cache, no batching), count the
    generated n-grams found among the suffix's n-grams by pairwise comparison."""
    T, total = len(seq), 0.0
    for t in range(1, T):
        cur = list(seq[:t])
        for _ in range(T - t):
            logits = model(input_ids=torch.tensor([cur])).logits
            cur.append(int(logits[0, -1].argmax()))
        pred, label = cur[t:], seq[t:]
        n_label = len(label) - n + 1
        if n_label <= 0:
            continue
        hits = sum(any(pred[a:a + n] == label[b:b + n] for b in range(n_label)) for a in range(len(pred) - n + 1))
        total += hits / n_label
    return total / (T - n)


def _brute_ma(model, seq):
    hits = 0
    for t in range(1, len(seq)):
        hits += int(model(input_ids=torch.tensor([seq[:t]])).logits[0, -1].argmax()) == seq[t]
    return hits / (len(seq) - 1)


def test_el_and_ma_match_brute_force_on_a_random_lm(tiny_config):
    torch.manual_seed(0)
    cfg = {**tiny_config, "vocab_size": 5}  # few tokens: greedy continuations share n-grams with the suffix
    model = build_causal_lm(cfg, "float64").eval()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 5, (L,), generator=g).tolist() for L in (8, 6, 9)]
    ids, mask = _batch(seqs)
    n = 2
    brute = torch.tensor([_brute_el(model, s, n) for s in seqs], dtype=torch.float64)
    assert brute.max() > 0  # the oracle is not trivially zero
    for shortcut, use_cache in ((True, True), (False, True), (True, False)):
        el = extraction_likelihoods(model, ids, mask, n=n, shortcut=shortcut, use_cache=use_cache, max_rows=7)
        torch.testing.assert_close(el, brute, rtol=0, atol=1e-12)
    ma = score_sequences(model, ids, mask, el_n=None).ma
    torch.testing.assert_close(ma, torch.tensor([_brute_ma(model, s) for s in seqs], dtype=torch.float64))


def test_greedy_decode_feeds_the_kv_cache_back(tiny_config, recwarn):
    """With use_cache the model sees the prefix once, then one token per step with its cache (passed under the name
    the installed transformers takes, so no deprecation warning), and decodes what recomputing everything decodes."""
    torch.manual_seed(0)
    model = build_causal_lm({**tiny_config, "vocab_size": 7}, "float64").eval()
    lengths = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: lengths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    ids, mask = _batch([[1, 2, 3, 4], [5, 6]])
    cached = greedy_decode(model, ids, mask, max_new_tokens=5)
    hook.remove()
    assert lengths == [4, 1, 1, 1, 1]
    assert not [w for w in recwarn if "past_key_values" in str(w.message)]
    torch.testing.assert_close(cached, greedy_decode(model, ids, mask, max_new_tokens=5, use_cache=False))


def test_el_when_the_sequences_fill_the_models_position_table(tiny_config):
    # rows decoded together run as long as the longest; with T = max_position_embeddings the shorter rows' extra
    # (dropped) steps would index past the table: same EL as the brute force, in one big decode or row by row
    torch.manual_seed(0)
    cfg = {**tiny_config, "vocab_size": 5, "max_position_embeddings": 9, "window_size": 9}
    model = build_causal_lm(cfg, "float64").eval()
    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, 5, (9,), generator=g).tolist() for _ in range(3)]
    ids, mask = _batch(seqs)
    brute = torch.tensor([_brute_el(model, s, 2) for s in seqs], dtype=torch.float64)
    for shortcut in (True, False):
        for max_rows in (1024, 1):
            el = extraction_likelihoods(model, ids, mask, n=2, shortcut=shortcut, max_rows=max_rows)
            torch.testing.assert_close(el, brute, rtol=0, atol=1e-12)


def test_overlap_counts_generated_ngrams_found_in_the_suffix():
    # label 2-grams: (1,2) (2,3) (3,4); pred 2-grams: (1,2) (2,9) (9,4) -> one hit of three
    assert overlap_n([1, 2, 9, 4], [1, 2, 3, 4], 2) == pytest.approx(1 / 3)
    assert overlap_n([1], [1], 2) is None


def test_thresholds_outliers_and_attack():
    assert unseen_threshold([0.2, 0.4]) == pytest.approx(0.3)
    assert unseen_threshold([0.2, 0.4], num_std=1.0) == pytest.approx(0.4)
    # the official analysis: still memorized MA >= 0.60, unlearned too far MA <= 0.15 (both inclusive)
    ma = [0.1, 0.15, 0.3, 0.5, 0.6, 0.9]
    assert outlier_counts(ma, 0.60, 0.15) == (2, 2)
    assert count_outliers(ma, 0.60, 0.15) == 4 and count_outliers(ma, 0.60) == 2
    # band = mean -/+ k population std: [0.2, 0.4] has mean 0.3 and std 0.1
    low, high = outlier_band([0.2, 0.4], 2.0)
    assert low == pytest.approx(0.1) and high == pytest.approx(0.5)
    assert attack_auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert attack_auc([0.1, 0.2], [0.9, 0.8]) == 0.0
    assert attack_auc([0.5, 0.5], [0.5, 0.5]) == 0.5


def test_bad_input_is_refused_with_a_clear_message():
    with pytest.raises(ZooError, match="empty unseen set"):
        unseen_threshold([])
    with pytest.raises(ZooError, match="shorter than the EL_10 window.*doc_id b"):
        check_window([40, 10], 10, ["a", "b"])
    with pytest.raises(ZooError, match="overlaps the unseen set.*doc_id f1"):
        check_disjoint([[1, 2, 3], [4, 5, 6]], [[7, 8], [4, 5, 6]], ["f0", "f1"])
    with pytest.raises(ZooError, match="non-empty"):
        attack_auc([], [0.1])
