"""Test oracle for DiffOAS's operators (tests/support is on sys.path in every test process)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def assemble_operator_loop(c: np.ndarray, q: np.ndarray | None = None, sigma: float = 1.0) -> sp.csr_matrix:
    """Reference assembly with explicit loops over grid points: slow by design, written from the 5-point flux
    formula one entry at a time, so a vectorisation mistake in zoo.diffoas.operators shows up as a mismatch."""
    c = np.asarray(c, dtype=np.float64)
    s = c.shape[0]
    n = s - 2
    h2 = 1.0 / (s - 1) ** 2
    qi = np.zeros((n, n)) if q is None else (np.asarray(q, dtype=np.float64)[1:-1, 1:-1] if q.shape[-1] == s else q)
    A = sp.lil_matrix((n * n, n * n))
    for i in range(n):
        for j in range(n):
            k = i * n + j
            gi, gj = i + 1, j + 1  # node on the full grid
            diag = 0.0
            for di, dj in ((0, -1), (0, 1), (-1, 0), (1, 0)):
                face = 0.5 * (c[gi, gj] + c[gi + di, gj + dj])
                diag += face
                ni, nj = i + di, j + dj
                if 0 <= ni < n and 0 <= nj < n:
                    A[k, ni * n + nj] = -sigma * face / h2
            A[k, k] = sigma * diag / h2 + qi[i, j]
    return A.tocsr()
