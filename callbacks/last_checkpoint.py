"""`last.ckpt` for exact resume: every epoch, every N optimizer steps if asked, and once more at the end, with the
random number generators' states (Lightning's checkpoint does not hold them)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_warn

from zoo.data import flat_loaders, is_resumable
from zoo.errors import ZooError

LAST = "last.ckpt"


class LastCheckpoint(Checkpoint):
    """Writes `<dirpath>/last.ckpt` through `Trainer.save_checkpoint` (weights, optimizer, loop and stateful
    data-loader state) at every epoch end, every `every_n_train_steps` optimizer steps, and when training ends,
    so it always holds the newest weights (a step-based checkpoint alone stops at the last multiple of N).
    Only after an optimizer step, never in the middle of a gradient-accumulation window.

    Where in an epoch's end it saves decides what a resume from there gets, because Lightning resumes from an
    epoch-end checkpoint in one of two ways. A fit bounded by epochs goes on with the next epoch, so the save must
    come after every `on_train_epoch_end` hook, or what a hook changed (a rate decayed, a statistic) is lost: this
    class is a Lightning `Checkpoint`, whose hook Lightning calls after the module's and the other callbacks'. A
    fit bounded by `max_steps` runs the finished epoch's end hooks again, so the save must come before all of them,
    or their changes are made twice: there the save is made by `before_epoch_end`, a plain callback that must
    come first in the trainer's callbacks (zoo's trainer puts it there), and this class's own save then finds the
    step saved. Being a `Checkpoint` also keeps Lightning from adding a `ModelCheckpoint` of its own, which wrote a
    second full checkpoint each epoch under `logs/fit/checkpoints` for a module without a monitor.

    Its own state carries the global RNGs (torch, CUDA, NumPy, Python) as they stood at the save, and a resumed fit
    sets them back when training starts: after the training loader was built (it draws its shuffling seed at the
    fit's start, as the uninterrupted run did) and after the sanity check (which Lightning runs on a copy of the
    RNGs). Without them, a module that draws noise in its steps (dropout, GAN and diffusion noise, GENTLE's
    u-samples, sampled trajectories) would go on with other draws than the uninterrupted run. Under DDP the saving
    rank's states are restored on every rank: `seed_everything` seeds all ranks alike, and they draw alike.

    For this to be exact, nothing may draw from the global RNGs when Lightning makes a loader's iterator, which a
    resumed fit does at other moments than the uninterrupted run: `zoo.data.train_loader` gives its loaders a
    generator of their own for the workers' base seed (`tests/framework/test_reliability.py` resumes mid-epoch
    and at epoch boundaries with steps that draw noise)."""

    def __init__(self, dirpath: str | Path, every_n_train_steps: Optional[int] = None):
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ZooError(f"checkpoint_every_n_steps must be a positive number of steps, got {every_n_train_steps}")
        self.dirpath = Path(dirpath)
        self.every_n_train_steps = every_n_train_steps
        self.last_model_path = ""
        self._saved_step = -1
        self._resumed_rng: dict[str, Any] | None = None
        self._max_epochs_before_epoch_end: int | None = None  # set while a save before an epoch's end hooks runs
        self._resumed_max_epochs: int | None = None  # the saving fit's max_epochs, if it saved there
        self.before_epoch_end = _SaveBeforeEpochEndHooks(self)

    def _save(self, trainer: pl.Trainer, before_epoch_end: bool = False) -> None:
        if trainer.global_step == self._saved_step or trainer.sanity_checking:
            return
        path = self.dirpath / LAST
        # read by state_dict, which save_checkpoint calls (as does any other checkpoint's save, which it is not for)
        self._max_epochs_before_epoch_end = trainer.max_epochs if before_epoch_end else None
        # every rank calls it; the strategy writes once. A full checkpoint (optimizer, loops, callbacks) is the
        # point of last.ckpt, so weights_only is said, not left to Lightning's default and its log line
        try:
            trainer.save_checkpoint(path, weights_only=False)
        finally:
            self._max_epochs_before_epoch_end = None
        self._saved_step = trainer.global_step
        self.last_model_path = str(path)

    def on_fit_end(self, trainer, pl_module) -> None:
        """A resumed fit that saved nothing (it had ended, or it ended at the step it resumed at): the checkpoint it
        resumed from is its run's newest state. Saving again at that step would hold what the resumed epoch-end
        hooks changed, which a later resume would change twice; so that file is copied as it is into this run's
        checkpoints (a fit resumed from another run's file starts a new run dir, which would otherwise end with no
        checkpoint at all) and named as the run's last checkpoint."""
        source = Path(trainer.ckpt_path) if trainer.ckpt_path else None
        if self.last_model_path or source is None or not source.is_file():
            return
        path = self.dirpath / LAST
        if trainer.is_global_zero and source.resolve() != path.resolve():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, path)
        trainer.strategy.barrier("zoo.last_checkpoint.adopt")
        self.last_model_path = str(path)

    def on_train_start(self, trainer, pl_module) -> None:
        if self._resumed_rng is not None:
            set_rng_states(self._resumed_rng)
            self._resumed_rng = None
        saved = self._resumed_max_epochs
        if saved not in (None, -1) and trainer.max_steps != -1 and trainer.max_epochs == saved:
            # Lightning 2.6 counts the epoch a max_steps fit resumes at the end of twice, and stops by that count
            rank_zero_warn(f"this fit resumes at an epoch's end and is bounded by max_steps={trainer.max_steps} and "
                           f"max_epochs={saved}: Lightning counts that epoch twice, so it ends one epoch early; for "
                           f"the uninterrupted run's length resume with --trainer.max_epochs {saved + 1}")
        self._resumed_max_epochs = None
        if not is_resumable(trainer.train_dataloader):
            rank_zero_warn("the training loader is not stateful, so a run resumed mid-epoch restarts that epoch's "
                           "data; build it with zoo.data.train_loader for an exact resume")

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        # Lightning tells samplers the epoch from its count of processed epochs, which a fit resumed from an
        # epoch-end checkpoint under max_steps has one ahead (Lightning 2.6 runs that epoch's end again and counts
        # it twice): the epoch would be shuffled as the one after it. The trainer's current epoch is right in every
        # case. The same count ends such a fit one epoch early if it also sets max_epochs: on_train_start warns.
        for loader in flat_loaders(trainer.train_dataloader):
            for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None),
                                                                      "sampler", None)):
                if callable(getattr(sampler, "set_epoch", None)):
                    sampler.set_epoch(trainer.current_epoch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        n = self.every_n_train_steps
        # Not on an epoch's last batch: there the data loader has run out, and a resume from that state would
        # start the next epoch with an exhausted loader and skip it. The epoch-end save, moments later, holds the
        # same step in a state Lightning resumes from exactly.
        if n and trainer.global_step % n == 0 and trainer.global_step > 0 \
                and batch_idx + 1 < trainer.num_training_batches:
            self._save(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._save(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"saved_step": self._saved_step, "rng": rng_states(),
                "max_epochs_before_epoch_end": self._max_epochs_before_epoch_end}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_step = state_dict.get("saved_step", -1)
        self._resumed_rng = state_dict.get("rng")  # a checkpoint from before RNG states were kept has none
        self._resumed_max_epochs = state_dict.get("max_epochs_before_epoch_end")


class _SaveBeforeEpochEndHooks(pl.Callback):
    """The epoch-end save of a fit bounded by `max_steps` (see `LastCheckpoint`), made before the other
    callbacks' and the module's `on_train_epoch_end`, which Lightning runs again when such a fit resumes."""

    def __init__(self, last: LastCheckpoint):
        self.last = last

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.max_steps != -1:
            self.last._save(trainer, before_epoch_end=True)


def rng_states() -> dict[str, Any]:
    """The global RNGs' states as tensors and plain numbers, so a weights-only `torch.load` reads them back."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, mt, gauss_next = random.getstate()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized()
            else [],
            "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached": float(cached)},
            "python": {"version": version, "state": list(mt), "gauss_next": gauss_next}}


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    n = states["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    py = states["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))


def last_checkpoint_path(trainer: pl.Trainer) -> str:
    """The run's newest `last.ckpt` written so far ("" if none)."""
    for cb in trainer.callbacks:
        if isinstance(cb, LastCheckpoint) and cb.last_model_path:
            return cb.last_model_path
    return getattr(trainer.checkpoint_callback, "last_model_path", "") or ""
