"""Oracles added by mutation testing: the reparameterised draw's spread, the paper's entropy bonus (the reverse KL's
−H term raises the decoder's entropy), the paper's mask (top-k among the training combinations) and the strict
"> τ" relevance of the metrics."""

import torch
import torch.nn.functional as F

from zoo.bggn.bias import all_combinations, codes
from zoo.bggn.metrics import precision_at_k, recall_at_k
from zoo.bggn.networks import Decoder, Encoder
from zoo.bggn.objective import BGGNConfig, attribute_entropy, reparameterize, sampled_term


def test_reparameterize_draws_from_n_mu_exp_s():
    """z = μ + ε·e^{s/2} has mean μ and standard deviation e^{s/2} (s the log-variance): s = log 4 gives std 2."""
    n, D = 200_000, 3
    mu = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64).expand(n, D)
    log_var = torch.full((n, 1), torch.log(torch.tensor(4.0)).item(), dtype=torch.float64)
    z = reparameterize(mu, log_var, torch.Generator().manual_seed(0))
    torch.testing.assert_close(z.mean(0), mu[0], atol=0.02, rtol=0)
    torch.testing.assert_close(z.std(0), torch.full((D,), 2.0, dtype=torch.float64), atol=0.02, rtol=0)


def test_paper_entropy_term_is_a_bonus_a_descent_step_raises_the_entropy():
    """Paper form: the loss is the reverse KL E_p[log p − b·L̂], whose entropy part enters as −β·H. With no reward
    (b = λ = 0, baseline 0) and every sample kept, the loss is −β × the mean attribute entropy, and one gradient
    step on it raises the decoder's entropy at the same z's."""
    torch.manual_seed(0)
    d, D, bs = 4, 6, 16
    enc, dec = Encoder(d, D, 16).double(), Decoder(d, D, 16).double()
    bank = codes(all_combinations(d))  # every combination seen: the mask keeps all bs samples
    cfg = BGGNConfig(batch_size=bs, z_resample=1, mask_coef=1.0, bias_coef=0.0, neglog_coef=0.0, entropy_coef=0.5,
                     form="paper")
    z = torch.randn(bs, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)  # sampled_term's z

    def entropy():
        with torch.no_grad():
            return attribute_entropy(F.log_softmax(dec.logits(z), dim=-1)).mean()

    before = entropy()
    loss, info = sampled_term(dec, enc, lambda a: a.double().mean(-1), bank, cfg, 0.0, D,
                              generator=torch.Generator().manual_seed(3))
    assert info["mask_share"] == 1.0
    torch.testing.assert_close(loss.detach(), -cfg.entropy_coef * before)
    loss.backward()
    with torch.no_grad():
        for p in dec.parameters():
            p -= 1e-2 * p.grad
    assert entropy() > before


def test_paper_mask_is_top_k_among_training_combinations_even_when_unseen_ones_score_higher():
    """Paper form: the mask keeps the k highest-L̂ samples *among those whose a is a training combination*, so it
    holds exactly k samples whenever at least k seen samples were drawn, however high the unseen ones score."""
    torch.manual_seed(1)
    d, D = 4, 6
    enc, dec = Encoder(d, D, 16).double(), Decoder(d, D, 16).double()
    all_a = all_combinations(d)
    bank = codes(all_a[::2])  # half the combinations are training ones
    w = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)

    def bias_fn(a):  # unseen combinations score far higher than any seen one
        unseen = ~torch.isin(codes(a), bank)
        return a.double() @ w + 10.0 * unseen.double()

    cfg = BGGNConfig(batch_size=8, z_resample=4, mask_coef=0.5, form="paper")  # k = 4 of 32 samples
    _, info = sampled_term(dec, enc, bias_fn, bank, cfg, 0.0, D, generator=torch.Generator().manual_seed(2))
    n = cfg.batch_size * cfg.z_resample
    n_seen = round(float(info["seen_share"]) * n)
    assert n_seen >= cfg.k and n - n_seen >= cfg.k  # the case is informative: both kinds drawn at least k times
    torch.testing.assert_close(info["mask_share"], torch.tensor(cfg.k / n, dtype=torch.float64))


def test_relevance_is_strictly_above_the_threshold():
    """An a is high-bias when its true bias *exceeds* τ (paper: bias > 0.3; `zoo.bggn.metrics`): one at exactly τ is
    not."""
    ranked = [0.5, 0.3, 0.1]
    assert precision_at_k(ranked, 2, 0.3) == 0.5
    assert recall_at_k(ranked, 3, 0.3, n_relevant=1) == 1.0
