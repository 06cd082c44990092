"""Evaluation by records: a module that scores whole examples (one dict of results per example) logs each batch's
records as it goes and writes the stage's records to the run dir once, when the stage ends (CRUXEval's verdicts,
DPO-Diff's prompt searches). `EvalRecords` holds the Lightning hooks; the module says how to score, log and save."""

from __future__ import annotations

from typing import Any


class EvalRecords:
    """Validation, test and predict hooks over `score_records(batch) -> list[dict]`. Each batch's records are kept in
    `self.records` (this rank's, for the current stage: reset when a stage starts) and passed to
    `log_records(records, stage)` ("val" or "test"; predict only returns them); `save_records(stage)` writes them when
    the stage ends. List it before `LightningModule` in the bases, so that its hooks replace Lightning's defaults."""

    records: list[dict[str, Any]]

    def score_records(self, batch: Any) -> list[dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__} must define score_records(batch)")

    def log_records(self, records: list[dict[str, Any]], stage: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define log_records(records, stage)")

    def save_records(self, stage: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define save_records(stage)")

    def _step(self, batch: Any, stage: str) -> list[dict[str, Any]]:
        records = self.score_records(batch)
        self.records.extend(records)
        if stage != "predict":
            self.log_records(records, stage)
        return records

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        return self._step(batch, "predict")

    def on_validation_epoch_start(self) -> None:
        self.records = []

    on_test_epoch_start = on_validation_epoch_start
    on_predict_epoch_start = on_validation_epoch_start

    def on_validation_epoch_end(self) -> None:
        self.save_records("val")

    def on_test_epoch_end(self) -> None:
        self.save_records("test")

    def on_predict_epoch_end(self) -> None:
        self.save_records("predict")
