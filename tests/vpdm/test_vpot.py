"""VPOT oracles: the batched log-domain Sinkhorn against POT (and geomloss), marginals, convex conditions, the
envelope-theorem gradient of L_OT, and the refusals."""

import numpy as np
import pytest
import torch

from zoo.errors import ZooError
from zoo.vpdm.vpot import ot_loss, prototype_cost, sinkhorn_log, vague_condition

ot = pytest.importorskip("ot")


def _problem(b=3, n=20, k=5, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randn(b, n, d, generator=g, dtype=torch.float64)
    protos = torch.randn(k, d, generator=g, dtype=torch.float64)
    return tokens, protos


@pytest.mark.parametrize("kind", ["sqeuclidean", "cosine"])
def test_plan_matches_pot_and_marginals(kind):
    tokens, protos = _problem()
    cost = prototype_cost(tokens, protos, kind)
    eps = 0.1
    res = sinkhorn_log(cost, eps, tol=1e-12, max_iter=5000, check_every=1)
    n, k = cost.shape[1:]
    for b in range(cost.shape[0]):
        ref = ot.sinkhorn(np.full(n, 1 / n), np.full(k, 1 / k), cost[b].numpy(), eps, stopThr=1e-14,
                          numItermax=100000)
        np.testing.assert_allclose(res.plan[b].numpy(), ref, atol=1e-10, rtol=1e-7)
    np.testing.assert_allclose(res.plan.sum(2).numpy(), 1 / n, atol=1e-6)
    np.testing.assert_allclose(res.plan.sum(1).numpy(), 1 / k, atol=1e-6)


def test_log_domain_fallback_matches_pot():
    """At small eps the kernel exp(-C / eps) leaves float32's range: the log-domain iterations run and agree with
    POT's Sinkhorn in float64 (where the kernel still fits, as do our float64 kernel-domain iterations)."""
    tokens, protos = _problem(b=2, n=16, k=6)
    cost = prototype_cost(tokens, protos)
    eps = 0.01
    res = sinkhorn_log(cost.float(), eps, tol=1e-6, max_iter=20000, check_every=1)
    assert res.log_domain
    res64 = sinkhorn_log(cost, eps, tol=1e-11, max_iter=20000, check_every=1)
    assert not res64.log_domain
    n, k = cost.shape[1:]
    for b in range(cost.shape[0]):
        ref = ot.sinkhorn(np.full(n, 1 / n), np.full(k, 1 / k), cost[b].numpy(), eps, stopThr=1e-11,
                          numItermax=200000)
        np.testing.assert_allclose(res64.plan[b].numpy(), ref, atol=1e-9)
        # float32 exponents C / eps of a few hundred carry ~3e-5 relative rounding: a few 1e-6 on entries of 1/16
        np.testing.assert_allclose(res.plan[b].double().numpy(), ref, atol=5e-6)
    np.testing.assert_allclose(res.plan.sum(2).double().numpy(), 1 / n, atol=5e-6)  # float32 rounding, as above
    np.testing.assert_allclose(res.plan.sum(1).double().numpy(), 1 / k, atol=5e-6)


def test_float32_plan_matches_pot():
    """The model's setting: float32 kernel-domain iterations, marginals to 1e-6, the plan equal to POT's."""
    tokens, protos = _problem(b=4, n=49, k=8, d=16)
    cost = prototype_cost(tokens, protos)
    res = sinkhorn_log(cost.float(), 0.05, tol=1e-6)
    assert res.plan.dtype == torch.float32 and not res.log_domain
    n, k = cost.shape[1:]
    np.testing.assert_allclose(res.plan.sum(2).double().numpy(), 1 / n, atol=1e-6)
    np.testing.assert_allclose(res.plan.sum(1).double().numpy(), 1 / k, atol=1e-6)
    for b in range(cost.shape[0]):
        ref = ot.sinkhorn(np.full(n, 1 / n), np.full(k, 1 / k), cost[b].numpy(), 0.05, stopThr=1e-12,
                          numItermax=100000)
        np.testing.assert_allclose(res.plan[b].double().numpy(), ref, atol=1e-6)


def test_cost_is_mean_squared_difference():
    tokens, protos = _problem()
    ref = ((tokens[:, :, None, :] - protos[None, None]) ** 2).mean(-1)
    torch.testing.assert_close(prototype_cost(tokens, protos), ref, rtol=1e-10, atol=1e-10)


def test_non_uniform_marginals_match_pot():
    tokens, protos = _problem(b=1, n=12, k=4)
    cost = prototype_cost(tokens, protos)
    a = torch.rand(1, 12, dtype=torch.float64) + 0.1
    a /= a.sum()
    b = torch.rand(1, 4, dtype=torch.float64) + 0.1
    b /= b.sum()
    res = sinkhorn_log(cost, 0.05, a, b, tol=1e-12, max_iter=20000, check_every=1)
    ref = ot.sinkhorn(a[0].numpy(), b[0].numpy(), cost[0].numpy(), 0.05, stopThr=1e-14, numItermax=200000)
    np.testing.assert_allclose(res.plan[0].numpy(), ref, atol=1e-10)


def test_plan_matches_geomloss_potentials():
    """geomloss's Sinkhorn (p=2, blur^p = eps, no debiasing) on one image: its dual potentials give the plan
    exp((f + g - C) / eps) a b. geomloss's cost is |x - y|^2 / 2. geomloss anneals eps (scaling 0.99) and stops
    at a few iterations at the final eps, so it is a loose second reference (POT is the exact one)."""
    geomloss = pytest.importorskip("geomloss")
    tokens, protos = _problem(b=1, n=15, k=4, d=3)
    cost = ((tokens[0][:, None] - protos[None]) ** 2).sum(-1) / 2
    eps = 0.5
    loss = geomloss.SamplesLoss("sinkhorn", p=2, blur=eps ** 0.5, debias=False, potentials=True, scaling=0.99,
                                backend="tensorized")
    f, g = loss(tokens[0][None], protos[None])  # uniform weights
    a, b = 1 / 15, 1 / 4
    ref = a * b * torch.exp((f[0][:, None] + g[0][None, :] - cost) / eps)
    ours = sinkhorn_log(cost[None], eps, tol=1e-13, max_iter=20000, check_every=1).plan[0]
    torch.testing.assert_close(ours, ref, atol=1e-3, rtol=0)  # measured: 4.8e-4


def test_condition_is_convex_combination():
    tokens, protos = _problem()
    plan = sinkhorn_log(prototype_cost(tokens, protos), 0.1).plan
    w = plan / plan.sum(-1, keepdim=True)
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-12, rtol=0)
    c = vague_condition(plan, protos)
    torch.testing.assert_close(c, torch.einsum("bnk,kd->bnd", w, protos))
    # inside the prototypes' bounding box, coordinate-wise (a consequence of convexity)
    assert (c <= protos.max(0).values + 1e-12).all() and (c >= protos.min(0).values - 1e-12).all()


def test_ot_loss_gradient_is_the_envelope_gradient():
    """d W_eps / d C = T*: central finite differences of the entropic OT value W = <T,C> + eps sum T log T."""
    tokens, protos = _problem(b=1, n=10, k=3)
    cost = prototype_cost(tokens, protos)
    eps = 0.2

    def value(c):
        t = sinkhorn_log(c, eps, tol=1e-14, max_iter=50000, check_every=1).plan
        return float((t * c).sum() + eps * (t * t.log()).sum())

    direction = torch.randn_like(cost)
    h = 1e-5
    fd = (value(cost + h * direction) - value(cost - h * direction)) / (2 * h)
    c = cost.clone().requires_grad_(True)
    plan = sinkhorn_log(c.detach(), eps, tol=1e-14, max_iter=50000, check_every=1).plan
    ot_loss(plan, c).backward()
    assert abs(float((c.grad * direction).sum()) - fd) < 1e-6


def test_refusals():
    tokens, protos = _problem()
    with pytest.raises(ZooError, match=r"did not converge: marginal error .* after 3 iterations"):
        sinkhorn_log(prototype_cost(tokens, protos), 1e-3, max_iter=3)  # log domain
    with pytest.raises(ZooError, match=r"did not converge: marginal error .* after 2 iterations"):
        sinkhorn_log(prototype_cost(tokens, protos), 0.5, max_iter=2)  # kernel domain
    with pytest.raises(ZooError, match="eps must be > 0"):
        sinkhorn_log(prototype_cost(tokens, protos), 0.0)
    with pytest.raises(ZooError, match="cost 'l1'"):
        prototype_cost(tokens, protos, "l1")
