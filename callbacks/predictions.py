"""`zoo predict` keeps what it predicts: the outputs of every predict batch go to the run dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning_utilities.core.apply_func import apply_to_collection

PREDICTIONS = "predictions"


def _to_cpu(obj: Any) -> Any:
    """Tensors to the CPU and numpy values to tensors and numbers, through any nesting of lists, tuples and dicts,
    so that the file loads with weights_only=True."""
    obj = apply_to_collection(obj, torch.Tensor, lambda t: t.detach().cpu())
    obj = apply_to_collection(obj, np.ndarray, lambda a: torch.from_numpy(np.ascontiguousarray(a)))
    return apply_to_collection(obj, np.generic, lambda v: v.item())


class PredictionWriter(BasePredictionWriter):
    """Writes `<run_dir>/predictions/predict.pt` (prediction runs in one process: `one_process_reason`): the list
    of the module's `predict_step` outputs, one item per batch in loader order, on the CPU, with the indices of the
    examples in each batch. Tensors, numbers, strings and lists/dicts of them, so `torch.load(path,
    weights_only=True)` reads it back without unpickling arbitrary objects."""

    def __init__(self, run_dir: str):
        super().__init__(write_interval="epoch")
        self.out_dir = Path(run_dir) / PREDICTIONS
        self.path: Path | None = None

    def write_on_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, predictions: Any,
                           batch_indices: Any) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / "predict.pt"
        torch.save({"predictions": _to_cpu(predictions), "batch_indices": _to_cpu(batch_indices)}, self.path)
