"""Straight-vs-resumed checks for the paper modules: a fit that keeps a copy of every `last.ckpt` it writes, and
the bit-for-bit comparison of two checkpoints' training state (`tests/<paper>/test_resume.py`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from callbacks.last_checkpoint import LAST, LastCheckpoint
from zoo.cli import main


def fit_keeping_every_checkpoint(argv: list[str], run_dir: Path, monkeypatch) -> dict[int, Path]:
    """`zoo fit ARGV --run_dir RUN_DIR`, in process, with a copy of `last.ckpt` as each save wrote it (the file
    is overwritten): {global step: copy}; the step of the last save of a step (an epoch end, the fit's end) wins.
    Each copy is what a fit killed right after that save leaves behind."""
    saved: dict[int, Path] = {}
    save = LastCheckpoint._save

    def keep(self, trainer, before_epoch_end=False):
        before = self._saved_step
        save(self, trainer, before_epoch_end)
        if self._saved_step != before:
            copy = run_dir / f"step-{trainer.global_step}.ckpt"
            shutil.copyfile(self.dirpath / LAST, copy)
            saved[trainer.global_step] = copy

    monkeypatch.setattr(LastCheckpoint, "_save", keep)
    assert main(["fit", *argv, "--run_dir", str(run_dir)]) == 0
    monkeypatch.setattr(LastCheckpoint, "_save", save)
    return saved


def training_state(ckpt: Path) -> dict:
    payload = torch.load(ckpt, map_location="cpu", weights_only=False)
    return {k: payload.get(k) for k in ("global_step", "state_dict", "optimizer_states", "lr_schedulers")}


def differences(a, b, path: str = "") -> list[str]:
    """Where two nested checkpoint values differ (tensors compared with torch.equal)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and a.dtype == b.dtype and torch.equal(a, b)
        return [] if same else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}" for k in set(a) ^ set(b)]
        return out + [d for k in a if k in b for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]
