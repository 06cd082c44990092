"""`last.ckpt` for exact resume: every epoch, every N optimizer steps if asked, and once more at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn

from zoo.data import is_resumable
from zoo.errors import ZooError

LAST = "last.ckpt"


class LastCheckpoint(pl.Callback):
    """Writes `<dirpath>/last.ckpt` through `Trainer.save_checkpoint` (weights, optimizer, loop and stateful
    data-loader state) at every epoch end, every `every_n_train_steps` optimizer steps, and when training ends,
    so it always holds the newest weights (a step-based checkpoint alone stops at the last multiple of N).
    Only after an optimizer step, never in the middle of a gradient-accumulation window."""

    def __init__(self, dirpath: str | Path, every_n_train_steps: Optional[int] = None):
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ZooError(f"checkpoint_every_n_steps must be a positive number of steps, got {every_n_train_steps}")
        self.dirpath = Path(dirpath)
        self.every_n_train_steps = every_n_train_steps
        self.last_model_path = ""
        self._saved_step = -1

    def _save(self, trainer: pl.Trainer) -> None:
        if trainer.global_step == self._saved_step or trainer.sanity_checking:
            return
        path = self.dirpath / LAST
        # every rank calls it; the strategy writes once. A full checkpoint (optimizer, loops, callbacks) is the
        # point of last.ckpt, so weights_only is said, not left to Lightning's default and its log line
        trainer.save_checkpoint(path, weights_only=False)
        self._saved_step = trainer.global_step
        self.last_model_path = str(path)

    def on_train_start(self, trainer, pl_module) -> None:
        if not is_resumable(trainer.train_dataloader):
            rank_zero_warn("the training loader is not stateful, so a run resumed mid-epoch restarts that epoch's "
                           "data; build it with zoo.data.train_loader for an exact resume")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        n = self.every_n_train_steps
        if n and trainer.global_step % n == 0 and trainer.global_step > 0:
            self._save(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._save(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"saved_step": self._saved_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_step = state_dict.get("saved_step", -1)


def last_checkpoint_path(trainer: pl.Trainer) -> str:
    """The run's newest `last.ckpt` written so far ("" if none)."""
    for cb in trainer.callbacks:
        if isinstance(cb, LastCheckpoint) and cb.last_model_path:
            return cb.last_model_path
    return getattr(trainer.checkpoint_callback, "last_model_path", "") or ""
