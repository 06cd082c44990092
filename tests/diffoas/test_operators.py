"""Oracles for the 5-point flux operators: a naive loop assembly, the matrix-free stencil, and exact identities."""

import numpy as np
import pytest
import scipy.sparse as sp

from zoo.diffoas.generate import PROBLEMS
from operator_reference import assemble_operator_loop
from zoo.diffoas.operators import apply_operator, assemble_block_diagonal, assemble_operator
from zoo.errors import ZooError


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("s", [3, 4, 7])
def test_vectorised_assembly_matches_loop_assembly(name, s):
    P = PROBLEMS[name]
    rng = np.random.default_rng(s)
    a = P.coefficients(rng, 1, s)[0]
    c, q = P.operator_fields(a)
    A = assemble_operator(c, q, P.sigma)
    B = assemble_operator_loop(c, q, P.sigma)
    assert A.shape == B.shape == ((s - 2) ** 2, (s - 2) ** 2)
    assert abs(A - B).max() <= 1e-13 * abs(B).max()
    assert A.has_sorted_indices
    A.check_format(full_check=True)


def test_matrix_free_and_block_diagonal_agree_with_sparse_matrix():
    P = PROBLEMS["diffusion"]
    rng = np.random.default_rng(0)
    s, m = 9, 4
    a = P.coefficients(rng, m, s)
    u = rng.standard_normal((m, s - 2, s - 2))
    c, q = P.operator_fields(a.transpose(1, 0, 2, 3))
    ref = np.stack([P.operator(a[i]) @ u[i].ravel() for i in range(m)])
    free = apply_operator(c, u, q, P.sigma).reshape(m, -1)
    block = (assemble_block_diagonal(c, q, P.sigma) @ u.ravel()).reshape(m, -1)
    np.testing.assert_allclose(free, ref, rtol=1e-12, atol=1e-12 * abs(ref).max())
    np.testing.assert_allclose(block, ref, rtol=0, atol=1e-12 * abs(ref).max())


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("s", [3, 4, 7])
def test_block_diagonal_is_the_block_diag_of_loop_assembled_operators(name, s):
    # entry by entry: no coupling between samples or across grid rows, the same stencil in every block
    P = PROBLEMS[name]
    a = P.coefficients(np.random.default_rng(s), 3, s)
    c, q = P.operator_fields(a.transpose(1, 0, 2, 3))
    B = sp.block_diag([assemble_operator_loop(*P.operator_fields(a[i]), P.sigma) for i in range(3)]).toarray()
    A = assemble_block_diagonal(c, q, P.sigma).toarray()
    assert A.shape == B.shape
    np.testing.assert_allclose(A, B, rtol=0, atol=1e-13 * abs(B).max())


def test_constant_coefficient_darcy_is_the_5_point_laplacian():
    s = 6
    n = s - 2
    A = assemble_operator(np.ones((s, s)))
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    lap = (sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n))) * (s - 1) ** 2
    assert abs(A - lap).max() < 1e-12


def test_darcy_operator_is_symmetric_positive_definite():
    rng = np.random.default_rng(1)
    A = PROBLEMS["darcy"].operator(PROBLEMS["darcy"].coefficients(rng, 1, 8)[0]).toarray()
    np.testing.assert_allclose(A, A.T, rtol=0, atol=1e-12 * abs(A).max())
    assert np.linalg.eigvalsh(A).min() > 0


def test_operator_annihilates_nothing_on_the_boundary():
    """A linear field that is zero on the boundary does not exist, but u = x(1-x)y(1-y) has -lap u = 2(x(1-x)+y(1-y)):
    the 5-point stencil is exact for quadratics, so A(1) u equals the closed form at the interior nodes."""
    s = 11
    x = np.linspace(0, 1, s)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u = (X * (1 - X) * Y * (1 - Y))[1:-1, 1:-1]
    f = (2 * (X * (1 - X) + Y * (1 - Y)))[1:-1, 1:-1]
    # the stencil of x(1-x)y(1-y) is exact along each axis (quadratic in each variable)
    np.testing.assert_allclose(assemble_operator(np.ones((s, s))) @ u.ravel(), f.ravel(), rtol=1e-10)


@pytest.mark.parametrize("s", [0, 1, 2])
def test_grid_too_small_for_the_stencil(s):
    with pytest.raises(ZooError, match="too small for the 5-point stencil"):
        assemble_operator(np.ones((s, s)))
