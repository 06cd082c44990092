"""Point-cloud geometry in plain torch: grid subsampling, radius neighbours, the KPConv pyramid, rigid transforms,
weighted Kabsch.

The official code needs GeoTransformer's compiled C++ ops for grid subsampling and radius search; these are the same
operations written with `torch.unique` and a chunked `torch.cdist` (clouds here are at most a few thousand points
per part).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def grid_subsample(points: torch.Tensor, voxel_size: float) -> torch.Tensor:
    """KPConv grid subsampling: one point per occupied voxel of side `voxel_size`, the barycentre of the points in
    it. Voxels are ordered by their integer coordinates (the C++ op orders them by its hash map; the set is the
    same)."""
    cells = torch.floor(points / voxel_size).long()
    _, inverse = torch.unique(cells, dim=0, return_inverse=True)
    n = int(inverse.max()) + 1 if len(points) else 0
    sums = torch.zeros(n, 3, dtype=points.dtype, device=points.device).index_add_(0, inverse, points)
    counts = torch.zeros(n, dtype=points.dtype, device=points.device).index_add_(
        0, inverse, torch.ones_like(points[:, 0]))
    return sums / counts[:, None]


def radius_neighbors(q_points: torch.Tensor, s_points: torch.Tensor, radius: float, limit: int,
                     chunk: int = 1024) -> torch.Tensor:
    """For each query point, the indices of support points within `radius`, nearest first, at most `limit` of them
    (all if ``limit <= 0``: then the width is the largest count); rows with fewer are padded with ``len(s_points)``
    (GeoTransformer's shadow index). Queries go `chunk` rows at a time, so no (len(q), len(s)) matrix is built."""
    n = s_points.shape[0]
    rows = []
    for start in range(0, q_points.shape[0], chunk):
        d = torch.cdist(q_points[start:start + chunk], s_points)
        k = min(limit, n) if limit > 0 else int((d <= radius).sum(1).max()) if d.numel() else 0
        dist, idx = torch.topk(d, k, dim=1, largest=False)
        rows.append(torch.where(dist <= radius, idx, torch.full_like(idx, n)))
    width = max((r.shape[1] for r in rows), default=0)
    rows = [torch.cat([r, r.new_full((r.shape[0], width - r.shape[1]), n)], 1) for r in rows]
    return torch.cat(rows) if rows else torch.zeros(0, width, dtype=torch.long, device=q_points.device)


@dataclass
class Pyramid:
    """The KPConv-FPN inputs of a stacked (source, target) pair: per level the stacked points, the two lengths, and
    the neighbour lists (indices into the stacked points of the same level / the finer / the coarser level, padded
    with that level's total length)."""

    points: list[torch.Tensor]
    lengths: list[tuple[int, int]]
    neighbors: list[torch.Tensor]
    subsampling: list[torch.Tensor]
    upsampling: list[torch.Tensor]


def build_pyramid(src: torch.Tensor, trg: torch.Tensor, num_stages: int, voxel_size: float, radius: float,
                  neighbor_limits: list[int]) -> Pyramid:
    """GeoTransformer's stack-mode `subsampling` for one pair. As in the official `common/sampling.py`, level 0 is
    the raw points and the voxel doubles *before* the first subsampling, so level k > 0 uses the grid
    ``voxel_size * 2**k`` (first grid 0.02 for the paper's 0.01); the search radius doubles per level. Neighbours
    never cross the two clouds."""
    if len(neighbor_limits) != num_stages:
        raise ValueError(f"neighbor_limits has {len(neighbor_limits)} entries for {num_stages} stages")
    clouds = [[src], [trg]]
    v = voxel_size
    for i in range(1, num_stages):
        v *= 2
        for c in clouds:
            c.append(grid_subsample(c[-1], v))
    points, lengths = [], []
    for i in range(num_stages):
        points.append(torch.cat([clouds[0][i], clouds[1][i]]))
        lengths.append((len(clouds[0][i]), len(clouds[1][i])))

    def stacked(q_level: int, s_level: int, r: float, limit: int) -> torch.Tensor:
        out, s_total = [], len(points[s_level])
        s_offset = 0
        for c in range(2):
            q, s = clouds[c][q_level], clouds[c][s_level]
            idx = radius_neighbors(q, s, r, limit)
            local_pad = idx == len(s)
            idx = idx + s_offset
            idx[local_pad] = s_total
            out.append(idx)
            s_offset += len(s)
        width = max(o.shape[1] for o in out)
        out = [torch.cat([o, torch.full((o.shape[0], width - o.shape[1]), s_total, dtype=o.dtype)], 1) for o in out]
        return torch.cat(out)

    neighbors, subsampling, upsampling = [], [], []
    r = radius
    for i in range(num_stages):
        neighbors.append(stacked(i, i, r, neighbor_limits[i]))
        if i < num_stages - 1:
            subsampling.append(stacked(i + 1, i, r, neighbor_limits[i]))
            upsampling.append(stacked(i, i + 1, 2 * r, neighbor_limits[i + 1]))
        r *= 2
    return Pyramid(points, lengths, neighbors, subsampling, upsampling)


def apply_transform(points: torch.Tensor, rotation: torch.Tensor, translation: torch.Tensor) -> torch.Tensor:
    """y = R x + t for points (..., N, 3) and R (..., 3, 3), t (..., 3)."""
    return points @ rotation.transpose(-1, -2) + translation.unsqueeze(-2)


def weighted_kabsch(src: torch.Tensor, ref: torch.Tensor, weights: torch.Tensor | None = None,
                    eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """The rigid (R, t) minimising sum_i w_i ||R src_i + t - ref_i||^2 (GeoTransformer's WeightedProcrustes:
    normalised weights, SVD of the weighted cross-covariance, reflection fixed by the determinant sign). Batched over
    leading dims; the official code needs `torch-batch-svd`, `torch.linalg.svd` is batched already."""
    if weights is None:
        weights = torch.ones(src.shape[:-1], dtype=src.dtype, device=src.device)
    w = weights.clamp_min(0)
    w = w / (w.sum(-1, keepdim=True) + eps)
    src_c = (src * w.unsqueeze(-1)).sum(-2)
    ref_c = (ref * w.unsqueeze(-1)).sum(-2)
    src0, ref0 = src - src_c.unsqueeze(-2), ref - ref_c.unsqueeze(-2)
    h = src0.transpose(-1, -2) @ (ref0 * w.unsqueeze(-1))
    u, _, vh = torch.linalg.svd(h)
    v = vh.transpose(-1, -2)
    d = torch.sign(torch.det(v @ u.transpose(-1, -2)))
    d = torch.where(d == 0, torch.ones_like(d), d)
    diag = torch.ones(*d.shape, 3, dtype=src.dtype, device=src.device)
    diag[..., 2] = d
    rotation = v @ torch.diag_embed(diag) @ u.transpose(-1, -2)
    translation = ref_c - (rotation @ src_c.unsqueeze(-1)).squeeze(-1)
    return rotation, translation


def relative_pose(r_i: torch.Tensor, c_i: torch.Tensor, r_j: torch.Tensor, c_j: torch.Tensor):
    """Parts are posed as x_i = R_i (p - c_i) (re-centred, then rotated). The pose mapping posed part i into posed
    part j's frame, y = R x + t: R = R_j R_i^T, t = R_j (c_i - c_j)."""
    return r_j @ r_i.transpose(-1, -2), r_j @ (c_i - c_j)
