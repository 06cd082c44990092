"""The training progress bar: batches against a total in batches, and no meaningless fields."""

from __future__ import annotations

from typing import Union

from lightning.pytorch.callbacks import TQDMProgressBar


class ZooProgressBar(TQDMProgressBar):
    """Lightning's bar counts micro-batches but, under `max_steps`, caps its total at the remaining optimizer steps
    (so with gradient accumulation the count overshoots its total and the ETA reaches 0 halfway). Here the total is
    the epoch's micro-batches, capped at what the remaining optimizer steps need; the logger version (`v_num`,
    which is the stage name in a zoo run dir) is not shown."""

    @property
    def total_train_batches(self) -> Union[int, float]:
        trainer = self.trainer
        total = trainer.num_training_batches
        if trainer.max_steps is not None and trainer.max_steps > 0:
            remaining = (trainer.max_steps - trainer.global_step) * trainer.accumulate_grad_batches
            total = min(total, remaining)
        return total

    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items
