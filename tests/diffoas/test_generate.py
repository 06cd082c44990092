"""Oracles for DiffOAS and the solver baseline: the PDE residual, a direct re-solve, the boundary, file round trips."""

import numpy as np
import pytest
from scipy.sparse.linalg import spsolve

from zoo.diffoas.generate import (
    PROBLEMS,
    boundary_mask,
    diffoas_chunks,
    generate,
    generate_diffoas,
    generate_solver,
    load_dataset,
    save_dataset,
    solve,
)
from zoo.errors import ZooError

S = 20  # 18 x 18 interior


@pytest.fixture(scope="module", params=sorted(PROBLEMS))
def diffoas_data(request):
    return generate_diffoas(request.param, n_samples=40, grid_size=S, n_basis=6, seed=3, chunk=16)


def test_diffoas_samples_satisfy_the_pde_to_machine_precision(diffoas_data):
    res = diffoas_data.residuals()  # independent per-sample sparse matrix, float64
    assert res.max() <= 1e-12
    # the official Darcy script saved the same basis solution as every target; ours are all distinct
    u = diffoas_data.u.reshape(len(diffoas_data), -1)
    assert np.linalg.matrix_rank(u) == len(u)  # 6 bases + independent noise: no repeated target
    assert np.abs(u).max() > 0


def test_direct_solve_of_a_f_recovers_u(diffoas_data):
    d = diffoas_data
    for i in (0, 17, 39):
        A = d.problem.operator(d.a[i])
        u = spsolve(A.tocsc(), d.f[i, 1:-1, 1:-1].ravel())
        ref = d.u[i, 1:-1, 1:-1].ravel()
        assert np.abs(u - ref).max() <= 1e-10 * np.abs(ref).max()


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_matrix_free_action_gives_the_same_dataset(name):
    d1 = generate_diffoas(name, 10, 12, n_basis=3, seed=4, action="sparse")
    d2 = generate_diffoas(name, 10, 12, n_basis=3, seed=4, action="stencil")
    np.testing.assert_array_equal(d1.u, d2.u)
    np.testing.assert_allclose(d2.f, d1.f, rtol=0, atol=1e-12 * np.abs(d1.f).max())
    assert d2.residuals().max() <= 1e-12


def test_boundary_is_zero(diffoas_data):
    for arr in (diffoas_data.u, diffoas_data.f):
        assert not arr[:, 0].any() and not arr[:, -1].any() and not arr[:, :, 0].any() and not arr[:, :, -1].any()
    assert diffoas_data.a.shape == (40, len(diffoas_data.problem.channels), S, S)


def test_noise_mask_is_zero_on_the_boundary_and_one_at_the_centre():
    m = boundary_mask(9)
    assert not m[0].any() and not m[-1].any() and not m[:, 0].any() and not m[:, -1].any()
    assert m[4, 4] == 1.0 and (m > 0)[1:-1, 1:-1].all()


def test_noise_is_the_official_darcy_formula():
    # official darcy/generate_darcy_u.py: eps = exp(GRF(2.5, 7) on the (s-2)^2 interior) * min(u) * 0.05 / (s-2),
    # times the full-grid mask cropped to the interior; min(u) signed and taken before the noise is added. A GRF
    # has its mean mode removed, so log(eps / (mask * min(u) * 0.05 / n)) must average to exactly 0 per sample.
    P, n = PROBLEMS["darcy"], S - 2
    U = np.random.default_rng(0).standard_normal((4, n * n))  # signed bases: min(u) < 0, the sign must cancel
    runs = [next(diffoas_chunks(P, U, 8, S, np.random.default_rng(5), noise_scale=k)) for k in (0.05, 0.0)]
    (_, _, u_noisy), (_, _, u) = runs  # same stream: the noise field is drawn either way
    assert (u.min(axis=1) < 0).all()
    scale = boundary_mask(S)[1:-1, 1:-1].ravel() * u.min(axis=1)[:, None] * 0.05 / n
    ratio = (u_noisy - u) / scale
    assert (ratio > 0).all()
    np.testing.assert_allclose(np.log(ratio).mean(axis=1), 0.0, atol=1e-4)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_gmres_samples_have_residual_at_solver_tolerance(name):
    d = generate_solver(name, 4, S, seed=1, solver="gmres", rtol=1e-5)
    res = d.residuals()
    assert res.max() <= 1e-5 * 1.5  # SciPy's restart-end check
    assert res.min() > 1e-9  # an iterative answer, not an exact one
    d2 = generate_solver(name, 2, S, seed=1, solver="direct")
    assert d2.residuals().max() < 1e-12


def test_diffoas_and_baseline_draw_inputs_from_the_same_distribution():
    a1 = generate_diffoas("darcy", 200, 12, n_basis=4, seed=0).a
    a2 = generate_solver("darcy", 200, 12, seed=5, solver="direct").a
    assert abs(np.log(a1).std() - np.log(a2).std()) < 0.1 * np.log(a2).std()


def test_float32_storage_keeps_the_pde_to_single_precision():
    d = generate_diffoas("darcy", 8, 12, n_basis=2, dtype="float32")
    assert d.u.dtype == np.float32 and d.meta["dtype"] == "float32"
    assert d.residuals().max() < 1e-5
    with pytest.raises(ZooError, match="storage dtype"):
        generate_solver("darcy", 2, 8, dtype="float16")


@pytest.mark.parametrize("suffix", [".npz", ".h5", ".safetensors"])
def test_dataset_file_round_trip(tmp_path, suffix):
    d = generate_diffoas("diffusion", 5, 8, n_basis=2, seed=0)
    path = save_dataset(d, tmp_path / f"set{suffix}")
    e = load_dataset(path)
    for k in ("a", "f", "u"):
        np.testing.assert_array_equal(getattr(e, k), getattr(d, k))
    assert e.meta == d.meta and e.meta["method"] == "diffoas" and e.meta["n_basis"] == 2
    assert e.residuals().max() <= 1e-12


def test_cli_writes_a_dataset(tmp_path):
    from zoo.diffoas.generate import main

    main(["--problem", "helmholtz", "--method", "direct", "--n", "3", "--grid", "8", "--out", str(tmp_path / "h.npz")])
    d = load_dataset(tmp_path / "h.npz")
    assert len(d) == 3 and d.meta["problem"] == "helmholtz" and d.meta["method"] == "direct"


# ---------------------------------------------------------------------------------------------- bad input
def test_grid_too_small():
    with pytest.raises(ZooError, match="too small for the 5-point stencil"):
        generate_diffoas("darcy", 10, grid_size=2, n_basis=2)


def test_basis_count_larger_than_the_sample_budget():
    with pytest.raises(ZooError, match="n_basis=20 does not fit the sample budget n_samples=10"):
        generate_diffoas("darcy", 10, grid_size=8, n_basis=20)
    with pytest.raises(ZooError, match="exceeds the 4 unknowns"):
        generate_diffoas("darcy", 10, grid_size=4, n_basis=5)


def test_solver_not_converging():
    with pytest.raises(ZooError, match="GMRES did not converge"):
        generate_diffoas("darcy", 10, grid_size=20, n_basis=2, maxiter=1)
    with pytest.raises(ZooError, match="GMRES did not converge"):
        generate_solver("darcy", 2, grid_size=20, maxiter=1)


def test_singular_system_is_not_silently_accepted():
    import scipy.sparse as sp

    A = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ZooError, match="singular"):
        solve(A, np.array([1.0, -1.0]), "direct")


def test_unknown_names_and_missing_files(tmp_path):
    with pytest.raises(ZooError, match="unknown PDE problem"):
        generate("burgers", "diffoas", 4)
    with pytest.raises(ZooError, match="unknown generation method"):
        generate("darcy", "sor", 4)
    with pytest.raises(ZooError, match="not found"):
        load_dataset(tmp_path / "missing.npz")
    with pytest.raises(ZooError, match="unknown dataset format"):
        load_dataset(tmp_path / "x.xyz")


@pytest.mark.parametrize("action", ["stencil", "sparse"])
def test_stage_times_cover_the_loop(action):
    d = generate_diffoas("darcy", 30, 12, n_basis=3, seed=1, chunk=8, action=action)
    st = d.meta["cpu_stage_s"]
    expected = {"coefficients", "combination", "noise", "action"} | ({"assembly"} if action == "sparse" else set())
    assert set(st) == expected and all(v >= 0 for v in st.values())
