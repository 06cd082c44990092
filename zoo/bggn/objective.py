"""BGGN fine-tuning (paper Sec. 4; official ``utils/vae_bias_utils.py``, ``engine/engine_vae_bias.py``).

Goal: a generator p_θ(a) = E_z p_θ(a|z) whose mass follows the bias, p_θ(a) ∝ exp(b·L̂(a)) (reverse KL to the
bias-tilted target). The reverse KL E_p[log p_θ(a) − b·L̂(a)] has no reparameterisation through discrete a, so its
gradient is the score-function (REINFORCE) estimator with reward

    R(z, a) = λ·[−log q_φ(z|a)] + b·L̂(a),

where the encoder's −log q_φ(z|a) is the entropy surrogate (λ = ``neglog_coef`` 0.05, b = ``bias_coef`` 5000 /
1e4), and a running baseline R_g reduces the variance. Two forms are implemented:

* ``paper`` (default): one term, z ~ N(0, I), a ~ Cat(p_θ(·|z)); the per-sample Gaussian −log q (exact up to its
  constant: ½‖z−μ‖²/e^s + (D/2)·s); the mask keeps the top-k samples by L̂ among those whose a is a training
  combination; loss Σ(R − R_g)·mask·(−log p_θ(a|z))/k − β·H (an entropy *bonus*, the reverse KL's −H term).
* ``official``: the three terms the official code sums, as written there: the same term with its batch-level
  Frobenius norm (‖Z − M‖²_F of the whole batch in every sample's reward, and "+ s" instead of (D/2)·s), the mask
  "in training ∧ top-k overall", and "+ β·H" with its broadcast mask (mean H times the masked share); plus a term
  on training a's reparameterised through the encoder whose reward is their *ground-truth* bias, and the same
  sampled-z term again without the baseline and with a top-k-only mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn.functional as F

from zoo.bggn.bias import codes, one_hot
from zoo.errors import ZooError

Form = Literal["paper", "official"]


# -- VAE pretraining (official engine/engine_vae.py) ---------------------------------------------------------------

def reparameterize(mu: torch.Tensor, log_var: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    # ε has μ's shape: z ~ N(μ, e^s I), the distribution the KL and −log q assume. The official
    # reparameterize_latent draws randn_like(std) with std of shape (B, 1), one ε per sample shared by all latent
    # dimensions (z on a line through μ); an official-code quirk we do not reproduce (card, deviations).
    eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
    return mu + eps * torch.exp(0.5 * log_var)


def gaussian_kl(mu: torch.Tensor, log_var: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, e^s I) ‖ N(0, I)) per sample, s a scalar per sample broadcast over the latent dimensions."""
    return -0.5 * torch.sum(1 + log_var - mu**2 - log_var.exp(), dim=-1)


def vae_loss(probs: torch.Tensor, a_one_hot: torch.Tensor, mu: torch.Tensor, log_var: torch.Tensor,
             kl_weight: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Official VAE objective: MSE between the per-attribute softmax and the one-hot a, plus kl_weight·KL."""
    recon = F.mse_loss(probs, a_one_hot.view_as(probs))
    kl = gaussian_kl(mu, log_var).mean()
    return recon + kl_weight * kl, recon, kl


# -- pieces of the estimator ---------------------------------------------------------------------------------------

def sample_attributes(log_probs: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """a ~ Cat(p(·|z)) independently per attribute: (B, d, 2) log-probabilities -> (B, d) int64 in {0, 1}."""
    u = torch.rand(log_probs.shape[:-1], generator=generator, dtype=log_probs.dtype, device=log_probs.device)
    return (u < log_probs[..., 1].exp()).long()


def log_prob(log_probs: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """log p_θ(a|z) = Σ_j log p(a_j|z): (B, d, 2), (B, d) -> (B,)."""
    return log_probs.gather(-1, a.long().unsqueeze(-1)).squeeze(-1).sum(-1)


def attribute_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Per sample, the mean over attributes of the categorical entropy (official ``compute_entropy``): (B,)."""
    return -(log_probs.exp() * log_probs).sum(-1).mean(-1)


def neg_log_q(z: torch.Tensor, mu: torch.Tensor, log_var: torch.Tensor, form: Form = "paper") -> torch.Tensor:
    """Entropy surrogate −log q_φ(z|a) per sample, without the constant (D/2)·log 2π.

    ``paper``: ½‖z_i − μ_i‖²/e^{s_i} + (D/2)·s_i, exactly −log N(z_i; μ_i, e^{s_i} I) + const.
    ``official``: ½‖Z − M‖²_F/e^{s_i} + s_i, the official ``torch.norm(z - mu)`` being the norm of the whole batch;
    per sample (B = 1) it is the Gaussian's −log q only for D = 2."""
    s = log_var.reshape(-1)
    if form == "paper":
        return 0.5 * ((z - mu) ** 2).sum(-1) / s.exp() + 0.5 * z.shape[-1] * s
    return 0.5 * torch.sum((z - mu) ** 2) / s.exp() + s


def topk_mask(values: torch.Tensor, k: int, eligible: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Float mask of the k largest ``values`` (among ``eligible`` ones if given; fewer if fewer are eligible)."""
    if k < 1:
        raise ZooError(f"the top-k mask needs k >= 1, got {k}")
    if values.numel() < k:
        raise ZooError(f"the top-{k} mask needs at least {k} samples, got {values.numel()}")
    v = values if eligible is None else values.masked_fill(~eligible, float("-inf"))
    mask = torch.zeros_like(values)
    mask[torch.topk(v, k).indices] = 1.0
    return mask if eligible is None else mask * eligible.to(values.dtype)


def in_bank(a: torch.Tensor, bank_codes: torch.Tensor) -> torch.Tensor:
    """Whether each generated a (B, d) is a training combination (``bank_codes`` = their `codes`)."""
    return torch.isin(codes(a), bank_codes)


def update_baseline(r_global: torch.Tensor | float, r_ghost_mean: torch.Tensor, local_coef: float = 0.01,
                    global_coef: float = 0.01) -> torch.Tensor:
    """Official moving baseline R_g ← local·mean(R_ghost) + global·R_g (``vae_bias_r_local/global``: 0.01, 0.01; the
    weights sum to 0.02, so R_g stays near 2% of the reward level: kept as written)."""
    return local_coef * r_ghost_mean + global_coef * r_global


def reinforce_loss(reward: torch.Tensor, log_p: torch.Tensor, baseline: torch.Tensor | float = 0.0,
                   mask: Optional[torch.Tensor] = None, normaliser: Optional[float] = None) -> torch.Tensor:
    """Σ_i (R_i − R_g)·m_i·(−log p_θ(a_i))/N: its gradient is minus the score-function estimate of ∇E[R·m].
    The reward is treated as a constant (detached)."""
    adv = (reward - baseline).detach()
    if mask is not None:
        adv = adv * mask
    return torch.dot(adv.reshape(-1), -log_p.reshape(-1)) / (normaliser or reward.numel())


# -- one BGGN iteration --------------------------------------------------------------------------------------------

@dataclass
class BGGNConfig:
    batch_size: int = 64  # samples kept by the mask (official batch_size; CelebA 128)
    z_resample: int = 3  # z drawn per iteration: batch_size·z_resample (official z_resample; CelebA 10)
    mask_coef: float = 1.0  # official mask_bs_coef: k = mask_coef·batch_size (CelebA 0.2)
    bias_coef: float = 5000.0  # b (official vae_bias_b; CelebA 1e4)
    neglog_coef: float = 0.05  # λ (official vae_bias_neglog)
    entropy_coef: float = 0.05  # β (official vae_bias_reg_coef; CelebA 1.0)
    baseline_local: float = 0.01
    baseline_global: float = 0.01
    form: Form = "paper"

    @property
    def k(self) -> int:
        return int(self.mask_coef * self.batch_size)


BiasFn = Callable[[torch.Tensor], torch.Tensor]  # (B, d) binary -> (B,) predicted bias L̂(a)


def _reward_parts(encoder, z: torch.Tensor, a: torch.Tensor, form: Form) -> torch.Tensor:
    mu, log_var = encoder(one_hot(a).to(z.dtype))
    return neg_log_q(z, mu, log_var, form)


def sampled_term(decoder, encoder, bias_fn: BiasFn, bank_codes: torch.Tensor, cfg: BGGNConfig,
                 r_global: torch.Tensor | float, latent_dim: int, *, with_baseline: bool = True,
                 mask_type: Literal["train_topk", "topk"] = "train_topk",
                 generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, dict]:
    """The main term: z ~ N(0, I) (batch_size·z_resample), a ~ Cat(p_θ(·|z)), reward, mask, baseline.
    Returns (loss, info) with the updated baseline in info["r_global"] when ``with_baseline``."""
    n = cfg.batch_size * cfg.z_resample
    p = next(decoder.parameters())
    z = torch.randn(n, latent_dim, generator=generator, dtype=p.dtype, device=p.device)
    log_probs = F.log_softmax(decoder.logits(z), dim=-1)
    with torch.no_grad():
        a = sample_attributes(log_probs, generator)
        bias = bias_fn(a).to(z.dtype)
        seen = in_bank(a, bank_codes)
        if mask_type == "topk":
            mask = topk_mask(bias, cfg.batch_size)
        elif cfg.form == "official":  # in training ∧ top-k of all samples
            mask = topk_mask(bias, cfg.k) * seen.to(z.dtype)
        else:  # top-k among the samples whose a is a training combination
            mask = topk_mask(bias, cfg.k, eligible=seen)
        nlq = _reward_parts(encoder, z, a, cfg.form)
        reward = (cfg.neglog_coef * nlq + cfg.bias_coef * bias) * mask
        info: dict = {"bias_mean": bias.mean(), "neglog_q_mean": nlq.mean(), "mask_share": mask.mean(),
                      "seen_share": seen.to(z.dtype).mean()}
        baseline = torch.zeros((), dtype=z.dtype, device=z.device)
        if with_baseline:  # ghost samples: an independent batch only for the baseline
            z_g = torch.randn(cfg.batch_size, latent_dim, generator=generator, dtype=z.dtype, device=z.device)
            a_g = sample_attributes(F.log_softmax(decoder.logits(z_g), dim=-1), generator)
            r_ghost = cfg.neglog_coef * _reward_parts(encoder, z_g, a_g, cfg.form) + cfg.bias_coef * bias_fn(a_g)
            baseline = update_baseline(r_global, r_ghost.mean(), cfg.baseline_local, cfg.baseline_global)
            info["r_global"] = baseline
    lp = log_prob(log_probs, a)
    main = reinforce_loss(reward, lp, baseline, mask, normaliser=cfg.batch_size)
    ent = attribute_entropy(log_probs)
    if cfg.form == "official":  # "+ β·H" with the official (B,) * (B, 1) broadcast: mean(H)·mean(mask)
        reg = cfg.entropy_coef * ent.mean() * mask.mean()
    else:  # the reverse KL's entropy bonus, on the kept samples
        reg = -cfg.entropy_coef * (ent * mask).sum() / mask.sum().clamp_min(1.0)
    info.update(main=main.detach(), entropy=ent.mean().detach(), reward_mean=reward.mean())
    return main + reg, info


def training_combination_term(decoder, encoder, a_train: torch.Tensor, bias_train: torch.Tensor, cfg: BGGNConfig,
                              generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, dict]:
    """Official second term: training a's with their ground-truth bias, z ~ q_φ(z|a) (reparameterised, encoder
    frozen), a' ~ p_θ(·|z); reward λ·(−log q(z|a')) + b·L_f(a) on the top-``batch_size`` a by bias, no baseline."""
    if a_train.shape[0] < cfg.batch_size:
        raise ZooError(f"the training-combination term's top-{cfg.batch_size} mask needs at least {cfg.batch_size} "
                       f"training combinations per batch, got {a_train.shape[0]}")
    with torch.no_grad():
        mu, log_var = encoder(one_hot(a_train).to(bias_train.dtype))
        z = reparameterize(mu, log_var, generator)
    log_probs = F.log_softmax(decoder.logits(z), dim=-1)
    with torch.no_grad():
        a = sample_attributes(log_probs, generator)
        mask = topk_mask(bias_train, cfg.batch_size)
        nlq = _reward_parts(encoder, z, a, "official")
        reward = cfg.neglog_coef * nlq * mask + cfg.bias_coef * bias_train * mask
    main = reinforce_loss(reward, log_prob(log_probs, a), 0.0, None, normaliser=cfg.batch_size)
    reg = cfg.entropy_coef * attribute_entropy(log_probs).mean() * mask.mean()
    return main + reg, {"main": main.detach()}


def encoder_refit_loss(decoder, encoder, cfg: BGGNConfig, latent_dim: int,
                       generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Every 3rd iteration the encoder is refit to the current decoder (wake-sleep style, decoder frozen): z ~ N(0, I),
    the encoder must recover z from what the decoder makes of it. ``paper``: from a sampled one-hot a, the mean
    Gaussian −log q; ``official``: from the decoder's soft probabilities, with the batch-level norm."""
    p = next(decoder.parameters())
    z = torch.randn(cfg.batch_size, latent_dim, generator=generator, dtype=p.dtype, device=p.device)
    with torch.no_grad():
        probs = decoder(z)
        x = one_hot(sample_attributes(probs.log(), generator)).to(z.dtype) if cfg.form == "paper" else probs.flatten(1)
    mu, log_var = encoder(x)
    return neg_log_q(z, mu, log_var, cfg.form).mean()


def gaussian_nll_constant(latent_dim: int) -> float:
    """The constant (D/2)·log 2π that `neg_log_q` leaves out."""
    return 0.5 * latent_dim * math.log(2 * math.pi)
