"""The two models whose gradients at θ₀ ByMI inspects, in closed form and batched over machines, plus the
stratified half split of a machine's data.

* ``logistic``: multinomial logistic regression on features with an intercept, θ ∈ R^{(p+1)×K} (official
  ``gradient_descent``: the mean cross-entropy gradient ``X̃ᵀ(softmax(X̃θ) − Y)/n``).
* ``location``: the Gaussian location model of the simulation, loss ``½‖x − θ‖²``, per-sample gradient ``θ − x``;
  a half's gradient is ``θ − x̄_half``, so half-sample means are sufficient.

Gradients are flattened column-major like R's ``as.numeric(grad)`` (class by class); ByMI is invariant to the
order of coordinates, the flattening only keeps R comparisons one-to-one.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from zoo.errors import ZooError

Model = Literal["logistic", "location"]


def with_intercept(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.ones(*x.shape[:-1], 1, dtype=x.dtype, device=x.device)], dim=-1)


def flatten_theta(G: torch.Tensor) -> torch.Tensor:
    """(..., p+1, K) → (..., (p+1)K), column-major as R's ``as.numeric``."""
    return G.transpose(-1, -2).reshape(*G.shape[:-2], -1)


def unflatten_theta(v: torch.Tensor, n_rows: int) -> torch.Tensor:
    return v.reshape(*v.shape[:-1], -1, n_rows).transpose(-1, -2)


def logistic_gradient(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Mean cross-entropy gradient for samples ``x`` (..., n, p), labels ``y`` (..., n) → (..., (p+1)K)."""
    X = with_intercept(x)
    P = torch.softmax(X @ theta, dim=-1)
    Y = F.one_hot(y, n_classes).to(x.dtype)
    return flatten_theta(X.transpose(-1, -2) @ (P - Y) / x.shape[-2])


def logistic_per_sample(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Per-sample gradients (..., n, (p+1)K): ``x̃_i (p_i − y_i)ᵀ``."""
    X = with_intercept(x)
    R = torch.softmax(X @ theta, dim=-1) - F.one_hot(y, n_classes).to(x.dtype)
    return flatten_theta(X.unsqueeze(-1) * R.unsqueeze(-2))


def logistic_loss(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of samples (n, p) under parameters ``theta`` (..., p+1, K) → (...,)."""
    logits = with_intercept(x) @ theta
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, y.expand(*logits.shape[:-1]).unsqueeze(-1)).squeeze(-1).mean(dim=-1)


def location_loss(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean of ½‖x_i − θ‖² over samples (n, p) for parameters ``theta`` (..., p) → (...,); in closed form,
    ½‖x̄ − θ‖² + ½ tr(S) with S the (1/n) sample covariance."""
    xbar = x.mean(dim=0)
    spread = 0.5 * ((x - xbar) ** 2).sum(dim=-1).mean()
    return 0.5 * ((theta - xbar) ** 2).sum(dim=-1) + spread


def covariance(samples: torch.Tensor) -> torch.Tensor:
    """(1/n) covariance of rows (..., n, d), as the official ``Sig_hat``."""
    c = samples - samples.mean(dim=-2, keepdim=True)
    return c.transpose(-1, -2) @ c / samples.shape[-2]


def stratified_halves(y: torch.Tensor, generator: torch.Generator, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split each machine's samples into two halves stratified by class, as the official driver: a class with an
    even count is split evenly; classes with an odd count give their extra sample alternately to the first and
    the second half (official ``id_sign``). ``y`` (M, n) labels → index tensors (M, n1), (M, n2).

    A class that a machine holds only once would be missing from one half: that is an error (the official code
    silently leaves it out of one half)."""
    M, n = y.shape
    counts = F.one_hot(y, n_classes).sum(dim=-2)  # (M, K)
    single = (counts == 1).nonzero()
    if len(single):
        j, c = single[0].tolist()
        raise ZooError(f"machine {j} has a single sample of class {c}, so a class-stratified half split would leave it "
                       f"out of one half; give every machine at least 2 samples of each class it holds")
    odd = counts % 2 == 1
    # official: D2 gets floor(n_c/2) + id_sign, id_sign flipping after every odd class (starting at 0)
    sign = (torch.cumsum(odd.long(), dim=-1) - odd.long()) % 2
    to_second = counts // 2 + odd.long() * sign  # (M, K)
    keys = torch.rand((M, n), generator=generator, dtype=torch.float64)
    order = torch.argsort(y.double() * 2 + keys, dim=-1)  # by class, random within a class
    sorted_y = y.gather(-1, order)
    start = torch.cumsum(counts, dim=-1) - counts
    rank = torch.arange(n).expand(M, n) - start.gather(-1, sorted_y)
    in_second = rank < to_second.gather(-1, sorted_y)
    n2 = int(in_second[0].sum())
    if not bool((in_second.sum(dim=-1) == n2).all()):
        raise ZooError("the stratified halves have different sizes on different machines; use an even n per machine")
    second = order[in_second].reshape(M, n2)
    first = order[~in_second].reshape(M, n - n2)
    return first.sort(dim=-1).values, second.sort(dim=-1).values


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (M, n, ...) rows ``idx`` (M, k) → (M, k, ...)."""
    expand = idx.reshape(*idx.shape, *([1] * (x.dim() - 2))).expand(*idx.shape, *x.shape[2:])
    return x.gather(1, expand)
