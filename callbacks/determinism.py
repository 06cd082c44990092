"""PyTorch's deterministic algorithms for a run on CPU, so a seeded run repeats to the bit on the same machine."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.accelerators import CPUAccelerator


class DeterministicOnCPU(pl.Callback):
    """Turns on `torch.use_deterministic_algorithms` (warn-only) while a run on CPU lasts, and sets it back after.

    Some CPU kernels add in the order their threads finish: `index_put_` with `accumulate=True`, which is the
    backward of indexing a tensor with repeated indices (`feats[neighbors]`), and `put_`. A seeded PMTR fit on two
    threads then ended with other weights in about one run of ten (up to 2e-3 after two Adam steps), so neither a
    repeat nor an exact resume could be told from a broken one. In deterministic mode these kernels sort first
    (PMTR's training step: no measurable cost). No kernel the smoke configs run on CPU lacks a deterministic form
    (`tests/test_smoke_configs.py` fails on the warning that would say so; warn-only, should one appear).
    Uninitialised memory is not filled (`fill_uninitialized_memory`): that is a debugging aid, not determinism.

    The zoo CLI adds it unless the config sets `trainer.deterministic`, which Lightning then applies as given
    (`false` keeps the threaded kernels). On GPU it does nothing: deterministic CUDA kernels can be much slower,
    so there it is the user's choice (`--trainer.deterministic true`)."""

    def __init__(self) -> None:
        self._previous: tuple[bool, bool, bool] | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(trainer.accelerator, CPUAccelerator) or self._previous is not None:
            return
        self._previous = (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled(),
                          torch.utils.deterministic.fill_uninitialized_memory)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()  # Lightning skips `teardown` when a run fails or is interrupted

    def _restore(self) -> None:
        if self._previous is None:
            return
        enabled, warn_only, fill = self._previous
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill
        self._previous = None
