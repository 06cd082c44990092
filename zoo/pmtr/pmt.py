"""Proxy Match Transform (PMT): the paper's contribution.

A feature of width c*f is seen as an [f, c] matrix. Per head, a Linear acts on c and a proxy P_h (f x f') shared by
the source and the target contracts f. With P P^T = I, <xP, yP> = <x, y>, so transforming each cloud on its own acts
like a high-order transform of the source-target cross-correlation at O(|X| + |Y|) cost instead of O(|X||Y|).
Then an intra-part aggregation weights the neighbours by an MLP of their distance, a Linear merges the heads, and
GroupNorm + LeakyReLU follow (official `model/pmt.py`: `PMT`, `PMTNeighbor`, `PMTBlock`).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo.errors import ZooError


class ProxyMatchTransform(nn.Module):
    """One PMT layer on a (source, target) pair of [s, f, c] tensors.

    Separate per-cloud channel Linears (`w_src`, `w_trg`) and head-merging Linears, one proxy shared by both clouds
    (as the official code). The proxy is initialised like a `nn.Linear(f_in, f_out * heads)` weight."""

    def __init__(self, c_in: int, f_in: int, c_out: int, f_out: int, heads: int):
        super().__init__()
        self.c_in, self.f_in, self.c_out, self.f_out, self.heads = c_in, f_in, c_out, f_out, heads
        self.w_src = nn.Linear(c_in, heads * c_out)
        self.w_trg = nn.Linear(c_in, heads * c_out)
        self.out_src = nn.Linear(c_out * heads, c_out)
        self.out_trg = nn.Linear(c_out * heads, c_out)
        w = nn.Linear(f_in, f_out * heads, bias=False).weight  # (h*o, i)
        self.proxy = nn.Parameter(w.detach().reshape(heads, f_out, f_in).transpose(1, 2).contiguous())  # (h, f, o)

    def project(self, x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
        """[s, f, c] -> X'[s, o, c, h] = sum_f (x W_h)[s, f, c] P[h, f, o]."""
        x = linear(x).reshape(x.shape[0], x.shape[1], self.c_out, self.heads)  # channel layout (c h), as official
        return torch.einsum("sfch,hfo->soch", x, self.proxy)

    def merge(self, x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
        return linear(x.reshape(x.shape[0], x.shape[1], self.c_out * self.heads))


class PairGroupNorm(nn.Module):
    """GroupNorm with one group per c-channel over the f axis of each cloud (official `PairGroupNorm`)."""

    def __init__(self, c: int):
        super().__init__()
        self.norm = nn.GroupNorm(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [s, f, c]
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


def distance_mlp(heads: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(1, heads), nn.ReLU(), nn.Linear(heads, heads))


def _check_dims(c: list[int], f: list[int], heads: list[int]) -> None:
    if len(c) != len(f) or len(c) < 2 or len(heads) != len(c) - 1:
        raise ZooError(f"PMT channels c={c}, f={f}, heads={heads}: c and f need the same length >= 2 and one head "
                       "count per layer (len(c) - 1)")


class CoarsePMTBlock(nn.Module):
    """PMT on the superpoints (nodes): aggregation over all nodes of the same part within `radius`
    (distance > radius masked to -inf before the softmax), an output Linear on c*f."""

    def __init__(self, c: list[int] = (64, 16, 4), f: list[int] = (8, 32, 128), heads: list[int] = (4, 4),
                 radius: float = 0.05):
        super().__init__()
        c, f, heads = list(c), list(f), list(heads)
        _check_dims(c, f, heads)
        self.c, self.f, self.radius = c, f, radius
        self.layers = nn.ModuleList(ProxyMatchTransform(c[i], f[i], c[i + 1], f[i + 1], heads[i])
                                    for i in range(len(heads)))
        self.att_src = nn.ModuleList(distance_mlp(h) for h in heads)
        self.att_trg = nn.ModuleList(distance_mlp(h) for h in heads)
        self.norms = nn.ModuleList(PairGroupNorm(c[i + 1]) for i in range(len(heads)))
        self.act = nn.LeakyReLU()
        self.out = nn.Linear(c[-1] * f[-1], c[-1] * f[-1])

    @property
    def in_dim(self) -> int:
        return self.c[0] * self.f[0]

    def _aggregate(self, x: torch.Tensor, mlp: nn.Module, dist: torch.Tensor) -> torch.Tensor:
        att = mlp(dist.unsqueeze(-1))  # (s, j, h)
        att = att.masked_fill((dist > self.radius).unsqueeze(-1), float("-inf")).softmax(dim=1)
        return torch.einsum("sjh,jfch->sfch", att, x)

    def forward(self, src_pos, trg_pos, src_feat, trg_feat) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, 3), (T, 3) node positions and (S, c0*f0), (T, c0*f0) features -> (S, c*f), (T, c*f)."""
        if src_feat.shape[-1] != self.in_dim:
            raise ZooError(f"coarse PMT expects {self.in_dim}-d node features (c0*f0 = {self.c[0]}*{self.f[0]}), "
                           f"got {src_feat.shape[-1]}")
        d_src, d_trg = torch.cdist(src_pos, src_pos), torch.cdist(trg_pos, trg_pos)
        # features laid out (f c), normalised along c as the official block does
        s = F.normalize(src_feat.reshape(-1, self.f[0], self.c[0]), dim=-1)
        t = F.normalize(trg_feat.reshape(-1, self.f[0], self.c[0]), dim=-1)
        for layer, a_s, a_t, norm in zip(self.layers, self.att_src, self.att_trg, self.norms):
            s = layer.merge(self._aggregate(layer.project(s, layer.w_src), a_s, d_src), layer.out_src)
            t = layer.merge(self._aggregate(layer.project(t, layer.w_trg), a_t, d_trg), layer.out_trg)
            s, t = self.act(norm(s)), self.act(norm(t))
        return self.out(s.reshape(s.shape[0], -1)), self.out(t.reshape(t.shape[0], -1))


class FinePMTBlock(nn.Module):
    """PMT in the KPConv-FPN decoder: aggregation over each point's KPConv radius-neighbour list (padded with the
    shadow index), weighted by an MLP of the squared distance; no output Linear (the official block defines one but
    its neighbour path never applies it)."""

    def __init__(self, c: list[int] = (64, 16, 4), f: list[int] = (4, 16, 64), heads: list[int] = (4, 4)):
        super().__init__()
        c, f, heads = list(c), list(f), list(heads)
        _check_dims(c, f, heads)
        self.c, self.f = c, f
        self.layers = nn.ModuleList(ProxyMatchTransform(c[i], f[i], c[i + 1], f[i + 1], heads[i])
                                    for i in range(len(heads)))
        self.att_src = nn.ModuleList(distance_mlp(h) for h in heads)
        self.att_trg = nn.ModuleList(distance_mlp(h) for h in heads)
        self.norms = nn.ModuleList(PairGroupNorm(c[i + 1]) for i in range(len(heads)))
        self.act = nn.LeakyReLU()

    @property
    def in_dim(self) -> int:
        return self.c[0] * self.f[0]

    def forward(self, feat: torch.Tensor, points: torch.Tensor, neighbors: torch.Tensor,
                lengths: tuple[int, int]) -> torch.Tensor:
        """feat (N, c0*f0) of the stacked pair, points (N, 3), neighbors (N, H) padded with N -> (N, c*f)."""
        if feat.shape[-1] != self.in_dim:
            raise ZooError(f"fine PMT expects {self.in_dim}-d features (c0*f0 = {self.c[0]}*{self.f[0]}), "
                           f"got {feat.shape[-1]}")
        n_src = lengths[0]
        n = points.shape[0]
        pad = neighbors >= n
        nb_pts = torch.cat([points, torch.zeros_like(points[:1])])[neighbors]
        sq_dist = (points.unsqueeze(1) - nb_pts).pow(2).sum(-1, keepdim=True)  # (N, H, 1)
        x = F.normalize(feat.reshape(n, self.f[0], self.c[0]), dim=-1)
        parts = (slice(0, n_src), slice(n_src, n))
        for layer, a_s, a_t, norm in zip(self.layers, self.att_src, self.att_trg, self.norms):
            proj = torch.cat([layer.project(x[parts[0]], layer.w_src), layer.project(x[parts[1]], layer.w_trg)])
            proj = torch.cat([proj, torch.zeros_like(proj[:1])])  # shadow row for padded neighbours
            out = []
            for part, mlp, merge in ((parts[0], a_s, layer.out_src), (parts[1], a_t, layer.out_trg)):
                att = mlp(sq_dist[part]).masked_fill(pad[part].unsqueeze(-1), float("-inf")).softmax(dim=1)
                agg = torch.einsum("sah,safch->sfch", att, proj[neighbors[part]])
                out.append(layer.merge(agg, merge))
            x = self.act(norm(torch.cat(out)))
        return x.reshape(n, -1)


def orthogonality_loss(proxies: list[torch.Tensor], scale: float = 10.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The proxy regulariser of the official `_compute_orthloss`, averaged over layers:
    orth = scale * mean_h mean((P_h P_h^T - I)^2) and zero = scale * mean((P_x P_y^T)^2, x != y).
    A single-head layer has no x != y term (0)."""
    orth, zero = [], []
    for p in proxies:
        h, f = p.shape[0], p.shape[1]
        pair = torch.einsum("xid,yjd->xyij", p, p)  # (h, h, f, f)
        eye = torch.eye(f, dtype=p.dtype, device=p.device)
        diag = pair[torch.arange(h), torch.arange(h)]
        orth.append((diag - eye).pow(2).mean())
        off = ~torch.eye(h, dtype=torch.bool, device=p.device)
        zero.append(pair[off].pow(2).mean() if h > 1 else p.new_zeros(()))
    return torch.stack(orth).mean() * scale, torch.stack(zero).mean() * scale
