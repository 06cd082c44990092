"""GSM8K data: real files, the embedded generator, tokenisation/masking and the harness's answer extraction."""

from __future__ import annotations

import json
import re

import pytest
import torch

from datamodules.gsm8k import GSM8KDataModule, embedded_gsm8k, load_gsm8k, tokenize_example
from zoo.errors import ZooError
from zoo.rosa.gsm8k import EVAL_TEMPLATE, INVALID, GSM8KExactMatch, extract_answer, is_correct


def test_extraction_on_hand_checked_real_rows(shared_data):
    rows = [json.loads(line) for line in (shared_data / "gsm8k" / "test.jsonl").open()]
    assert len(rows) == 1319
    # hand-checked: row 0 "Janet's ducks" -> 18; row 146 "Johnny ... lego" -> 2,125; row 489 Southlandia -> -10
    assert rows[0]["question"].startswith("Janet") and extract_answer(rows[0]["answer"]) == "18"
    assert rows[146]["answer"].endswith("#### 2,125") and extract_answer(rows[146]["answer"]) == "2125"
    assert extract_answer(rows[489]["answer"]) == "-10"
    # a completion in the training format is scored like the harness: first "#### N", commas stripped
    assert is_correct("Janet sells 16 - 3 - 4 = 9 eggs. 9 * 2 = 18\n#### 18", rows[0]["answer"])
    assert is_correct("... 2125 blocks\n#### 2,125", rows[146]["answer"])
    assert not is_correct("The answer is 18.", rows[0]["answer"])  # no "####": invalid, as in the harness
    assert not is_correct("#### 19\n#### 18", rows[0]["answer"])  # the first match counts
    assert extract_answer("no answer") == INVALID


def test_exact_match_metric():
    m = GSM8KExactMatch()
    m.update(["x\n#### 5", "#### 1,000", "#### 7"], ["a\n#### 5", "b\n#### 1000", "c\n#### 8"])
    m.update(["#### -3"], ["d\n#### -3"])
    assert m.compute().item() == pytest.approx(3 / 4)


def test_local_jsonl_and_parquet(shared_data, tmp_path):
    train, test = load_gsm8k("local", str(shared_data / "gsm8k"))
    assert (len(train), len(test)) == (7473, 1319)
    import pandas as pd

    pd.DataFrame(train[:5]).to_parquet(tmp_path / "train-00000-of-00001.parquet")
    pd.DataFrame(test[:3]).to_parquet(tmp_path / "test-00000-of-00001.parquet")
    ptrain, ptest = load_gsm8k("local", str(tmp_path))
    assert ptrain == train[:5] and ptest == test[:3]


def test_the_card_names_gsm8k_only_for_the_released_rows(shared_data, tmp_path):
    """Local files are GSM8K on a run's card only when their rows are the release's, in any order or file format;
    a user's own problems in the same format are named by their path."""
    import pandas as pd

    train, test = load_gsm8k("local", str(shared_data / "gsm8k"))
    released = GSM8KDataModule(source="local", path=str(shared_data / "gsm8k"), tokenizer="byt5", num_test=8)
    released.setup()
    assert released.card_metadata()["datasets"] == ["openai/gsm8k"]
    pd.DataFrame(train[::-1]).to_parquet(tmp_path / "train-00000-of-00001.parquet")  # the Hub's format, reordered
    pd.DataFrame(test).to_parquet(tmp_path / "test-00000-of-00001.parquet")
    assert GSM8KDataModule(source="local", path=str(tmp_path), tokenizer="byt5").card_metadata()["datasets"] == [
        "openai/gsm8k"]
    own = tmp_path / "own"
    own.mkdir()
    for split, rows in (("train", train[:40]), ("test", test[:1318] + [{**test[-1], "answer": "#### 0"}])):
        (own / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    meta = GSM8KDataModule(source="local", path=str(own), tokenizer="byt5").card_metadata()
    assert "datasets" not in meta
    assert str(own) in meta["data_source"] and "40 train / 1319 test rows; not the released GSM8K" in meta["data_source"]


def test_missing_sources_are_errors(tmp_path):
    with pytest.raises(ZooError, match="does not exist"):
        load_gsm8k("local", str(tmp_path / "nowhere"))
    with pytest.raises(ZooError, match="train split not found"):
        load_gsm8k("local", str(tmp_path))
    with pytest.raises(ZooError, match="openai/gsm8k"):  # HF_HUB_OFFLINE=1 and no cache in the tests
        load_gsm8k("hub")
    with pytest.raises(ZooError, match="unknown GSM8K source"):
        GSM8KDataModule(source="web")


def test_embedded_problems_have_gsm8k_format_and_correct_arithmetic():
    rows = embedded_gsm8k(50, seed=3)
    assert rows == embedded_gsm8k(50, seed=3) and rows != embedded_gsm8k(50, seed=4)
    for r in rows:
        notes = re.findall(r"<<([^=>]+)=([^>]+)>>", r["answer"])
        assert notes
        for expr, value in notes:
            assert eval(expr.replace("/", "//") if "/" in expr else expr) == int(value)  # noqa: S307
        final = extract_answer(r["answer"])
        assert final != INVALID and final == notes[-1][1]


def test_prompt_tokens_are_masked_and_datamodule_batches():
    from zoo.lm import load_tokenizer

    tok = load_tokenizer("byt5")
    ex = tokenize_example(tok, "Q?", "A #### 1", max_length=64)
    n_prompt = len(tok("Q?", add_special_tokens=False)["input_ids"])
    assert ex["labels"][:n_prompt] == [-100] * n_prompt and ex["labels"][n_prompt:] == ex["input_ids"][n_prompt:]
    assert ex["input_ids"][-1] == tok.eos_token_id
    dm = GSM8KDataModule(source="embedded", tokenizer="byt5", max_length=128, batch_size=3, eval_batch_size=2,
                         num_val=4, num_test=5, embedded_size=20)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == batch["labels"].shape and batch["input_ids"].shape[1] <= 128
    pad = batch["attention_mask"] == 0
    assert torch.all(batch["labels"][pad] == -100)
    ev = next(iter(dm.test_dataloader()))
    assert len(ev["prompt"]) == 2 and ev["prompt"][0] == EVAL_TEMPLATE.format(question=ev["question"][0])
    assert len(dm.val_rows) == 4 and len(dm.train_rows) == 16 and len(dm.test_rows) == 5


def test_long_examples_keep_supervised_tokens():
    from zoo.lm import load_tokenizer

    tok = load_tokenizer("byt5")
    ex = tokenize_example(tok, "x" * 300, "answer #### 1", max_length=64)
    assert len(ex["input_ids"]) == 64 and ex["labels"][-1] == tok.eos_token_id
    assert ex["input_ids"][-14:-1] == tok("answer #### 1", add_special_tokens=False)["input_ids"]
    ex = tokenize_example(tok, "x" * 300, "y" * 300, max_length=64)
    assert len(ex["input_ids"]) == 64 and sum(lab != -100 for lab in ex["labels"]) == 32
