"""Five-point flux discretisation of the paper's three operators, assembled without loops over grid points.

All three PDEs of the paper (Appendix B.2) are instances of

    A(c, q) u = sigma * ( -div(c grad u) ) + q u        on (0, 1)^2,   u = 0 on the boundary,

discretised on an ``s x s`` node grid with ``h = 1/(s-1)``; the unknowns are the ``n = s-2`` interior nodes per
direction, ordered row-major (``k = i*n + j`` for interior node ``(i+1, j+1)``). The flux through a cell face uses
the mean of the two neighbouring nodal coefficients, as in the official code's ``build_darcy2`` / ``creat_f``.

* Darcy, eq. (8):            -div(K grad h) = f       -> sigma=+1, c=K, q=0
* Helmholtz, eq. (9):        lap(Phi) + k^2 Phi = S   -> sigma=-1, c=1, q=k^2
* Solute diffusion, eq. (10): div(k grad C) + q C = f -> sigma=-1, c=k, q=q

(The official Helmholtz/diffusion scripts flip the sign of the diffusion term, i.e. solve ``-div(c grad u) + q u``;
we keep the paper's equations. Both are well posed for the paper's coefficient ranges.)

``assemble_operator`` builds one sample's CSR matrix from a cached sparsity pattern (only the values change between
samples; the solvers use it), ``assemble_block_diagonal`` the DIA matrix of a batch (one product acts on all of it),
and ``apply_operator`` applies the same operator matrix-free to a batch of fields (DiffOAS's default action).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from zoo.errors import ZooError

MIN_GRID = 3  # the 5-point stencil needs at least one interior node: s - 2 >= 1


def check_grid(s: int) -> int:
    if not isinstance(s, (int, np.integer)) or s < MIN_GRID:
        raise ZooError(
            f"grid size s={s} is too small for the 5-point stencil: need s >= {MIN_GRID} "
            "(s nodes per side incl. the Dirichlet boundary, so at least one interior node)"
        )
    return int(s)


@lru_cache(maxsize=16)
def _pattern(n: int):
    """CSR structure of the 5-point stencil on an n x n interior grid, and where each stencil entry goes.

    Returns (indptr, indices, gather): CSR data = stacked stencil weights (centre, west, east, south, north; each
    (n*n,) over all nodes, boundary neighbours included) taken at ``gather``, so assembly is one vectorised take.
    """
    k = np.arange(n * n).reshape(n, n)
    i, j = np.divmod(k, n)
    # neighbour offsets in (row, col) and whether they stay inside the interior grid
    nbrs = {
        "c": (0, 0, np.ones_like(k, dtype=bool)),
        "w": (0, -1, j > 0),
        "e": (0, 1, j < n - 1),
        "s": (-1, 0, i > 0),
        "n": (1, 0, i < n - 1),
    }
    rows, cols, tags = [], [], []
    for d, (di, dj, has) in nbrs.items():
        rows.append(k[has])
        cols.append(k[has] + di * n + dj)
        tags.append(np.full(has.sum(), "cwesn".index(d)))
    rows, cols, tags = map(np.concatenate, (rows, cols, tags))
    order = np.lexsort((cols, rows))  # CSR order: by row, then column
    rows, cols, tags = rows[order], cols[order], tags[order]
    indptr = np.zeros(n * n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n * n), out=indptr[1:])
    # CSR entry p holds stencil weight `tags[p]` of node `rows[p]`: its index in the stacked (5, n*n) weights
    gather = tags * (n * n) + rows
    return indptr, cols.astype(np.int32), gather


def face_coefficients(c: np.ndarray):
    """Face coefficients (mean of the two nodes) for the four faces of every interior node of an s x s field."""
    cc = c[..., 1:-1, 1:-1]
    return (
        0.5 * (cc + c[..., 1:-1, :-2]),  # west
        0.5 * (cc + c[..., 1:-1, 2:]),  # east
        0.5 * (cc + c[..., :-2, 1:-1]),  # south (row i-1)
        0.5 * (cc + c[..., 2:, 1:-1]),  # north (row i+1)
    )


def _interior_q(q, s: int):
    if q is None:
        return 0.0
    q = np.asarray(q, dtype=np.float64)
    if q.shape[-2:] == (s, s):
        return q[..., 1:-1, 1:-1]
    if q.shape[-2:] == (s - 2, s - 2):
        return q
    raise ZooError(f"reaction field q has shape {q.shape[-2:]}, expected ({s}, {s}) or ({s - 2}, {s - 2})")


def assemble_operator(c: np.ndarray, q: np.ndarray | None = None, sigma: float = 1.0) -> sp.csr_matrix:
    """CSR matrix of ``sigma * (-div(c grad .)) + q`` on the interior nodes of the s x s grid of ``c``.

    ``c`` is the nodal coefficient on the full grid (boundary included, it enters the boundary faces);
    ``q`` is nodal on the full or the interior grid. Vectorised: values are scattered into a cached pattern.
    """
    c = np.asarray(c, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ZooError(f"coefficient field must be a square 2-D array, got shape {c.shape}")
    s = check_grid(c.shape[-1])
    n = s - 2
    k = sigma * float((s - 1) ** 2)
    cw, ce, cs, cn = face_coefficients(c)
    indptr, indices, gather = _pattern(n)
    diag = k * (cw + ce + cs + cn) + _interior_q(q, s)
    data = np.stack([diag, -k * cw, -k * ce, -k * cs, -k * cn]).reshape(-1).take(gather)
    return sp.csr_matrix((data, indices, indptr), shape=(n * n, n * n))


def assemble_block_diagonal(c: np.ndarray, q: np.ndarray | None = None, sigma: float = 1.0) -> sp.dia_matrix:
    """Block-diagonal operator of a batch ``c`` (m, s, s) as one sparse DIA matrix: one product acts on m samples.

    The five stencil diagonals (offsets -n, -1, 0, +1, +n) of all samples are laid end to end; the entries that
    would couple the last node of a grid row (or of a sample) to the first of the next are zero. Equal to the
    block-diagonal of ``assemble_operator`` (tested), but filled with five slice writes instead of a CSR gather
    (about 3x cheaper to build; the product costs the same)."""
    c = np.asarray(c, dtype=np.float64)
    if c.ndim != 3 or c.shape[-1] != c.shape[-2]:
        raise ZooError(f"a batch of square coefficient fields (m, s, s) is needed, got shape {c.shape}")
    s = check_grid(c.shape[-1])
    m, n = c.shape[0], s - 2
    k = sigma * float((s - 1) ** 2)
    cw, ce, cs, cn = face_coefficients(c)
    # DIA stores A[r, r + off] at data[d, r + off]: each neighbour weight moves to its neighbour's position
    data = np.zeros((5, m, n, n))
    south, west, centre, east, north = data
    np.add(cw, ce, out=centre)
    centre += cs
    centre += cn
    centre *= k
    if q is not None:
        centre += _interior_q(q, s)
    np.multiply(cs[:, 1:, :], -k, out=south[:, :-1, :])  # A[(i, j), (i-1, j)] at column (i-1, j)
    np.multiply(cw[:, :, 1:], -k, out=west[:, :, :-1])  # A[(i, j), (i, j-1)] at column (i, j-1)
    np.multiply(ce[:, :, :-1], -k, out=east[:, :, 1:])  # A[(i, j), (i, j+1)] at column (i, j+1)
    np.multiply(cn[:, :-1, :], -k, out=north[:, 1:, :])  # A[(i, j), (i+1, j)] at column (i+1, j)
    N = m * n * n
    if n == 1:  # one interior node: no neighbours, and offsets +-1 and +-n would coincide
        return sp.dia_matrix((centre.reshape(1, N), [0]), shape=(N, N))
    return sp.dia_matrix((data.reshape(5, N), [-n, -1, 0, 1, n]), shape=(N, N))


def apply_operator(c: np.ndarray, u: np.ndarray, q: np.ndarray | None = None, sigma: float = 1.0) -> np.ndarray:
    """Matrix-free ``A(c, q) u`` for a batch: ``c`` (..., s, s), ``u`` (..., s-2, s-2) interior values.

    Written as a divergence of face fluxes: each face's flux ``c_face * (u_right - u_left)`` is computed once and
    shared by the two nodes it separates (half the work of four per-node face terms; the same operator)."""
    c = np.asarray(c, dtype=np.float64)
    s = check_grid(c.shape[-1])
    up = np.zeros(u.shape[:-2] + (s, s))
    up[..., 1:-1, 1:-1] = u  # zero Dirichlet boundary
    # 2 * flux across the vertical faces of the interior rows (..., n, s-1) and the horizontal faces of the
    # interior columns (..., s-1, n); the 1/2 of the face mean is folded into the final scale
    row = c[..., 1:-1, :]
    fx = row[..., 1:] + row[..., :-1]
    fx *= np.diff(up[..., 1:-1, :], axis=-1)
    col = c[..., :, 1:-1]
    fy = col[..., 1:, :] + col[..., :-1, :]
    fy *= np.diff(up[..., :, 1:-1], axis=-2)
    out = fx[..., :-1] - fx[..., 1:]  # -div: flux in from the west minus flux out to the east
    out += fy[..., :-1, :]
    out -= fy[..., 1:, :]
    out *= 0.5 * sigma * float((s - 1) ** 2)
    if q is not None:
        out += _interior_q(q, s) * u
    return out
