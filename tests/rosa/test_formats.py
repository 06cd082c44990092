"""GSM8K files in their released layouts with defects a user meets: one-line errors naming file and line.

* github.com/openai/grade-school-math ``grade_school_math/data/{train,test}.jsonl``: one JSON object per line,
  ``{"question": ..., "answer": "...#### 72"}``.
* Hub ``openai/gsm8k`` ``main/{train,test}-00000-of-00001.parquet``: columns question, answer (strings).
"""

import json
from pathlib import Path

import pandas as pd
import pytest

from datamodules.gsm8k import GSM8KDataModule, load_gsm8k
from zoo.cli import main
from zoo.errors import ZooError

ROOT = Path(__file__).resolve().parents[2]
ROW = {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                   "How many clips did Natalia sell altogether in April and May?",
       "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
                 "altogether in April and May.\n#### 72"}


def write_jsonl(directory: Path, train_lines: list[str], test_lines: list[str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.jsonl").write_text("".join(line + "\n" for line in train_lines))
    good = [json.dumps(ROW)] * 2
    (directory / "test.jsonl").write_text("".join(line + "\n" for line in (test_lines or good)))
    return directory


def test_released_jsonl_reads(tmp_path):
    train, test = load_gsm8k("local", str(write_jsonl(tmp_path, [json.dumps(ROW)] * 3)))
    assert len(train) == 3 and len(test) == 2 and train[0] == ROW


def test_broken_json_line_names_file_and_line(tmp_path):
    lines = [json.dumps(ROW)] * 2 + ['{"question": "How many?", "answer": "#### 3"'] + [json.dumps(ROW)]
    with pytest.raises(ZooError, match=r"train.jsonl, line 3: not valid JSON") as e:
        load_gsm8k("local", str(write_jsonl(tmp_path, lines)))  # was json.JSONDecodeError
    assert "\n" not in str(e.value)


def test_a_row_without_answer_anywhere_is_named(tmp_path):
    lines = [json.dumps(ROW)] * 4 + [json.dumps({"question": "How many?"})] + [json.dumps(ROW)]
    with pytest.raises(ZooError, match=r"train.jsonl, line 5: field 'answer' missing"):
        load_gsm8k("local", str(write_jsonl(tmp_path, lines)))  # was KeyError (only the first row was checked)
    with pytest.raises(ZooError, match=r"test.jsonl, line 2: a JSON list"):
        load_gsm8k("local", str(write_jsonl(tmp_path / "b", [json.dumps(ROW)], [json.dumps(ROW), "[1, 2]"])))


def test_parquet_row_without_answer_is_named(tmp_path):
    main_dir = tmp_path / "main"
    main_dir.mkdir()
    pd.DataFrame([ROW, ROW]).to_parquet(main_dir / "test-00000-of-00001.parquet")
    pd.DataFrame([ROW, ROW, {"question": "How many?", "answer": None}]).to_parquet(
        main_dir / "train-00000-of-00001.parquet")
    with pytest.raises(ZooError, match=r"train-00000-of-00001.parquet, row 2: field 'answer' missing"):
        load_gsm8k("local", str(tmp_path))


def test_an_answer_without_its_number_line_is_named(tmp_path):
    """A user's own files (README "Your own data"): a test answer without `#### N` was found only when the model was
    scored, after the fit, with no file or line (is_correct's error); it is now refused where it is read."""
    lines = [json.dumps(ROW), json.dumps({**ROW, "answer": ROW["answer"].replace("#### ", "The answer is ")})]
    with pytest.raises(ZooError, match=r"test.jsonl, line 2: the answer has no '#### <number>' line") as e:
        load_gsm8k("local", str(write_jsonl(tmp_path, [json.dumps(ROW)] * 3, lines)))
    assert "\n" not in str(e.value)
    with pytest.raises(ZooError, match=r"train.jsonl, line 1: the answer has no"):
        load_gsm8k("local", str(write_jsonl(tmp_path / "b", [json.dumps({**ROW, "answer": "72"})])))


def test_zero_batch_size_is_a_one_line_error(in_tmp, capsys):
    with pytest.raises(ZooError, match="batch_size must be >= 1, got 0"):
        GSM8KDataModule(source="embedded", batch_size=0)
    for name in ("num_train", "num_test"):  # 0 was read as no limit: every row
        with pytest.raises(ZooError, match=rf"{name} must be >= 1 .or null for every row., got 0"):
            GSM8KDataModule(source="embedded", **{name: 0})
    cfg = str(ROOT / "configs" / "smoke" / "rosa_gsm8k.yaml")
    assert main(["fit", "--config", cfg, "--wandb_mode", "disabled", "--data.init_args.batch_size", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (  # the settings check, before anything is built
        "zoo: error: data.init_args.batch_size = 0: a size must be positive")
