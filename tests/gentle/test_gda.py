"""Smoothed GDA: one step equals the hand-computed update on a quadratic game (SGD and Adam), anchors included."""

import torch

from zoo.gentle.gda import make_anchors, proximal_penalty, smoothed_gda_step

R1, R2, BETA, MU, LR = 3.0, 2.0, 0.5, 0.7, 0.05


def game(seed=0):
    gen = torch.Generator().manual_seed(seed)
    A = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    A = A @ A.T + torch.eye(3, dtype=torch.float64)
    B = torch.randn(3, 2, generator=gen, dtype=torch.float64)
    C = torch.eye(2, dtype=torch.float64) * 2
    theta = torch.nn.Parameter(torch.randn(3, generator=gen, dtype=torch.float64))
    phi = torch.nn.Parameter(torch.randn(2, generator=gen, dtype=torch.float64))
    f = lambda: 0.5 * theta @ A @ theta + theta @ B @ phi - 0.5 * phi @ C @ phi
    return A, B, C, theta, phi, f


def step(theta, phi, f, anchors, opt):
    return smoothed_gda_step([theta], [phi], anchors[0], anchors[1], f, f, opt([theta]), opt([phi]), R1, R2, BETA, MU)


def test_one_sgd_step_is_the_hand_computed_update():
    A, B, C, theta, phi, f = game()
    t0, p0 = theta.detach().clone(), phi.detach().clone()
    anchors = ([t0 + 0.3], [p0 - 0.2])  # anchors away from the iterates, so the proximal terms act
    ta, pa = anchors[0][0].clone(), anchors[1][0].clone()
    out = step(theta, phi, f, anchors, lambda p: torch.optim.SGD(p, lr=LR))
    t1 = t0 - LR * (A @ t0 + B @ p0 + R1 * (t0 - ta))
    p1 = p0 + LR * (B.T @ t1 - C @ p0 - R2 * (p0 - pa))  # the potential sees the updated generator
    torch.testing.assert_close(theta.detach(), t1, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(phi.detach(), p1, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(anchors[0][0], (1 - BETA) * ta + BETA * t1, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(anchors[1][0], (1 - MU) * pa + MU * p1, rtol=1e-14, atol=1e-14)
    assert out["prox_min"].item() == ((t0 - ta) ** 2).sum().item()


def test_first_adam_step_moves_each_coordinate_by_lr_times_gradient_sign():
    A, B, C, theta, phi, f = game(1)
    t0, p0 = theta.detach().clone(), phi.detach().clone()
    anchors = (make_anchors([theta]), make_anchors([phi]))  # official start: anchors = initial weights
    step(theta, phi, f, anchors, lambda p: torch.optim.Adam(p, lr=LR))
    g_t = A @ t0 + B @ p0  # the proximal gradient is 0 at the start
    t1 = t0 - LR * g_t / (g_t.abs() + 1e-8)  # bias-corrected first Adam step
    g_p = -(B.T @ t1 - C @ p0)
    torch.testing.assert_close(theta.detach(), t1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(phi.detach(), p0 - LR * g_p / (g_p.abs() + 1e-8), rtol=1e-12, atol=1e-12)


def test_second_step_uses_the_moved_anchors():
    A, B, C, theta, phi, f = game(2)
    anchors = (make_anchors([theta]), make_anchors([phi]))
    sgd = lambda p: torch.optim.SGD(p, lr=LR)
    step(theta, phi, f, anchors, sgd)
    t1, p1 = theta.detach().clone(), phi.detach().clone()
    ta, pa = anchors[0][0].clone(), anchors[1][0].clone()
    step(theta, phi, f, anchors, sgd)
    t2 = t1 - LR * (A @ t1 + B @ p1 + R1 * (t1 - ta))
    torch.testing.assert_close(theta.detach(), t2, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(phi.detach(), p1 + LR * (B.T @ t2 - C @ p1 - R2 * (p1 - pa)), rtol=1e-14, atol=1e-14)


def test_proximal_penalty_sums_all_tensors():
    p = [torch.ones(2, 2), torch.zeros(3)]
    assert proximal_penalty(p, [torch.zeros(2, 2), torch.full((3,), 2.0)]).item() == 4 + 12


def test_each_players_objective_reaches_only_that_player_and_the_flags_come_back():
    # DDP expects a gradient for every parameter a loss reaches: the other player is off the graph
    _, _, _, theta, phi, f = game()
    seen = []

    def watched():
        seen.append((theta.requires_grad, phi.requires_grad))
        return f()

    anchors = (make_anchors([theta]), make_anchors([phi]))
    step(theta, phi, watched, anchors, lambda p: torch.optim.SGD(p, lr=LR))
    assert seen == [(True, False), (False, True)]
    assert theta.requires_grad and phi.requires_grad
