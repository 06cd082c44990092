"""Record each stage's final metrics in the run dir and (re)render the run's model card."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from callbacks.last_checkpoint import last_checkpoint_path
from zoo.rundir import read_summary, run_environment, update_summary


def _scalar_metrics(metrics: dict) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def run_card_metadata(trainer: pl.Trainer) -> dict:
    """The card metadata of what this run used: the module's (base model, tags, ...) then the datamodule's
    (datasets, data_source); tags are merged. A run with no base model or no Hub dataset says so explicitly."""
    meta: dict = {"base_model": None, "datasets": []}
    for owner in (trainer.lightning_module, trainer.datamodule):
        fn = getattr(owner, "card_metadata", None)
        for k, v in (fn() if callable(fn) else {}).items():
            if k == "tags":
                meta["tags"] = list(dict.fromkeys([*meta.get("tags", []), *v]))
            else:
                meta[k] = v
    weights = getattr(trainer.lightning_module, "zoo_weights", None)  # `zoo ... --weights`: what the run started from
    if weights:
        meta["base_model"] = weights
    base = meta.get("base_model")
    if isinstance(base, str) and Path(base).exists():
        # a local directory (e.g. an exported fine-tune) is not a Hub model: the card's base_model names Hub models
        # only, and "What this run used" names the directory
        meta["base_model"], meta["base_model_path"] = None, str(Path(base).resolve())
    return meta


class ModelCardWriter(pl.Callback):
    """At the end of fit/validate/test, stores `trainer.callback_metrics` (plus, when the DataModule has a
    `run_metrics()` method, what preparing its data measured, e.g. generation time as `data/...`) under the stage in
    `summary.json` and renders `README.md` (the card) into the run dir."""

    def __init__(self, run_dir: str | None = None, config_name: str | None = None, paper_id: str | None = None,
                 render: bool = True):
        self.run_dir = run_dir
        self.config_name = config_name
        self.paper_id = paper_id
        self.render = render

    def _dir(self, trainer: pl.Trainer) -> Path:
        return Path(self.run_dir or trainer.default_root_dir)

    @rank_zero_only
    def _record(self, trainer: pl.Trainer, stage: str) -> None:
        run_dir = self._dir(trainer)
        metrics = _scalar_metrics(trainer.callback_metrics)
        run_metrics = getattr(trainer.datamodule, "run_metrics", None)  # what preparing the data measured
        if callable(run_metrics):
            metrics.update(_scalar_metrics(run_metrics()))
        fields = {stage: metrics, "stages": sorted(set(read_summary(run_dir).get("stages", [])) | {stage})}
        if stage == "fit":
            fields.update(global_step=trainer.global_step, epochs=trainer.current_epoch)
            ckpt = last_checkpoint_path(trainer)
            if ckpt:
                fields["last_ckpt"] = str(ckpt)
        if self.config_name:
            fields["config_name"] = self.config_name
        if self.paper_id:
            fields["paper"] = self.paper_id
        fields["card_metadata"] = run_card_metadata(trainer)
        fields["environment"] = {stage: run_environment(trainer.strategy.root_device)}
        fields["model_class"] = f"{type(trainer.lightning_module).__module__}.{type(trainer.lightning_module).__qualname__}"
        fields.update(status="finished", error=None)  # this command finished: a resume clears an earlier failure
        update_summary(run_dir, **fields)
        if self.render:
            from zoo.cards import write_card

            write_card(run_dir)

    def on_fit_start(self, trainer, pl_module):
        self._start_step = trainer.global_step

    def on_fit_end(self, trainer, pl_module):
        # resuming a run that had already finished trains nothing: keep its record as it was
        if trainer.global_step == getattr(self, "_start_step", -1) and "fit" in read_summary(self._dir(trainer)):
            return
        self._record(trainer, "fit")

    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == "validate":
            self._record(trainer, "validate")

    def on_test_end(self, trainer, pl_module):
        self._record(trainer, "test")

