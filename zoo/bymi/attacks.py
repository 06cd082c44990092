"""The attacks of the paper's experiments (official ``detect_realdata.R``, parameter block "parameter set"), batched.

* OOD (data): a Byzantine machine's covariates become ``0.7 x + v + 0.2 ξ``, ``v ~ N(0, I_p)`` one draw shared by
  all Byzantine machines, ``ξ ~ N(0, I_p)`` per sample (``s = 0.7, b = 1, s2 = 0.2``).
* random gradient: ``g_h = ḡ + 0.8 ṽ + ζ_h/√(n/2)`` for each half h, ḡ and sd the coordinate-wise mean and standard
  deviation of all machines' honest gradients, ``ṽ = v/‖v‖ · sd · √n`` and ``ζ_h ~ N(0, diag(0.7 sd)²)``
  (``b1 = 0.8, sig = 0.7``).
* IPM (inner-product manipulation): every Byzantine half and full gradient is ``−0.2 ·`` the mean gradient of the
  normal workers (``c_gamma = 0.2``).
* mean shift (the simulation): the Byzantine machines' data mean moves by ``δ``, so their gradients by ``−δ``.

Masks are (..., M) bool over machines; the master is never Byzantine.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import torch

from zoo.errors import ZooError

Attack = Literal["ood", "grad", "ipm", "shift", "none"]
ATTACKS: tuple[str, ...] = ("ood", "grad", "ipm", "shift", "none")
DATA_ATTACKS = ("ood", "shift")


def choose_byzantine(batch: tuple[int, ...], n_machines: int, eps: float, generator: torch.Generator,
                     master: int = 0) -> torch.Tensor:
    """⌊ε·m⌋ of the m workers, uniformly at random (official ``sample(2:nworker, floor((nworker - 1) * eps))``)."""
    m = n_machines - 1
    k = math.floor(m * eps)
    keys = torch.rand((*batch, m), generator=generator, dtype=torch.float64)
    chosen = torch.zeros((*batch, m), dtype=torch.bool)
    chosen.scatter_(-1, keys.argsort(dim=-1)[..., :k], True)
    workers = [j for j in range(n_machines) if j != master]
    mask = torch.zeros((*batch, n_machines), dtype=torch.bool)
    mask[..., workers] = chosen
    return mask


def ood_features(x: torch.Tensor, v: torch.Tensor, generator: torch.Generator, s: float = 0.7, b: float = 1.0,
                 s2: float = 0.2) -> torch.Tensor:
    """``s·x + b·v + s2·ξ`` for samples ``x`` (..., n, p); ``v`` (p,) or (..., 1, p)."""
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    return s * x + b * v + s2 * noise


def ood_half_means(xbar: torch.Tensor, v: torch.Tensor, n_half: int, generator: torch.Generator, s: float = 0.7,
                   b: float = 1.0, s2: float = 0.2) -> torch.Tensor:
    """The OOD attack on half-sample means (simulation): the mean of ``s x_i + b v + s2 ξ_i`` over n_half samples
    is ``s x̄ + b v + s2 ξ̄`` with ``ξ̄ ~ N(0, I/n_half)``, exactly."""
    noise = torch.randn(xbar.shape, generator=generator, dtype=xbar.dtype) / math.sqrt(n_half)
    return s * xbar + b * v + s2 * noise


def random_gradient(g1: torch.Tensor, g2: torch.Tensor, g: torch.Tensor, byzantine: torch.Tensor, n: int,
                    generator: torch.Generator, sig: float = 0.7, b1: float = 0.8
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Official ``attack == "grad"``: statistics over *all* machines' honest full gradients ``g`` (..., M, d)."""
    mean = g.mean(dim=-2, keepdim=True)
    sd = g.std(dim=-2, keepdim=True)  # R's sd(): n − 1
    v = torch.randn(sd.shape, generator=generator, dtype=g.dtype)
    v = v / v.norm(dim=-1, keepdim=True) * sd * math.sqrt(n)
    ss = sig * sd
    half = math.sqrt(n / 2)
    b1_g1 = mean + b1 * v + torch.randn(g1.shape, generator=generator, dtype=g.dtype) * ss / half
    b1_g2 = mean + b1 * v + torch.randn(g2.shape, generator=generator, dtype=g.dtype) * ss / half
    mask = byzantine.unsqueeze(-1)
    new_g1 = torch.where(mask, b1_g1, g1)
    new_g2 = torch.where(mask, b1_g2, g2)
    return new_g1, new_g2, torch.where(mask, (b1_g1 + b1_g2) / 2, g)


def ipm(g1: torch.Tensor, g2: torch.Tensor, g: torch.Tensor, byzantine: torch.Tensor, master: int = 0,
        c_gamma: float = 0.2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Official ``attack == "IPM"``: ``−c·`` the mean full gradient of the normal *workers* (the master excluded)."""
    normal = ~byzantine
    normal[..., master] = False
    w = normal.to(g.dtype).unsqueeze(-1)
    target = -c_gamma * (g * w).sum(dim=-2, keepdim=True) / w.sum(dim=-2, keepdim=True)
    mask = byzantine.unsqueeze(-1)
    target = target.expand_as(g)
    return torch.where(mask, target, g1), torch.where(mask, target, g2), torch.where(mask, target, g)


def unit_direction(dim: int, generator: torch.Generator, batch: tuple[int, ...] = (),
                   dtype: Optional[torch.dtype] = torch.float64) -> torch.Tensor:
    u = torch.randn((*batch, dim), generator=generator, dtype=dtype)
    return u / u.norm(dim=-1, keepdim=True)


def check_attack(name: str) -> None:
    if name not in ATTACKS:
        raise ZooError(f"unknown attack {name!r}; choose one of {', '.join(ATTACKS)}")
