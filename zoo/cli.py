"""The `zoo` command.

`fit/validate/test/predict` go to `ZooCLI` (a LightningCLI in subclass mode for model and data);
`list/push/pull/card/compare` are plain typed functions whose signatures and docstrings are their CLI.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import typing
from pathlib import Path

TRAINER_VERBS = ("fit", "validate", "test", "predict")
# function verbs -> (module, function); only the chosen one is imported (`zoo list` needs no torch)
FUNCTIONS = {"list": ("zoo.registry", "list_zoo"), "push": ("zoo.hub", "push"), "pull": ("zoo.hub", "pull"),
             "card": ("zoo.cards", "card"), "compare": ("zoo.compare", "compare"), "sweep": ("zoo.sweep", "sweep"),
             "cruxeval-score": ("zoo.cruxeval", "score_generations")}
FUNCTION_VERBS = tuple(FUNCTIONS)

USAGE = """usage: zoo <command> [options]

Train, evaluate, publish and compare the models of the zoo (ICML 2024 papers).

Trainer commands (LightningCLI; `zoo fit --help` lists every option):
  fit        train a model:            zoo fit --config configs/smoke/rosa_gsm8k.yaml
  validate   run the validation loop:  zoo validate --config CFG --ckpt_path CKPT
  test       run the test loop:        zoo test --config CFG --ckpt_path RUN/checkpoints/last.ckpt
  predict    run the predict loop:     zoo predict --config CFG --ckpt_path CKPT

Zoo commands (`zoo <command> --help` for options):
  list       papers, models, datamodules, callbacks and configs in the zoo (filter by pattern or status)
  push       publish a run dir to the Hugging Face Hub (safetensors + config + card)
  pull       download a published model into the local HF cache
  card       write or refresh a run's model card (README.md)
  compare    compare runs (local run dirs, a sweep dir or a W&B project): table + plot; --group_by aggregates seeds
  sweep      run a sweep file (configs/sweeps/...): every point an ordinary run, resumable, local or SLURM
  cruxeval-score  score a CRUXEval generations file by execution in the sandbox (no model needed)

Each run gets its own directory runs/<config-name>/<timestamp>/ with config.yaml, checkpoints/,
logs/, a W&B run (offline unless logged in), summary.json and the model card README.md.
Set ZOO_DEBUG=1 to see tracebacks instead of one-line errors.
"""


def one_line(exc: BaseException) -> str:
    """A multi-line library message as one line, by its layout alone (no wording is matched): jsonargparse nests
    causes by indentation, so the line is the message's first line followed by the path down to its most deeply
    nested line (the innermost cause, e.g. 'Option 'hiden' is not accepted'); sibling branches are left out. A
    message without nesting keeps all its lines."""
    text = str(exc)
    if text.startswith("Caught ") and "in DataLoader worker process" in text.split("\n", 1)[0]:
        # torch re-raises a worker's exception with the worker's traceback as its message; the original message is
        # its last line, after "<module>.<Type>: "
        last = text.rstrip().splitlines()[-1]
        return last.split(": ", 1)[1] if ": " in last else last
    lines = [(len(ln) - len(ln.lstrip()), ln.strip()) for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if len(lines) == 1:
        return lines[0][1]
    deepest = max(range(len(lines)), key=lambda k: (lines[k][0], -k))
    if deepest == 0:  # no nesting (e.g. a library's message plus a hint line): every line, once
        return " ".join(text for _, text in lines)
    path, indent = [lines[deepest][1]], lines[deepest][0]
    for ind, text in reversed(lines[1:deepest]):
        if ind < indent:
            path.append(text)
            indent = ind
    parts = [lines[0][1]] + path[::-1]
    return ": ".join(t.removeprefix("- ").rstrip(":").strip() for t in parts)


def _user_error(exc: BaseException, zoo_error: type) -> BaseException | None:
    """The user-facing error in an exception chain, by type: a ZooError anywhere in it (jsonargparse and
    Lightning wrap exceptions raised in __init__ or hooks), else a parse error, Lightning's own misconfiguration
    error, or a missing file/module."""
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        if isinstance(e, zoo_error):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    in_worker = _worker_error(exc, zoo_error)
    if in_worker is not None:
        return in_worker
    user = (argparse.ArgumentError, FileNotFoundError, ImportError)
    if "lightning" in sys.modules:  # Lightning reports a bad trainer option as a MisconfigurationException
        from lightning.fabric.utilities.exceptions import MisconfigurationException

        user += (MisconfigurationException,)
    return exc if isinstance(exc, user) or _trainer_setting_error(exc) else None


def _worker_error(exc: BaseException, zoo_error: type) -> BaseException | None:
    """A ZooError raised in a process Lightning started (ddp_fork, ddp_spawn): torch's launcher re-raises it as a
    ProcessRaisedException whose text is the worker's traceback, ending in `zoo.errors.ZooError: <message>`."""
    if type(exc).__name__ != "ProcessRaisedException":
        return None
    lines = str(exc).rstrip().splitlines()
    prefix = f"{zoo_error.__module__}.{zoo_error.__qualname__}: "
    return zoo_error(lines[-1][len(prefix):]) if lines and lines[-1].startswith(prefix) else None


def _trainer_setting_error(exc: BaseException) -> bool:
    """A ValueError that Lightning's trainer or loops raise themselves: they check trainer options against the data
    (`val_check_interval` above the number of batches, ...) with plain ValueErrors. Also the RuntimeError of its
    hparams merge: a model option and a data option of one name set to different values. One raised in a module's
    own code, or in LightningModule.log (a bug of ours, not a setting), keeps its traceback."""
    if not isinstance(exc, (ValueError, RuntimeError)) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    parts = Path(tb.tb_frame.f_code.co_filename).parts
    places = ((("lightning", "pytorch", "trainer"), ("lightning", "pytorch", "loops")) if isinstance(exc, ValueError)
              else (("lightning", "pytorch", "loggers", "utilities.py"),))
    return any(parts[k:k + len(place)] == place for place in places for k in range(len(parts)))


def check_config_files(argv: list[str], zoo_error: type) -> None:
    """Every `--config` file exists and is a YAML mapping (jsonargparse says only 'Unexpected config' for an
    empty file or a list)."""
    from zoo.configs import read_yaml

    for k, tok in enumerate(argv):
        path = tok.split("=", 1)[1] if tok.startswith("--config=") else (
            argv[k + 1] if tok in ("--config", "-c") and k + 1 < len(argv) else None)
        if path is None:
            continue
        if not os.path.isfile(path):
            raise zoo_error(f"config file {path} does not exist")
        data = read_yaml(path, "config file ")
        if not isinstance(data, dict):
            what = "empty" if data is None else f"a YAML {type(data).__name__}, not a mapping of options"
            raise zoo_error(f"config file {path} is {what}")


def _run_trainer(argv: list[str] | None) -> int:
    from zoo.rundir import RUN_DIR_ENV
    from zoo.trainer import ZooCLI

    # ZooCLI tells DDP worker processes its run dir through the environment; only for the length of this command
    before = os.environ.get(RUN_DIR_ENV)
    try:
        ZooCLI(args=argv)
    finally:
        if before is None:
            os.environ.pop(RUN_DIR_ENV, None)
        else:
            os.environ[RUN_DIR_ENV] = before
    return 0


def _list_params(fn) -> list[str]:
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        ann = typing.get_type_hints(fn).get(name)
        args = typing.get_args(ann) if typing.get_origin(ann) is typing.Union else (ann,)
        if any(typing.get_origin(a) is list for a in args):
            out.append(name)
    return out


def list_args(fn, argv: list[str]) -> list[str]:
    """Lists the way users type them: `--group_by a b` and, for a function whose first parameter is a list
    (`compare(runs, ...)`), bare words (`zoo compare runs/x runs/y`); jsonargparse itself wants `--group_by [a,b]`."""
    lists = _list_params(fn)
    first = next(iter(inspect.signature(fn).parameters), None)
    out, bare, i = [argv[0]], [], 1
    while i < len(argv):
        tok = argv[i]
        name = tok[2:].split("=", 1)[0].rstrip("+") if tok.startswith("--") else None
        if name in lists and "=" not in tok:
            vals = []
            while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                vals.append(argv[i + 1])
                i += 1
            if len(vals) == 1 and vals[0].startswith("["):  # already jsonargparse's list syntax
                out += [tok, vals[0]]
            else:
                out.append(f"--{name}={json.dumps(vals)}" if vals else tok)
        elif name is not None:
            out.append(tok)
            if "=" not in tok and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out.append(argv[i + 1])
                i += 1
        elif first in lists:
            bare.append(tok)
        else:
            out.append(tok)
        i += 1
    if bare:
        out.append(f"--{first}={json.dumps(bare)}")
    return out


def _run_function(argv: list[str]) -> int:
    import importlib

    from jsonargparse import CLI

    module, name = FUNCTIONS[argv[0]]
    fn = getattr(importlib.import_module(module), name)
    CLI({argv[0]: fn}, args=list_args(fn, argv), prog="zoo", exit_on_error=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    from_sys = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    verb = argv[0]
    if verb not in TRAINER_VERBS + FUNCTION_VERBS:
        print(f"zoo: error: unknown command {verb!r}; choose from {', '.join(TRAINER_VERBS + FUNCTION_VERBS)}",
              file=sys.stderr)
        return 2
    debug = os.environ.get("ZOO_DEBUG", "") not in ("", "0")
    from zoo.errors import ZooError

    try:
        if verb in TRAINER_VERBS:
            check_config_files(argv[1:], ZooError)
            return _run_trainer(None if from_sys else argv)
        return _run_function(argv)
    except Exception as e:  # noqa: BLE001 - user errors become one line; anything else keeps its traceback
        cause = _user_error(e, ZooError)
        if debug or cause is None:
            raise
        print(f"zoo: error: {one_line(cause)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("zoo: interrupted" + (f"; {e}" if str(e) else ""), file=sys.stderr)
        return 130


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
