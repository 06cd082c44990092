"""Smoothed gradient descent-ascent for min_θ max_φ f(θ, φ) (the training scheme of GENTLE).

One step, in the official order:
  1. θ ← opt_θ step on   f(θ, φ) + (r1/2)‖θ - θ̄‖²           (generator: L_fit + λR + proximal term)
  2. φ ← opt_φ step on -[g(θ, φ) - (r2/2)‖φ - φ̄‖²]           (potential ascends λR, evaluated at the new θ)
  3. θ̄ ← (1-β)θ̄ + βθ,  φ̄ ← (1-μ)φ̄ + μφ                    (anchors follow the iterates)
The anchors start as copies of the initial parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

Params = Sequence[torch.nn.Parameter]


def make_anchors(params: Params) -> list[torch.Tensor]:
    return [p.detach().clone() for p in params]


def proximal_penalty(params: Params, anchors: Sequence[torch.Tensor]) -> torch.Tensor:
    """‖θ - θ̄‖² summed over all parameter tensors (the official `term_r1` / `term_r2`, before the r/2 factor)."""
    return sum(((p - a) ** 2).sum() for p, a in zip(params, anchors))


@torch.no_grad()
def update_anchors(anchors: Sequence[torch.Tensor], params: Params, rate: float) -> None:
    """θ̄ ← (1 - rate) θ̄ + rate θ, in place."""
    for a, p in zip(anchors, params):
        a.lerp_(p.detach(), rate)


@contextmanager
def frozen(params: Params) -> Iterator[None]:
    """The other player's parameters without requires_grad while one player's objective is built and differentiated,
    so its graph reaches only the player being updated: DDP expects a gradient for every parameter a loss reaches
    (its gradients would have been discarded anyway; the gradients of the player updated are unchanged)."""
    before = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(params, before):
            p.requires_grad_(flag)


def smoothed_gda_step(
    min_params: Params, max_params: Params, min_anchors: Sequence[torch.Tensor], max_anchors: Sequence[torch.Tensor],
    min_loss: Callable[[], torch.Tensor], max_objective: Callable[[], torch.Tensor],
    min_opt: torch.optim.Optimizer, max_opt: torch.optim.Optimizer,
    r1: float, r2: float, beta: float, mu: float,
    backward: Callable[..., None] | None = None,
) -> dict[str, torch.Tensor]:
    """One smoothed-GDA step. `min_loss()` / `max_objective()` build the two players' objectives (without the
    proximal terms) from the current parameters; `backward(loss, inputs=...)` defaults to `torch.autograd.backward`
    (the Lightning module passes `manual_backward`). Gradients reach only the player being updated."""
    backward = backward or (lambda loss, inputs: torch.autograd.backward(loss, inputs=inputs))
    min_params, max_params = list(min_params), list(max_params)

    with frozen(max_params):
        f = min_loss()
        prox_min = proximal_penalty(min_params, min_anchors)
        loss = f + 0.5 * r1 * prox_min
        min_opt.zero_grad()
        backward(loss, inputs=min_params)
        min_opt.step()

    with frozen(min_params):
        g = max_objective()
        prox_max = proximal_penalty(max_params, max_anchors)
        ascent = g - 0.5 * r2 * prox_max
        max_opt.zero_grad()
        backward(-ascent, inputs=max_params)
        max_opt.step()

    update_anchors(min_anchors, min_params, beta)
    update_anchors(max_anchors, max_params, mu)
    return {"min_loss": f.detach(), "max_objective": g.detach(), "prox_min": prox_min.detach(),
            "prox_max": prox_max.detach()}


def gradient_norms(terms: dict[str, torch.Tensor], params: Params) -> dict[str, torch.Tensor]:
    """‖∇ term‖ over `params` for each named term of one player's loss, and the cosine between the first two: a
    diagnostic of which force moves the player (GENTLE: the fit term against λR). The graph is kept, so the step's
    own backward still runs on it afterwards; nothing is accumulated into `.grad`."""
    params = list(params)
    grads = {}
    for name, term in terms.items():
        g = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
        grads[name] = torch.cat([(torch.zeros_like(p) if gi is None else gi).flatten() for p, gi in zip(params, g)])
    out = {name: g.norm().detach() for name, g in grads.items()}
    if len(grads) >= 2:
        first, second = list(grads.values())[:2]
        out["cos"] = torch.nn.functional.cosine_similarity(first, second, dim=0).detach()
    return out
