"""knockoff+ threshold vs knockpy, BH step-up vs statsmodels (float64, exact)."""

import numpy as np
import pytest
import torch

from zoo.bymi.threshold import bh_reject, knockoff_select, knockoff_threshold, min_rejection_size
from zoo.errors import ZooError

knockoff_stats = pytest.importorskip("knockpy.knockoff_stats", reason="knockpy is the threshold's oracle")
multitest = pytest.importorskip("statsmodels.stats.multitest", reason="statsmodels is the BH oracle")


def _knockpy(W, alpha, offset=1):
    return knockoff_stats.data_dependent_threshhold(W, fdr=alpha, offset=offset)  # the library's spelling


def _formula(W, alpha, offset=1):
    """The definition, by brute force: min t in {|W_j| > 0} with (offset + #{W <= -t}) / max(1, #{W >= t}) <= alpha."""
    ok = [t for t in np.abs(W) if t > 0 and (offset + (W <= -t).sum()) / max(1, (W >= t).sum()) <= alpha]
    return min(ok) if ok else np.inf


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2])
@pytest.mark.parametrize("offset", [0, 1])
def test_threshold_equals_knockpy_on_continuous_scores(alpha, offset):
    rng = np.random.default_rng(int(alpha * 100) + offset)
    rejected_some = 0
    for _ in range(200):
        m = int(rng.integers(10, 100))
        W = rng.standard_normal(m) + rng.uniform(0, 8) * (rng.random(m) < 0.4)
        ours = knockoff_threshold(torch.tensor(W), alpha, offset).item()
        assert ours == _knockpy(W, alpha, offset) == _formula(W, alpha, offset)
        rejected_some += np.isfinite(ours)
    assert 0 < rejected_some < 200  # both outcomes occur, including no rejection (inf)


def test_threshold_with_ties_of_one_sign():
    """Tied |W| of one sign (integer scores, each magnitude positive or negative): the same rejections as knockpy.
    (Inside a tied run of negatives knockpy's running count may already qualify; it then returns that magnitude
    instead of the next larger one, which rejects the same set. The definition's threshold is the brute force.)"""
    rng = np.random.default_rng(3)
    for _ in range(300):
        magnitudes = rng.permutation(np.arange(1, 12))[: int(rng.integers(3, 10))]
        signs = np.where(rng.random(len(magnitudes)) < 0.7, 1.0, -1.0)
        reps = rng.integers(1, 6, size=len(magnitudes))
        W = rng.permutation(np.repeat(signs * magnitudes, reps))
        for alpha in (0.1, 0.3):
            ours = knockoff_threshold(torch.tensor(W), alpha).item()
            assert ours == _formula(W, alpha)
            assert np.array_equal(W >= ours, W >= _knockpy(W, alpha))


def test_threshold_is_order_free_where_knockpy_is_not():
    """Ten +1 and one -1: (1 + 1)/10 > 0.1, so nothing is rejected, whatever the order; knockpy's running count
    rejects when the -1 happens to come last among the ties."""
    W = np.array([1.0] * 10 + [-1.0])
    assert np.isinf(knockoff_threshold(torch.tensor(W), 0.1).item()) and np.isinf(_formula(W, 0.1))
    assert _knockpy(W, 0.1) == 1.0
    assert np.isinf(_knockpy(W[::-1].copy(), 0.1))


def test_no_rejection_and_zero_scores():
    W = torch.tensor([0.0, 0.0, 5.0, 4.0, -0.5], dtype=torch.float64)
    assert knockoff_threshold(W, 0.1).item() == np.inf  # 2 positives can never reach 1/2 <= 0.1
    flagged, L = knockoff_select(torch.tensor([9.0] * 12 + [0.0, -1.0], dtype=torch.float64), 0.1)
    assert L.item() == 9.0 and flagged.sum() == 12  # a zero score is never rejected
    assert _knockpy(np.array([9.0] * 12 + [0.0, -1.0]), 0.1) == 9.0


def test_batched_threshold_matches_rows():
    W = torch.randn(7, 50, dtype=torch.float64) + 3 * (torch.rand(7, 50) < 0.3)
    rows = torch.stack([knockoff_threshold(w, 0.2) for w in W])
    assert torch.equal(knockoff_threshold(W, 0.2), rows)


def test_min_rejection_size():
    assert [min_rejection_size(a) for a in (0.1, 0.2, 0.25, 0.3, 0.05)] == [10, 5, 4, 4, 20]
    assert min_rejection_size(0.1, offset=0) == 1
    for alpha in (0.1, 0.2, 0.3):  # exactly the smallest set knockoff+ rejects
        k = min_rejection_size(alpha)
        assert np.isfinite(_formula(np.full(k, 2.0), alpha)) and np.isinf(_formula(np.full(k - 1, 2.0), alpha))
    with pytest.raises(ZooError, match="alpha must lie in"):
        min_rejection_size(1.5)


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.3])
def test_bh_equals_statsmodels(alpha):
    rng = np.random.default_rng(int(alpha * 1000))
    for _ in range(100):
        m = int(rng.integers(1, 60))
        p = rng.random(m) ** rng.uniform(1, 6)
        ref = multitest.multipletests(p, alpha=alpha, method="fdr_bh")[0]
        assert np.array_equal(bh_reject(torch.tensor(p), alpha).numpy(), ref)
    batch = torch.rand(5, 30, dtype=torch.float64) ** 4
    assert torch.equal(bh_reject(batch, alpha), torch.stack([bh_reject(b, alpha) for b in batch]))
