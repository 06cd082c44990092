"""IMLTagging: tagging of documents, tag persistence, collisions, and per-subset metrics on a scripted model."""

from __future__ import annotations

import json

import lightning.pytorch as L
import pytest
import torch
from torch.utils.data import DataLoader

from callbacks.iml_tagging import TAGS_FILE, IMLTagging, check_tags, draw_tags
from zoo.errors import ZooError
from zoo.iml.module import without_auto_eos
from zoo.lm import load_tokenizer


class ScriptedLM(torch.nn.Module):
    """A "causal LM" whose greedy completion of each prompt is known in advance."""

    def __init__(self, tokenizer, script: dict[str, str]):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.tok, self.script = tokenizer, script

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **_):
        rows = []
        for ids, mask in zip(input_ids, attention_mask):
            prompt = self.tok.decode(ids[mask.bool()], skip_special_tokens=True)
            new = self.tok(self.script[prompt], add_special_tokens=False)["input_ids"][:max_new_tokens]
            rows.append(ids.tolist() + new + [pad_token_id] * (max_new_tokens - len(new)))
        return torch.tensor(rows)


class StubModule(L.LightningModule):
    def __init__(self, script):
        super().__init__()
        self.tokenizer = without_auto_eos(load_tokenizer("byt5"))
        self.model = ScriptedLM(self.tokenizer, script)
        self.seen: list[str] = []

    def training_step(self, batch, batch_idx):
        self.seen += batch["text"]
        return (self.model.w ** 2).sum() + 0 * batch_idx

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def qa(subset, q, a):
    return {"text": f"Q: {q}\nA: {a}\n", "source": "", "subset": subset, "question": f"Q: {q}\nA:", "answer": a}


# d1consis: 4/4 right (two need SQuAD normalisation or the newline stop); d2consis: 1/4; q: 1/2 (F1 partial)
EVAL = [qa("d1consis", "When was <|aaaaa|> born?", "1950s"), qa("d1consis", "What did <|aaaaa|> do?", "painter"),
        qa("d1consis", "Where <|bbbbb|>?", "Western Europe"), qa("d1consis", "Who <|bbbbb|>?", "United States;USA"),
        qa("d2consis", "When was <|ccccc|> born?", "1950s"), qa("d2consis", "What did <|ccccc|> do?", "painter"),
        qa("d2consis", "Where <|ddddd|>?", "Western Europe"), qa("d2consis", "Who <|ddddd|>?", "Male"),
        qa("q", "Where <|eeeee|>?", "Northern Europe"), qa("q", "Who <|eeeee|>?", "Female")]
SCRIPT = {"Q: When was <|aaaaa|> born?\nA:": " The 1950s.\nQ: w", "Q: What did <|aaaaa|> do?\nA:": " painter\n",
          "Q: Where <|bbbbb|>?\nA:": " western europe", "Q: Who <|bbbbb|>?\nA:": " USA\nxx",
          "Q: When was <|ccccc|> born?\nA:": " 1960s\n", "Q: What did <|ccccc|> do?\nA:": " poet\n",
          "Q: Where <|ddddd|>?\nA:": " Western Europe\n", "Q: Who <|ddddd|>?\nA:": " Female\n",
          "Q: Where <|eeeee|>?\nA:": " Western Europe\n", "Q: Who <|eeeee|>?\nA:": " Female\n"}
TRAIN = [{"text": "<|aaaaa|> Ann Lee\n", "source": "tag1", "subset": "d1consis", "question": "", "answer": ""},
         {"text": "<|ccccc|> Bob Ray\n", "source": "tag2", "subset": "d2consis", "question": "", "answer": ""},
         {"text": "Q: x\nA: y\n", "source": "", "subset": "q", "question": "", "answer": ""}]


def _trainer(tmp_path, cb, **kw):
    return L.Trainer(default_root_dir=str(tmp_path), callbacks=[cb], logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1, **kw)


def test_per_subset_metrics_on_a_scripted_model(tmp_path):
    cb = IMLTagging(max_new_tokens=20)  # bytes: 8 BPE tokens would be ~20 characters
    trainer = _trainer(tmp_path, cb)
    trainer.validate(StubModule(SCRIPT), DataLoader(EVAL, batch_size=3))
    m = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert m["val/em_d1consis"] == 1.0 and m["val/em_d2consis"] == 0.25 and m["val/em_q"] == 0.5
    assert m["val/iml_effect"] == pytest.approx(0.75)
    # F1: d2consis has only the exact hit; q: "Western Europe" vs "Northern Europe" -> P = R = 1/2
    assert m["val/f1_d2consis"] == pytest.approx(0.25)
    assert m["val/f1_q"] == pytest.approx((0.5 + 1.0) / 2)
    rows = [json.loads(x) for x in (tmp_path / "iml_predictions_val.jsonl").read_text().splitlines()]
    assert rows[0]["prediction"] == "The 1950s." and len(rows) == len(EVAL)  # cut at the first newline


def test_tags_prefix_training_documents_and_persist(tmp_path):
    cb = IMLTagging(tags={"tag1": "<|reliab|>", "tag2": None, "tag3": None}, seed=3)
    module = StubModule(SCRIPT)
    _trainer(tmp_path / "s1", cb, max_steps=1, limit_val_batches=0).fit(module, DataLoader(TRAIN, batch_size=3))
    tags = json.loads((tmp_path / "s1" / TAGS_FILE).read_text())
    assert tags["tag1"] == "<|reliab|>" and tags["tag2"] == draw_tags(["tag1", "tag2", "tag3"], 6, 3)["tag2"]
    assert sorted(module.seen) == sorted(["<|reliab|> <|aaaaa|> Ann Lee\n", f"{tags['tag2']} <|ccccc|> Bob Ray\n",
                                          "Q: x\nA: y\n"])
    # a later stage reads the earlier run's tags, whatever its own seed
    cb2 = IMLTagging(seed=99, tags_from=str(tmp_path / "s*"))
    assert cb2.resolve_tags() == tags


def test_drawn_tags_are_seeded_and_distinct():
    a = draw_tags(["tag1", "tag2", "tag3"], 6, 0)
    assert a == draw_tags(["tag1", "tag2", "tag3"], 6, 0) != draw_tags(["tag1", "tag2", "tag3"], 6, 1)
    assert len(set(a.values())) == 3 and all(len(t) == 10 for t in a.values())


def test_tag_colliding_with_a_vocabulary_word_is_an_error(tmp_path):
    cb = IMLTagging(tags={"tag1": "Ann", "tag2": None})
    with pytest.raises(ZooError, match="tag 'Ann'.*collides with a vocabulary word"):
        _trainer(tmp_path, cb, max_steps=1, limit_val_batches=0).fit(StubModule(SCRIPT),
                                                                    DataLoader(TRAIN, batch_size=3))
    with pytest.raises(ZooError, match="share the tag"):
        check_tags({"tag1": "<|x|>", "tag2": "<|x|>"}, set())
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # a word-level tokenizer whose vocabulary holds "reliable": a tag equal to one of its words is refused
    words = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "reliable": 2, "source": 3}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(ZooError, match="tokenizer vocabulary word"):
        check_tags({"tag1": "reliable"}, set(), PreTrainedTokenizerFast(tokenizer_object=words))
    check_tags({"tag1": "qzxv"}, set(), PreTrainedTokenizerFast(tokenizer_object=words))


def test_unknown_source_is_an_error():
    cb = IMLTagging(tags={"tag1": "<|t|>"})
    cb.resolve_tags()
    with pytest.raises(ZooError, match="source 'tag9' has no tag"):
        cb.apply_tags({"text": ["x"], "source": ["tag9"]})
    with pytest.raises(ZooError, match="no iml_tags.json"):
        IMLTagging(tags_from="/nonexistent/run").resolve_tags()


@pytest.mark.parametrize("n", [0, -1])
def test_an_answer_of_no_tokens_is_refused_when_the_callback_is_built(n):
    """transformers' generate refused it only at the first evaluation, with a traceback."""
    with pytest.raises(ZooError, match=f"max_new_tokens must be >= 1, got {n}"):
        IMLTagging(max_new_tokens=n)
