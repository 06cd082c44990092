"""The three networks of BGGN (official ``layers/network.py``): the bias predictor L̂(a), the VAE encoder q_φ(z|a)
and the decoder p_θ(a|z). Inputs are one-hot sensitive vectors (B, 2d); the decoder outputs (B, d, 2) with a softmax
per attribute (the attributes are conditionally independent given z)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


def _xavier(m: nn.Module) -> None:
    # official init_weights: xavier-normal weights, zero biases for every Linear
    if isinstance(m, nn.Linear):
        nn.init.xavier_normal_(m.weight)
        nn.init.zeros_(m.bias)


class BiasPredictor(nn.Module):
    """L̂(a): MLP 2d -> hidden -> feature (ReLU) with two residual heads (official ``Predictor_MLP_REG_CLS``):
    regression ``reg(f + ReLU(W_r f))`` and a weight-normalised classification head over the bias bins on
    ``f + W_c f``. Returns (bias (B,), bin logits (B, n_bins), classification feature (B, feature))."""

    def __init__(self, d: int, hidden_dim: int = 512, feature_dim: int = 256, n_bins: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2 * d, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, feature_dim), nn.ReLU())
        self.reg_feature = nn.Sequential(nn.Linear(feature_dim, feature_dim), nn.ReLU())
        self.reg = nn.Linear(feature_dim, 1)
        self.cls_feature = nn.Linear(feature_dim, feature_dim)
        self.cls = nn.Linear(feature_dim, n_bins)
        self.apply(_xavier)
        self.cls = weight_norm(self.cls)  # after init, as the official code wraps an initialised layer

    def forward(self, a_one_hot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self.body(a_one_hot)
        f_reg = f + self.reg_feature(f)
        f_cls = f + self.cls_feature(f)
        return self.reg(f_reg).squeeze(-1), self.cls(f_cls), f_cls


class Encoder(nn.Module):
    """q_φ(z|a) = N(μ_φ(a), e^{s_φ(a)} I): MLP 2d -> hidden -> hidden, a mean head (latent) and a *scalar*
    log-variance head (official ``Encoder``)."""

    def __init__(self, d: int, latent_dim: int = 200, hidden_dim: int = 500):
        super().__init__()
        self.shared = nn.Sequential(nn.Linear(2 * d, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, hidden_dim), nn.ReLU())
        self.mean = nn.Linear(hidden_dim, latent_dim)
        self.log_var = nn.Linear(hidden_dim, 1)

    def forward(self, a_one_hot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.shared(a_one_hot)
        return self.mean(h), self.log_var(h)


class Decoder(nn.Module):
    """p_θ(a|z): MLP latent -> hidden -> hidden -> 2d, reshaped (B, d, 2), softmax per attribute (official
    ``Decoder``)."""

    def __init__(self, d: int, latent_dim: int = 200, hidden_dim: int = 500):
        super().__init__()
        self.d = d
        self.net = nn.Sequential(nn.Linear(latent_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, hidden_dim),
                                 nn.ReLU(), nn.Linear(hidden_dim, 2 * d))

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z).view(-1, self.d, 2)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(z), dim=-1)
