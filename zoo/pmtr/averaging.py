"""Multi-part pose graph (ours: the public PMTR repository has no multi-part code): Shonan rotation averaging
(gtsam) over every ordered pair's estimate, then translations by weighted linear least squares given the rotations,
the anchor part fixed."""

from __future__ import annotations

import numpy as np
import torch

from zoo.errors import ZooError


def _gtsam():
    try:
        import gtsam
    except ImportError as e:  # pragma: no cover - gtsam is in the pmtr extra
        raise ZooError("multi-part assembly needs gtsam (pip install 'zoo[pmtr]')") from e
    return gtsam


def shonan_poses(n: int, anchor: int, edges: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, float]],
                 p_min: int = 3, p_max: int = 40):
    """Absolute poses anchor -> part k (x_k = R_k x_anchor + t_k) from pairwise estimates (i, j) -> (R, t, w) mapping
    part i into part j's frame with confidence w. One BetweenFactorPose3 per ordered pair with
    information (1 / uncertainty) I_6, `ShonanAveraging3.run` from a random start (levels 3 ... p_max, Ceres-default
    LM), rotations re-expressed relative to the anchor; then t_j - t_i = R_i t_ij (world = anchor frame) solved by
    least squares with variance uncertainty * 1e-2 (no official source: see cards/pmtr.md). Returns None when Shonan
    fails (the caller falls back to the anchor's pairwise estimates).

    `w` is the uncertainty 1 / mean((node score * 1e5)^2), i.e. the factor's information is
    mean((node score * 1e5)^2)."""
    gtsam = _gtsam()
    factors = gtsam.BetweenFactorPose3s()
    unc = []
    for (i, j), (r, t, w) in edges.items():
        # our estimate maps x_i -> x_j; with world poses X_k (world <- part k), X_j^-1 X_i maps x_i -> x_j
        pose = gtsam.Pose3(gtsam.Rot3(r.double().numpy()), gtsam.Point3(*t.double().numpy()))
        factors.append(gtsam.BetweenFactorPose3(j, i, pose, gtsam.noiseModel.Diagonal.Information(np.eye(6) / w)))
        unc.append(w)
    params = gtsam.ShonanAveragingParameters3(gtsam.LevenbergMarquardtParams.CeresDefaults())
    sa = gtsam.ShonanAveraging3(factors, params)
    try:
        rots, _ = sa.run(sa.initializeRandomly(), p_min, p_max)
    except RuntimeError:
        return None
    ra = rots.atRot3(anchor).matrix()
    world = [ra.T @ rots.atRot3(k).matrix() for k in range(n)]  # X_k rotation, anchor frame = world
    # translations: X_j = X_i * M_ij with M_ij = measured of factor (i, j): t_j - t_i = R_i t_M
    rows, rhs, wts = [], [], []
    for f, u in zip(factors, unc):
        i, j = f.keys()
        m = f.measured()
        a = np.zeros((3, 3 * n))
        a[:, 3 * j:3 * j + 3], a[:, 3 * i:3 * i + 3] = np.eye(3), -np.eye(3)
        rows.append(a)
        rhs.append(world[i] @ m.translation())
        wts.append(np.full(3, 1.0 / np.sqrt(u * 1e-2)))
    anchor_row = np.zeros((3, 3 * n))
    anchor_row[:, 3 * anchor:3 * anchor + 3] = np.eye(3)
    a = np.concatenate(rows + [anchor_row]) * np.concatenate(wts + [np.ones(3)])[:, None]
    b = np.concatenate(rhs + [np.zeros(3)]) * np.concatenate(wts + [np.ones(3)])
    t_world = np.linalg.lstsq(a, b, rcond=None)[0].reshape(n, 3)
    dtype = next(iter(edges.values()))[0].dtype
    # anchor -> part k is X_k^-1
    r_out = [torch.tensor(world[k].T, dtype=dtype) for k in range(n)]
    t_out = [torch.tensor(-world[k].T @ t_world[k], dtype=dtype) for k in range(n)]
    return r_out, t_out
