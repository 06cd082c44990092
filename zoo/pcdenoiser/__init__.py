"""Pseudo-contractive denoisers (Wei, Chen & Li, ICML 2024): Jacobian-penalised training and PnP-Ishikawa.

Read top-down: `jacobian` (power iterations, the k-SPC penalty, the PC diagnostic), `operators` (FFT blur,
blur + decimation, Poisson prox), `solvers` (Ishikawa / Picard, PnPI-GD/HQS/FBS operators), `denoisers`
(deepinv's DRUNet, a small DnCNN), `metrics` (8-bit PSNR/SSIM), `restore` (one restoration end to end),
`module` (Lightning).
"""

from zoo.pcdenoiser.jacobian import jacobian_spectral_norm_sq, spc_operator, spc_penalty, sym_jacobian_lambda_max
from zoo.pcdenoiser.module import PCDenoiserModule
from zoo.pcdenoiser.operators import BlurDownsample, CircularBlur, check_kernel, least_squares_grad, poisson_prox
from zoo.pcdenoiser.restore import PnPConfig, restore
from zoo.pcdenoiser.solvers import check_exponents, ishikawa_steps, make_operator, picard, pnp_ishikawa

__all__ = [
    "BlurDownsample",
    "CircularBlur",
    "PCDenoiserModule",
    "PnPConfig",
    "check_exponents",
    "check_kernel",
    "ishikawa_steps",
    "jacobian_spectral_norm_sq",
    "least_squares_grad",
    "make_operator",
    "picard",
    "pnp_ishikawa",
    "poisson_prox",
    "restore",
    "spc_operator",
    "spc_penalty",
    "sym_jacobian_lambda_max",
]
