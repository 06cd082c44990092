"""Oracles of the REINFORCE fine-tuning: convergence of a plain categorical policy to softmax(b·L), the exact
gradient by enumeration, the entropy surrogate against torch.distributions, the KL term against Monte Carlo."""

import math

import pytest
import torch

from zoo.bggn.bias import all_combinations, codes, one_hot
from zoo.bggn.networks import Decoder, Encoder
from zoo.bggn.objective import (
    BGGNConfig,
    attribute_entropy,
    encoder_refit_loss,
    gaussian_kl,
    log_prob,
    neg_log_q,
    reinforce_loss,
    sampled_term,
    topk_mask,
    training_combination_term,
    update_baseline,
)
from zoo.errors import ZooError


def test_categorical_policy_converges_to_softmax_of_bias():
    # d = 4: 16 combinations, a plain categorical policy; reward b·L(a) + λ·(−log p(a)) with λ = 1 (for a plain
    # categorical −log p is exact, the role −log q plays in BGGN) and the official baseline: p -> softmax(b·L)
    g = torch.Generator().manual_seed(0)
    L = torch.rand(16, generator=g, dtype=torch.float64)
    b = 3.0
    target = torch.softmax(b * L, 0)
    theta = torch.zeros(16, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 75, 0.5)
    r_g = torch.zeros((), dtype=torch.float64)
    for _ in range(300):
        logp = torch.log_softmax(theta, 0)
        a = torch.multinomial(logp.exp().detach(), 512, replacement=True, generator=g)
        reward = b * L[a] - logp[a].detach()
        r_g = update_baseline(r_g, reward.mean())
        loss = reinforce_loss(reward, logp[a], r_g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    p = torch.softmax(theta.detach(), 0)
    kl = torch.sum(p * (p.log() - target.log()))
    assert kl < 0.01, kl


@pytest.mark.parametrize("baseline", [0.0, 0.7])
def test_reinforce_expectation_equals_exact_gradient(baseline):
    # a factorised policy p(a) = Π_j softmax(θ_j)[a_j] over d = 3 attributes, as the decoder's given z
    torch.manual_seed(0)
    d = 3
    theta = torch.randn(d, 2, dtype=torch.float64, requires_grad=True)
    A = all_combinations(d)
    R = torch.randn(len(A), dtype=torch.float64)

    def logp_all():
        return log_prob(torch.log_softmax(theta, -1).expand(len(A), d, 2), A)

    exact = torch.autograd.grad((logp_all().exp() * R).sum(), theta)[0]  # ∇ E_p[R]
    p = logp_all().exp().detach()
    expected = torch.zeros_like(theta)
    for i in range(len(A)):  # E_a~p[∇ loss(a)]: the estimator's expectation, by enumeration
        lp = log_prob(torch.log_softmax(theta, -1)[None], A[i:i + 1])
        expected += p[i] * torch.autograd.grad(reinforce_loss(R[i:i + 1], lp, baseline), theta)[0]
    torch.testing.assert_close(-expected, exact, rtol=1e-12, atol=1e-12)


def test_entropy_surrogate_is_gaussian_negative_log_density():
    torch.manual_seed(0)
    for D in (2, 7):
        z, mu, s = torch.randn(5, D, dtype=torch.float64), torch.randn(5, D, dtype=torch.float64), torch.randn(5, 1, dtype=torch.float64)
        q = torch.distributions.Normal(mu, (0.5 * s).exp())
        nll = -q.log_prob(z).sum(-1) - 0.5 * D * math.log(2 * math.pi)
        torch.testing.assert_close(neg_log_q(z, mu, s, "paper"), nll, rtol=1e-12, atol=1e-12)
    # the issue's/official per-sample formula ½‖z−μ‖²/e^s + s is −log q up to its constant for D = 2 ...
    z, mu, s = torch.randn(1, 2, dtype=torch.float64), torch.randn(1, 2, dtype=torch.float64), torch.randn(1, 1, dtype=torch.float64)
    nll = -torch.distributions.Normal(mu, (0.5 * s).exp()).log_prob(z).sum(-1) - math.log(2 * math.pi)
    torch.testing.assert_close(neg_log_q(z, mu, s, "official"), nll, rtol=1e-12, atol=1e-12)
    # ... and the official batch form puts the whole batch's squared distance in every sample's reward
    z, mu, s = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64), torch.zeros(4, 1, dtype=torch.float64)
    torch.testing.assert_close(neg_log_q(z, mu, s, "official"), torch.full((4,), 0.5 * ((z - mu) ** 2).sum(), dtype=torch.float64))


def test_kl_term_matches_monte_carlo():
    torch.manual_seed(0)
    mu, s = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64) * 0.5
    q = torch.distributions.Normal(mu, (0.5 * s).exp().expand_as(mu))
    z = q.sample((200_000,))
    mc = (q.log_prob(z) - torch.distributions.Normal(0.0, 1.0).log_prob(z)).sum(-1).mean(0)
    torch.testing.assert_close(gaussian_kl(mu, s), mc, rtol=0.0, atol=0.02)
    closed = torch.distributions.kl_divergence(q, torch.distributions.Normal(torch.zeros_like(mu), 1.0)).sum(-1)
    torch.testing.assert_close(gaussian_kl(mu, s), closed, rtol=1e-12, atol=1e-12)


def test_decoder_softmax_per_attribute_and_entropy():
    torch.manual_seed(0)
    dec = Decoder(d=5, latent_dim=8, hidden_dim=16).double()
    probs = dec(torch.randn(7, 8, dtype=torch.float64))
    assert probs.shape == (7, 5, 2)
    torch.testing.assert_close(probs.sum(-1), torch.ones(7, 5, dtype=torch.float64))
    uniform = torch.full((1, 5, 2), math.log(0.5), dtype=torch.float64)
    torch.testing.assert_close(attribute_entropy(uniform), torch.tensor([math.log(2)], dtype=torch.float64))


def test_masks():
    v = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.3])
    assert topk_mask(v, 2).tolist() == [0, 1, 0, 1, 0]
    seen = torch.tensor([True, False, True, True, True])
    assert topk_mask(v, 2, eligible=seen).tolist() == [0, 0, 1, 1, 0]  # top-2 among the training ones
    with pytest.raises(ZooError, match="top-8 mask needs at least 8"):
        topk_mask(v, 8)


def test_bggn_terms_run_in_both_forms_and_refuse_small_batches():
    torch.manual_seed(0)
    d, D = 4, 6
    enc, dec = Encoder(d, D, 16), Decoder(d, D, 16)
    bank = codes(all_combinations(d)[:10])
    bias_fn = lambda a: a.float().mean(-1)
    for form in ("paper", "official"):
        cfg = BGGNConfig(batch_size=8, z_resample=3, form=form)
        loss, info = sampled_term(dec, enc, bias_fn, bank, cfg, 0.0, D)
        loss.backward()
        assert torch.isfinite(loss) and "r_global" in info
        assert all(p.grad is None for p in enc.parameters())  # the decoder term leaves the encoder alone
        assert encoder_refit_loss(dec, enc, cfg, D).requires_grad
    a_tr = all_combinations(d)[:6]
    with pytest.raises(ZooError, match="needs at least 8 training combinations"):
        training_combination_term(dec, enc, a_tr, torch.rand(6), BGGNConfig(batch_size=8))
    loss, _ = training_combination_term(dec, enc, all_combinations(d)[:8], torch.rand(8), BGGNConfig(batch_size=8))
    assert torch.isfinite(loss)
    assert one_hot(a_tr).shape == (6, 2 * d)


def test_official_form_sampled_term_equals_a_transcription_of_the_official_loss():
    """Oracle for `sampled_term(form="official")`: the official `get_z_based_loss(..., "bs_trA", "var_control")`
    written out independently from its formulas (batch-level torch.norm, mask "in training ∧ top-k of all", baseline
    (R·m − R_g)·m, Σ/batch_size, "+ β·H" with the (B,)×(B,1) broadcast), on the same random draws; value and
    decoder gradient in float64."""
    torch.manual_seed(0)
    d, D, bs, zr = 5, 6, 8, 3
    enc, dec = Encoder(d, D, 16).double(), Decoder(d, D, 16).double()
    w = torch.rand(d, dtype=torch.float64)
    bias_fn = lambda a: a.double() @ w  # continuous: no ties in the top-k
    bank_a = all_combinations(d)[[i for i in range(2 ** d) if i % 3]]  # two thirds of the combinations
    cfg = BGGNConfig(batch_size=bs, z_resample=zr, mask_coef=1.0, bias_coef=50.0, neglog_coef=0.05,
                     entropy_coef=0.3, form="official")
    r_g0 = torch.tensor(0.37, dtype=torch.float64)

    loss, info = sampled_term(dec, enc, bias_fn, codes(bank_a), cfg, r_g0, D,
                              generator=torch.Generator().manual_seed(5))
    ours = torch.autograd.grad(loss, list(dec.parameters()))

    g = torch.Generator().manual_seed(5)  # the same draws, in the same order
    z = torch.randn(bs * zr, D, generator=g, dtype=torch.float64)
    hat_x = dec(z)
    u = torch.rand(bs * zr, d, generator=g, dtype=torch.float64)
    a = (u < hat_x[..., 1].detach()).long()
    dis_x = torch.nn.functional.one_hot(a, 2).double()
    with torch.no_grad():
        b = bias_fn(a).view(-1, 1)
        in_tr = (a.unsqueeze(1) - bank_a.unsqueeze(0)).abs().sum(-1).min(-1).values == 0
        mask_bs = torch.zeros_like(b)
        mask_bs[torch.topk(b.view(-1), int(cfg.mask_coef * bs)).indices] = 1
        mask = in_tr.double().unsqueeze(1) * mask_bs  # (B, 1)
        mu, lv = enc(dis_x.view(-1, 2 * d))
        nlq = (0.5 * torch.norm(z - mu) ** 2 / torch.exp(lv) + lv) * cfg.neglog_coef * mask
        R = nlq + cfg.bias_coef * b * mask
        z_g = torch.randn(bs, D, generator=g, dtype=torch.float64)
        hat_g = dec(z_g)
        a_g = (torch.rand(bs, d, generator=g, dtype=torch.float64) < hat_g[..., 1]).long()
        mu_g, lv_g = enc(torch.nn.functional.one_hot(a_g, 2).double().view(-1, 2 * d))
        r_ghost = (cfg.neglog_coef * (0.5 * torch.norm(z_g - mu_g) ** 2 / torch.exp(lv_g) + lv_g)
                   + cfg.bias_coef * bias_fn(a_g).view(-1, 1))
        r_global = 0.01 * r_ghost.mean() + 0.01 * r_g0
        r_final = (R - r_global) * mask
    neg_log_p = -(torch.log(hat_x + 1e-9) * dis_x).sum(2).sum(1)
    main = torch.dot(r_final.view(-1), neg_log_p) / bs
    entropy = (-torch.log(hat_x + 1e-9) * hat_x).sum(-1)
    ref = main + cfg.entropy_coef * torch.mean(entropy.mean(-1) * mask)
    theirs = torch.autograd.grad(ref, list(dec.parameters()))

    torch.testing.assert_close(info["r_global"], r_global, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-8)  # the official log(p + 1e-9)
    for x, y in zip(ours, theirs):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-8)
    assert 0 < float(mask.sum()) < int(cfg.mask_coef * bs)  # "in training ∧ top-k" keeps some, not all, of the k
