"""Stop a run at the first non-finite loss, before the optimizer step can spoil the weights."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from callbacks.last_checkpoint import last_checkpoint_path
from zoo.errors import ZooError


class NaNGuard(pl.Callback):
    """Raises a `ZooError` when the training loss is NaN/inf.

    The check runs in `on_before_backward`, i.e. before gradients and the optimizer step, so the last
    checkpoint written (`last.ckpt`) still holds the last good weights and nothing is overwritten.
    """

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        if not torch.isfinite(loss.detach()).all():
            last = last_checkpoint_path(trainer) or "none written yet"
            raise ZooError(
                f"non-finite training loss ({loss.item()}) at global step {trainer.global_step}, "
                f"epoch {trainer.current_epoch}; stopped; last good checkpoint: {last}"
            )
