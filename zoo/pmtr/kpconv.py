"""KPConv-FPN backbone (GeoTransformer's `KPConvFPN`, the PMTR variant with fine PMT blocks in the decoder) in plain
torch.

Kernel points: GeoTransformer loads an optimised 15-point disposition from a file; here it is the centre plus 14
points of a Fibonacci sphere at 2/3 of the kernel radius (deterministic, near-uniform), a documented deviation.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from zoo.errors import ZooError
from zoo.pmtr.geometry import Pyramid
from zoo.pmtr.pmt import FinePMTBlock


def kernel_points(n: int, radius: float) -> torch.Tensor:
    pts = [torch.zeros(3)]
    m = n - 1
    golden = math.pi * (3 - math.sqrt(5))
    for i in range(m):
        z = 1 - 2 * (i + 0.5) / m
        r = math.sqrt(max(0.0, 1 - z * z))
        pts.append(torch.tensor([r * math.cos(golden * i), r * math.sin(golden * i), z]) * (2 * radius / 3))
    return torch.stack(pts)


class KPConv(nn.Module):
    """Rigid KPConv: out_q = sum_neighbours sum_k relu(1 - |x_j - x_q - p_k| / sigma) W_k f_j, divided by the number
    of valid neighbours (GeoTransformer's normalisation)."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, radius: float, sigma: float):
        super().__init__()
        self.sigma = sigma
        self.register_buffer("kernel", kernel_points(kernel_size, radius), persistent=False)
        self.weights = nn.Parameter(torch.empty(kernel_size, c_in, c_out))
        nn.init.kaiming_uniform_(self.weights, a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(c_out))

    def forward(self, s_feats, q_points, s_points, neighbors):
        s_points = torch.cat([s_points, torch.full_like(s_points[:1], 1e6)])  # shadow point: zero kernel weight
        nb = s_points[neighbors] - q_points.unsqueeze(1)  # (M, H, 3)
        d = (nb.unsqueeze(2) - self.kernel.to(nb.dtype)).norm(dim=-1)  # (M, H, K)
        w = torch.clamp(1 - d / self.sigma, min=0)
        feats = torch.cat([s_feats, torch.zeros_like(s_feats[:1])])[neighbors]  # (M, H, C)
        wf = torch.einsum("mhk,mhc->mkc", w, feats)
        out = torch.einsum("mkc,kco->mo", wf, self.weights)
        valid = (feats.abs().sum(-1) > 0).sum(-1).clamp_min(1)
        return out / valid.unsqueeze(-1) + self.bias


class GroupNorm1d(nn.Module):
    def __init__(self, groups: int, c: int):
        super().__init__()
        if groups < 1 or c % min(groups, c):
            raise ZooError(f"groups={groups} must be positive and divide every backbone width (a layer has {c} "
                           f"channels)")
        self.norm = nn.GroupNorm(min(groups, c), c)

    def forward(self, x):  # (N, C) over all points
        return self.norm(x.t().unsqueeze(0)).squeeze(0).t()


class UnaryBlock(nn.Module):
    def __init__(self, c_in, c_out, groups, relu=True):
        super().__init__()
        self.mlp = nn.Linear(c_in, c_out)
        self.norm = GroupNorm1d(groups, c_out)
        self.act = nn.LeakyReLU(0.1) if relu else nn.Identity()

    def forward(self, x):
        return self.act(self.norm(self.mlp(x)))


class ConvBlock(nn.Module):
    def __init__(self, c_in, c_out, kernel_size, radius, sigma, groups):
        super().__init__()
        self.conv = KPConv(c_in, c_out, kernel_size, radius, sigma)
        self.norm = GroupNorm1d(groups, c_out)
        self.act = nn.LeakyReLU(0.1)

    def forward(self, s_feats, q_points, s_points, neighbors):
        return self.act(self.norm(self.conv(s_feats, q_points, s_points, neighbors)))


class ResidualBlock(nn.Module):
    """Bottleneck residual KPConv block; the strided one max-pools the shortcut over the subsampling neighbours."""

    def __init__(self, c_in, c_out, kernel_size, radius, sigma, groups, strided=False):
        super().__init__()
        mid = c_out // 4
        self.strided = strided
        self.unary1 = UnaryBlock(c_in, mid, groups) if c_in != mid else nn.Identity()
        self.conv = KPConv(mid, mid, kernel_size, radius, sigma)
        self.norm = GroupNorm1d(groups, mid)
        self.act = nn.LeakyReLU(0.1)
        self.unary2 = UnaryBlock(mid, c_out, groups, relu=False)
        self.shortcut = UnaryBlock(c_in, c_out, groups, relu=False) if c_in != c_out else nn.Identity()

    def forward(self, s_feats, q_points, s_points, neighbors):
        x = self.act(self.norm(self.conv(self.unary1(s_feats), q_points, s_points, neighbors)))
        x = self.unary2(x)
        sc = s_feats
        if self.strided:
            padded = torch.cat([s_feats, torch.zeros_like(s_feats[:1])])
            sc = padded[neighbors].max(dim=1).values
        return self.act(x + self.shortcut(sc))


def nearest_upsample(x: torch.Tensor, upsampling: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.zeros_like(x[:1])])[upsampling[:, 0]]


class KPConvFPN(nn.Module):
    """Three-level encoder (official `KPConvFPN_Flex(1, [256, 128], [[64, 128], [128, 256, 256], [256, 512, 512]])`)
    and a decoder whose every stage ends with a fine PMT block. Returns per-level features, finest first; the
    coarsest entry is the encoder's output (the node features)."""

    def __init__(self, channels: list[list[int]], output_dims: list[int], fine_c: list[list[int]],
                 fine_f: list[list[int]], fine_heads: list[int] = (4, 4), kernel_size: int = 15,
                 init_radius: float = 0.125, init_sigma: float = 0.1, groups: int = 32, fine_pmt: bool = True):
        super().__init__()
        self.encoders = nn.ModuleList()
        r, s = init_radius, init_sigma
        c_in = 1
        for i, ch in enumerate(channels):
            blocks = nn.ModuleList()
            if i == 0:
                blocks.append(ConvBlock(c_in, ch[0], kernel_size, r, s, groups))
            else:
                blocks.append(ResidualBlock(c_in, ch[0], kernel_size, r, s, groups, strided=True))
                r, s = 2 * r, 2 * s
            c_in = ch[0]
            for c_out in ch[1:]:
                blocks.append(ResidualBlock(c_in, c_out, kernel_size, r, s, groups))
                c_in = c_out
            self.encoders.append(blocks)
        self.decoders, self.pmt = nn.ModuleList(), nn.ModuleList()
        c_in = channels[-1][-1] + channels[-2][-1]
        for i, c_out in enumerate(output_dims):
            last = i == len(output_dims) - 1
            self.decoders.append(nn.Linear(c_in, c_out) if last else UnaryBlock(c_in, c_out, groups))
            if not last:
                c_in = c_out + channels[-3 - i][-1]
            self.pmt.append(FinePMTBlock(fine_c[i], fine_f[i], fine_heads) if fine_pmt else nn.Identity())

    def forward(self, pyr: Pyramid) -> list[torch.Tensor]:
        x = torch.ones(len(pyr.points[0]), 1, dtype=pyr.points[0].dtype, device=pyr.points[0].device)
        enc = []
        for i, blocks in enumerate(self.encoders):
            for j, block in enumerate(blocks):
                if i > 0 and j == 0:
                    x = block(x, pyr.points[i], pyr.points[i - 1], pyr.subsampling[i - 1])
                else:
                    x = block(x, pyr.points[i], pyr.points[i], pyr.neighbors[i])
            enc.append(x)
        levels = len(enc)
        feats = [enc[-1]]
        latent = enc[-1]
        for i, (decoder, pmt) in enumerate(zip(self.decoders, self.pmt)):
            level = levels - 2 - i
            latent = torch.cat([nearest_upsample(latent, pyr.upsampling[level]), enc[level]], dim=1)
            latent = decoder(latent)
            if isinstance(pmt, FinePMTBlock):
                latent = pmt(latent, pyr.points[level], pyr.neighbors[level], pyr.lengths[level])
            feats.append(latent)
        return feats[::-1]
