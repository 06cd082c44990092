"""Monte-Carlo oracle for Re-Attention: corrected logits are unbiased in exp-space, vanilla ones inflated."""

import torch

from zoo.dpformer.model import SASRec, linear_output_variance, re_attention_logits


def test_monte_carlo_unbiasedness():
    g = torch.Generator().manual_seed(0)
    d, n_keys, S = 8, 4, 400_000
    q = torch.randn(1, d, generator=g, dtype=torch.float64) * 0.5
    mu = torch.randn(n_keys, d, generator=g, dtype=torch.float64) * 0.5
    sigma2 = torch.tensor([0.0, 0.1, 0.5, 1.0], dtype=torch.float64)  # rare items: large variance
    K = mu + sigma2.sqrt()[:, None] * torch.randn(S, n_keys, d, generator=g, dtype=torch.float64)
    C = float(q.pow(2).sum()) / d  # E exp(<q,K>/√d) = exp(<q,μ>/√d + ‖q‖²σ²/(2d)) for K ~ N(μ, σ²I)
    clean = torch.exp(re_attention_logits(q, mu, None, C)).squeeze(0)
    vanilla = torch.exp(re_attention_logits(q, K, None, C)).mean(0).squeeze(0)
    corrected = torch.exp(re_attention_logits(q, K, sigma2.expand(S, -1), C)).mean(0).squeeze(0)
    assert torch.allclose(corrected, clean, rtol=0.01)
    assert torch.allclose(vanilla / clean, torch.exp(C * sigma2 / 2), rtol=0.01)
    assert (vanilla[1:] / clean[1:] > 1.01).all()  # the attention distraction the paper describes


def test_linear_variance_propagation_matches_monte_carlo():
    """NPN rule v_y = v_x(W∘W) + (m∘m)V + v_xV for y = xWᵀ with W ~ N(W̄, V), x ~ N(m, v_x)."""
    g = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(5, 3, bias=False).double()
    m = torch.randn(5, dtype=torch.float64, generator=g)
    vx, V, S = torch.tensor(0.3, dtype=torch.float64), torch.tensor(0.05, dtype=torch.float64), 200_000
    x = m + vx.sqrt() * torch.randn(S, 5, generator=g, dtype=torch.float64)
    W = lin.weight.detach() + V.sqrt() * torch.randn(S, 3, 5, generator=g, dtype=torch.float64)
    y = torch.einsum("soi,si->so", W, x)
    pred = linear_output_variance(lin, m, vx, V)
    assert torch.allclose(y.var(0), pred, rtol=0.03)


def test_re_attention_is_vanilla_without_noise_and_penalises_rare_items():
    torch.manual_seed(0)
    model = SASRec(20, max_len=6, d_model=8, n_heads=2, d_ff=8, dropout=0.0, re_attention=True, re_attention_c=5.0)
    seq = torch.randint(1, 21, (3, 6))
    base = model.hidden(seq)
    freq = torch.full((21,), 1.0)
    freq[seq[0, 0]] = 1e-3  # a rare item
    model.set_dp_noise(0.1, freq)
    assert model.item_noise_var[seq[0, 0]] > 1e3 * model.item_noise_var[seq[1, 1]]
    assert not torch.allclose(model.hidden(seq), base)
    vanilla = SASRec(20, max_len=6, d_model=8, n_heads=2, d_ff=8, dropout=0.0, re_attention=False)
    vanilla.load_state_dict(model.state_dict())
    model.set_dp_noise(0.0, freq)
    assert torch.allclose(model.hidden(seq), vanilla.hidden(seq))
