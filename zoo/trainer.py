"""`ZooCLI`: LightningCLI plus the zoo's run directories, loggers, checkpoints, NaN guard and model card."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Literal, Optional

from lightning.pytorch.callbacks import BasePredictionWriter, Checkpoint, ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import DDPStrategy

from callbacks.determinism import DeterministicOnCPU
from callbacks.distributed import DistributedSettings
from callbacks.last_checkpoint import LastCheckpoint, last_checkpoint_path
from callbacks.model_card import ModelCardWriter
from callbacks.nan_guard import NaNGuard
from callbacks.predictions import PredictionWriter
from callbacks.progress import ZooProgressBar
from zoo.checks import (
    check_checkpoint,
    check_checkpoint_class,
    check_init_args,
    check_nulls,
    check_processes,
    check_ranges,
    check_resume_settings,
    check_seed,
    check_trainer_settings,
    check_verb,
    one_process_reason,
    requested_processes,
    untrained_evaluation_note,
)
from zoo.configs import load_yaml
from zoo.errors import ZooError
from zoo.hub import CONFIG, WEIGHTS, load_fitting, load_weights, resolve_weights, state_dict_misfit
from zoo.registry import paper_of_class
from zoo.rundir import (
    RUN_DIR_ENV,
    is_worker_process,
    new_run_dir,
    newest_match,
    read_point,
    run_dir_of_checkpoint,
    stage_dir,
    update_summary,
)


class RunDirConfig(SaveConfigCallback):
    """Saves the resolved config (seed included) into the run dir: `config.yaml` for the first fit,
    `config.<stage>[-N].yaml` afterwards, so a resumed or evaluated run never overwrites anything."""

    def __init__(self, *args: Any, run_dir: str = ".", **kwargs: Any):
        super().__init__(*args, save_to_log_dir=False, **kwargs)
        self.run_dir = Path(run_dir)

    def save_config(self, trainer, pl_module, stage: str) -> None:
        stage = getattr(stage, "value", stage)
        name = "config.yaml"
        if (self.run_dir / name).exists():
            name = f"config.{stage}.yaml"
            n = 1
            while (self.run_dir / name).exists():
                name, n = f"config.{stage}-{n}.yaml", n + 1
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.parser.save(self.config, self.run_dir / name, skip_unset=False, overwrite=False, multifile=False)
        self.written = self.run_dir / name  # a failed evaluation of an existing run removes it (ZooCLI._abandon)


def _init_args(model: Any) -> dict[str, Any]:
    """A model config's init args as plain data (jsonargparse Namespaces included)."""
    from jsonargparse import Namespace

    if model is None:
        return {}
    model = model.clone().as_dict() if isinstance(model, Namespace) else dict(model)
    return dict(model.get("init_args") or model.get("dict_kwargs") or {})


def _class_path(model: Any) -> str | None:
    return model.get("class_path") if model is not None and hasattr(model, "get") else None


def wandb_id(name: str) -> str:
    """A W&B run id: W&B refuses ':;,#?/' and quotes (sweep point names hold commas), and long ids."""
    import hashlib
    import re

    clean = re.sub(r"[^A-Za-z0-9._=+-]", "-", name)
    return clean if len(clean) <= 96 else f"{clean[:80]}-{hashlib.sha1(name.encode()).hexdigest()[:12]}"


def wandb_mode(requested: str) -> str:
    """`auto`: online only when the user is logged in (API key in env or netrc), else offline."""
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        import netrc

        auth = netrc.netrc().authenticators("api.wandb.ai")
        return "online" if auth else "offline"
    except (OSError, netrc.NetrcParseError):
        return "offline"


class ZooCLI(LightningCLI):
    def __init__(self, args: list[str] | None = None, **kwargs: Any):
        no_exit = {"exit_on_error": False}
        given = sys.argv[1:] if args is None else args
        listed = isinstance(given, (list, tuple)) and given
        self._verb = given[0] if listed and given[0] in LightningCLI.subcommands() else None
        self.fresh_run_dir: Optional[Path] = None  # the run dir this command created (not a resumed or given one)
        self._quiet: warnings.catch_warnings | None = None
        try:
            super().__init__(
                model_class=None,
                datamodule_class=None,
                subclass_mode_model=True,
                subclass_mode_data=True,
                save_config_callback=RunDirConfig,
                parser_kwargs={**no_exit, **{v: dict(no_exit) for v in self.subcommands()}},
                args=args,
                **kwargs,
            )
        except BaseException as e:
            self._abandon(e)
            if self._interrupted(e):  # Lightning turns Ctrl-C into exit(1) after a graceful shutdown
                raise KeyboardInterrupt(self._resume_hint()) from e
            misfit = self._checkpoint_misfit(e)
            if misfit is not None:
                raise misfit from e
            raise
        finally:
            self._end_quiet()

    # What Lightning says when an evaluation restores a fit's checkpoint: that the fit's checkpoint callbacks are
    # missing, and that its default checkpoint callback cannot take their place. Evaluating needs neither.
    EVAL_RESTORE_NOISE = (r"Be aware that when using `ckpt_path`", r"The dirpath has changed from")

    def subcommands(self) -> dict[str, set[str]]:  # Lightning's is static; it is only called on the instance
        """The verbs whose parsers are built: only the one this command runs (`zoo fit ...` builds no test,
        validate or predict parser: most of the parser's build time), or all four (`zoo --help`, no verb)."""
        every = LightningCLI.subcommands()
        return {self._verb: every[self._verb]} if self._verb else every

    def _quiet_evaluation(self) -> None:
        """LightningCLI's public before_<subcommand> hook of test, validate and predict: ignore those warnings until
        the command ends (`_end_quiet`, also when it fails)."""
        self._quiet = warnings.catch_warnings()
        self._quiet.__enter__()
        for message in self.EVAL_RESTORE_NOISE:
            warnings.filterwarnings("ignore", message=message)

    def _end_quiet(self) -> None:
        if self._quiet is not None:
            quiet, self._quiet = self._quiet, None
            quiet.__exit__(None, None, None)

    before_test = before_validate = before_predict = _quiet_evaluation

    def _abandon(self, error: BaseException) -> None:
        """A command that failed leaves no orphan: a run dir it created that holds no checkpoint is removed
        (nothing is lost); any other run dir records the failure in summary.json, which lookups then skip."""
        run_dir = self.fresh_run_dir
        trainer = getattr(self, "trainer", None)
        if run_dir is None and getattr(self, "subcommand", None) in ("validate", "test", "predict"):
            self._remove_evaluation_files(trainer)  # the run it evaluated is as it was
            return
        if run_dir is None and self._interrupted(error) and getattr(self, "subcommand", None) == "fit":
            run_dir = getattr(self, "run_dir", None)  # a resumed fit stopped with Ctrl-C: its checkpoint moved on
        if run_dir is None or is_worker_process() or not run_dir.exists():
            return
        wandb = sys.modules.get("wandb")
        if wandb is not None and wandb.run is not None:  # close the W&B run first: it writes into the run dir
            wandb.finish(exit_code=1)
        if not (run_dir / "checkpoints").exists() and (trainer is None or trainer.global_step == 0):
            shutil.rmtree(run_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                run_dir.parent.rmdir()  # the config's group dir, if this was its only run
        elif self._interrupted(error):
            step = trainer.global_step if trainer is not None else "?"
            update_summary(run_dir, status="interrupted", error=f"interrupted at global step {step}; "
                                                                f"{self._resume_hint()}")
        else:
            update_summary(run_dir, status="failed", error=f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")

    def _remove_evaluation_files(self, trainer: Any) -> None:
        """What a failed evaluation of an existing run wrote there: its config.<stage>[-N].yaml and logs/<stage>[-N];
        they described a stage that produced nothing (the summary and card never listed it). Its W&B run stays,
        finished as failed, as W&B records a failed run: deleting its files under W&B's service process broke the
        offline runs that process started next."""
        run_dir = getattr(self, "run_dir", None)
        if run_dir is None or is_worker_process() or not run_dir.exists():
            return
        wandb = sys.modules.get("wandb")
        if wandb is not None and wandb.run is not None:
            wandb.finish(exit_code=1)
        logs = getattr(self, "_stage_logs", None)
        if logs is not None and logs.exists():
            shutil.rmtree(logs, ignore_errors=True)
        for cb in getattr(trainer, "callbacks", None) or []:
            written = getattr(cb, "written", None) if isinstance(cb, RunDirConfig) else None
            if written is not None and written.name != "config.yaml":
                written.unlink(missing_ok=True)

    def _checkpoint_misfit(self, error: BaseException) -> ZooError | None:
        """torch's load_state_dict refusing the --ckpt_path's weights as Lightning restores them (shapes or keys
        that do not fit the model the config builds: an edited, damaged or other-version checkpoint) is bad input,
        not a bug: one line naming the checkpoint and the first mismatches."""
        if not isinstance(error, RuntimeError) or error.__traceback__ is None:
            return None
        problems = state_dict_misfit(error)
        files = [Path(frame.f_code.co_filename).name for frame, _ in traceback.walk_tb(error.__traceback__)]
        if problems is None or "checkpoint_connector.py" not in files:
            return None
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        return ZooError(f"checkpoint {self._cfg().get('ckpt_path')} does not fit the model this config builds: "
                        f"{'; '.join(problems[:3])}{more}")

    @staticmethod
    def _interrupted(error: BaseException) -> bool:
        """Ctrl-C: a KeyboardInterrupt, or the exit(1) Lightning raises while handling one (after a graceful
        shutdown; Lightning marks a run 'interrupted' on any exception, so its status does not tell)."""
        return isinstance(error, KeyboardInterrupt) or (isinstance(error, SystemExit)
                                                        and isinstance(error.__context__, KeyboardInterrupt))

    def _resume_hint(self) -> str:
        trainer = getattr(self, "trainer", None)
        last = last_checkpoint_path(trainer) if trainer is not None else None
        if getattr(self, "subcommand", None) != "fit" or not last:
            return "nothing to resume"
        return f"resume with the same command plus --ckpt_path {last}"

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--run_root", type=str, default="runs",
                            help="Runs go to <run_root>/<config name>/<timestamp>/.")
        parser.add_argument("--run_name", type=Optional[str], default=None,
                            help="Name of the run group (default: the config file's stem).")
        parser.add_argument("--run_dir", type=Optional[str], default=None,
                            help="Use exactly this run directory (created if missing; `zoo sweep` names each point's "
                                 "run dir this way) instead of <run_root>/<run_name>/<timestamp>/.")
        parser.add_argument("--wandb_mode", type=Literal["auto", "online", "offline", "disabled"], default="auto",
                            help="W&B: 'auto' = online when logged in, otherwise offline.")
        parser.add_argument("--wandb_project", type=str, default="zoo", help="W&B project.")
        parser.add_argument("--checkpoint_every_n_steps", type=Optional[int], default=None,
                            help="Also write last.ckpt every N optimizer steps (default: at epoch/validation end).")
        parser.add_argument("--weights", type=Optional[str], default=None,
                            help="Weights to start from (fit) or to evaluate (test, validate, predict): a published "
                                 "Hub repo org/name, a run dir, a model.safetensors dir or a checkpoint file, read "
                                 "weights-only into the model this config builds. A new run; --ckpt_path instead "
                                 "resumes or evaluates a run's whole training state.")

    # -- inputs --------------------------------------------------------------------------------------
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        sub = self.config.get("subcommand")
        cfg = self.config.get(sub) if sub else None
        self.requested_model, self.requested_class = None, None
        if cfg is not None:
            check_seed(cfg.get("seed_everything"))  # Lightning seeds before any other hook
            if cfg.get("weights") and cfg.get("ckpt_path"):
                raise ZooError("--weights and --ckpt_path both name the weights; give --ckpt_path to resume or evaluate "
                               "a run, --weights to start a new run from (or evaluate) published weights")
            if isinstance(cfg.get("ckpt_path"), str):  # a quoted glob: its newest match, as for `init_from`
                cfg["ckpt_path"] = newest_match(cfg["ckpt_path"], "--ckpt_path",
                                                "give a checkpoint file, e.g. runs/<config>/<ts>/checkpoints/last.ckpt")
            check_checkpoint(cfg.get("ckpt_path"))
            # before Lightning replaces the model's settings with the checkpoint's (see before_instantiate_classes)
            self.requested_model = _init_args(cfg.get("model"))
            self.requested_class = _class_path(cfg.get("model"))

    # -- run directory -------------------------------------------------------------------------------
    def _cfg(self) -> Any:
        return self.config[self.subcommand]

    def check_settings(self) -> None:
        """The checks of a command's settings that need nothing built (`zoo sweep` runs them for every point before
        anything starts)."""
        cfg = self._cfg()
        model, trainer = _class_path(cfg.get("model")) or "", cfg.get("trainer") or {}
        check_init_args(_init_args(cfg.get("model")), _init_args(cfg.get("data")), self.subcommand == "fit")
        for group in ("model", "data"):
            check_nulls(group, _class_path(cfg.get(group)), _init_args(cfg.get(group)))
        callbacks = trainer.get("callbacks") or []
        for i, callback in enumerate(callbacks if isinstance(callbacks, list) else [callbacks]):
            check_ranges(f"trainer.callbacks.{i}", _init_args(callback))  # counts and sizes by the model's rules
            check_nulls(f"trainer.callbacks.{i}", _class_path(callback), _init_args(callback))
        check_verb(model, self.subcommand)
        check_processes(model, self.subcommand, trainer)
        check_trainer_settings(trainer, self.subcommand)

    def before_instantiate_classes(self) -> None:
        self.check_settings()
        cfg = self._cfg()
        if note := untrained_evaluation_note(_class_path(cfg.get("model")) or "", self.subcommand, cfg.get("ckpt_path")):
            print(f"zoo: note: {note}", file=sys.stderr)
        model_args = _init_args(cfg.get("model"))
        if cfg.get("ckpt_path") and self.requested_model is not None:
            check_checkpoint_class(self.requested_class, _class_path(cfg.get("model")), cfg["ckpt_path"])
            check_resume_settings(self.requested_model, model_args, cfg["ckpt_path"])
        configs = cfg.get("config") or []
        stem = cfg.get("run_name") or (Path(str(configs[-1])).stem if configs else None)
        model_path = cfg["model"]["class_path"] if cfg.get("model") else ""
        stem = stem or model_path.rsplit(".", 1)[-1].lower() or "run"
        paper = paper_of_class(model_path)
        self.paper_id = paper.id if paper else None
        self.config_name = stem

        if is_worker_process():
            run_dir = Path(os.environ[RUN_DIR_ENV])
        else:
            run_dir = Path(cfg["run_dir"]) if cfg.get("run_dir") else run_dir_of_checkpoint(cfg.get("ckpt_path"))
            try:  # a --run_dir that is a file, a --run_root that cannot be written
                if run_dir is None:
                    run_dir = self.fresh_run_dir = new_run_dir(cfg["run_root"], stem)
                run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                where = run_dir if run_dir is not None else Path(cfg["run_root"]) / stem
                raise ZooError(f"cannot create the run dir {where} ({e.strerror or e}: {e.filename})") from e
            os.environ[RUN_DIR_ENV] = str(run_dir)
        self.run_dir = run_dir
        self.save_config_kwargs = {"run_dir": str(run_dir), "overwrite": False}

    def instantiate_classes(self) -> None:
        super().instantiate_classes()
        if self.subcommand and self._cfg().get("weights"):
            load_weights_into(self.model, self._cfg()["weights"])

    def instantiate_trainer(self, **kwargs: Any):
        cfg = self.config_init[self.subcommand]
        trainer_cfg = cfg.get("trainer", {})
        run_dir = self.run_dir
        kwargs.setdefault("default_root_dir", str(run_dir))
        kwargs.update(self._one_process(trainer_cfg))
        if trainer_cfg.get("logger") in (None, True):
            kwargs["logger"] = self._loggers(cfg)
        callbacks = list(trainer_cfg.get("callbacks") or [])
        if self.subcommand == "fit" and trainer_cfg.get("enable_checkpointing") is not False \
                and not any(isinstance(c, Checkpoint) for c in callbacks):
            ours = self._checkpoints(cfg)
            callbacks = [ours[-1].before_epoch_end, *callbacks, *ours]  # first: see LastCheckpoint
        if trainer_cfg.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar)
                                                                           for c in callbacks):
            callbacks.append(ZooProgressBar())
        callbacks += [DistributedSettings(), NaNGuard(), ModelCardWriter(str(run_dir), self.config_name, self.paper_id)]
        if trainer_cfg.get("deterministic") is None:  # a config's own choice is Lightning's to apply
            callbacks.append(DeterministicOnCPU())
        if self.subcommand == "predict" and not any(isinstance(c, BasePredictionWriter) for c in callbacks):
            callbacks.append(PredictionWriter(str(run_dir)))
        kwargs["callbacks"] = callbacks
        return super().instantiate_trainer(**kwargs)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
        # Lightning leaves the config callback out under fast_dev_run: the run dir then had no config.yaml, and
        # `zoo card`/`push`/`compare` refused it as no run dir, while `zoo test --ckpt_path` on its checkpoint
        # silently made a new one
        if config.get("fast_dev_run") and self.save_config_callback:
            callbacks = [*callbacks, self.save_config_callback(
                self._parser(self.subcommand), self.config.get(str(self.subcommand), self.config),
                **self.save_config_kwargs)]
        return super()._instantiate_trainer(config, callbacks)

    def _one_process(self, trainer_cfg: dict[str, Any]) -> dict[str, Any]:
        """Trainer settings that keep a command in one process where it must be (see `one_process_reason`):
        "auto" devices would take every GPU; an evaluation with a config that trains on several (a DDP config's
        own `zoo test`) runs in one, with a note."""
        reason = one_process_reason(type(self.model), self.subcommand)
        n = requested_processes(trainer_cfg.get("devices"), trainer_cfg.get("num_nodes"))
        if not reason or n == 1:
            return {}
        if n is None:
            return {"devices": 1, "num_nodes": 1}
        print(f"zoo: {reason}; running it on 1 device instead of {n}", file=sys.stderr)
        strategy = trainer_cfg.get("strategy")
        ddp = isinstance(strategy, DDPStrategy) or (isinstance(strategy, str) and strategy.startswith("ddp"))
        return {"devices": 1, "num_nodes": 1, **({"strategy": "auto"} if ddp else {})}

    def _checkpoints(self, cfg: Any) -> list:
        """`last.ckpt` (every epoch and, if asked, every N steps) for resume; plus best-1 by the
        module's `monitor`. Two callbacks, because a monitored checkpoint skips steps where the
        monitored metric does not exist yet, and `last.ckpt` must not wait for it."""
        dirpath = str(self.run_dir / "checkpoints")
        out: list = []
        monitor = getattr(self.model, "monitor", None)
        if monitor:
            # only after validation (which logs the monitor), never at an epoch end without one: no warning about a
            # missing key in runs that do not validate. First, so it is `trainer.checkpoint_callback`, the one
            # Lightning asks for the best model
            out.append(ModelCheckpoint(dirpath=dirpath, filename="best-{epoch}-{step}", auto_insert_metric_name=False,
                                       monitor=monitor, mode=getattr(self.model, "monitor_mode", "min"),
                                       save_top_k=1, save_last=False, save_on_train_epoch_end=False))
        return [*out, LastCheckpoint(dirpath, every_n_train_steps=cfg.get("checkpoint_every_n_steps"))]

    def _loggers(self, cfg: Any) -> list:
        stage = self.subcommand
        logs = self._stage_logs = stage_dir(self.run_dir, stage)
        loggers: list = [CSVLogger(save_dir=str(logs.parent), name="", version=logs.name)]
        mode = wandb_mode(cfg.get("wandb_mode", "auto"))
        if mode != "disabled":
            from lightning.pytorch.loggers import WandbLogger

            tags = [t for t in (self.paper_id, self.config_name, stage) if t]
            config = self._flat_config()
            group = self.paper_id or "misc"
            point = read_point(self.run_dir)
            if point:  # a sweep point: one W&B group per sweep, its axis values as config and tags
                group = point["sweep"]
                tags += [f"{k}={v}" for k, v in point["axes"].items()]
                config.update({"sweep": point["sweep"], "sweep.stage": point["stage"],
                               **{f"sweep.{k}": v for k, v in point["axes"].items()}})
            run_id = wandb_id(f"{point['sweep']}-{point['stage']}-{self.run_dir.name}-{logs.name}" if point else
                              f"{self.config_name}-{self.run_dir.name}-{logs.name}")
            loggers.append(WandbLogger(
                save_dir=str(self.run_dir), project=cfg.get("wandb_project", "zoo"), name=run_id, id=run_id,
                group=group, tags=tags, mode=mode, job_type=stage, config=config, log_model=False,
            ))
        return loggers

    def _flat_config(self) -> dict[str, Any]:
        """The full resolved config for W&B, flattened to dotted keys (seed included)."""
        from zoo.configs import flatten

        return flatten(self._parser(self.subcommand).dump(self._cfg(), format="yaml", skip_unset=False))

    def after_fit(self) -> None:
        self._check_batches("training", [self.trainer.num_training_batches], "trained")
        self._report()

    def after_test(self) -> None:
        self._check_batches("test", self.trainer.num_test_batches, "evaluated")
        self._report()

    def after_validate(self) -> None:
        self._check_batches("validation", self.trainer.num_val_batches, "evaluated")
        self._report()

    def after_predict(self) -> None:
        self._check_batches("prediction", self.trainer.num_predict_batches, "predicted")
        self._report()

    def _check_batches(self, split: str, counts: list, done: str) -> None:
        """Lightning ends a command whose data has no batches with a warning or an info line ("No training
        batches"), and the run would look done: a card with no metrics, a fit with no checkpoint. Raising here
        also removes the run dir the command created. The data settings at 0 are named (a smoke config's
        `num_val: 0` made `zoo validate` fail with no hint of the option)."""
        if not any(counts):
            data = _init_args(self._cfg().get("data"))
            at_zero = (k for k, v in data.items() if v == 0 and type(v) is int and "worker" not in k)
            zeros = [f"data.init_args.{k}" for k in at_zero  # sample counts, not seeds or loader workers
                     if k == "n" or k.startswith(("n_", "num_")) or k.endswith(("samples", "_size", "_count"))]
            hint = f"; this config sets {', '.join(zeros)} to 0" if zeros else ""
            raise ZooError(f"the {split} data has no batches (an empty split, e.g. a data setting of 0 samples, or "
                           f"fewer samples than a batch with drop_last): nothing was {done}{hint}")

    def _report(self) -> None:
        from lightning.pytorch.loggers import WandbLogger

        if any(isinstance(lg, WandbLogger) for lg in self.trainer.loggers):
            import wandb

            if wandb.run is not None:
                wandb.finish()  # flush the offline run (config, summary) to disk now
        if self.trainer.is_global_zero:
            print(f"zoo: run dir {self.run_dir}")
            last = last_checkpoint_path(self.trainer)
            if self.subcommand == "fit" and last:
                print(f"zoo: last checkpoint {last}")
            writer = next((c for c in self.trainer.callbacks if isinstance(c, PredictionWriter)), None)
            if writer is not None and writer.path is not None:
                print(f"zoo: predictions {writer.path}")


def load_weights_into(module: Any, weights: str) -> None:
    """`--weights`: the state a Hub repo, run dir, weights dir or checkpoint holds, loaded as `from_pretrained`
    loads it (the module prepares what its shapes depend on, then the weights must fit). A repo or dir whose
    config names another class is refused: its weights would fit only by accident."""
    path = resolve_weights(weights, "--weights", "give a Hub repo org/name, a run dir or a checkpoint file")
    cfg = path.parent / CONFIG if path.name == WEIGHTS else None
    named = (load_yaml(cfg).get("model") or {}).get("class_path") if cfg is not None and cfg.is_file() else None
    own = f"{type(module).__module__}.{type(module).__qualname__}"
    if named and named != own:
        raise ZooError(f"--weights {weights} holds a {named.rsplit('.', 1)[-1]}, but this config builds a "
                       f"{type(module).__name__}")
    state = load_weights(path)
    if hasattr(module, "prepare_state_dict_load"):
        module.prepare_state_dict_load(state)
    load_fitting(module, state, f"--weights {weights}")
    module.zoo_weights = weights  # the card names them (callbacks/model_card.py)


class _Parsed(Exception):
    """Raised by a parse-only CLI once a command's settings are resolved and checked (its args: the model's)."""


class _ParseOnly(ZooCLI):
    def _set_seed(self) -> None:
        """A parse seeds nothing: it must leave the caller's random state alone (and print no "Seed set to")."""

    def before_instantiate_classes(self) -> None:
        self.check_settings()
        raise _Parsed(_init_args(self._cfg().get("model")))


def parse_only(argv: list[str]) -> dict[str, Any]:
    """Parse a trainer command (`["fit", "--config", ...]`) with the real CLI parser and run its settings checks,
    instantiating nothing: a key that names no option, a wrong type or an out-of-range value fails as the command
    would. Returns the model's resolved init args; raises what the parser raises (SystemExit, jsonargparse's
    errors) or a ZooError."""
    try:
        _ParseOnly(args=argv)
    except _Parsed as e:
        return e.args[0]
    raise ZooError(f"zoo {argv[0] if argv else ''} did not reach its settings check")
