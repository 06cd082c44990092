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
from torch.utils.checkpoint import checkpoint

from zoo.errors import ZooError
from zoo.pmtr.geometry import radius_neighbors


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

    def channel(self, x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
        """[s, f, c] -> (x W_h)[s, f, c, h], channel layout (c h) as the official code."""
        return linear(x).reshape(x.shape[0], x.shape[1], self.c_out, self.heads)

    def contract_merge(self, y: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
        """merge(contract(y)) without the [s, f', c, h] tensor: the head-merging Linear M (on (c h)) and the proxy
        (on f, per head) commute, sum_{c,h} M[k,c,h] sum_f y[s,f,c,h] P[h,f,o] = sum_{f,h} P[h,f,o] sum_c M[k,c,h]
        y[s,f,c,h]. The intermediate is [s, f, h, k] (f c_out h / f' c_out h of the official width: 1/4 in the
        paper's blocks) and the multiply-adds drop too."""
        m = linear.weight.reshape(self.c_out, self.c_out, self.heads)  # (k, c, h): input channel index c*h + h_
        b = torch.einsum("sfch,kch->sfhk", y, m)
        return torch.einsum("sfhk,hfo->sok", b, self.proxy) + linear.bias

    def composed(self, channel: nn.Linear, merge: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
        """The channel Linear W (c_in -> (c h)) followed by the head-merging Linear M ((c h) -> k), per head:
        WM[h, i, k] = sum_c W[(c h), i] M[k, (c h)] and bWM[h, k] = sum_c b_W[(c h)] M[k, (c h)]. Exact: the proxy
        contraction (on f) and the aggregation (over points) commute with both, and the aggregation weights sum to 1,
        so the W bias passes through it (it is aggregated with the rest anyway)."""
        w = channel.weight.reshape(self.c_out, self.heads, self.c_in)
        m = merge.weight.reshape(merge.out_features, self.c_out, self.heads)
        return (torch.einsum("chi,kch->hik", w, m),
                torch.einsum("ch,kch->hk", channel.bias.reshape(self.c_out, self.heads), m))


class PairGroupNorm(nn.Module):
    """GroupNorm with one group per c-channel over the f axis of each cloud (official `PairGroupNorm`)."""

    def __init__(self, c: int):
        super().__init__()
        self.norm = nn.GroupNorm(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [s, f, c]
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


def distance_mlp(heads: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(1, heads), nn.ReLU(), nn.Linear(heads, heads))


def _padded(w: torch.Tensor, idx: torch.Tensor, m: int):
    """Padding (idx == m) as a zero weight on row 0 (GeoTransformer's shadow point is a zero row)."""
    pad = idx >= m
    return w.masked_fill(pad.unsqueeze(-1), 0), idx.masked_fill(pad, 0), pad


def _gather_sum(w: torch.Tensor, x: torch.Tensor, safe: torch.Tensor) -> torch.Tensor:
    """sum_k w[s, k, h] x[safe[s, k], :, h], one neighbour slot at a time (no (n, K, F, h) gather)."""
    out = x.new_zeros(safe.shape[0], *x.shape[1:])
    for k in range(safe.shape[1]):
        out.addcmul_(w[:, k].unsqueeze(1), x[safe[:, k]])
    return out


def _gather_sum_backward(g, w, x, safe, pad, need_w: bool, need_x: bool):
    gw = torch.empty_like(w) if need_w else None
    gx = torch.zeros_like(x) if need_x else None
    for k in range(safe.shape[1]):
        if gw is not None:
            gw[:, k] = (g * x[safe[:, k]]).sum(1)
        if gx is not None:
            gx.index_add_(0, safe[:, k], g * w[:, k].unsqueeze(1))
    if gw is not None:
        gw.masked_fill_(pad.unsqueeze(-1), 0)
    return gw, gx


class _NeighborSum(torch.autograd.Function):
    """out[s, :, h] = sum_k w[s, k, h] x[idx[s, k], :, h] over padded neighbour lists (idx == len(x) is padding: a
    zero row, whatever its weight). Gathering x[idx] first (an (n, K, F, h) tensor kept for the backward) is what makes a
    neighbour aggregation cost K times the features; here one neighbour slot is gathered at a time, in the forward
    and again in the backward, so only w, x and idx are kept."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        w, safe, pad = _padded(w, idx, x.shape[0])
        ctx.save_for_backward(w, x, safe, pad)
        return _gather_sum(w, x, safe)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: torch.Tensor):
        w, x, safe, pad = ctx.saved_tensors
        return *_gather_sum_backward(g, w, x, safe, pad, ctx.needs_input_grad[0], ctx.needs_input_grad[1]), None


class _ProxyChain(torch.autograd.Function):
    """One PMT layer up to its GroupNorm, for one cloud, keeping only its input for the backward.

    z[s, k, o] = sum_{f,h} P[h, f, o] sum_j att[s, j, h] u[j, f, k, h] + b[k],  u[j, f, k, h] = x[j, f, :] WM[h, :, k]
    + bWM[h, k], with WM = the channel Linear composed with the head-merging Linear (`composed`). The chain is linear
    in x and the aggregation weights depend on the distances only, so the backward needs just x, the (n, K, h)
    weights and the small parameters: u and the aggregate are recomputed there (one einsum and K gathers) instead of
    autograd storing every (n, f, c, h) intermediate. Output laid out (n, k, o) so that GroupNorm (groups = k over o)
    reads it without a copy."""

    @staticmethod
    def forward(ctx, x, wm, bwm, att, idx, proxy, bias):
        att, safe, pad = _padded(att, idx, x.shape[0])
        u = _ProxyChain._project(x, wm, bwm)
        v = _gather_sum(att, u, safe).reshape(x.shape[0], x.shape[1], wm.shape[2], wm.shape[0])
        ctx.save_for_backward(x, wm, bwm, att, safe, pad, proxy)
        return torch.einsum("nfkh,hfo->nko", v, proxy).add_(bias[:, None])

    @staticmethod
    def _project(x, wm, bwm):
        """u = x WM_h + bWM_h as (n, f*k, h), the layout the neighbour sum gathers rows of."""
        n, f = x.shape[:2]
        return torch.einsum("nfi,hik->nfkh", x, wm).add_(bwm.t()).reshape(n, f * wm.shape[2], wm.shape[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gz):
        x, wm, bwm, att, safe, pad, proxy = ctx.saved_tensors
        n, f, (h, _, k) = x.shape[0], x.shape[1], wm.shape
        u = _ProxyChain._project(x, wm, bwm)
        v = _gather_sum(att, u, safe).reshape(n, f, k, h)
        g_proxy = torch.einsum("nfkh,nko->hfo", v, gz)
        del v
        gv = torch.einsum("nko,hfo->nfkh", gz, proxy).reshape(n, f * k, h)
        g_att, gu = _gather_sum_backward(gv, att, u, safe, pad, ctx.needs_input_grad[3], True)
        del u, gv
        gu = gu.reshape(n, f, k, h)
        gx = torch.einsum("nfkh,hik->nfi", gu, wm) if ctx.needs_input_grad[0] else None
        return (gx, torch.einsum("nfi,nfkh->hik", x, gu), gu.sum((0, 1)).t(), g_att, None, g_proxy, gz.sum((0, 2)))


def neighbor_sum(w: torch.Tensor, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """w (n, K, h) weights over the neighbour lists idx (n, K) (padded with len(x): a zero row), x (m, F, h)
    -> (n, F, h). Memory O(n K h + m F h), not O(n K F h)."""
    return _NeighborSum.apply(w, x.contiguous(), idx)


def neighbor_softmax(mlp: nn.Module, dist: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """softmax over each neighbour list of MLP(dist), padding masked to -inf: (n, K, 1) -> (n, K, h)."""
    return mlp(dist).masked_fill(pad.unsqueeze(-1), float("-inf")).softmax(dim=1)


def _check_dims(c: list[int], f: list[int], heads: list[int]) -> None:
    if len(c) != len(f) or len(c) < 2 or len(heads) != len(c) - 1:
        raise ZooError(f"PMT channels c={c}, f={f}, heads={heads}: c and f need the same length >= 2 and one head "
                       "count per layer (len(c) - 1)")


def _checkpoint(fn, *args):
    """`torch.utils.checkpoint` (keep only `args`, recompute `fn` in the backward) when a graph is being built."""
    if not torch.is_grad_enabled():
        return fn(*args)
    # no random op inside, so no RNG state to replay
    return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)


class _PMTStack(nn.Module):
    """The layers both PMT blocks stack: per layer a ProxyMatchTransform (c_i, f_i) -> (c_i+1, f_i+1), a distance
    MLP per cloud and a PairGroupNorm, then LeakyReLU; the blocks differ in whose neighbours they aggregate over."""

    def __init__(self, c: list[int], f: list[int], heads: list[int]):
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


class CoarsePMTBlock(_PMTStack):
    """PMT on the superpoints (nodes): aggregation over all nodes of the same part within `radius` (the official
    code masks distance > radius to -inf before a softmax over all nodes; here a softmax over the radius-neighbour
    lists, the same value), an output Linear on c*f.

    `recompute=True` (default) trades compute for memory in training: each layer's linear chain is one
    `_ProxyChain` (keeps its input only), each layer's GroupNorm + LeakyReLU + chain is a checkpoint segment
    (keeps the (n, 512) pre-norm tensor between layers) and each cloud's whole block is an outer checkpoint (while one
    cloud back-propagates, the other keeps only its input). `recompute=False` is plain autograd, which stores every
    intermediate (the same values; tests compare them)."""

    def __init__(self, c: list[int] = (64, 16, 4), f: list[int] = (8, 32, 128), heads: list[int] = (4, 4),
                 radius: float = 0.05, recompute: bool = True):
        super().__init__(c, f, heads)
        self.radius, self.recompute = radius, recompute
        self.out = nn.Linear(self.c[-1] * self.f[-1], self.c[-1] * self.f[-1])

    def neighbors(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every node's neighbours within `radius` (itself included), uncapped so that the aggregation equals the
        official dense masked softmax over all nodes: indices (n, K) padded with n, distances (n, K, 1), pad mask."""
        with torch.no_grad():
            idx = radius_neighbors(pos, pos, self.radius, limit=0)
        pad = idx >= len(pos)
        nb = torch.cat([pos, pos.new_zeros(1, 3)])[idx]
        return idx, (pos.unsqueeze(1) - nb).norm(dim=-1, keepdim=True), pad

    def _aggregate(self, y: torch.Tensor, mlp: nn.Module, nbrs) -> torch.Tensor:
        """Y''_s = sum_j softmax_j(MLP(dist_sj)) Y_j over the radius neighbours, y (n, f, c, h)."""
        idx, dist, pad = nbrs
        att = neighbor_softmax(mlp, dist, pad)  # (n, K, h)
        return neighbor_sum(att, y.reshape(y.shape[0], -1, y.shape[-1]), idx).reshape(y.shape)

    def _layer(self, layer, x, linear, mlp, merge, nbrs):
        # The official code aggregates X' = (x W) P, (n, f', c, h), then merges the heads. The aggregation (per
        # head, over nodes) and the proxy contraction (per head, over f) commute, so aggregating x W first gives the
        # same X'' with f/f' (1/4 in the paper's block) of the aggregated width; the merge goes before the
        # contraction too (`contract_merge`), so no f'-wide tensor is stored.
        return layer.contract_merge(self._aggregate(layer.channel(x, linear), mlp, nbrs), merge)

    def forward(self, src_pos, trg_pos, src_feat, trg_feat) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, 3), (T, 3) node positions and (S, c0*f0), (T, c0*f0) features -> (S, c*f), (T, c*f)."""
        if src_feat.shape[-1] != self.in_dim:
            raise ZooError(f"coarse PMT expects {self.in_dim}-d node features (c0*f0 = {self.c[0]}*{self.f[0]}), "
                           f"got {src_feat.shape[-1]}")
        # the official block masks a dense (n, n) distance matrix; the radius-neighbour lists hold the same entries
        # at O(n K) memory (K: the most nodes within the radius of one node)
        n_src, n_trg = self.neighbors(src_pos), self.neighbors(trg_pos)
        if self.recompute:
            return self._lean(src_feat, n_src, 0), self._lean(trg_feat, n_trg, 1)
        # features laid out (f c), normalised along c as the official block does
        s = F.normalize(src_feat.reshape(-1, self.f[0], self.c[0]), dim=-1)
        t = F.normalize(trg_feat.reshape(-1, self.f[0], self.c[0]), dim=-1)
        for layer, a_s, a_t, norm in zip(self.layers, self.att_src, self.att_trg, self.norms):
            s = self._layer(layer, s, layer.w_src, a_s, layer.out_src, n_src)
            t = self._layer(layer, t, layer.w_trg, a_t, layer.out_trg, n_trg)
            s, t = self.act(norm(s)), self.act(norm(t))
        return self.out(s.reshape(s.shape[0], -1)), self.out(t.reshape(t.shape[0], -1))

    # --- recompute=True: the same block, keeping for the backward only what it cannot cheaply recompute ---

    def _lean(self, feat: torch.Tensor, nbrs, side: int) -> torch.Tensor:
        idx, dist, pad = nbrs
        mlps = self.att_trg if side else self.att_src
        atts = [neighbor_softmax(mlp, dist, pad) for mlp in mlps]  # (n, K, h) each: small, kept
        return _checkpoint(self._segments, feat, idx, side, *atts)

    def _segments(self, feat, idx, side, *atts):
        z = _checkpoint(self._first, feat, atts[0], idx, side)
        for i in range(1, len(self.layers)):
            z = _checkpoint(self._inner, i, z, atts[i], idx, side)
        return _checkpoint(self._last, z)

    def _chain(self, i: int, x: torch.Tensor, att, idx, side: int) -> torch.Tensor:
        layer = self.layers[i]
        channel, merge = (layer.w_trg, layer.out_trg) if side else (layer.w_src, layer.out_src)
        wm, bwm = layer.composed(channel, merge)
        return _ProxyChain.apply(x, wm, bwm, att, idx, layer.proxy, merge.bias)  # (n, k, o)

    def _norm_act(self, i: int, z: torch.Tensor) -> torch.Tensor:
        # z is (n, c, f): GroupNorm (one group per c over f, as PairGroupNorm) reads it as it is; the LeakyReLU
        # goes in place on GroupNorm's output, which GroupNorm's backward does not need
        return F.leaky_relu_(self.norms[i].norm(z), self.act.negative_slope)

    def _first(self, feat, att, idx, side):
        return self._chain(0, F.normalize(feat.reshape(-1, self.f[0], self.c[0]), dim=-1), att, idx, side)

    def _inner(self, i, z, att, idx, side):
        return self._chain(i, self._norm_act(i - 1, z).transpose(1, 2), att, idx, side)

    def _last(self, z):
        a = self._norm_act(len(self.layers) - 1, z)  # (n, c, f)
        # the output Linear reads (f c)-ordered features: permute its weight's columns instead of copying a to that
        # layout
        d = self.out.out_features
        w = self.out.weight.reshape(d, self.f[-1], self.c[-1]).transpose(1, 2).reshape(d, -1)
        return F.linear(a.reshape(a.shape[0], -1), w, self.out.bias)


class FinePMTBlock(_PMTStack):
    """PMT in the KPConv-FPN decoder: aggregation over each point's KPConv radius-neighbour list (padded with the
    shadow index), weighted by an MLP of the squared distance; no output Linear (the official block defines one but
    its neighbour path never applies it)."""

    def __init__(self, c: list[int] = (64, 16, 4), f: list[int] = (4, 16, 64), heads: list[int] = (4, 4)):
        super().__init__(c, f, heads)

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
        att_pad = [pad[p] for p in parts]
        for layer, a_s, a_t, norm in zip(self.layers, self.att_src, self.att_trg, self.norms):
            # (x W) of both clouds stacked, aggregated before the proxy contraction (they commute; see the coarse
            # block): the same X'' as the official gather of X' = (x W) P over the neighbour lists
            y = torch.cat([layer.channel(x[parts[0]], layer.w_src), layer.channel(x[parts[1]], layer.w_trg)])
            y = y.reshape(n, -1, layer.heads)
            out = []
            for part, p_pad, mlp, merge in ((parts[0], att_pad[0], a_s, layer.out_src),
                                            (parts[1], att_pad[1], a_t, layer.out_trg)):
                att = neighbor_softmax(mlp, sq_dist[part], p_pad)
                agg = neighbor_sum(att, y, neighbors[part]).reshape(-1, layer.f_in, layer.c_out, layer.heads)
                out.append(layer.contract_merge(agg, merge))
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
