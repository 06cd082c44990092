"""MGAN baseline: the monotone GAN of Hosseini, Hsu & Taghvaei ("Conditional sampling with monotone GANs"), as the
GENTLE authors' `train_mgan.py` configures it (the paper's optional baseline).

A generator F(z2, x) maps Gaussian noise z2 ~ N(0, I) (the outcome's dimension, 1 here) and a covariate x to an
outcome; with the identity on x it is the block-triangular map T(x, z2) = (x, F(z2, x)) from the reference
(x-marginal ⊗ N(0, I)) to the joint law of (x, y). A discriminator D(x, y) plays the least-squares GAN game, and a
penalty rewards monotone T:

    generator:      MSE(D(x̃, F(z)), 1) - c · mean_i ⟨F(z_i) - F(z'_i), z2_i - z2'_i⟩
    discriminator:  ½ (MSE(D(x, y), 1) + MSE(D(x̃, F(z)), 0))

with x̃, x̃' fresh draws of training covariates (independent of the real batch (x, y)), z = (z2, x̃) and z' an
independent second draw, c = ``monotone_param``. Both players are `MLPM` (GENTLE's network). In the official
file the names are swapped relative to ours: its ``y_data`` are the covariates (the first value
`datasets.data_preparation` returns, the ``context_vars``) and its ``x_data`` the outcome.
"""

from __future__ import annotations

import torch
from torch.nn.functional import mse_loss

from zoo.attached import attached_datamodule
from zoo.errors import ZooError
from zoo.gentle.module import ConditionalGeneratorModule
from zoo.gentle.nets import MLPM

ADAM_BETAS = (0.5, 0.999)  # train_mgan.py: betas=(0.5, 0.999) for both players


def lsgan_generator_loss(d_fake: torch.Tensor) -> torch.Tensor:
    """Least-squares GAN, generator: MSE(D(fake), 1)."""
    return mse_loss(d_fake, torch.ones_like(d_fake))


def lsgan_discriminator_loss(d_real: torch.Tensor, d_fake: torch.Tensor) -> torch.Tensor:
    """Least-squares GAN, discriminator: ½ (MSE(D(real), 1) + MSE(D(fake), 0))."""
    return 0.5 * (mse_loss(d_real, torch.ones_like(d_real)) + mse_loss(d_fake, torch.zeros_like(d_fake)))


def monotone_term(f: torch.Tensor, f_prime: torch.Tensor, z2: torch.Tensor, z2_prime: torch.Tensor) -> torch.Tensor:
    """Per pair ⟨F(z_i) - F(z'_i), z2_i - z2'_i⟩ for (N, d_y) outputs and noises: the outcome block of
    ⟨T(z) - T(z'), z - z'⟩. The generator subtracts c times its mean, so it is rewarded for increasing in z2."""
    return ((f - f_prime) * (z2 - z2_prime)).sum(-1)


class MGANModule(ConditionalGeneratorModule):
    """Monotone GAN baseline (official `train_mgan.py`): generator F([z2, x]) and discriminator D([x, y]), both
    `MLPM`, one generator step then one discriminator step on every batch of training rows.

    Official behaviour kept on purpose (cards/gentle.md, "MGAN baseline"):

    * the covariates the generator sees are a fresh draw without replacement from the training rows (the official
      ``next(iter(ydata_loader))``: a new shuffle's first batch), independent of the real batch;
    * the monotone term pairs two *different* covariates x̃_i ≠ x̃'_i, i.e. it asks the joint map T(x, z2) =
      (x, F(z2, x)) to be monotone, not F(·, x) at each fixed x. The term is linear in F and z2' is independent and
      centred, so its expectation is 2 E⟨F(z), z2⟩ with either pairing: pairing different covariates adds variance,
      not bias. Its covariate block ‖x̃ - x̃'‖² is a constant the loss leaves out; the official "percent monotone"
      diagnostic adds it back (``train/monotone``, the fraction of pairs with ⟨T(z) - T(z'), z - z'⟩ ≥ 0);
      ``train/monotone_outcome`` is the fraction without it;
    * the discriminator's fake rows are the generator's draws from *before* its step (the official ``Fz.detach()``);
    * both learning rates decay by ``lr_decay`` once per epoch (official StepLR with step_size = batches per epoch,
      stepped every batch).

    Deviations: the official loader drops a last partial batch; ours trains on it (none at toy1 200 x 5, batch 100).
    The official diagnostic divides the batches' sum by ceil(n_train / batch) with its default n_train = 10000
    whatever the data size; ours is logged for every batch.

    Args:
        x_dim: number of covariates (toy1 3, cps 9).
        monotone_param: c, weight of the monotone term (``--monotone_param`` 0.01; 0 = a plain conditional LSGAN).
        lr: Adam learning rate of both players (``--learning_rate`` 2e-4; betas (0.5, 0.999)).
        lr_decay: γ, both learning rates are multiplied by it after every epoch (official StepLR gamma 0.995).
        n_eval_samples: draws per evaluation covariate.
    """

    batch_by = "row"

    def __init__(self, x_dim: int = 3, monotone_param: float = 0.01, lr: float = 2e-4, lr_decay: float = 0.995,
                 n_eval_samples: int = 1000):
        super().__init__(x_dim, n_eval_samples)
        self.save_hyperparameters()
        if not monotone_param >= 0:
            raise ZooError(f"MGAN monotone_param={monotone_param} is not allowed: it must be >= 0")
        if not lr > 0:
            raise ZooError(f"MGAN lr={lr} is not allowed: it must be > 0")
        if not 0 < lr_decay <= 1:
            raise ZooError(f"MGAN lr_decay={lr_decay} is not allowed: it must be in (0, 1]")
        self.automatic_optimization = False
        self.generator = MLPM(1 + x_dim)  # F([z2, x]), the official torch.cat((z2, z1), 1)
        self.discriminator = MLPM(x_dim + 1)  # D([x, y]), the official torch.cat((y_data, x_data), 1)
        self.register_buffer("train_covariates", torch.zeros(0, x_dim), persistent=False)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        dm = attached_datamodule(self)
        if stage == "fit" and dm is not None:
            # the covariates of every training row (standardised): the x-marginal the generator's x̃ are drawn from
            x_distinct, y_groups = dm.train_groups()
            rows = torch.as_tensor(x_distinct, dtype=torch.float32).repeat_interleave(
                torch.as_tensor([len(g) for g in y_groups]), dim=0)
            self.train_covariates = rows.to(self.device)

    # --------------------------------------------------------------------------------------- sampling
    def F(self, z2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(N, 1) noise, (N, x_dim) standardised covariates -> (N, 1) standardised outcomes."""
        return self.generator(torch.cat((z2, x), dim=-1)).reshape(-1, 1)

    def D(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.discriminator(torch.cat((x, y), dim=-1)).reshape(-1, 1)

    def sample_standardised(self, xs: torch.Tensor, n: int) -> torch.Tensor:
        rows = xs.repeat_interleave(n, dim=0)
        return self.F(torch.randn(len(rows), 1, device=rows.device, dtype=rows.dtype), rows).reshape(xs.shape[0], n)

    def draw_reference(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x̃, z2): n training covariates drawn without replacement, independent of the batch (as the official code:
        a fresh shuffle of the covariate rows, its first n), then n standard normal noises."""
        if len(self.train_covariates) < n:
            raise ZooError(f"MGAN needs at least {n} training rows to draw a batch of covariates from, has "
                           f"{len(self.train_covariates)}: fit it through a ConditionalDataModule")
        pick = torch.randperm(len(self.train_covariates), device=self.device)[:n]
        x_ref = self.train_covariates[pick]
        return x_ref, torch.randn(n, 1, device=self.device)

    # --------------------------------------------------------------------------------------- training
    def configure_optimizers(self):
        hp = self.hparams
        opts = [torch.optim.Adam(net.parameters(), lr=hp.lr, betas=ADAM_BETAS)
                for net in (self.generator, self.discriminator)]
        return opts, [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=hp.lr_decay) for opt in opts]

    def training_step(self, batch, batch_idx):
        y, x = batch
        y, n = y.reshape(-1, 1), len(y)
        opt_f, opt_d = self.optimizers()
        # generator step (the official order: z1, z2, then z1', z2')
        with self.toggled_optimizer(opt_f):  # the discriminator's weights off the graph (DDP expects a grad for all)
            x_ref, z2 = self.draw_reference(n)
            fz = self.F(z2, x_ref)
            x_ref2, z2_prime = self.draw_reference(n)
            monotone = monotone_term(fz, self.F(z2_prime, x_ref2), z2, z2_prime)
            generator_lsgan = lsgan_generator_loss(self.D(x_ref, fz))
            loss = generator_lsgan - self.hparams.monotone_param * monotone.mean()
            opt_f.zero_grad()
            self.manual_backward(loss, inputs=list(self.generator.parameters()))
            opt_f.step()
        # discriminator step on the generator's draws from before its step
        d_loss = lsgan_discriminator_loss(self.D(x, y), self.D(x_ref, fz.detach()))
        opt_d.zero_grad()
        self.manual_backward(d_loss, inputs=list(self.discriminator.parameters()))
        opt_d.step()
        with torch.no_grad():
            covariate_block = (x_ref - x_ref2).square().sum(-1)
        self.log("train/loss", loss.detach(), prog_bar=True, batch_size=n)
        self.log("train/generator_loss", generator_lsgan.detach(), batch_size=n)
        self.log("train/discriminator_loss", d_loss.detach(), batch_size=n)
        self.log("train/monotone_term", monotone.mean().detach(), batch_size=n)
        self.log("train/monotone", (monotone.detach() + covariate_block >= 0).float().mean(), batch_size=n)
        self.log("train/monotone_outcome", (monotone.detach() >= 0).float().mean(), batch_size=n)

    def on_train_epoch_start(self) -> None:
        # the official decay after every epoch, made as the next epoch starts (every epoch trains at the same rate
        # as with a decay at the epoch's end): a hook that a resumed fit runs once, whatever bounds it
        if self.current_epoch > 0:
            for scheduler in self.lr_schedulers():
                scheduler.step()

    def card_metadata(self) -> dict:
        return {"tags": ["gentle", "baseline", "mgan", "monotone-gan", "conditional-generation"], "base_model": None}
