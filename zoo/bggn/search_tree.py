"""The (relaxed) search-tree baseline of the paper (official ``baselines.py``, ``utils/baseline_utils.py``): a
regression tree (scikit-learn) fit on the seen combinations' bias values; every root-to-leaf path fixes some
attributes (left: 0, right: 1) and leaves the rest free. "Relaxed": each high-value leaf is expanded into the
combinations its free attributes allow, which is how the tree can propose unseen combinations."""

from __future__ import annotations

import numpy as np

from zoo.errors import ZooError


def leaf_patterns(a: np.ndarray, bias: np.ndarray, max_depth: int | None = None, min_samples_leaf: int = 1,
                  seed: int = 0) -> list[tuple[np.ndarray, float]]:
    """Fit the tree; returns one (pattern, predicted value) per leaf, pattern[j] ∈ {0, 1, -1 (free)}."""
    from sklearn.tree import DecisionTreeRegressor

    if len(a) == 0:
        raise ZooError("the search tree needs at least one training combination")
    tree = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed)
    tree.fit(a, bias)
    t = tree.tree_
    out: list[tuple[np.ndarray, float]] = []
    stack = [(0, -np.ones(a.shape[1], dtype=np.int64))]
    while stack:
        node, pattern = stack.pop()
        if t.children_left[node] == -1:  # a leaf
            out.append((pattern, float(t.value[node].mean())))
            continue
        j = t.feature[node]  # binary features: threshold 0.5, left = 0, right = 1
        for child, v in ((t.children_left[node], 0), (t.children_right[node], 1)):
            p = pattern.copy()
            p[j] = v
            stack.append((child, p))
    return out


def expand(pattern: np.ndarray, max_combinations: int, rng: np.random.Generator) -> np.ndarray:
    """The combinations a pattern allows (all of them, or ``max_combinations`` drawn without repetition)."""
    free = np.nonzero(pattern < 0)[0]
    n = 2 ** len(free)
    if len(free) > 62:
        raise ZooError(f"a leaf with {len(free)} free attributes cannot be enumerated")
    idx = np.arange(n) if n <= max_combinations else rng.choice(n, max_combinations, replace=False)
    bits = (idx[:, None] >> np.arange(len(free) - 1, -1, -1)) & 1
    out = np.repeat(pattern[None], len(idx), axis=0)
    out[:, free] = bits
    return out


def relaxed_search_tree(a: np.ndarray, bias: np.ndarray, threshold: float, max_depth: int | None = None,
                        min_samples_leaf: int = 1, max_per_leaf: int = 256, seed: int = 0) -> np.ndarray:
    """Combinations proposed by the relaxed tree: the expansions of every leaf whose value exceeds ``threshold``."""
    rng = np.random.default_rng(seed)
    found = [expand(p, max_per_leaf, rng) for p, v in leaf_patterns(a, bias, max_depth, min_samples_leaf, seed)
             if v > threshold]
    return np.unique(np.concatenate(found), axis=0) if found else np.zeros((0, a.shape[1]), dtype=np.int64)
