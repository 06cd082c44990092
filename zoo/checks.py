"""Checks of a trainer command's inputs before anything runs, each a one-line `ZooError` naming the problem."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from zoo.configs import flatten
from zoo.errors import ZooError

SPECIAL_CKPT = ("last", "best", "hpc", "registry")


def check_checkpoint(path: str | None) -> None:
    """A `--ckpt_path` must be a readable Lightning checkpoint: torch saves zip archives, so a truncated file (its
    central directory is at the end) or random bytes fail here instead of deep inside torch.load."""
    if path is None or str(path) in SPECIAL_CKPT or str(path).startswith("registry:"):
        return
    p = Path(path)
    if not p.is_file():
        raise ZooError(f"checkpoint {path} does not exist")
    if not zipfile.is_zipfile(p):
        raise ZooError(f"checkpoint {path} is not a readable PyTorch checkpoint (truncated, or not a checkpoint "
                       f"file: {p.stat().st_size} bytes)")


def check_learning_rates(model_init_args: dict[str, Any]) -> None:
    """Every init argument named like a learning rate (lr, lora_lr, probe_lr, ...) is a non-negative number:
    optimisers check only their default rate, not the per-group rates modules pass, so a negative one would train
    (uphill) without a word."""
    for key, value in flatten(model_init_args).items():
        name = key.rsplit(".", 1)[-1]
        if (name == "lr" or name.endswith("_lr") or name.startswith("lr_")) and isinstance(value, (int, float)) \
                and not isinstance(value, bool) and value < 0:
            raise ZooError(f"model.init_args.{key} = {value} is a negative learning rate")


def check_resume_settings(requested: dict[str, Any], restored: dict[str, Any], ckpt: str) -> None:
    """Lightning rebuilds a module from the checkpoint's hyper-parameters, silently overriding the command's: a
    setting the command changes would be ignored. Refuse it, naming each key. A requested None is a setting the
    module resolves itself (from the data at setup, e.g. num_items), so the checkpoint's resolved value is not a
    change."""
    req, got = flatten(requested or {}), flatten(restored or {})
    changed = [k for k in sorted(req) if k in got and req[k] is not None and _differs(req[k], got[k])]
    if changed:
        shown = ", ".join(f"{k}={req[k]!r} (checkpoint: {got[k]!r})" for k in changed[:4])
        raise ZooError(f"{ckpt} was trained with other model settings than this command asks: {shown}; resume "
                       f"with the run's own settings, or start a new run (e.g. from its weights with init_from)")


def _differs(a: Any, b: Any) -> bool:
    if a == b:
        return False
    try:
        return float(a) != float(b)
    except (TypeError, ValueError):
        return str(a) != str(b)


def check_trainable(class_path: str, subcommand: str) -> None:
    """`zoo fit` on an evaluation-only module (CRUXEval, minnorm, DPO-Diff, cluster deletion) would fail deep in
    Lightning ("No `training_step()` method defined"), after loading its base model; say which verb it takes."""
    if subcommand != "fit" or "." not in class_path:
        return
    import importlib

    import lightning as L

    module, name = class_path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name, None)
    if isinstance(cls, type) and issubclass(cls, L.LightningModule) and \
            cls.training_step is L.LightningModule.training_step:
        raise ZooError(f"{name} is evaluation only (it has no training step): run it with `zoo test`, not `zoo fit`")
