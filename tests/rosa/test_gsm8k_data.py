"""GSM8K data: real files, the embedded generator, tokenisation/masking and the harness's answer extraction."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from datamodules.gsm8k import GSM8KDataModule, embedded_gsm8k, load_gsm8k, tokenize_example, tokenize_llm_foundry
from zoo.errors import ZooError
from zoo.rosa.gsm8k import EVAL_TEMPLATE, INVALID, GSM8KExactMatch, extract_answer, is_correct

from .conftest import llama_style_tokenizer


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
    dm = GSM8KDataModule(source="embedded", tokenizer="byt5", max_length=256, batch_size=3, eval_batch_size=2,
                         num_val=4, num_test=5, embedded_size=20)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == batch["labels"].shape and batch["input_ids"].shape[1] <= 256
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


# --- the training format: llm-foundry's (the official recipe's) and plain -------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _llm_foundry(tokenizer, prompt: str, response: str, max_seq_len: int):
    """The oracle: llm-foundry's steps as the official recipe runs them (IST-DASLab/RoSA's fork), transcribed step by
    step: `tasks.py` `_tokenize_formatted_example` (tokenizer(text=prompt, text_target=response)), then the decoder-only
    branch of `Seq2SeqFinetuningCollator` for one example, padded to max_seq_len as it pads (labels -100, input ids
    with the pad id); returns the unpadded part (attention mask 1), or None for an example the collator skips."""
    example = tokenizer(text=prompt, text_target=response)
    context, target = list(example["input_ids"]), list(example["labels"])
    # first, get rid of any padding tokens
    context = [t for t in context if t != tokenizer.pad_token_id]
    target = [t for t in target if t != tokenizer.pad_token_id]
    # (no separator_text in 7b_rosa_gsm.yaml); third, ensure that the target ends with an EOS
    if target[-1] != tokenizer.eos_token_id:
        target = target + [tokenizer.eos_token_id]
    n_context, n_target = len(context), len(target)
    if n_context >= max_seq_len:
        return None  # "Skipping example because CONTEXT length ... leaves no room for TARGET tokens"
    if n_context + n_target > max_seq_len:
        n_target = max_seq_len - n_context
        target = target[-n_target:]
        target[-1] = tokenizer.eos_token_id
    n_total = n_context + n_target
    input_ids = context + target + [tokenizer.pad_token_id] * (max_seq_len - n_total)
    labels = [-100] * n_context + target + [-100] * (max_seq_len - n_total)
    attention_mask = [1] * n_total + [0] * (max_seq_len - n_total)
    keep = [i for i, m in enumerate(attention_mask) if m]
    return {"input_ids": [input_ids[i] for i in keep], "labels": [labels[i] for i in keep]}


def test_llm_foundry_format_with_a_llama_tokenizer_is_bos_prompt_bos_response_eos():
    tok = llama_style_tokenizer()
    bos, eos = tok.bos_token_id, tok.eos_token_id
    p = tok("Q? 12", add_special_tokens=False)["input_ids"]
    r = tok("the <<2*6=12>>12 #### 12", add_special_tokens=False)["input_ids"]
    ex = tokenize_llm_foundry(tok, "Q? 12", "the <<2*6=12>>12 #### 12", max_length=512)
    # the official training sequence: [BOS] prompt [BOS] response [EOS], the second BOS supervised
    assert ex["input_ids"] == [bos] + p + [bos] + r + [eos]
    assert ex["labels"] == [-100] * (1 + len(p)) + [bos] + r + [eos]
    assert ex == _llm_foundry(tok, "Q? 12", "the <<2*6=12>>12 #### 12", 512)
    # the plain format has a single BOS
    assert tokenize_example(tok, "Q? 12", "the <<2*6=12>>12 #### 12", 512)["input_ids"] == [bos] + p + r + [eos]


def test_llm_foundry_format_with_byt5_puts_eos_after_the_prompt():
    from zoo.lm import load_tokenizer

    tok = load_tokenizer("byt5")  # no BOS; EOS appended to every text, so to the prompt as well
    p = tok("Q? 12", add_special_tokens=False)["input_ids"]
    r = tok("A #### 12", add_special_tokens=False)["input_ids"]
    ex = tokenize_llm_foundry(tok, "Q? 12", "A #### 12", max_length=64)
    assert ex["input_ids"] == p + [tok.eos_token_id] + r + [tok.eos_token_id]  # one EOS at the end, not two
    assert ex["labels"] == [-100] * (len(p) + 1) + r + [tok.eos_token_id]
    assert ex == _llm_foundry(tok, "Q? 12", "A #### 12", 64)


@pytest.mark.parametrize("max_length", [512, 256, 160])
def test_llm_foundry_format_matches_the_official_steps_on_gsm8k_rows(shared_data, max_length):
    """Real GSM8K rows with a Llama-style tokenizer (about one token a character) and with ByT5, and their truncation:
    at 160 tokens some examples lose the start of their answer, and those whose question alone fills the budget are
    skipped."""
    from zoo.lm import load_tokenizer

    train, _ = load_gsm8k("local", str(shared_data / "gsm8k"))
    rows = train[:40] + sorted(train, key=lambda r: -len(r["question"]))[:5]
    for tok in (llama_style_tokenizer(), load_tokenizer("byt5")):
        got = [tokenize_llm_foundry(tok, r["question"], r["answer"], max_length) for r in rows]
        assert got == [_llm_foundry(tok, r["question"], r["answer"], max_length) for r in rows]
        assert all(g is None or (len(g["input_ids"]) <= max_length and g["labels"][-1] == tok.eos_token_id)
                   for g in got)
        if max_length == 160:
            assert any(g is None for g in got) and any(g and len(g["input_ids"]) == 160 for g in got)


def test_the_datamodule_trains_on_the_llm_foundry_format_by_default(tmp_path):
    """Through the datamodule: the tokenizer loaded from a saved Llama-style tokenizer directory (AutoTokenizer, as
    for meta-llama/Llama-2-7b-hf), the rows and a collated batch; examples whose prompt fills max_length are skipped
    with a warning, and a run that would skip them all is an error."""
    llama_style_tokenizer().save_pretrained(tmp_path / "tok")
    kw = {"source": "embedded", "tokenizer": str(tmp_path / "tok"), "embedded_size": 12, "num_test": 2}
    dm = GSM8KDataModule(max_length=384, batch_size=12, **kw)
    assert dm.hparams.tokenization == "llm-foundry"
    dm.setup("fit")
    tok = dm.tokenizer
    train = load_gsm8k("embedded", embedded_size=12, seed=0)[0]
    expected = [_llm_foundry(tok, r["question"], r["answer"], 384) for r in train]
    assert dm.train_rows == expected
    assert all(row["input_ids"].count(tok.bos_token_id) == 2 for row in dm.train_rows)
    batch = next(iter(dm.train_dataloader()))
    rows = [{"input_ids": ids[m == 1].tolist(), "labels": lab[m == 1].tolist()}
            for ids, lab, m in zip(batch["input_ids"], batch["labels"], batch["attention_mask"])]
    assert sorted(map(str, rows)) == sorted(map(str, expected))
    assert torch.all(batch["labels"][batch["attention_mask"] == 0] == -100)

    lengths = sorted(len(tok(r["question"])["input_ids"]) for r in train)
    cut = lengths[len(lengths) // 2]  # prompts of `cut` tokens or more fill max_length = cut
    short = GSM8KDataModule(max_length=cut, **kw)
    with pytest.warns(UserWarning, match=rf"{sum(n >= cut for n in lengths)} of 12 training examples skipped"):
        short.setup("fit")
    assert short.train_rows == [e for e in (_llm_foundry(tok, r["question"], r["answer"], cut) for r in train) if e]
    with pytest.raises(ZooError, match="every GSM8K training prompt fills max_length=4 tokens"):
        GSM8KDataModule(max_length=4, **kw).setup("fit")
    with pytest.raises(ZooError, match="unknown GSM8K tokenization 'llama'"):
        GSM8KDataModule(source="embedded", tokenization="llama")


def test_plain_format_is_unchanged():
    """`tokenization: plain` is the format the CPU reproduction was made with: pinned to the output of the zoo's
    tokenisation before the llm-foundry format became the default (commit 5325910), on a short example and on
    embedded problems at lengths that cut the prompt, the answer or nothing."""
    from zoo.lm import load_tokenizer

    pins = {"llama": (llama_style_tokenizer(),
                      [1, 55, 85, 97, 4, 5, 106, 97, 107, 5, 74, 9, 83, 4, 5, 108, 4, 5, 97, 104, 97, 4, 5, 2], 6,
                      "91a2d9dfec4f11a2269749311aaf0e88b449ac5b46c141ad1433286076406797", 5570),
            "byt5": (load_tokenizer("byt5"),
                     [84, 66, 35, 52, 53, 119, 107, 104, 35, 63, 63, 53, 45, 57, 64, 52, 53, 65, 65, 52, 53, 35, 38, 38,
                      38, 38, 35, 52, 53, 1], 5,
                     "64cb04c6b3cb3613a66d70c0804733898085065e0b249c63a22b1b9d2610fafb", 5689)}
    for name, (tok, ids, n_prompt, digest, n_tokens) in pins.items():
        ex = tokenize_example(tok, "Q? 12", "the <<2*6=12>>12 #### 12", 64)
        assert ex == {"input_ids": ids, "labels": [-100] * n_prompt + ids[n_prompt:]}, name
        out = [tokenize_example(tok, r["question"], r["answer"], n) for r in embedded_gsm8k(12, seed=5)
               for n in (24, 96, 160, 512)]
        assert sum(len(o["input_ids"]) for o in out) == n_tokens, name
        assert hashlib.sha256(json.dumps(out).encode()).hexdigest() == digest, name
    # and the datamodule's plain option is that function
    dm = GSM8KDataModule(source="embedded", tokenizer="byt5", tokenization="plain", max_length=96, embedded_size=6)
    dm.setup("fit")
    tok = dm.tokenizer
    assert dm.train_rows == [tokenize_example(tok, r["question"], r["answer"], 96)
                             for r in load_gsm8k("embedded", embedded_size=6, seed=0)[0]]


def test_paper_configs_use_the_official_format_and_the_cpu_reproduction_plain():
    for name in ("rosa_gsm8k", "rosa_gsm8k_mask", "qrosa_gsm8k", "qrosa_gsm8k_mask", "lora_gsm8k", "fft_gsm8k"):
        cfg = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
        assert cfg["data"]["init_args"].get("tokenization", "llm-foundry") == "llm-foundry", name
    # the CPU reproduction's runs (and their smoke twins) were made, and evaluate, in the plain format
    for sweep in ("sweeps/rosa_tiny", "sweeps/rosa_tiny_select", "smoke/sweeps/rosa_tiny",
                  "smoke/sweeps/rosa_tiny_select"):
        spec = yaml.safe_load((ROOT / "configs" / f"{sweep}.yaml").read_text())
        assert spec["args"]["data.init_args.tokenization"] == "plain", sweep
