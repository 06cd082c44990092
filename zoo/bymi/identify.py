"""ByMI (Qian et al., ICML 2024): Byzantine machine identification by split-half scores and the knockoff+ threshold.

Machines are rows, the trusted master M₀ among them (row ``master``, 0 by default, as machine 1 of the official
``detect_realdata.R``). Every machine splits its local data in two halves D1, D2 and reports the gradients
``g1_j = ∇L(θ₀; D1)``, ``g2_j = ∇L(θ₀; D2)`` at the same θ₀. Then (official ``ByMI()``):

    μ̂    robust mean of the g1 of all machines (spectral filter, geometric median, the master alone, ...)
    Ω    diag(MAD over all machines of g_j = (g1_j + g2_j)/2)⁻¹
    W_j  (g1_j − μ̂)ᵀ Ω (g2_j − μ̂) for every worker j ≠ master
    flag {j : W_j ≥ L}, L the knockoff+ threshold at level α.

A normal worker's halves are independent given μ̂, so its W_j is nearly symmetric about 0; a Byzantine worker whose
gradients have mean μ + δ scores about δᵀΩδ > 0. ByMI-Filter+ instead projects on the top eigenvector of the
centred g1 covariance and uses a 1-D trimmed mean with Ω = 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch

from zoo.bymi.robust import (_filtering_mean_np, _weiszfeld_np, filtering_mean, geometric_median, is_few_rows,
                             is_small, mad, mad_np, trimmed_mean_1d)
from zoo.bymi.threshold import knockoff_select, knockoff_threshold_np
from zoo.errors import ZooError

Estimator = Literal["filter", "geom", "master", "filter_plus", "oracle"]
ESTIMATORS: tuple[str, ...] = ("filter", "geom", "master", "filter_plus", "oracle")


@dataclass
class Identification:
    """ByMI's output for workers (all rows but the master), leading batch dimensions kept.

    W (..., m) scores, threshold (...,) knockoff+ L (inf: nothing flagged), flagged (..., m) bool,
    workers (m,) the row index of each worker, mu_hat (..., d) the centre (projected for filter_plus)."""

    W: torch.Tensor
    threshold: torch.Tensor
    flagged: torch.Tensor
    workers: torch.Tensor
    mu_hat: torch.Tensor


def check_finite(name: str, x: torch.Tensor) -> None:
    # the common case of one small problem (or a few rows), without torch ops
    if (is_small(x) or is_few_rows(x)) and np.isfinite(x.numpy()).all():
        return
    if not bool(torch.isfinite(x).all()):
        bad = (~torch.isfinite(x)).reshape(-1, x.shape[-1]).any(dim=-1).nonzero().flatten()[:5].tolist()
        raise ZooError(f"{name} has non-finite entries (rows {bad} of the flattened batch); ByMI needs finite gradients")


def split_scores(g1: torch.Tensor, g2: torch.Tensor, mu_hat: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """``W_j = (g1_j − μ̂)ᵀ diag(ω) (g2_j − μ̂)`` for rows (..., m, d); ``omega`` (..., d) or a scalar."""
    omega = omega.unsqueeze(-2) if omega.dim() else omega
    return ((g1 - mu_hat.unsqueeze(-2)) * omega * (g2 - mu_hat.unsqueeze(-2))).sum(dim=-1)


def scaled_rows(g1: torch.Tensor, n_half: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The official estimators' input ``(g1_j − ḡ1)·√(n/2)`` (per-sample scale, comparable to Σ₀) and ḡ1."""
    centre = g1.mean(dim=-2)
    return (g1 - centre.unsqueeze(-2)) * math.sqrt(n_half), centre


def top_direction(g1: torch.Tensor, n_half: int) -> torch.Tensor:
    """ByMI-Filter+'s projection: the top eigenvector of the centred, scaled g1 covariance (official ``v1``)."""
    Xs, _ = scaled_rows(g1, n_half)
    cov = Xs.transpose(-1, -2) @ Xs / g1.shape[-2]
    return torch.linalg.eigh(cov).eigenvectors[..., -1]


def bymi(
    g1: torch.Tensor,
    g2: torch.Tensor,
    *,
    alpha: float = 0.1,
    estimator: Estimator = "filter",
    eps: float = 0.1,
    const_f: float = 1.2,
    n_half: int = 1,
    sigma0: Optional[torch.Tensor] = None,
    g: Optional[torch.Tensor] = None,
    master: int = 0,
    offset: int = 1,
    oracle_mean: Optional[torch.Tensor] = None,
) -> Identification:
    """Run ByMI on split-half gradients ``g1, g2`` (..., M, d) of M machines (row ``master`` is the master).

    Args:
        alpha: target FDR (official experiments: 0.1).
        estimator: μ̂ from ``filter`` (ByMI-Filter, needs ``sigma0``), ``geom`` (ByMI-GEOM), ``master`` (the master's
            gradient ``g[master]``), ``filter_plus`` (ByMI-Filter+) or ``oracle`` (``oracle_mean``, for simulations).
        eps, const_f: assumed Byzantine share ε and the official safety factor: the filter and the trimmed mean
            remove about ε' = const_f·ε (official 1.2·ε).
        n_half: samples per half; the official code scales centred g1 by √n_half so that Σ₀ (a per-sample
            covariance) is on the same scale.
        sigma0: covariance of the master's per-sample gradients (d, d) or (..., d, d) (official ``Sig_hat``).
        g: full local gradients (default (g1 + g2)/2, exact for equal halves); Ω uses their MAD.
        offset: 1 = knockoff+ (FDR control), 0 = the modified-FDR variant.
    """
    if g1.shape != g2.shape or g1.dim() < 2:
        raise ZooError(f"g1 and g2 must both be (..., machines, dim); got {tuple(g1.shape)} and {tuple(g2.shape)}")
    M, d = g1.shape[-2:]
    if M < 2:
        raise ZooError(f"ByMI needs the master and at least one worker, got {M} machine(s)")
    if not 0 <= master < M:
        raise ZooError(f"master row {master} is outside the {M} machines")
    if estimator not in ESTIMATORS:
        raise ZooError(f"unknown ByMI estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    if estimator == "filter":
        if sigma0 is None:
            raise ZooError("ByMI-Filter needs sigma0, the covariance of the master's per-sample gradients")
        if sigma0.shape[-2:] != (d, d):
            raise ZooError(f"sigma0 must be ({d}, {d}) for {d}-dimensional gradients, got {tuple(sigma0.shape)}")
        check_finite("sigma0", sigma0)
    if estimator == "oracle" and oracle_mean is None:
        raise ZooError("the oracle estimator needs oracle_mean (the true mean of normal gradients)")
    check_finite("g1", g1)
    check_finite("g2", g2)
    ep = const_f * eps  # official: ep = const_f * eps, in this order (the floors below depend on the rounding)
    rows = (g1, g2) + ((g,) if g is not None else ())
    if estimator != "filter_plus" and (oracle_mean is None or is_small(oracle_mean)) and (
            (all(is_small(t) for t in rows) and (sigma0 is None or is_small(sigma0)))
            or (estimator != "filter" and all(is_few_rows(t) for t in rows))):  # the filter's d × d steps: torch
        return _bymi_np(g1, g2, g, alpha, estimator, ep, n_half, sigma0, master, offset, oracle_mean)
    g = (g1 + g2) / 2 if g is None else g
    workers = torch.cat([torch.arange(master, device=g1.device), torch.arange(master + 1, M, device=g1.device)])

    if estimator == "filter_plus":
        v = top_direction(g1, n_half)
        z = torch.einsum("...md,...d->...m", g1, v)
        mu = trimmed_mean_1d(z, ep)
        z1, z2 = z.index_select(-1, workers), torch.einsum("...md,...d->...m", g2, v).index_select(-1, workers)
        W = (z1 - mu.unsqueeze(-1)) * (z2 - mu.unsqueeze(-1))  # Ω = 1 on the projection
        flagged, L = knockoff_select(W, alpha, offset)
        return Identification(W, L, flagged, workers, mu)

    if estimator == "filter":
        Xs, centre = scaled_rows(g1, n_half)
        mu_s, _ = filtering_mean(Xs, ep, sigma0)
        mu = mu_s / math.sqrt(n_half) + centre
    elif estimator == "geom":
        Xs, centre = scaled_rows(g1, n_half)
        mu = geometric_median(Xs) / math.sqrt(n_half) + centre
    elif estimator == "master":
        mu = g[..., master, :]
    else:
        mu = oracle_mean.expand(*g1.shape[:-2], d)

    spread = mad(g, dim=-2)
    if bool((spread <= 0).any()):
        _zero_mad((spread <= 0).reshape(-1, d).any(dim=0).nonzero().flatten()[:5].tolist())
    W = split_scores(g1.index_select(-2, workers), g2.index_select(-2, workers), mu, 1.0 / spread)
    flagged, L = knockoff_select(W, alpha, offset)
    return Identification(W, L, flagged, workers, mu)


def _zero_mad(coordinates: list[int]) -> None:
    raise ZooError(f"gradient coordinates {coordinates} have zero MAD across machines, so Ω = diag(MAD)⁻¹ is "
                   "undefined; restrict the identification to parameters that vary across machines")


def _bymi_np(g1, g2, g, alpha, estimator, ep, n_half, sigma0, master, offset, oracle_mean) -> Identification:
    """`bymi` of one small CPU problem (see `zoo.bymi.robust.is_small`), or of a few rows of any width
    (`is_few_rows`, not for the filter), in numpy on the tensors' memory: the same steps as the torch path, without
    its per-op dispatch cost (3.7 → ~1 ms at 150 machines × 20 coordinates; 2.4 → ~0.3 ms for the geometric median
    at 2 ranks × 15,882, the DDP callback's check)."""
    A1, A2 = g1.numpy(), g2.numpy()
    M = A1.shape[0]
    if g is None:
        G = A1 + A2
        G *= 0.5  # (g1 + g2) / 2, as the torch path rounds it
    else:
        G = g.numpy()
    workers = np.arange(1, M) if master == 0 else np.delete(np.arange(M), master)
    if estimator in ("filter", "geom"):
        centre = np.add.reduce(A1, axis=0) / M  # = A1.mean(axis=0), without np.mean's Python layer
        Xs = A1 - centre
        Xs *= math.sqrt(n_half)  # `scaled_rows`
        if estimator == "filter":
            mu_s = _filtering_mean_np(Xs, ep, sigma0.numpy(), max(1, math.floor(ep * M)))[0]
        else:
            mu_s = _weiszfeld_np(Xs, 1e-10, 10000)
        mu = mu_s / math.sqrt(n_half) + centre
    elif estimator == "master":
        mu = G[master]
    else:
        mu = np.broadcast_to(oracle_mean.numpy(), A1.shape[-1:])
    spread = mad_np(G, axis=0)
    if (spread <= 0).any():
        _zero_mad(np.flatnonzero(spread <= 0)[:5].tolist())
    # `split_scores` over all rows (no gathered copies of the workers' rows), then the master's score dropped
    D1 = A1 - mu
    D1 *= 1.0 / spread
    D1 *= A2 - mu
    W_all = D1.sum(axis=-1)
    W = W_all[workers]
    L = knockoff_threshold_np(W, alpha, offset)
    return Identification(torch.from_numpy(W), torch.tensor(L, dtype=g1.dtype), torch.from_numpy(W >= L),
                          torch.from_numpy(workers), torch.from_numpy(np.array(mu)))
