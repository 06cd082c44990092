"""Bayesian-network pieces of the DAG task: every DAG on n <= 5 nodes, and the BGe score.

The official code (``data_dag/scores/base.py``, from DAG-GFlowNet) scores a DAG with the BGe marginal likelihood
(Geiger & Heckerman 1994; Kuipers et al. 2014) under a uniform structure prior; the reward is
``log R(G) = BGe(G) - BGe(empty graph)``. BGe is modular, so we tabulate the local score of every (node, parent set)
once: ``local_scores[j, mask]`` with ``mask`` the bitmask of j's parents.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy.special import gammaln

from zoo.errors import ZooError

# Number of labelled DAGs on n nodes (OEIS A003024); the official DAG-5-list.npy holds the 29,281 of n = 5.
N_DAGS = (1, 1, 3, 25, 543, 29281, 3781503)
MAX_ENUMERATED_NODES = 5


def enumerate_dags(n: int) -> torch.Tensor:
    """Every DAG on ``n`` nodes as a row-major flat 0/1 adjacency, (N_DAGS[n], n*n) int64.

    Rows come in the order of the official ``utils.all_dag`` generator (edge subsets by size, then
    lexicographically over ``itertools.permutations(range(n), 2)``), so row i is state i of ``DAG-5-list.npy``.
    """
    if not 1 <= n <= MAX_ENUMERATED_NODES:
        raise ZooError(f"enumerating every DAG is limited to 1 <= n <= {MAX_ENUMERATED_NODES} nodes "
                       f"(n={n}{f' has {N_DAGS[n]:,} DAGs' if 0 <= n < len(N_DAGS) else ''})")
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]  # = itertools.permutations order
    m = len(pairs)
    pair_id = {p: k for k, p in enumerate(pairs)}
    # every DAG has a topological order: the union over node orders of the subsets of forward edges, deduplicated
    # (n = 5: 120 orders x 1,024 subsets -> 29,281 graphs)
    upper = [(a, b) for a in range(n) for b in range(a + 1, n)]
    subsets = (np.arange(2 ** len(upper))[:, None] >> np.arange(len(upper))) & 1  # (2^k, k)
    codes = []
    for order in itertools.permutations(range(n)):
        ids = np.array([pair_id[(order[a], order[b])] for a, b in upper], dtype=np.int64)
        codes.append(subsets @ (1 << ids))
    codes = np.unique(np.concatenate(codes))
    bits = (codes[:, None] >> np.arange(m)) & 1
    src = torch.tensor([p[0] for p in pairs], dtype=torch.long)
    dst = torch.tensor([p[1] for p in pairs], dtype=torch.long)
    # order of itertools.combinations over the pair list: by subset size, then lexicographic in the pair indices
    size = bits.sum(1)
    idx = np.where(bits.astype(bool), np.arange(m)[None, :], m)  # pair indices, m where absent
    idx.sort(axis=1)
    order = np.lexsort(tuple(idx[:, k] for k in range(m - 1, -1, -1)) + (size,))
    bits = torch.from_numpy(bits[order])
    out = torch.zeros(len(bits), n * n, dtype=torch.long)
    out[:, src * n + dst] = bits
    return out


def check_dag_list(dags: np.ndarray, n: int, source: str) -> torch.Tensor:
    """Validate a DAG list read from a file (the official DAG-<n>-list.npy layout): (N, n*n) 0/1 rows, each a
    distinct acyclic graph, N = the number of DAGs on n nodes."""
    where = f"DAG list {source}"
    if dags.ndim != 2 or dags.shape[1] != n * n:
        raise ZooError(f"{where} has shape {dags.shape}; expected (N, {n * n}) flat adjacency rows for {n} nodes")
    if not np.isin(dags, (0, 1)).all():
        raise ZooError(f"{where} holds values other than 0/1")
    t = torch.as_tensor(dags.astype(np.int64))
    adj = t.view(-1, n, n).float()
    power = adj.clone()
    for _ in range(n - 1):
        power = power @ adj
    cyclic = int((power.flatten(1).sum(1) > 0).sum())
    if cyclic:
        raise ZooError(f"{where} holds {cyclic} cyclic graphs")
    distinct = len(torch.unique(t, dim=0))
    if distinct != len(t):
        raise ZooError(f"{where} holds {len(t) - distinct} duplicate graphs")
    if n < len(N_DAGS) and len(t) != N_DAGS[n]:
        raise ZooError(f"{where} has {len(t)} DAGs; {n} nodes have {N_DAGS[n]:,} (every DAG is needed for exact metrics)")
    return t


def bge_local_scores(data: np.ndarray, alpha_mu: float = 1.0, alpha_w: float | None = None,
                     mean_obs: np.ndarray | None = None) -> torch.Tensor:
    """BGe local scores of every node and parent set, (n, 2**n) float64 (NaN where the set contains the node).

    With N samples, n variables, ``t = alpha_mu (alpha_w - n - 1) / (alpha_mu + 1)``, ``T = t I`` and
    ``R = T + S_N + N alpha_mu / (N + alpha_mu) (xbar - nu)(xbar - nu)^T``, the local score of node j with the p parents P
    is ``log p(D_{P+j}) - log p(D_P)``:

        0.5 (log alpha_mu - log(N + alpha_mu)) + lgamma((N + alpha_w - n + p + 1)/2) - lgamma((alpha_w - n + p + 1)/2)
        - N/2 log pi + (alpha_w - n + 2p + 1)/2 log t + (N + alpha_w - n + p)/2 log|R_PP|
        - (N + alpha_w - n + p + 1)/2 log|R_{P+j,P+j}|

    Defaults are the official ones (alpha_mu = 1, alpha_w = n + 2, nu = 0).
    """
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or data.shape[0] < 1:
        raise ZooError(f"BGe needs a 2-D (samples, variables) array, got shape {data.shape}")
    if not np.isfinite(data).all():
        raise ZooError("BGe data contain NaN or infinite values")
    N, n = data.shape
    alpha_w = n + 2.0 if alpha_w is None else float(alpha_w)
    if alpha_w <= n - 1 or alpha_mu <= 0:
        raise ZooError(f"BGe needs alpha_mu > 0 and alpha_w > n - 1 = {n - 1}; got {alpha_mu}, {alpha_w}")
    nu = np.zeros(n) if mean_obs is None else np.asarray(mean_obs, dtype=np.float64)
    t = alpha_mu * (alpha_w - n - 1) / (alpha_mu + 1)
    xbar = data.mean(0, keepdims=True)
    centred = data - xbar
    R = t * np.eye(n) + centred.T @ centred + (N * alpha_mu / (N + alpha_mu)) * (xbar - nu).T @ (xbar - nu)
    logdet = np.zeros(2**n)  # log|R_SS| for every subset S (empty set: 0)
    for mask in range(1, 2**n):
        s = [i for i in range(n) if mask >> i & 1]
        logdet[mask] = np.linalg.slogdet(R[np.ix_(s, s)])[1]
    p = np.arange(n)
    log_gamma = (0.5 * (math.log(alpha_mu) - math.log(N + alpha_mu))
                 + gammaln(0.5 * (N + alpha_w - n + p + 1)) - gammaln(0.5 * (alpha_w - n + p + 1))
                 - 0.5 * N * math.log(math.pi) + 0.5 * (alpha_w - n + 2 * p + 1) * math.log(t))
    out = np.full((n, 2**n), np.nan)
    for j in range(n):
        for mask in range(2**n):
            if mask >> j & 1:
                continue
            k = bin(mask).count("1")
            out[j, mask] = (log_gamma[k] + 0.5 * (N + alpha_w - n + k) * logdet[mask]
                            - 0.5 * (N + alpha_w - n + k + 1) * logdet[mask | 1 << j])
    return torch.from_numpy(out)
