"""Test oracle: slow, literal set-function implementations (NumPy, loops over sets) for the vectorised losses.

Nothing here is used for training; each function transcribes a formula of the module docstring of
``zoo.score.losses`` one element at a time, so a vectorisation mistake there shows up as a mismatch.
"""

from __future__ import annotations

import numpy as np


def fl_value(S: np.ndarray, A) -> float:
    A = list(A)
    if not A:
        return 0.0
    return float(sum(max(S[i, j] for j in A) for i in range(S.shape[0])))


def gc_value(S: np.ndarray, A, lamda: float) -> float:
    A = list(A)
    n = S.shape[0]
    return float(sum(S[i, j] for i in range(n) for j in A) - lamda * sum(S[i, j] for i in A for j in A))


def logdet_value(S: np.ndarray, A, delta: float) -> float:
    A = list(A)
    if not A:
        return 0.0
    sign, value = np.linalg.slogdet(S[np.ix_(A, A)] + delta * np.eye(len(A)))
    assert sign > 0
    return float(value)


def class_partition(labels) -> list[list[int]]:
    labels = list(labels)
    return [[i for i, y in enumerate(labels) if y == c] for c in sorted(set(labels))]


def total_information(f, S, labels, **kw) -> float:
    return sum(f(S, A, **kw) for A in class_partition(labels))


def total_correlation(f, S, labels, **kw) -> float:
    return total_information(f, S, labels, **kw) - f(S, range(S.shape[0]), **kw)


def supcon_set_value(Z: np.ndarray, A, temperature: float) -> float:
    """f_SupCon(A_k) = sum_{i in A_k}[log sum_{a != i} e^{S_ia/t} - 1/(|A_k|-1) sum_{p in A_k, p != i} S_ip/t]."""
    S = Z @ Z.T / temperature
    n = S.shape[0]
    total = 0.0
    for i in A:
        lse = np.log(sum(np.exp(S[i, a]) for a in range(n) if a != i))
        pos = [S[i, p] for p in A if p != i]
        total += lse - sum(pos) / len(pos)
    return float(total)


def supcon_loop(Z: np.ndarray, labels, temperature: float) -> float:
    """S_f with f_SupCon, divided by |V| (SupCon's mean over anchors)."""
    return sum(supcon_set_value(Z, A, temperature) for A in class_partition(labels)) / Z.shape[0]
