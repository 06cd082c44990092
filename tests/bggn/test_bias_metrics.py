"""Oracles of the bias values and the evaluation metrics: fairlearn's MetricFrame for L_f(a), scikit-learn's
dcg_score for DCG@k, hand-made rankings for precision/recall/RR, and the planted benchmark's closed-form truth
against a Monte-Carlo estimate."""

import numpy as np
import pytest
import torch

from datamodules.intersectional import SyntheticBenchmark
from zoo.bggn.bias import (
    bias_bins,
    check_binary,
    codes,
    decode,
    group_bias,
    inverse_frequency_weights,
    read_bias_table,
    split_seen_unseen,
    write_bias_table,
)
from zoo.bggn.metrics import dcg_at_k, evaluate_generation, precision_at_k, recall_at_k, reciprocal_rank, rr_at_k
from zoo.errors import ZooError


def test_group_bias_equals_fairlearn_metricframe():
    fairlearn = pytest.importorskip("fairlearn.metrics", reason="fairlearn is the peer of L_f(a)")
    import pandas as pd

    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, (500, 4))
    loss = rng.exponential(size=500)
    combos, bias, count = group_bias(torch.as_tensor(loss), torch.as_tensor(a))
    sf = pd.DataFrame(a, columns=["s0", "s1", "s2", "s3"])
    mf = fairlearn.MetricFrame(metrics=lambda y_true, y_pred: float(np.mean(y_pred)), y_true=loss, y_pred=loss,
                               sensitive_features=sf)
    peer = mf.by_group
    for row, b in zip(combos.tolist(), bias.tolist()):
        assert b == pytest.approx(float(peer.loc[tuple(row)]), rel=1e-12)
    assert int(count.sum()) == 500 and len(combos) == len(peer)


def test_codes_roundtrip_and_binary_check():
    a = torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1]])
    assert codes(a).tolist() == [5, 0, 7]
    assert torch.equal(decode(codes(a), 3), a)
    with pytest.raises(ZooError, match="sensitive attribute 'age' is not binary"):
        check_binary(np.array([[0, 3], [1, 1]]), ["sex", "age"])


def test_split_and_weights():
    seen = split_seen_unseen(100, 0.3, seed=1)
    assert int((~seen).sum()) == 30 and torch.equal(seen, split_seen_unseen(100, 0.3, seed=1))
    assert bool(split_seen_unseen(1, 0.6, seed=0).all())  # official int(0.6 * 1) = 0 held out
    bins = bias_bins(torch.tensor([0.01, 0.07, 0.5, 3.0]), 0.05, 10)
    assert bins.tolist() == [0, 1, 9, 9]
    w = inverse_frequency_weights(bins, 10)
    # counts 1, 1, 2 are all clipped up to 5 (official np.clip(v, 5, 5000)): equal weights
    assert torch.allclose(w, torch.ones(4)) and w.mean() == pytest.approx(1.0)


def test_inverse_frequency_weights_match_the_official_clipped_rule():
    """Brute force of the official ``_prepare_weights`` (reweight: inverse): count per bin, clip the counts to
    [5, 5000], weight 1/count, rescale to mean 1."""
    rng = np.random.default_rng(0)
    labels = np.concatenate([np.zeros(6000, int), np.full(40, 1), np.full(12, 2), np.full(3, 3), np.full(1, 7)])
    rng.shuffle(labels)
    counts = {k: 0 for k in range(10)}
    for lab in labels:
        counts[lab] += 1
    clipped = {k: np.clip(v, 5, 5000) for k, v in counts.items()}
    ref = np.array([1.0 / clipped[lab] for lab in labels])
    ref = ref * len(ref) / ref.sum()
    w = inverse_frequency_weights(torch.as_tensor(labels), 10).double().numpy()
    np.testing.assert_allclose(w, ref, rtol=1e-6)
    # above the clip the inverse ratio holds; below it (3 and 1 combinations) the bins weigh as one of 5
    i1, i2, i3, i7 = (int(np.flatnonzero(labels == k)[0]) for k in (1, 2, 3, 7))
    assert w[i2] / w[i1] == pytest.approx(40 / 12) and w[i3] == pytest.approx(w[i7])


def test_bias_table_roundtrip_and_nonbinary_refusal(tmp_path):
    a = np.array([[0, 1], [1, 1]])
    write_bias_table(tmp_path / "t.csv", ["male", "young"], a, np.array([0.2, 0.5]), np.array([10, 3]))
    names, a2, bias, count = read_bias_table(str(tmp_path / "t.csv"))
    assert names == ["male", "young"] and (a2 == a).all() and bias.tolist() == [0.2, 0.5] and count.tolist() == [10, 3]
    (tmp_path / "bad.csv").write_text("male,age,count,bias\n0,2,5,0.1\n1,1,5,0.2\n")
    with pytest.raises(ZooError, match="'age' is not binary"):
        read_bias_table(str(tmp_path / "bad.csv"))


def test_planted_truth_matches_monte_carlo():
    # the closed-form truth (Gauss-Hermite) equals the reference classifier's empirical per-group BCE
    bench = SyntheticBenchmark(d=4, seed=3, n_planted=2, interaction_order=2, n_extra=200_000, min_count=2000,
                               feature_dim=2)
    x, y, a = bench.samples()
    logit = 2 * bench.delta * x[:, 0].astype(np.float64)
    loss = np.logaddexp(0, -logit) * y + np.logaddexp(0, logit) * (1 - y)
    combos, emp, _ = group_bias(torch.as_tensor(loss), torch.as_tensor(a))
    truth = torch.as_tensor(bench.bias)[codes(combos)]
    assert (emp - truth).abs().max() < 0.1
    assert truth.max() > 0.3 > truth.min()  # planted interactions stand above the threshold, the rest below


def test_ranking_metrics_on_hand_made_rankings():
    true_ranked = np.array([0.9, 0.1, 0.5, 0.2, 0.4])
    assert precision_at_k(true_ranked, 3, 0.3) == pytest.approx(2 / 3)
    assert precision_at_k(true_ranked, 10, 0.3) == pytest.approx(3 / 10)  # k past the end still divides by k
    assert recall_at_k(true_ranked, 2, 0.3, n_relevant=4) == pytest.approx(1 / 4)
    assert reciprocal_rank("c", ["a", "b", "c"]) == pytest.approx(1 / 3) and reciprocal_rank("z", ["a"]) == 0.0
    hit, score = rr_at_k(["a", "b", "c", "d", "e"], ["b", "a", "x", "e"], k=5)
    assert hit == pytest.approx(3 / 5)  # a, b, e found
    assert score == pytest.approx(np.exp(-1) + np.exp(-1) + np.exp(-1))  # a: 1 vs 0, b: 0 vs 1, e: 3 vs 4


def test_dcg_equals_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    true, pred = rng.random(40), rng.random(40)
    order = np.argsort(-pred)
    for k in (5, 20):
        ours = dcg_at_k(true[order], k)
        assert ours == pytest.approx(sklearn_metrics.dcg_score(true[None], pred[None], k=k), rel=1e-12)


def test_evaluate_generation_counts_seen_unseen_and_new():
    table_codes = np.arange(6)
    bias = np.array([0.1, 0.5, 0.9, 0.4, 0.2, 0.8])
    seen = np.array([True, True, True, False, False, False])
    gen = np.array([2, 2, 1, 5, 3, 0, 9])  # 9 is not a known combination: "new", true bias 0
    pred = {0: 0.0, 1: 0.6, 2: 0.7, 3: 0.1, 5: 0.9, 9: 1.0}
    m = evaluate_generation(gen, pred, table_codes, bias, seen, threshold=0.3, precision_k=2, recall_k=2, dcg_k=2,
                            rr_k=1, true_top_k=2)
    assert m["unique"] == 6 and m["unique_new"] == 1
    assert m["seen_unique"] == 3 and m["seen_high_bias"] == 2 and m["unseen_high_bias"] == 2
    assert m["mean_true_bias"] == pytest.approx((0.9 * 2 + 0.5 + 0.8 + 0.4 + 0.1 + 0.0) / 7)
    assert m["seen_precision@2"] == 1.0 and m["unseen_precision@2"] == 1.0  # ranked 5 (0.8), 3 (0.4)
    assert m["seen_dcg@2"] == pytest.approx(0.9 + 0.5 / np.log2(3))
    assert m["seen_reciprocal_rank"] == 1.0 and m["true_top2_found"] == 1.0


def test_relaxed_search_tree_expands_leaves_exactly():
    from zoo.bggn.search_tree import expand, leaf_patterns, relaxed_search_tree

    # bias is high exactly when a0 = 1 and a2 = 1: one leaf (a0=1, a2=1, a1 free) -> both of its combinations,
    # including the one never seen in training
    a = np.array([[0, 0, 0], [0, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 1], [0, 0, 1]])
    bias = np.where((a[:, 0] == 1) & (a[:, 2] == 1), 1.0, 0.1)
    leaves = leaf_patterns(a, bias)
    assert sum(v > 0.5 for _, v in leaves) == 1
    found = relaxed_search_tree(a, bias, threshold=0.5)
    assert found.tolist() == [[1, 0, 1], [1, 1, 1]]  # [1, 1, 1] is unseen
    rng = np.random.default_rng(0)
    full = expand(np.array([-1, 1, -1, -1]), 100, rng)
    assert len(np.unique(full, axis=0)) == 8 and (full[:, 1] == 1).all()
    assert len(np.unique(expand(np.array([-1, -1, -1, -1]), 5, rng), axis=0)) == 5
