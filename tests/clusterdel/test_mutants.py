"""Oracles added by mutation testing: the three pivots on dense auxiliary graphs H, against the brute-force
sequential references of test_pivots (every score recomputed from scratch on H[U] before each pivot).

The H's of the other tests (G minus the LP's or the wedge set's edges, on sparse random G) have few 2-paths and
few nodes next to two pivots, so pivot order, the "earliest pivot" rule and the 2-path counts are barely exercised
there. The pivot rules are defined for any H (paper Sec. 3-4), so they are checked here on dense random graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from zoo.clusterdel import degree_pivot, random_pivot, ratio_pivot

from .test_pivots import pick_degree, pick_ratio, same_partition, seq_random, seq_scores


@pytest.mark.parametrize("n, p, seed", [(20, 0.3, 0), (35, 0.2, 1), (50, 0.12, 2), (40, 0.5, 3)])
def test_pivots_on_dense_h_match_the_sequential_references(n, p, seed):
    h = sp.csr_array(nx.to_scipy_sparse_array(nx.gnp_random_graph(n, p, seed=seed), weight=None))
    h.sort_indices()
    rank = np.random.default_rng(seed).permutation(n)
    assert np.array_equal(random_pivot(h, np.random.default_rng(seed)), seq_random(h, rank))
    assert same_partition(degree_pivot(h), seq_scores(h, pick_degree))
    assert same_partition(ratio_pivot(h), seq_scores(h, pick_ratio))
