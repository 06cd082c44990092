"""What a LightningModule is attached to, through Lightning's public API: `module.trainer` raises when no trainer
is attached (a module built in a notebook, by `from_pretrained`, or by a test), so each helper answers None there."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as L


def attached_trainer(module: L.LightningModule) -> L.Trainer | None:
    try:
        return module.trainer
    except RuntimeError:  # Lightning: "<Module> is not attached to a `Trainer`."
        return None


def attached_datamodule(module: L.LightningModule) -> Any:
    return getattr(attached_trainer(module), "datamodule", None)
