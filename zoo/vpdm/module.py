"""`VPDMModule`: frozen timm features -> VPOT vague condition -> conditional feature DDPM; one model for all classes.

Training: L = L_diff + lambda * L_OT over normal images of every class. Test: partially noise each image's tokens,
denoise them under the condition, anomaly map = smoothed ||x - x_hat|| upsampled to the image, image score = the
map's maximum; image / pixel AUROC and AUPRO per class and their means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Sequence

import lightning as L
import torch
from torch import nn

from zoo.backbones import timm_model
from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.vpdm.diffusion import ConditionalDenoiser, build_scheduler, diffusion_loss, partial_denoise, sampling_scheduler
from zoo.vpdm.metrics import anomaly_map, defect_error_ratio, per_class_metrics
from zoo.vpdm.vpot import ot_loss, prototype_cost, sinkhorn_log, vague_condition


class FeatureExtractor(nn.Module):
    """UniAD-style tokens: timm ``features_only`` stages resized to ``feature_size`` and concatenated (B, D, h, w),
    put on the unit scale the diffusion schedule assumes (our choice; the paper's normalisation is not available
    here): ``token`` layer-normalises each token over channels; ``channel`` standardises each channel with the
    mean and variance of the training tokens (a BatchNorm without affine, cumulative statistics), which keeps a
    token's norm, i.e. the information that an abnormal token is larger or smaller than normal ones."""

    def __init__(self, backbone: str, pretrained: bool, out_indices: Sequence[int], feature_size: int,
                 norm: Literal["token", "channel"] = "token"):
        super().__init__()
        if norm not in ("token", "channel"):
            raise ZooError(f"feature_norm {norm!r} is not one of 'token', 'channel'")
        self.net = timm_model(backbone, pretrained, fallback="set model.init_args.pretrained: false",
                              features_only=True, out_indices=tuple(out_indices))
        self.feature_size = feature_size
        self.dim = sum(self.net.feature_info.channels())
        for p in self.net.parameters():
            p.requires_grad_(False)
        # eval from the start, not only in train(): Lightning (2.2 on) keeps each submodule's mode and calls no
        # model.train() when a fit starts, so a backbone built in train mode would train its batch norms
        self.net.eval()
        self.norm = norm
        # momentum=None: the running statistics are the plain average over every training batch seen
        self.standardize = nn.BatchNorm2d(self.dim, affine=False, momentum=None) if norm == "channel" else None

    def train(self, mode: bool = True):
        super().train(mode)
        self.net.eval()  # frozen backbone: its batch-norm statistics stay the pretrained ones
        return self

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        s = (self.feature_size, self.feature_size)
        feats = [nn.functional.interpolate(f, size=s, mode="bilinear", align_corners=False) for f in self.net(images)]
        x = torch.cat(feats, 1)
        if self.standardize is not None:
            return self.standardize(x)  # batch statistics while training (and accumulated), the averages after
        return nn.functional.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],)).permute(0, 3, 1, 2).contiguous()


class VPDMModule(HubMixin, L.LightningModule):
    """VPDM for multi-class anomaly detection.

    Args:
        backbone, pretrained, out_indices, feature_size: frozen timm feature extractor (provisional design, as
            UniAD: efficientnet_b4 stages 1-4, 272 channels, 14x14 tokens at 224 px).
        feature_norm: ``token`` (layer norm per token) or ``channel`` (per-channel standardisation with the
            training tokens' statistics); see FeatureExtractor.
        num_prototypes: K, the learnable prototypes shared by all classes.
        ot_epsilon, ot_cost, ot_max_iter, ot_tol: VPOT's entropic regularisation, cost, and Sinkhorn stopping rule.
        lambda_ot: weight of L_OT in L = L_diff + lambda * L_OT.
        condition: ``prototype`` (VPDM) or ``input`` (the raw tokens as the condition: the identical-shortcut
            ablation).
        num_train_timesteps, beta_schedule, beta_start, beta_end: the DDPM forward process.
        block_out_channels, layers_per_block, norm_num_groups, attention: the UNet2DModel denoiser.
        sampler, num_inference_steps, strength: the test-time partial noising (``strength`` of the inference
            steps) and reverse process.
        num_samples: test-time reconstructions from independent noise draws, averaged before the error (our
            choice, 1 = one draw: the average removes the sampling noise from the error of normal tokens).
        map_sigma: Gaussian smoothing of the anomaly map (pixels).
        fpr_limit: AUPRO's FPR integration limit (MVTec protocol: 0.3).
        lr, weight_decay: AdamW.
        eval_seed: seed of the test-time noise (per batch: eval_seed + batch index), so evaluation is reproducible.
        example_maps: save a PNG with this many anomalous test images and their maps to the run dir (0: none).
    """

    def __init__(
        self,
        backbone: str = "efficientnet_b4",
        pretrained: bool = True,
        out_indices: Sequence[int] = (0, 1, 2, 3),
        feature_size: int = 14,
        feature_norm: Literal["token", "channel"] = "token",
        num_prototypes: int = 64,
        ot_epsilon: float = 0.05,
        ot_cost: Literal["sqeuclidean", "cosine"] = "sqeuclidean",
        ot_max_iter: int = 1000,
        ot_tol: float = 1e-5,
        lambda_ot: float = 1.0,
        condition: Literal["prototype", "input"] = "prototype",
        num_train_timesteps: int = 1000,
        beta_schedule: Literal["linear", "scaled_linear", "squaredcos_cap_v2", "laplace", "sigmoid"] = "linear",
        beta_start: float = 1e-4,
        beta_end: float = 0.02,
        block_out_channels: Sequence[int] = (256, 512),
        layers_per_block: int = 2,
        norm_num_groups: int = 32,
        attention: bool = False,
        sampler: Literal["ddpm", "ddim"] = "ddim",
        num_inference_steps: int = 10,
        strength: float = 0.5,
        num_samples: int = 1,
        map_sigma: float = 4.0,
        fpr_limit: float = 0.3,
        lr: float = 1e-4,
        weight_decay: float = 1e-4,
        eval_seed: int = 0,
        example_maps: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        if num_prototypes < 1:
            raise ZooError(f"num_prototypes must be >= 1, got {num_prototypes}")
        if num_samples < 1:
            raise ZooError(f"num_samples must be >= 1, got {num_samples}")
        if num_inference_steps < 1 or num_train_timesteps < 1:  # 0 divides by zero in the scheduler at test time
            raise ZooError(f"num_inference_steps and num_train_timesteps must be >= 1, got {num_inference_steps}, "
                           f"{num_train_timesteps}")
        if not 0 <= strength <= 1:  # checked again at test time (partial_denoise); refuse it before training
            raise ZooError(f"strength must be in [0, 1], got {strength}")
        if not out_indices or not block_out_channels:  # no feature level / no UNet block: failed deep in torch
            raise ZooError(f"out_indices and block_out_channels must not be empty, got {list(out_indices)}, "
                           f"{list(block_out_channels)}")
        if condition not in ("prototype", "input"):
            raise ZooError(f"condition {condition!r} is not one of 'prototype', 'input'")
        self.features = FeatureExtractor(backbone, pretrained, out_indices, feature_size, feature_norm)
        d = self.features.dim
        self.prototypes = nn.Parameter(torch.randn(num_prototypes, d))
        self.denoiser = ConditionalDenoiser(d, block_out_channels, layers_per_block, norm_num_groups, attention)
        self.scheduler = build_scheduler(num_train_timesteps, beta_schedule, beta_start, beta_end)
        self.sampler = sampling_scheduler(self.scheduler, sampler)
        self._outputs: list[dict[str, torch.Tensor]] = []

    def train(self, mode: bool = True):
        super().train(mode)  # FeatureExtractor.train keeps the backbone in eval mode
        return self

    def condition_of(self, x: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(condition (B, D, h, w), L_OT or None) for tokens x (B, D, h, w)."""
        if self.hparams.condition == "input":
            return x, None
        b, d, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)  # (B, N, D)
        cost = prototype_cost(tokens, self.prototypes, self.hparams.ot_cost)
        with torch.no_grad():
            # in the features' dtype: float32 holds the marginals to ot_tol (1e-5), and the Sinkhorn switches to the
            # log domain by itself where float32's kernel would under/overflow
            plan = sinkhorn_log(cost.detach(), self.hparams.ot_epsilon, max_iter=self.hparams.ot_max_iter,
                                tol=self.hparams.ot_tol).plan
        cond = vague_condition(plan, self.prototypes)  # gradient reaches P through L_diff too: one objective
        return cond.transpose(1, 2).reshape(b, d, h, w), ot_loss(plan, cost)

    def training_step(self, batch, batch_idx):
        x = self.features(batch["image"])
        cond, l_ot = self.condition_of(x)
        l_diff = diffusion_loss(self.denoiser, self.scheduler, x, cond)
        loss = l_diff if l_ot is None else l_diff + self.hparams.lambda_ot * l_ot
        bs = x.shape[0]
        self.log("train/l_diff", l_diff, batch_size=bs)
        if l_ot is not None:
            self.log("train/l_ot", l_ot, batch_size=bs)
        self.log("train/loss", loss, prog_bar=True, batch_size=bs)
        if not torch.isfinite(loss):
            raise ZooError(f"non-finite loss {float(loss)} at step {self.global_step}")
        return loss

    @torch.no_grad()
    def reconstruct(self, images: torch.Tensor, generator: Optional[torch.Generator] = None):
        """(tokens x, reconstruction x_hat) of a batch of images."""
        x = self.features(images)
        cond, _ = self.condition_of(x)
        x_hat = sum(partial_denoise(self.denoiser, self.sampler, x, cond, self.hparams.strength,
                                    self.hparams.num_inference_steps, generator)
                    for _ in range(self.hparams.num_samples)) / self.hparams.num_samples
        return x, x_hat

    def _maps(self, batch, batch_idx):
        g = torch.Generator(device=self.device).manual_seed(self.hparams.eval_seed + batch_idx)
        x, x_hat = self.reconstruct(batch["image"], g)
        return anomaly_map(x, x_hat, tuple(batch["image"].shape[-2:]), self.hparams.map_sigma)

    def test_step(self, batch, batch_idx):
        maps = self._maps(batch, batch_idx)
        self._outputs.append({"map": maps.half().cpu(), "score": maps.flatten(1).amax(1).cpu(),
                              "label": batch["label"].cpu(), "mask": batch["mask"][:, 0].bool().cpu(),
                              "class_id": batch["class_id"].cpu(), "image": batch["image"].cpu()
                              if self.hparams.example_maps else torch.empty(0)})

    def on_test_epoch_start(self):
        self._outputs = []

    def on_test_epoch_end(self):
        if not self._outputs:
            return
        cat = {k: torch.cat([o[k] for o in self._outputs]) for k in self._outputs[0]}
        dm = getattr(self.trainer, "datamodule", None)
        names = list(getattr(dm, "class_names", []) or [])
        maps = cat["map"].float()
        out = per_class_metrics(cat["score"], cat["label"], maps, cat["mask"].float(), cat["class_id"], names,
                                self.hparams.fpr_limit)
        out["defect_error_ratio"] = defect_error_ratio(maps, cat["mask"].float())
        for k, v in out.items():
            self.log(f"test/{k}", v)
        if self.hparams.example_maps and self.trainer.log_dir:
            self._save_examples(cat, Path(self.trainer.log_dir) / "example_maps.png")
        self._outputs = []

    def _save_examples(self, cat, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        idx = (cat["label"] == 1).nonzero()[:, 0][: self.hparams.example_maps].tolist()
        if not idx:
            return
        fig, axes = plt.subplots(3, len(idx), figsize=(2 * len(idx), 6), squeeze=False)
        vmax = float(cat["map"].float().max())
        for j, i in enumerate(idx):
            img = cat["image"][i].permute(1, 2, 0)
            img = (img - img.min()) / (img.max() - img.min() + 1e-8)
            for r, (a, title) in enumerate([(img, "image"), (cat["mask"][i].float(), "mask"),
                                            (cat["map"][i].float(), f"map ({self.hparams.condition})")]):
                axes[r, j].imshow(a, cmap=None if r == 0 else "magma", vmin=None if r == 0 else 0,
                                  vmax=None if r != 2 else vmax)
                axes[r, j].set_axis_off()
                if j == 0:
                    axes[r, j].set_title(title, fontsize=8, loc="left")
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        plt.close(fig)

    def predict_step(self, batch, batch_idx):
        return self._maps(batch, batch_idx)

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    def card_metadata(self) -> dict:
        hp = self.hparams
        base = None
        if hp.pretrained:
            base = self.features.net.pretrained_cfg.get("hf_hub_id") or f"timm/{hp.backbone}"
        return {"tags": ["vpdm", "anomaly-detection", "diffusion", "optimal-transport", f"condition-{hp.condition}"],
                "base_model": base}
