"""`PCDenoiserModule`: `fit` trains a (k-strictly) pseudo-contractive denoiser; `test` restores degraded images with
PnP-Ishikawa (or Picard) using it, or denoises them.

Training loss (official `models/model_plain.py` + `loss_jacobian.py`):
    L1(D(y, sigma), x) + r * max(||J_{kI + (1-k)T}(y_1)||^2, 1 - eps),   T = D or I - D,
the norm by `power_iters` power steps at the batch's first noisy image, every step (`jacobian_checkpoint: 1`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Literal, Optional

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info

from zoo.attached import attached_datamodule, attached_trainer
from zoo.errors import ZooError
from zoo.hub import HubMixin, load_weights, resolve_weights
from zoo.pcdenoiser.denoisers import build_denoiser, check_sigma
from zoo.pcdenoiser.jacobian import jacobian_spectral_norm_sq, spc_operator, spc_penalty, sym_jacobian_lambda_max
from zoo.pcdenoiser.metrics import psnr, ssim
from zoo.pcdenoiser.restore import PnPConfig, restore
from zoo.pcdenoiser.solvers import check_exponents

CURVES = "restoration_curves.csv"


def _init_state(init_from: str) -> dict[str, torch.Tensor]:
    """Weights of a prior run: a .ckpt (weights-only), a HubMixin dir (model.safetensors), a run dir or a published
    Hub repo; a glob picks the newest match (`zoo.hub.resolve_weights`)."""
    return load_weights(resolve_weights(init_from, "init_from", "train the denoiser first"))


def best_iterate(curves: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The official scripts' best-iterate metric over restorations of shape (n, iters), grouped by kernel.

    Each official search run holds one kernel: it averages the per-image curves, then takes the best iterate of
    that mean curve (`np.max(dataset_psnr)`); the reported figure for Levin's 8 kernels is the mean of those eight
    per-kernel bests (26.79 = mean of the eight FBS values in `PnP_main_SPC+FBS_deblur.py`). So: max over iterations
    per group, then the mean over groups; and likewise the mean over groups of the 1-based best iteration. With a
    single group this is the best iterate of the mean curve."""
    best, at = [], []
    for g in torch.unique(groups):
        mean_curve = curves[groups == g].mean(0)
        best.append(mean_curve.max())
        at.append(mean_curve.argmax().to(torch.float64) + 1)
    return torch.stack(best).mean(), torch.stack(at).mean()


class PCDenoiserModule(HubMixin, L.LightningModule):
    """Pseudo-contractive denoiser (Wei, Chen & Li, ICML 2024) and its PnP-Ishikawa restorations.

    Args:
        denoiser: ``drunet`` (the paper's, deepinv's implementation) or ``dncnn`` (small, for CPU runs).
        channels: 1 (grey) or 3 (colour).
        nc, nb: DRUNet channels per scale and residual blocks per scale (official: 64-512, 4).
        dncnn_features, dncnn_depth: the small DnCNN's width and number of conv layers.
        lr, milestones, gamma: Adam and MultiStepLR in steps (official 1e-4, halved at 100k/200k/300k/400k).
        penalty_weight: r of the loss (official 1e-4); 0 trains an unconstrained denoiser.
        k, eps: k-strict pseudo-contractiveness (official 0.9) and the hinge 1 - eps (official 0.2).
        constrain: ``denoiser`` (T = D, the ICML paper's k-SPC denoiser) or ``residual`` (T = I - D, what the
            released models were trained with).
        power_iters: power iterations of the penalty, every step (official 10).
        diagnostic_every: log lambda_max(sym J_T) every this many training steps (0: only in val/test).
        diagnostic_iters: power iterations of that diagnostic and of evaluation-time norms.
        solver, scheme: PnP operator (``gd``, ``hqs``, ``fbs``) and iteration (``ishikawa`` or ``picard``).
        denoiser_sigma: the denoiser's sigma inside PnP, in [0, 1] units (e.g. 0.05, not 12.75).
        lam: balancing parameter lambda in [0, 1] image units; lam_per_kernel: one lambda per kernel index (the
            official deblurring searches tune it per Levin kernel), overrides lam for deblurring.
        a, b: Ishikawa exponents (0 < b < a, a + b <= 1); iters: PnP iterations.
        clamp_iterates, inner_clamp, hqs_decay: the official scripts' clipping and HQS schedule (see PnPConfig).
        admm_rho, admm_iters: Poisson deblurring's inner ADMM for prox_{lam F} (official rho 2, 10 steps).
        ishikawa_outer: ``alpha`` (the paper's u-update) or ``beta`` (the official Poisson-deblurring script's,
            which uses beta_k in both Ishikawa lines).
        ssim_curve: also track SSIM at every iterate and log ``test/ssim_best_iter``, the official scripts' SSIM
            (slow; the final SSIM is always logged).
        init_from: weights of a trained denoiser (run dir, .ckpt or model.safetensors dir) for restoration runs.
    """

    monitor = "val/psnr"
    monitor_mode = "max"

    def __init__(
        self,
        denoiser: Literal["drunet", "dncnn"] = "drunet",
        channels: int = 1,
        nc: list[int] = [64, 128, 256, 512],  # noqa: B006 - a config value, never mutated
        nb: int = 4,
        dncnn_features: int = 32,
        dncnn_depth: int = 5,
        lr: float = 1e-4,
        milestones: list[int] = [100_000, 200_000, 300_000, 400_000],  # noqa: B006
        gamma: float = 0.5,
        penalty_weight: float = 1e-4,
        k: float = 0.9,
        eps: float = 0.2,
        constrain: Literal["denoiser", "residual"] = "denoiser",
        power_iters: int = 10,
        diagnostic_every: int = 100,
        diagnostic_iters: int = 20,
        solver: Literal["gd", "hqs", "fbs"] = "fbs",
        scheme: Literal["ishikawa", "picard"] = "ishikawa",
        denoiser_sigma: float = 0.05,
        lam: float = 2.6,
        lam_per_kernel: Optional[list[float]] = None,
        a: float = 0.3,
        b: float = 0.15,
        iters: int = 300,
        clamp_iterates: bool = False,
        inner_clamp: bool = True,
        hqs_decay: Optional[float] = None,
        admm_rho: float = 2.0,
        admm_iters: int = 10,
        ishikawa_outer: Literal["alpha", "beta"] = "alpha",
        ssim_curve: bool = False,
        init_from: Optional[str] = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        check_sigma(denoiser_sigma, "denoiser_sigma")
        check_exponents(a, b)
        if penalty_weight < 0:
            raise ZooError(f"penalty_weight r must be >= 0, got {penalty_weight}")
        if not 0 <= k < 1:
            raise ZooError(f"k must be in [0, 1), got {k}")
        if not 0 <= eps < 1:
            raise ZooError(f"eps must be in [0, 1), got {eps}")
        if lam <= 0 or any(x <= 0 for x in (lam_per_kernel or [])):
            raise ZooError(f"lambda must be > 0, got lam={lam}, lam_per_kernel={lam_per_kernel}")
        if power_iters < 1 or diagnostic_iters < 1 or iters < 1 or admm_iters < 1:
            raise ZooError("power_iters, diagnostic_iters, iters and admm_iters must be >= 1")
        if admm_rho <= 0:
            raise ZooError(f"admm_rho must be > 0, got {admm_rho}")
        if hqs_decay is not None and hqs_decay <= 0:  # the official 1.02 / 1.025: lam / decay^k, sigma / decay^(k/2)
            raise ZooError(f"hqs_decay must be > 0, got {hqs_decay}")
        if ishikawa_outer not in ("alpha", "beta"):
            raise ZooError(f"ishikawa_outer must be 'alpha' or 'beta', got {ishikawa_outer!r}")
        self.denoiser = build_denoiser(denoiser, channels, nc, nb, dncnn_features, dncnn_depth)
        self._test_rows: list[dict] = []
        self._curves: list[dict[str, torch.Tensor]] = []
        self._val: list[dict] = []

    # ------------------------------------------------------------------ the denoiser and its operator T
    def forward(self, x: torch.Tensor, sigma) -> torch.Tensor:
        return self.denoiser(x, sigma)

    def constrained(self, sigma) -> "callable":
        """T at a fixed sigma: D, or I - D."""
        d = lambda z: self.denoiser(z, sigma)  # noqa: E731
        return d if self.hparams.constrain == "denoiser" else (lambda z: z - d(z))

    def jacobian_stats(self, y: torch.Tensor, sigma) -> dict[str, torch.Tensor]:
        """Detached ||J_{kI+(1-k)T}||^2 and lambda_max(sym J_T) (PC at y iff <= 1), per sample."""
        hp = self.hparams
        f = spc_operator(lambda z: self.denoiser(z, sigma), hp.k, hp.constrain)
        return {"jacobian_norm_sq": jacobian_spectral_norm_sq(f, y, hp.diagnostic_iters, create_graph=False),
                "lambda_max_sym": sym_jacobian_lambda_max(self.constrained(sigma), y, hp.diagnostic_iters)}

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        ch = getattr(dm, "channels", None)
        if ch is not None and ch != self.hparams.channels:
            raise ZooError(f"model channels={self.hparams.channels} but the data have {ch} channel(s)")
        if self.hparams.init_from and stage in ("fit", "test", "validate", "predict"):
            state = _init_state(self.hparams.init_from)
            own = self.state_dict()
            bad = [k for k in own if k not in state or tuple(state[k].shape) != tuple(own[k].shape)]
            if bad or any(k not in own for k in state):
                raise ZooError(f"init_from {self.hparams.init_from!r} does not fit this denoiser (e.g. {bad[:1]}); "
                               f"use the same denoiser/channels/nc/nb/dncnn_* as its run")
            self.load_state_dict(state)
            rank_zero_info(f"PCDenoiserModule: denoiser weights from {self.hparams.init_from}")

    # ------------------------------------------------------------------ training
    def training_step(self, batch, batch_idx):
        noisy, clean, sigma = batch
        hp = self.hparams
        l1 = F.l1_loss(self.denoiser(noisy, sigma), clean)
        loss = l1
        self.log("train/l1", l1, prog_bar=True, batch_size=noisy.shape[0])
        if hp.penalty_weight > 0:
            # official: the penalty at the first image of the batch only (img1[0:1]), with its noise level
            f = spc_operator(lambda z: self.denoiser(z, sigma[:1]), hp.k, hp.constrain)
            norm_sq = jacobian_spectral_norm_sq(f, noisy[:1], hp.power_iters, create_graph=True)
            loss = loss + hp.penalty_weight * spc_penalty(norm_sq, hp.eps)
            self.log("train/jacobian_norm_sq", norm_sq.detach().mean(), prog_bar=True, batch_size=1)
        if hp.diagnostic_every and self.global_step % hp.diagnostic_every == 0:
            lam_max = sym_jacobian_lambda_max(self.constrained(sigma[:1]), noisy[:1], hp.diagnostic_iters)
            self.log("train/lambda_max_sym", lam_max.mean(), batch_size=1)
            if hp.penalty_weight == 0:
                f = spc_operator(lambda z: self.denoiser(z, sigma[:1]), hp.k, hp.constrain)
                self.log("train/jacobian_norm_sq", jacobian_spectral_norm_sq(f, noisy[:1], hp.diagnostic_iters,
                                                                            create_graph=False).mean(), batch_size=1)
        if not torch.isfinite(loss):
            raise ZooError(f"loss is {float(loss)} at step {self.global_step}: lower lr or penalty_weight")
        self.log("train/loss", loss, batch_size=noisy.shape[0])
        return loss

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        # stepped after each optimiser step: the official loop's scheduler.step(n) before step n halves one step
        # earlier (cards/pcdenoiser.md, "Small training details")
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(self.hparams.milestones),
                                                     gamma=self.hparams.gamma)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------------ validation: denoising
    def validation_step(self, batch, batch_idx):
        out = self._denoise_eval(batch)
        self._val.append(out)
        self.log("val/psnr", out["psnr"].mean(), prog_bar=True, batch_size=out["psnr"].shape[0], sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        if self._val:
            for key in ("jacobian_norm_sq", "lambda_max_sym"):
                # the median over every DDP process's images (all_gather is the identity in one process)
                self.log(f"val/{key}", self.all_gather(torch.cat([o[key] for o in self._val])).flatten().median())
        self._val.clear()

    def _denoise_eval(self, batch) -> dict[str, torch.Tensor]:
        noisy, clean, sigma = batch["observed"], batch["clean"], batch["noise_sigma"]
        with torch.no_grad():
            est = self.denoiser(noisy, sigma)
        # no border crop: the official training loop's validation PSNR crops 1 px (border = scale)
        out = {"psnr": psnr(est, clean), "ssim": ssim(est, clean), "psnr_init": psnr(noisy, clean)}
        out.update(self.jacobian_stats(noisy, sigma))
        return out

    # ------------------------------------------------------------------ test: restoration (or denoising)
    def pnp_config(self, kernel_index: int) -> PnPConfig:
        hp = self.hparams
        lam = hp.lam
        if hp.lam_per_kernel:
            if kernel_index >= len(hp.lam_per_kernel):
                raise ZooError(f"lam_per_kernel has {len(hp.lam_per_kernel)} values, the data have kernel "
                               f"#{kernel_index}")
            lam = hp.lam_per_kernel[kernel_index]
        return PnPConfig(hp.solver, hp.scheme, hp.denoiser_sigma, lam, hp.a, hp.b, hp.iters, hp.clamp_iterates,
                         hp.inner_clamp, hp.hqs_decay, hp.admm_rho, hp.admm_iters, hp.ishikawa_outer)

    def test_step(self, batch, batch_idx):
        tasks = set(batch["task"])
        if len(tasks) != 1:
            raise ZooError(f"a test batch mixes tasks {sorted(tasks)}")
        task = tasks.pop()
        if task == "denoise":
            out = self._denoise_eval(batch)
            self._test_rows.append(out)
            for key in ("psnr", "ssim", "psnr_init"):
                self.log(f"test/{key}", out[key].mean(), batch_size=out[key].shape[0])
            return
        if batch["observed"].shape[0] != 1:
            raise ZooError("restoration test batches hold one image (test_batch_size: 1): kernels and sizes differ")
        clean, observed = batch["clean"], batch["observed"]
        kidx = int(batch["kernel_index"][0])
        cfg = self.pnp_config(kidx)
        kernel = batch["kernel"][0] if task in ("deblur", "sisr", "poisson_deblur") else None
        denoise = lambda x, s: self.denoiser(x, s)  # noqa: E731
        with torch.no_grad():
            run, curves = restore(task, observed, denoise, cfg, kernel=kernel, sf=int(batch["sf"][0]), clean=clean,
                                  ssim_curve=self.hparams.ssim_curve)
        est = run.u
        out = {"psnr": psnr(est, clean), "ssim": ssim(est, clean),
               "residual_final": run.residuals[-1].to(clean.dtype)}
        # the denoiser's Jacobian at the PnP sigma, at a noisy version of the clean image (seeded per image)
        g = torch.Generator(device="cpu").manual_seed(batch_idx)
        probe = clean + cfg.sigma * torch.randn(clean.shape, generator=g, dtype=clean.dtype).to(clean.device)
        out.update(self.jacobian_stats(probe, cfg.sigma))
        self._test_rows.append(out)
        self._curves.append({**{key: torch.stack(c).reshape(-1).cpu() for key, c in curves.items()},
                             "residual": torch.stack(run.residuals).reshape(-1).cpu(),
                             "kernel_index": torch.tensor(kidx)})
        for key in ("psnr", "ssim", "residual_final"):
            self.log(f"test/{key}", out[key].mean(), batch_size=1)
        if not math.isfinite(float(out["psnr"].mean())):
            raise ZooError("restoration diverged (non-finite PSNR)")

    def on_test_epoch_end(self) -> None:
        if self._test_rows:
            for key in ("jacobian_norm_sq", "lambda_max_sym"):
                vals = torch.cat([r[key] for r in self._test_rows])
                self.log(f"test/{key}_median", vals.median())
                self.log(f"test/{key}_max", vals.max())
                self.log("test/pc_fraction" if key == "lambda_max_sym" else "test/spc_fraction",
                         (vals <= 1.0).to(torch.float64).mean())
        if self._curves:
            psnr_curves = torch.stack([c["psnr"] for c in self._curves])
            kernels = torch.stack([c["kernel_index"] for c in self._curves])
            res_curve = torch.stack([c["residual"] for c in self._curves]).mean(0)
            # the official scripts report the best iterate of the mean curve, per kernel, averaged over kernels
            best, at = best_iterate(psnr_curves, kernels)
            self.log("test/psnr_best_iter", best)
            self.log("test/best_iter", at)
            if self.hparams.ssim_curve:
                self.log("test/ssim_best_iter", best_iterate(torch.stack([c["ssim"] for c in self._curves]),
                                                             kernels)[0])
            self._write_curves(psnr_curves.mean(0), res_curve)
        self._test_rows.clear()
        self._curves.clear()

    def _write_curves(self, psnr_curve: torch.Tensor, res_curve: torch.Tensor) -> None:
        if attached_trainer(self) is None or not self.trainer.is_global_zero:
            return
        path = Path(self.trainer.default_root_dir) / CURVES
        path.parent.mkdir(parents=True, exist_ok=True)  # a Trainer without logger has not made it
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["iter", "psnr_mean", "relative_change_mean"])
            for i, (p, r) in enumerate(zip(psnr_curve.tolist(), res_curve.tolist(), strict=True)):
                w.writerow([i + 1, f"{p:.6f}", f"{r:.6e}"])
        rank_zero_info(f"PCDenoiserModule: PSNR and residual curves in {path}")

    def card_metadata(self) -> dict:
        hp = self.hparams
        return {"tags": ["pcdenoiser", "image-restoration", "plug-and-play", hp.denoiser, hp.solver, hp.scheme],
                "base_model": None}
