"""zoo.records.EvalRecords under a real Trainer: each stage scores every example once, starts from no records, logs
validation and test batches (not predict) and saves its own records when it ends."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader

from zoo.records import EvalRecords


class Scorer(EvalRecords, L.LightningModule):
    def __init__(self):
        super().__init__()
        self.records, self.logged, self.saved = [], [], {}

    def score_records(self, batch):
        return [{"x": int(x), "square": int(x) ** 2} for x in batch]

    def log_records(self, records, stage):
        self.logged.append((stage, len(records)))
        self.log(f"{stage}/mean_square", sum(r["square"] for r in records) / len(records), batch_size=len(records))

    def save_records(self, stage):
        self.saved[stage] = [r["x"] for r in self.records]


def test_each_stage_scores_logs_and_saves_its_own_records(tmp_path):
    loader = DataLoader(torch.arange(5), batch_size=2)
    module = Scorer()
    trainer = L.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    val = trainer.validate(module, loader, verbose=False)
    test = trainer.test(module, loader, verbose=False)
    predicted = trainer.predict(module, loader)
    assert module.saved == {"val": [0, 1, 2, 3, 4], "test": [0, 1, 2, 3, 4], "predict": [0, 1, 2, 3, 4]}
    assert module.logged == [("val", 2), ("val", 2), ("val", 1), ("test", 2), ("test", 2), ("test", 1)]
    assert abs(val[0]["val/mean_square"] - 6.0) < 1e-6 and abs(test[0]["test/mean_square"] - 6.0) < 1e-6
    assert [r["square"] for batch in predicted for r in batch] == [0, 1, 4, 9, 16]
