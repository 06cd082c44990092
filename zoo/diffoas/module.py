"""`NeuralOperatorModule`: trains an FNO or a DeepONet on ``(a, f) -> u`` pairs with the relative L2 loss/metric."""

from __future__ import annotations

from typing import Literal, Optional

import lightning as L
import torch

from zoo.attached import attached_datamodule
from zoo.diffoas.models import build_model, relative_l2
from zoo.errors import ZooError
from zoo.hub import HubMixin


class NeuralOperatorModule(HubMixin, L.LightningModule):
    """Neural operator for the DiffOAS experiments (Table 1).

    Args:
        model: ``"fno"`` or ``"deeponet"``.
        in_channels: input fields per sample (coefficient channels + the right-hand side: 2 for Darcy and
            Helmholtz, 3 for solute diffusion).
        grid_size: nodes per side ``s`` (DeepONet's branch net is tied to it; FNO is not).
        modes, width, n_layers, projection_ratio: FNO (B.1: 12 modes, width 32, 4 layers).
        deeponet_width, deeponet_depth: DeepONet branch/trunk layers (B.1: 12 layers of 50, tanh).
        lr: Adam learning rate (B.1: 1e-3).
        weight_decay, step_size, gamma: Adam weight decay and StepLR (epochs) of the FNO reference code
            (Li et al.: 1e-4, every 100 epochs halve); the paper does not state them.
    """

    monitor = "val/rel_l2"
    monitor_mode = "min"

    def __init__(
        self,
        model: Literal["fno", "deeponet"] = "fno",
        in_channels: int = 2,
        grid_size: int = 102,
        modes: int = 12,
        width: int = 32,
        n_layers: int = 4,
        projection_ratio: float = 4.0,
        deeponet_width: int = 50,
        deeponet_depth: int = 12,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        step_size: int = 100,
        gamma: float = 0.5,
        domain_padding: Optional[float] = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        sizes = {"in_channels": in_channels, "grid_size": grid_size, "modes": modes, "width": width,
                 "n_layers": n_layers, "deeponet_width": deeponet_width, "deeponet_depth": deeponet_depth}
        if min(sizes.values()) < 1:  # modes=0 trained an FNO with no Fourier modes, without a word
            raise ZooError(f"NeuralOperatorModule: sizes must be >= 1, got "
                           f"{', '.join(f'{k}={v}' for k, v in sizes.items() if v < 1)}")
        if model == "fno":
            kw = dict(modes=modes, width=width, n_layers=n_layers, projection_ratio=projection_ratio,
                      domain_padding=domain_padding)
        else:
            kw = dict(width=deeponet_width, depth=deeponet_depth)
        self.net = build_model(model, in_channels, grid_size, **kw)
        # per-channel input normalisation and output scale from the training set (set in `setup`); buffers so
        # that checkpoints and Hub weights carry them
        self.register_buffer("in_mean", torch.zeros(in_channels))
        self.register_buffer("in_std", torch.ones(in_channels))
        self.register_buffer("out_std", torch.ones(1))

    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        if dm is not None and getattr(dm, "in_channels", self.hparams.in_channels) != self.hparams.in_channels:
            raise ZooError(f"model in_channels={self.hparams.in_channels} but the {dm.hparams.problem} data have "
                           f"{dm.in_channels} input fields (coefficient channels + right-hand side)")
        grid = dm.hparams.get("grid_size", self.hparams.grid_size) if dm is not None else self.hparams.grid_size
        if grid != self.hparams.grid_size:  # else Lightning's hparams merge failed with a traceback
            raise ZooError(f"model grid_size={self.hparams.grid_size} but the data's grid_size is {grid}: set both "
                           "to the same value")
        if stage == "fit" and dm is not None and hasattr(dm, "normalization_stats"):
            self.set_normalization(dm.normalization_stats())

    @torch.no_grad()
    def set_normalization(self, stats: dict[str, torch.Tensor]) -> None:
        """Input mean/std per channel and output std of the training set (see PDEDataModule.normalization_stats)."""
        for name in ("in_mean", "in_std", "out_std"):
            getattr(self, name).copy_(stats[name])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, s, s) raw input fields -> (B, 1, s, s) predicted solution."""
        z = (x - self.in_mean[:, None, None]) / self.in_std[:, None, None]
        return self.net(z) * self.out_std

    def _step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        err = relative_l2(self(x), y)
        self.log(f"{stage}/rel_l2", err.mean(), prog_bar=stage != "train", batch_size=x.shape[0],
                 sync_dist=stage != "train")
        return err

    def training_step(self, batch, batch_idx):
        # Li et al. train on the relative L2 itself, summed over the batch (their LpLoss(size_average=False), the
        # default of neuralop's LpLoss too). Under Adam the sum only sets the loss's weight against the weight
        # decay taken from the same code (a mean would make that decay batch-size times stronger).
        loss = self._step(batch, "train").sum()
        self.log("train/loss", loss, prog_bar=True, batch_size=batch[0].shape[0])
        return loss

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def predict_step(self, batch, batch_idx):
        return self(batch[0] if isinstance(batch, (tuple, list)) else batch)

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=self.hparams.step_size, gamma=self.hparams.gamma)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    def card_metadata(self) -> dict:
        return {"tags": ["diffoas", "neural-operator", self.hparams.model, "pde"]}
