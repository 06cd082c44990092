"""`CRUXEvalGenerationsModule`: a generations file scored through `zoo test` gives the closed-form pass@k of the
candidates it holds, the same numbers as `score_generations`, and one-line errors for files it cannot score."""

from __future__ import annotations

import json
from math import comb

import lightning as L
import pytest

from datamodules.cruxeval import CRUXEvalDataModule
from zoo.cruxeval import CRUXEvalGenerationsModule, score_generations
from zoo.errors import ZooError

WRONG = "'__not_any_output__'"  # a string literal no CRUXEval function returns


def _test(module, data, run_dir) -> dict[str, float]:
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
                        default_root_dir=run_dir)
    (metrics,) = trainer.test(module, datamodule=data, verbose=False)
    return metrics


def test_pass_at_k_is_the_closed_form_of_the_right_candidates(tmp_path, shared_data):
    rows = [json.loads(line) for line in (shared_data / "cruxeval.jsonl").read_text().splitlines()][:60]
    n = 4  # row i holds c_i = i % 5 right answers among its n = 4 candidates (c = 4 for every fifth row)
    right = [min(i % 5, n) for i in range(len(rows))]
    file = tmp_path / "generations.json"
    file.write_text(json.dumps({r["id"]: [r["output"]] * c + [WRONG] * (n - c) for r, c in zip(rows, right)}))
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    module = CRUXEvalGenerationsModule(str(file), mode="output", ks=[1, 2, 4], sandbox_workers=1,
                                       generated_by="codellama/CodeLlama-7b-hf")
    # the card says what was evaluated: no model of its own (not "randomly initialised"), whose generations, which file
    assert module.card_metadata()["model_source"] == (f"no model was run: generations by codellama/CodeLlama-7b-hf "
                                                      f"from {file} (answers), scored")
    metrics = _test(module, CRUXEvalDataModule(source="local", path=str(data), batch_size=16), tmp_path)
    assert (tmp_path / "verdicts_output_test.jsonl").is_file()  # the run's records, where zoo test writes them
    for k in (1, 2, 4):
        closed = 100 * sum(1 - comb(n - c, k) / comb(n, k) for c in right) / len(rows)
        assert metrics[f"test/pass@{k}"] == pytest.approx(closed, abs=1e-4)
    assert metrics["test/failed_rows"] == 0 and metrics["test/sandbox_errors"] == 0
    direct = score_generations(file, "output", data=data, ks=[1, 2, 4], workers=1)
    assert all(metrics[f"test/pass@{k}"] == pytest.approx(direct[f"pass@{k}"], abs=1e-4) for k in (1, 2, 4))


def test_raw_completions_and_missing_rows(tmp_path):
    data = CRUXEvalDataModule(source="embedded", batch_size=8)
    data.setup("test")
    sample = data.rows
    raw = {r["id"]: [f"[ANSWER]{r['output']}[/ANSWER]", "no tag here"] for r in sample[:-2]}  # the last two: absent
    file = tmp_path / "raw.json"
    file.write_text(json.dumps(raw))
    module = CRUXEvalGenerationsModule(str(file), mode="output", raw=True, cot=True, ks=[1], sandbox_workers=1)
    metrics = _test(module, data, tmp_path)
    assert metrics["test/failed_rows"] == 2
    assert metrics["test/pass@1"] == pytest.approx(100 * 0.5 * (len(sample) - 2) / len(sample))


@pytest.mark.parametrize("content, message", [
    (None, "not found"),
    ("[1, 2]", "holds a JSON list, not an object"),
    ("{not json", "not a readable generations JSON"),
    ('{"sample_0": ["1"]}', r"need 1 <= k <= n_samples .*\(n_samples = 1, the candidates per problem\)"),
])
def test_files_it_cannot_score_are_one_line_errors(tmp_path, content, message):
    file = tmp_path / "g.json"
    if content is not None:
        file.write_text(content)
    with pytest.raises(ZooError, match=message):
        CRUXEvalGenerationsModule(str(file), mode="output", ks=[1, 5])
