"""DDP settings a module declares, applied before Lightning wraps it; and the one-process rule enforced at setup."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy

from zoo.checks import one_process_reason
from zoo.errors import ZooError


class DistributedSettings(pl.Callback):
    """Two things DDP needs to know about a zoo module, at `setup` (after the process group exists, before
    `strategy.setup` wraps the module):

    - A module whose steps leave some parameters without a gradient (manual optimisation of two networks, as in
      GENTLE and the GANs; a two-stage schedule, as in SCoRe's probe stage) says so with the class attribute
      `ddp_find_unused_parameters = True`; DDP would otherwise stop at its second step ("parameters that were not
      used in producing the loss"). It is set here, not by the user's `--trainer.strategy`, so `auto`, `ddp`,
      `ddp_spawn` and a cluster launcher all get it. Lightning keeps the wrapper's arguments in `_ddp_kwargs`
      (its own registered `*_find_unused_parameters_true` strategies set the same key).
    - A run that must be one process (evaluation; a module with `single_process`) and still has several, from an
      environment the config did not name (a SLURM or torchrun launch), stops with the reason instead of
      reporting a share of the data.
    """

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.world_size > 1:
            reason = one_process_reason(type(pl_module), stage)
            if reason:
                raise ZooError(f"{reason}, but this run has {trainer.world_size} processes; set --trainer.devices 1 "
                               f"and --trainer.num_nodes 1")
        if isinstance(trainer.strategy, DDPStrategy) and getattr(pl_module, "ddp_find_unused_parameters", False):
            trainer.strategy._ddp_kwargs["find_unused_parameters"] = True
