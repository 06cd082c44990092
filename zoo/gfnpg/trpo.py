"""RL-T's actor step: TRPO (Schulman et al. 2015) as in the official ``trajectory_TRPO.py``.

The search direction solves H x = g by conjugate gradients, with g the gradient of the surrogate
sum A_t exp(log pi - log pi_old) / n_traj and H the Hessian of KL(pi_old || pi) summed over the batch's states
/ n_traj, through Hessian-vector products. The full step -sqrt(2 delta / x.g) x is halved until the surrogate
decreases and the mean per-state KL(pi_new || pi_old) is at most delta.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn


def flat_grad(y: torch.Tensor, params: Sequence[torch.Tensor], retain_graph: bool = False,
              create_graph: bool = False) -> torch.Tensor:
    grads = torch.autograd.grad(y, params, retain_graph=retain_graph or create_graph, create_graph=create_graph,
                                allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params)])


def conjugate_gradient(hvp: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, n_iter: int = 10,
                       res_tol: float = 1e-5) -> torch.Tensor:
    """Approximately solve H x = b from x = 0 (official ``conjugate_gradients``: 10 iterations, stop when r.r < 1e-5).
    As there, the residual is tested after each update, so at least one step is taken: a small gradient (|g|^2 below
    the tolerance, late in training) still gives the direction alpha g, and the trust-region step has its full KL size
    (testing before the first step returned x = 0, i.e. no TRPO step at all)."""
    x = torch.zeros_like(b)
    r = b.detach().clone()
    p = r.clone()
    rr = r @ r
    for _ in range(n_iter):
        hp = hvp(p)
        alpha = rr / (p @ hp)
        x = x + alpha * p
        r = r - alpha * hp
        rr_new = r @ r
        if rr_new < res_tol:
            break
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def kl_rows(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) of each row of two (S, A) log-probability tables."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def trpo_step(policy: nn.Module, log_probs_fn: Callable[[], torch.Tensor], actions: torch.Tensor,
              advantages: torch.Tensor, n_traj: int, max_kl: float = 0.01, cg_iters: int = 10,
              backtracks: int = 20, res_tol: float = 1e-5) -> dict[str, float]:
    """One TRPO update of ``policy`` in place. ``log_probs_fn()`` gives log pi(.|s) (S, A) at the batch's S states with
    the current parameters, ``actions``/``advantages`` (S,) the actions taken there and their advantages.

    Deviation: when no backtracking step is accepted the parameters are restored; the official line search leaves
    them at the last (smallest) step tried."""
    params = [p for p in policy.parameters() if p.requires_grad]
    log_all = log_probs_fn()
    old_all = log_all.detach()
    logp = log_all.gather(1, actions[:, None])[:, 0]
    old_logp = logp.detach()
    adv = advantages.detach()
    surrogate = (torch.exp(logp - old_logp) * adv).sum() / n_traj
    kl = kl_rows(old_all, log_all).sum() / n_traj  # 0 at theta_old; its Hessian there is the Fisher matrix
    g = flat_grad(surrogate, params, retain_graph=True)
    kl_grad = flat_grad(kl, params, create_graph=True)

    def hvp(v: torch.Tensor) -> torch.Tensor:
        return flat_grad(kl_grad @ v, params, retain_graph=True)

    direction = conjugate_gradient(hvp, g, n_iter=cg_iters, res_tol=res_tol)
    curvature = direction @ g
    info = {"surrogate": float(surrogate.detach()), "accepted": 0.0, "kl": 0.0, "step_frac": 0.0}
    if not torch.isfinite(curvature) or curvature <= 0:  # deviation: the official sqrt(2 delta / x.g) gives NaN
        return info
    full_step = -torch.sqrt(2 * max_kl / curvature) * direction  # descend: the surrogate is a cost
    old = torch.nn.utils.parameters_to_vector(params).detach()
    with torch.no_grad():
        for k in range(backtracks):
            frac = 0.5**k
            torch.nn.utils.vector_to_parameters(old + frac * full_step, params)
            new_all = log_probs_fn()
            new_logp = new_all.gather(1, actions[:, None])[:, 0]
            improve = (torch.exp(new_logp - old_logp) * adv).sum() / n_traj - surrogate.detach()
            kl_new = kl_rows(new_all, old_all).mean()
            if improve < 0 and kl_new <= max_kl:
                info.update(accepted=1.0, kl=float(kl_new), step_frac=frac, improve=float(improve))
                return info
        torch.nn.utils.vector_to_parameters(old, params)
    return info
