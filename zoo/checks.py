"""Checks of a trainer command's inputs before anything runs, each a one-line `ZooError` naming the problem."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

from zoo.configs import flatten
from zoo.errors import ZooError

SPECIAL_CKPT = ("last", "best", "hpc", "registry")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_checkpoint(path: str | None) -> None:
    """A `--ckpt_path` must be a readable Lightning checkpoint: torch saves zip archives, so a truncated file (its
    central directory is at the end) or random bytes fail here instead of deep inside torch.load."""
    if path is None or str(path) in SPECIAL_CKPT or str(path).startswith("registry:"):
        return
    p = Path(path)
    if p.is_file() and _is_safetensors(p):
        raise ZooError(f"checkpoint {path} is a safetensors file of weights (what `zoo push` publishes), not a "
                       "Lightning checkpoint; load it in Python with <Module>.from_pretrained(<its folder>)")
    check_torch_file(p)
    import torch

    try:  # the pickle only (tensors memory-mapped), as safely as Lightning will load it next
        ckpt = torch.load(p, map_location="cpu", mmap=True, weights_only=True)
    except Exception:  # noqa: BLE001 - what this safe load refuses is Lightning's to judge (it may be let through)
        return
    needed = ("state_dict", "pytorch-lightning_version")
    if not isinstance(ckpt, dict) or not all(k in ckpt for k in needed):
        what = (f"it holds a {type(ckpt).__name__}" if not isinstance(ckpt, dict) else
                f"no {' or '.join(repr(k) for k in needed if k not in ckpt)} among its keys "
                f"{', '.join(map(repr, list(ckpt)[:4]))}{', ...' if len(ckpt) > 4 else ''}")
        raise ZooError(f"checkpoint {path} is a PyTorch file but not a Lightning checkpoint ({what}); give a run's "
                       "checkpoints/*.ckpt")


def check_torch_file(p: Path) -> None:
    """A file torch.load can open: torch saves zip archives, so a truncated file (its central directory is at the
    end) or random bytes are named here instead of by torch's unpickler."""
    if p.is_dir():
        raise ZooError(f"checkpoint {p} is a directory; give a checkpoint file (e.g. <run dir>/checkpoints/last.ckpt)")
    if not p.is_file():
        raise ZooError(f"checkpoint {p} does not exist")
    if not zipfile.is_zipfile(p):
        raise ZooError(f"checkpoint {p} is not a readable PyTorch checkpoint (truncated, or not a checkpoint "
                       f"file: {p.stat().st_size} bytes)")


def _is_safetensors(p: Path) -> bool:
    """safetensors' layout: an 8-byte little-endian header length, then that many bytes of JSON."""
    with p.open("rb") as f:
        head = f.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        return False
    return 8 + int.from_bytes(head[:8], "little") <= p.stat().st_size


LR_NAME = re.compile(r"^(lr|\w+_lr|lr_\w+)$")
# Names of that form that shape a schedule (a floor, a warm-up start, a decay factor, a step count) rather than train
# a part of the model: zero is an ordinary value there.
LR_SCHEDULE_NAME = re.compile(r"^(min|warmup|final|end|start|initial|init|base)_lr$|"
                              r"^lr_(\w+_)?(steps|gamma|decay|rate|schedule|scheduler|factor|min|patience|warmup)$")


def check_learning_rates(model_init_args: dict[str, Any], training: bool = True) -> None:
    """Every init argument named like a learning rate (lr, lora_lr, lr_Z, ...) is a non-negative number: optimisers
    check only their default rate, not the per-group rates modules pass, so a negative one would train (uphill)
    without a word. For training, the rates that train something must not all be 0: the run would go through and
    learn nothing (one of several at 0 is a deliberate freeze of that part, and stays allowed)."""
    rates = {}
    for key, value in flatten(model_init_args).items():
        name = key.rsplit(".", 1)[-1]
        if LR_NAME.match(name) and _is_number(value):
            if value < 0:
                raise ZooError(f"model.init_args.{key} = {value} is a negative learning rate")
            if not LR_SCHEDULE_NAME.match(name):
                rates[key] = value
    if training and rates and not any(rates.values()):
        names = ", ".join(f"model.init_args.{k}" for k in rates)
        raise ZooError(f"{names} = 0: with every learning rate at 0 the run would train nothing")


# Integer settings that count or size something, by name (n_layers, num_heads, batch_size, d_model, r, top_k, ...);
# n_jobs is not one: -1 is joblib's "every core".
COUNT_NAME = re.compile(
    r"^(?!n_jobs$)(\w+_)?(n|num|max)_\w+$|^\w+_(size|dim|len|length|width|depth|layers|heads|steps|epochs|iterations|"
    r"samples|workers|features|channels|modes|groups|batches|tokens|rows|count|points|draws|repeats|components|"
    r"covariates|prototypes|timesteps|users|items|k|every|starts)$|^\w+_per_\w+$|^(d|r|k|size|dim|width|depth|crop|"
    r"modes|groups|channels|layers|heads|machines|subdivisions|stride|sparsity|iterations|d_model|d_ff|d_kv)$")
# Settings that size a part of a model or of the data (hidden_size, d_model, num_heads, vocab_size, image_size,
# n_components, ...): 0 builds nothing to compute with, and most failed deep inside torch or transformers ("cannot
# reshape tensor of 0 elements", "division by zero") with a traceback, or, for a few, ran on without a word.
SIZE_NAME = re.compile(
    r"^(\w+_)?(size|dim|d_model|d_ff|d_kv|heads|features|channels|chans|length|buckets|max_distance|components|"
    r"subdivisions|crop|groups|per_block|users|items|embeddings|dpi|sf|interval|width|bandwidth)$|^(num|n)_layers$")
WIDTHS_NAME = re.compile(r"^(\w+_)?(hidden|dims|widths|channels)$")  # a list of layer widths
EPS_NAME = re.compile(r"^(\w+_)?(eps|epsilon)$")  # a norm's or optimiser's epsilon, an OT or privacy budget epsilon
SEED_NAME = re.compile(r"^(\w+_)?seed(_\w+)?$")
DROPOUT_NAME = re.compile(r"^(\w+_)?dropout(_\w+)?$")
SANDBOX_LIMIT_NAME = re.compile(r"^(cpu_seconds|wall_timeout|memory_mb|sandbox_workers)$")


def check_ranges(group: str, init_args: dict[str, Any]) -> None:
    """Settings of `group` (model or data) outside the range their name implies are refused before anything is
    built: a negative count, size or seed, or a size of 0, would fail deep inside torch or numpy ("Trying to create
    tensor with negative dimension"), wrapped by jsonargparse in a traceback, or for some (a loop or layer count,
    PEFT's dropout) run without a word; a non-positive sandbox limit would reach setrlimit only when the first program
    runs, mid-run."""
    for key, value in flatten(init_args).items():
        name, where = key.rsplit(".", 1)[-1], f"{group}.init_args.{key} = {value}"
        if isinstance(value, (list, tuple)) and all(_is_number(x) for x in value):
            # layer widths (hidden: [128, 128], block_out_channels: [32, 64]): a 0 built a layer of no units, which
            # ran on as a constant (an MLP) or failed deep in torch (a conv)
            if (SIZE_NAME.match(name) or WIDTHS_NAME.match(name)) and not all(x > 0 for x in value):
                raise ZooError(f"{where}: every width or size in it must be positive")
            continue
        if not _is_number(value):
            continue
        if isinstance(value, int) and value < 0 and COUNT_NAME.match(name):
            raise ZooError(f"{where}: a count or size cannot be negative")
        if SIZE_NAME.match(name) and not value > 0:
            raise ZooError(f"{where}: a size must be positive")
        if EPS_NAME.match(name) and value < 0:
            raise ZooError(f"{where}: an epsilon cannot be negative")
        if isinstance(value, int) and value < 0 and SEED_NAME.match(name):
            raise ZooError(f"{where}: seeds are non-negative integers (numpy's rule)")
        if DROPOUT_NAME.match(name) and not 0 <= value <= 1:
            raise ZooError(f"{where}: a dropout probability lies in [0, 1]")
        if SANDBOX_LIMIT_NAME.match(name) and not value > 0:
            raise ZooError(f"{where}: sandbox limits must be positive")


def check_init_args(model_args: dict[str, Any], data_args: dict[str, Any], training: bool = True) -> None:
    """Every check of model and data settings that needs nothing built: the trainer runs it on a command's resolved
    config (`training`: the command is fit), `zoo sweep` also on each point's own values."""
    check_learning_rates(model_args, training)
    check_ranges("model", model_args)
    check_ranges("data", data_args)


def _resolve(class_path: str) -> Any:
    """The class a dotted path names (zoo.gentle.GENTLEModule and zoo.gentle.module.GENTLEModule are one), or the path
    itself when it does not import."""
    import importlib

    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return class_path


def check_nulls(group: str, class_path: str | None, init_args: dict[str, Any]) -> None:
    """A setting set to null where the class does not take None: jsonargparse refuses that for a plain argument but
    lets it through into a class_path's init_args, so it reached the constructor ("'<' not supported between
    instances of 'NoneType' and 'int'", in a traceback). A parameter whose default is None takes it."""
    import inspect
    import typing

    cls = _resolve(class_path) if class_path else None
    if not inspect.isclass(cls):
        return
    try:
        hints = typing.get_type_hints(cls.__init__)
        params = inspect.signature(cls.__init__).parameters
    except Exception:  # noqa: BLE001 - a signature that cannot be read is left to jsonargparse
        return
    for name, value in init_args.items():
        if value is None and name in hints and name in params and params[name].default is not None \
                and not _takes_none(hints[name]):
            raise ZooError(f"{group}.init_args.{name} = null, but {cls.__name__} needs a value there "
                           f"({_type_name(hints[name])})")


def _takes_none(hint: Any) -> bool:
    import types
    import typing

    if hint is Any or hint is type(None) or hint is None or isinstance(hint, typing.TypeVar):
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_takes_none(a) for a in typing.get_args(hint))
    if origin is typing.Literal:
        return None in typing.get_args(hint)
    return False


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def check_checkpoint_class(requested: str | None, restored: str | None, ckpt: str) -> None:
    """Lightning takes the model class from the checkpoint's hyper-parameters: another paper's (or another
    module's) checkpoint would build that model and meet this config's data deep inside a hook."""
    if requested and restored and _resolve(requested) != _resolve(restored):  # one class may have several paths
        raise ZooError(f"{ckpt} holds a {restored.rsplit('.', 1)[-1]} ({restored}), but the config builds "
                       f"{requested}; use that run's own config, or a checkpoint of this model")


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


def check_verb(class_path: str, subcommand: str) -> None:
    """`zoo fit` on an evaluation-only module (CRUXEval, minnorm, DPO-Diff, cluster deletion) would fail deep in
    Lightning ("No `training_step()` method defined") after loading its base model, and `zoo predict` on a module
    without a predict step would call its forward on a whole batch; say which verb it takes."""
    if subcommand not in ("fit", "predict") or "." not in class_path:
        return
    import lightning as L

    cls, name = _resolve(class_path), class_path.rsplit(".", 1)[1]
    if not (isinstance(cls, type) and issubclass(cls, L.LightningModule)):
        return
    if subcommand == "fit" and cls.training_step is L.LightningModule.training_step:
        raise ZooError(f"{name} is evaluation only (it has no training step): run it with `zoo test`, not `zoo fit`")
    if subcommand == "predict" and cls.predict_step is L.LightningModule.predict_step:
        raise ZooError(f"{name} makes no predictions (it has no predict step): `zoo test` reports its metrics")


def untrained_evaluation_note(class_path: str, subcommand: str, ckpt_path: Any) -> str | None:
    """`zoo test` (validate, predict) of a trainable module without --ckpt_path evaluates the weights the config
    builds: right for a pretrained base model, but for a smoke config it scores random weights, and the run's card
    and `zoo compare` showed them as any other result. Said, not refused."""
    if subcommand not in ("validate", "test", "predict") or ckpt_path or "." not in class_path:
        return None
    import lightning as L

    cls = _resolve(class_path)
    if not (isinstance(cls, type) and issubclass(cls, L.LightningModule)) or \
            cls.training_step is L.LightningModule.training_step:
        return None
    return (f"{class_path.rsplit('.', 1)[1]} trains, and no --ckpt_path was given: this {subcommand} scores the "
            "weights the config builds (random unless it loads pretrained ones); to evaluate a run, add "
            "--ckpt_path runs/<config>/<ts>/checkpoints/last.ckpt")


def requested_processes(devices: Any, num_nodes: Any = 1) -> int | None:
    """How many processes a trainer's `devices` and `num_nodes` ask for, in Lightning's forms (2, "2", "0,1",
    [0, 1]); None where Lightning decides ("auto", -1, "-1": every GPU there is)."""
    if devices is None or str(devices).strip() in ("auto", "-1"):
        return None
    if isinstance(devices, (list, tuple)):
        per_node = len(devices)
    elif isinstance(devices, str) and "," in devices:
        per_node = len([d for d in devices.split(",") if d.strip()])
    else:
        try:
            per_node = int(devices)
        except (TypeError, ValueError):
            return None  # Lightning's own check names a malformed value
    return per_node * int(num_nodes or 1)


def one_process_reason(model: type | str, subcommand: str) -> str | None:
    """Why a command on a module (its class, or class path) runs in one process, or None where DDP is fine: every
    evaluation (DDP's sampler pads the data by repeating examples and each rank would report its own share), and
    training of a module that says why it cannot be split (its class attribute `single_process`)."""
    if subcommand != "fit":
        return (f"evaluation ({subcommand}) runs in one process: under DDP each rank would score a share of the "
                f"data padded with repeated examples")
    cls = _resolve(model) if isinstance(model, str) and "." in model else model
    reason = getattr(cls, "single_process", None)
    return f"{getattr(cls, '__name__', model)} trains in one process: {reason}" if reason else None


def check_processes(class_path: str, subcommand: str, trainer: dict[str, Any]) -> None:
    """`zoo fit` asked explicitly for several processes for a module that trains in one: a one-line error before
    anything is built (evaluation is moved to one process by the trainer instead, and "auto" resolved to one)."""
    n = requested_processes(trainer.get("devices"), trainer.get("num_nodes"))
    reason = one_process_reason(class_path, subcommand) if subcommand == "fit" and n is not None and n > 1 else None
    if reason:
        raise ZooError(f"{reason}; set --trainer.devices 1 (and --trainer.num_nodes 1)")


def check_seed(seed: Any) -> None:
    """`seed_everything` (an integer, or true/false): Lightning seeds right after parsing, and numpy refuses a seed
    outside [0, 2**32 - 1] there with a traceback."""
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < 2**32:
        raise ZooError(f"seed_everything = {seed}: seeds are integers in [0, 2**32 - 1] (numpy's rule)")


def check_trainer_settings(trainer: dict[str, Any], subcommand: str = "fit") -> None:
    """Trainer options Lightning accepts but the zoo cannot honour, or Lightning itself would fail on late:
    `default_root_dir` (every run gets its own dir under --run_root, so it was silently ignored),
    `check_val_every_n_epoch` 0 or negative (a ZeroDivisionError at the first epoch end, or no validation), likewise
    `accumulate_grad_batches` and `val_check_interval` below 1 or 0, a negative `gradient_clip_val`, and a
    `zoo fit` that cannot take a step (`max_steps`, `max_epochs` or `limit_train_batches` 0: Lightning skipped the
    loop without a word and the run dir got a card but no checkpoint)."""
    if subcommand == "fit":
        for key in ("max_steps", "max_epochs", "limit_train_batches"):
            value = trainer.get(key)
            if _is_number(value) and value == 0:
                raise ZooError(f"trainer.{key} = {value} trains nothing, so `zoo fit` would make no checkpoint; "
                               f"give it a positive value, or evaluate with `zoo test`")
    if trainer.get("default_root_dir") is not None:
        raise ZooError(f"trainer.default_root_dir = {trainer['default_root_dir']}: the zoo gives every run its own "
                       f"dir; use --run_root DIR (runs go to DIR/<config name>/<timestamp>/) or --run_dir DIR")
    every = trainer.get("check_val_every_n_epoch")
    if isinstance(every, int) and not isinstance(every, bool) and every < 1:
        raise ZooError(f"trainer.check_val_every_n_epoch = {every}: validate every N >= 1 epochs, or set it to null "
                       f"(with val_check_interval in steps)")
    # Lightning takes these and fails mid-run (a ZeroDivisionError at the first step or validation check), or, for a
    # negative clip value, skips clipping without a word (it clips only above 0)
    number = {k: v for k, v in trainer.items() if _is_number(v)}
    if number.get("accumulate_grad_batches", 1) < 1:
        raise ZooError(f"trainer.accumulate_grad_batches = {number['accumulate_grad_batches']}: accumulate over N >= 1 "
                       f"batches")
    if number.get("val_check_interval", 1) <= 0:
        raise ZooError(f"trainer.val_check_interval = {number['val_check_interval']}: give a positive number of "
                       f"steps, or a fraction of an epoch in (0, 1]")
    if number.get("gradient_clip_val", 0) < 0:
        raise ZooError(f"trainer.gradient_clip_val = {number['gradient_clip_val']}: a clip value is >= 0 (0 or null: "
                       f"no clipping)")
