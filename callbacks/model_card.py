"""Record each stage's final metrics in the run dir and (re)render the run's model card."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from callbacks.last_checkpoint import last_checkpoint_path
from zoo.rundir import read_summary, update_summary


def _scalar_metrics(metrics: dict) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


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
        meta = getattr(trainer.lightning_module, "card_metadata", None)
        if callable(meta):
            fields["card_metadata"] = meta()
        fields["model_class"] = f"{type(trainer.lightning_module).__module__}.{type(trainer.lightning_module).__qualname__}"
        update_summary(run_dir, **fields)
        if self.render:
            from zoo.cards import write_card

            write_card(run_dir)

    def on_fit_end(self, trainer, pl_module):
        self._record(trainer, "fit")

    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == "validate":
            self._record(trainer, "validate")

    def on_test_end(self, trainer, pl_module):
        self._record(trainer, "test")

