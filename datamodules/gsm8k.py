"""GSM8K: grade-school math word problems with step-by-step answers ending in `#### N`.

Sources (explicit, logged, never a silent fallback):
* ``hub``: `datasets.load_dataset("openai/gsm8k", "main")` (7,473 train / 1,319 test).
* ``local``: a directory with `train.jsonl`/`test.jsonl` (the openai/grade-school-math files) or
  `train*.parquet`/`test*.parquet` (the Hub's `main/` folder).
* ``embedded``: a seeded generator of GSM8K-format problems (questions with numbers, answers with
  `<<a*b=c>>` calculator annotations and a final `#### N`), for smoke runs and tests.

Training (official RoSA recipe, llm-foundry `tasks.py`): prompt = the question, response = the raw answer
(calculator annotations and `#### N` included), concatenated with no separator; prompt tokens get label -100. The
tokens around them follow llm-foundry by default (`tokenize_llm_foundry`: with Llama-2, ``[BOS] prompt [BOS] response
[EOS]``); ``tokenization: plain`` gives ``[BOS] prompt response [EOS]`` (`tokenize_example`).
Evaluation (lm-eval-harness `gsm8k.py` at 2c18e367, 0-shot): context ``"Question: {q}\\nAnswer:"``, greedy
decoding until one of ``[":", "Question:", "Question"]``, answer = first match of ``#### (\\-?[0-9\\.\\,]+)``
with commas removed, exact string match with the reference's answer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

from zoo.data import content_digest, reading, refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.rosa.gsm8k import ANS_RE, EVAL_TEMPLATE

HUB_DATASET = ("openai/gsm8k", "main")
# zoo.data.content_digest of the release's rows (question, NUL, answer): openai/grade-school-math @ 3101c7d, whose
# rows the Hub copy holds. Local files count as GSM8K on a run's card only when their rows have these digests.
RELEASE_DIGESTS = {"train": "e929bed5b8df5112b1e43f03d1ae695af14038465754b26eee8fb24ef6b5f857",
                   "test": "717bdea61058589e2f4f312c8fbd63bf3c8d3278a62da068294afe22aa1b4f4b"}


# --- the embedded source ------------------------------------------------------------------------------------

_NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark", "Lisa", "Omar"]
_ITEMS = ["apples", "pencils", "stickers", "cookies", "marbles", "books", "cupcakes", "stamps"]


KINDS = 4  # the embedded problem templates: 0 boxes, 1 sales, 2 sharing (division), 3 collecting


def _problem(rng: random.Random, kinds: Optional[Sequence[int]] = None) -> dict[str, str]:
    """One GSM8K-format problem; every arithmetic step carries a `<<expr=value>>` annotation. `kinds` restricts the
    templates (a task for fine-tuning that pretraining has not seen); None draws from all four."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.randrange(KINDS) if kinds is None else rng.choice(list(kinds))
    if kind == 0:
        a, b, c = rng.randint(2, 9), rng.randint(2, 12), rng.randint(1, 10)
        n, left = a * b, a * b - c
        q = f"{name} has {a} boxes with {b} {item} in each box. {name} gives away {c} {item}. How many {item} are left?"
        ans = (f"{name} has {a}*{b}=<<{a}*{b}={n}>>{n} {item}.\n"
               f"After giving away {c}, {n}-{c}=<<{n}-{c}={left}>>{left} {item} are left.\n#### {left}")
    elif kind == 1:
        p, n = rng.randint(2, 20), rng.randint(2, 9)
        total, half = p * n, p * n * 2
        q = (f"{name} sells {item} for ${p} each. On Monday {name} sells {n} {item}, and on Tuesday twice as many. "
             f"How much money does {name} make in the two days?")
        ans = (f"On Monday {name} makes {p}*{n}=$<<{p}*{n}={total}>>{total}.\n"
               f"On Tuesday {name} makes {total}*2=$<<{total}*2={half}>>{half}.\n"
               f"Altogether {total}+{half}=$<<{total}+{half}={total + half}>>{total + half}.\n#### {total + half}")
    elif kind == 2:
        k, m = rng.randint(2, 6), rng.randint(3, 15)
        n = k * m
        q = f"{name} shares {n} {item} equally among {k} friends. How many {item} does each friend get?"
        ans = f"Each friend gets {n}/{k}=<<{n}/{k}={m}>>{m} {item}.\n#### {m}"
    else:
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(1, 9)
        s = a + b
        q = (f"{name} collected {a} {item} in the morning and {b} in the afternoon, then lost {c} of them. "
             f"How many {item} does {name} have now?")
        ans = (f"{name} collected {a}+{b}=<<{a}+{b}={s}>>{s} {item}.\n"
               f"After losing {c}, {name} has {s}-{c}=<<{s}-{c}={s - c}>>{s - c} {item}.\n#### {s - c}")
    return {"question": q, "answer": ans}


def embedded_gsm8k(n: int, seed: int, kinds: Optional[Sequence[int]] = None) -> list[dict[str, str]]:
    if kinds is not None and (not kinds or any(k not in range(KINDS) for k in kinds)):
        raise ZooError(f"embedded_kinds must be a non-empty list from 0..{KINDS - 1}, got {list(kinds)}")
    rng = random.Random(seed)
    return [_problem(rng, kinds) for _ in range(n)]


# --- reading the real data ----------------------------------------------------------------------------------

def _read_split(directory: Path, split: str) -> list[dict[str, str]]:
    """One split: ``{split}.jsonl`` (github.com/openai/grade-school-math: one ``{"question", "answer"}`` object per
    line) or ``{split}*.parquet`` (as in the Hub's ``main/`` folder, also read from a ``main/`` subfolder; columns
    question/answer). Every row is checked; a broken line or a row without a field is a ZooError naming the file and
    the line (jsonl) or row (parquet)."""
    jsonl = directory / f"{split}.jsonl"
    if jsonl.is_file():
        rows, where = [], []
        with reading(jsonl, "GSM8K jsonl (UTF-8 text)"), jsonl.open(encoding="utf-8") as f:
            for k, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ZooError(f"GSM8K file {jsonl}, line {k}: not valid JSON ({e.msg} at column {e.colno})") from e
                where.append(f"GSM8K file {jsonl}, line {k}")
    else:
        parquet = sorted(directory.glob(f"{split}*.parquet")) or sorted(directory.glob(f"main/{split}*.parquet"))
        if not parquet:
            raise ZooError(f"GSM8K {split} split not found in {directory} (expected {split}.jsonl or "
                           f"{split}*.parquet); get it from github.com/openai/grade-school-math "
                           f"(grade_school_math/data) or use source: hub")
        import pandas as pd

        rows, where = [], []
        for p in parquet:
            with reading(p, "GSM8K parquet file"):
                part = pd.read_parquet(p).to_dict("records")
            rows += part
            where += [f"GSM8K file {p}, row {k}" for k in range(len(part))]
    if not rows:
        raise ZooError(f"GSM8K {split} file {jsonl if jsonl.is_file() else parquet[0]} holds no rows")
    for r, at in zip(rows, where):
        if not isinstance(r, dict):
            raise ZooError(f"{at}: a JSON {type(r).__name__}, not an object with 'question' and 'answer'")
        missing = [k for k in ("question", "answer") if not isinstance(r.get(k), str)]
        if missing:
            raise ZooError(f"{at}: field {' and '.join(map(repr, missing))} missing or not text (the row has "
                           f"{sorted(r)}); GSM8K rows need 'question' and 'answer'")
        # scoring reads the reference from its `#### N` line: a test (or num_val) row without one stopped the run at
        # evaluation, after training, naming neither file nor line; a train row without one taught no answer format
        if not ANS_RE.search(r["answer"]):
            raise ZooError(f"{at}: the answer has no '#### <number>' line (it ends {r['answer'][-40:]!r}); GSM8K "
                           "answers end in '#### N', the number the model is scored on")
    return [{"question": r["question"], "answer": r["answer"]} for r in rows]


def load_gsm8k(source: str, path: Optional[str] = None, embedded_size: int = 256, seed: int = 0,
               kinds: Optional[Sequence[int]] = None) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train, test) rows with fields question/answer."""
    if source == "local":
        if not path:
            raise ZooError("GSM8K source 'local' needs `path` (a directory with train.jsonl and test.jsonl)")
        directory = Path(path).expanduser()
        if not directory.is_dir():
            raise ZooError(f"GSM8K directory {str(directory)!r} does not exist; download train.jsonl/test.jsonl "
                           f"from github.com/openai/grade-school-math or use source: hub")
        return _read_split(directory, "train"), _read_split(directory, "test")
    if source == "hub":
        try:
            from datasets import load_dataset

            ds = load_dataset(*HUB_DATASET)
        except Exception as e:  # noqa: BLE001 - datasets raises many types (offline, connection, not found)
            raise ZooError(f"cannot load {'/'.join(HUB_DATASET)} from the Hub ({type(e).__name__}); "
                           f"run once online or use source: local with train/test.jsonl") from e
        return tuple([{"question": r["question"], "answer": r["answer"]} for r in ds[s]] for s in ("train", "test"))
    if source == "embedded":
        return (embedded_gsm8k(embedded_size, seed, kinds),
                embedded_gsm8k(max(embedded_size // 4, 8), seed + 1, kinds))
    raise ZooError(f"unknown GSM8K source {source!r}; use 'hub', 'local' or 'embedded'")


# --- tokenisation -------------------------------------------------------------------------------------------

def tokenize_example(tokenizer, prompt: str, response: str, max_length: int) -> dict[str, list[int]]:
    """The ``plain`` format: prompt ids (with BOS if the tokenizer has one) + response ids + EOS; labels -100 on the
    prompt. No special tokens otherwise: with Llama-2 ``[BOS] prompt response [EOS]``, with ByT5 ``prompt response
    [EOS]`` (the official recipe's format is `tokenize_llm_foundry`).

    Over `max_length`, the prompt loses tokens from its left (down to half the budget) and then the response
    from its right, so every example keeps supervised tokens (an all -100 row would give a NaN loss).
    """
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    if len(bos) + len(p) + len(r) > max_length:
        keep = max(max_length - len(bos) - len(r), max_length // 2 - len(bos), 0)
        p = p[len(p) - keep:] if keep < len(p) else p
    p = bos + p
    ids = (p + r)[:max_length]
    labels = ([-100] * len(p) + r)[:max_length]
    return {"input_ids": ids, "labels": labels}


def tokenize_llm_foundry(tokenizer, prompt: str, response: str, max_length: int) -> dict[str, list[int]] | None:
    """The official recipe's training example (llm-foundry in IST-DASLab/RoSA): `tasks.py` tokenises
    ``tokenizer(text=prompt, text_target=response)``, each side with the tokenizer's special tokens, and the
    decoder-only path of its `Seq2SeqFinetuningCollator` drops pad tokens from both sides, appends EOS to the target
    unless it already ends in EOS, and supervises the target alone. With Llama-2 (BOS added, EOS not):
    ``[BOS] prompt [BOS] response [EOS]``, the second BOS a supervised target token; with ByT5 (EOS added, no BOS):
    ``prompt [EOS] response [EOS]``.

    Over `max_length`, as in that collator: an example whose context alone fills `max_length` is skipped (None is
    returned; the datamodule drops it and says how many); otherwise the target keeps its *last*
    ``max_length - len(context)`` tokens and ends in EOS (the collator's ``target[-n_target:]``, which cuts the start of
    the response, not its end as its comment says).
    """
    enc = tokenizer(text=prompt, text_target=response)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    context = [t for t in enc["input_ids"] if t != pad]
    target = [t for t in enc["labels"] if t != pad]
    if not target or target[-1] != eos:
        target.append(eos)
    if len(context) >= max_length:
        return None
    if len(context) + len(target) > max_length:
        target = target[len(context) + len(target) - max_length:]
        target[-1] = eos
    return {"input_ids": context + target, "labels": [-100] * len(context) + target}


# the datamodule's `tokenization` option: the training example's format
TOKENIZATIONS = {"llm-foundry": tokenize_llm_foundry, "plain": tokenize_example}


class _TrainCollate:
    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        n = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), n), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), n), -100, dtype=torch.long)
        attn = torch.zeros((len(rows), n), dtype=torch.long)
        for i, r in enumerate(rows):
            k = len(r["input_ids"])
            ids[i, :k], labels[i, :k], attn[i, :k] = torch.tensor(r["input_ids"]), torch.tensor(r["labels"]), 1
        return {"input_ids": ids, "attention_mask": attn, "labels": labels}


def _eval_collate(rows: list[dict[str, str]]) -> dict[str, list[str]]:
    return {k: [r[k] for r in rows] for k in ("prompt", "question", "answer")}


class GSM8KDataModule(L.LightningDataModule):
    # the file options and the sources that read them (`refuse_unread_files`; the tokenizer is read by all)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("local",)}

    def __init__(
        self,
        source: Literal["hub", "local", "embedded"] = "hub",
        path: Optional[str] = None,
        tokenizer: str = "meta-llama/Llama-2-7b-hf",
        max_length: int = 512,
        batch_size: int = 1,
        eval_batch_size: int = 8,
        train_template: str = "{question}",
        tokenization: Literal["llm-foundry", "plain"] = "llm-foundry",
        eval_template: str = EVAL_TEMPLATE,
        num_train: Optional[int] = None,
        num_val: int = 0,
        num_test: Optional[int] = None,
        embedded_size: int = 256,
        embedded_kinds: Optional[list[int]] = None,
        seed: int = 0,
        num_workers: int = 0,
    ):
        """
        Args:
            source: "hub" (openai/gsm8k, main), "local" (directory with train/test .jsonl or .parquet) or
                "embedded" (seeded generator with the same schema).
            path: the directory for source "local".
            tokenizer: the base model's tokenizer ("byt5" = file-free byte tokenizer for smoke runs).
            max_length: training sequence length in tokens (paper: 512); longer examples are cut.
            batch_size: training micro-batch (paper: 1, with 32 accumulated micro-batches per step).
            eval_batch_size: prompts per generation batch.
            train_template: training prompt; the official recipe uses the bare question ("{question}") and
                appends the answer with no separator.
            tokenization: the special tokens around prompt and answer. "llm-foundry" (the official recipe's
                finetuning pipeline): the prompt and the answer each tokenised with the tokenizer's special tokens,
                EOS appended to the answer unless it ends in one; with Llama-2 ``[BOS] prompt [BOS] answer [EOS]``, the
                second BOS a supervised token; examples whose prompt alone fills `max_length` are skipped, longer
                ones lose the start of the answer (as llm-foundry's collator). "plain": ``[BOS] prompt answer [EOS]``
                (BOS only if the tokenizer has one); longer examples lose prompt tokens from the left, then answer
                tokens from the right.
            eval_template: 0-shot evaluation context (lm-eval-harness gsm8k).
            num_train: use only the first N training rows (default: all).
            num_val: hold out the last N training rows as a validation set evaluated by generation (0: none;
                the paper trains on all 7,473 rows and reports the test split).
            num_test: evaluate only the first N test rows (default: all 1,319).
            embedded_size: number of generated training problems for source "embedded".
            embedded_kinds: the generator's problem templates to draw from (0 boxes, 1 sales, 2 sharing by
                division, 3 collecting); None: all four. Lets a sweep pretrain on some and fine-tune on another.
            seed: seed of the embedded generator.
            num_workers: DataLoader workers.
        """
        super().__init__()
        self.save_hyperparameters()
        if source not in ("hub", "local", "embedded"):
            raise ZooError(f"unknown GSM8K source {source!r}; use 'hub', 'local' or 'embedded'")
        refuse_unread_files(self, source, locals())
        if tokenization not in TOKENIZATIONS:
            raise ZooError(f"unknown GSM8K tokenization {tokenization!r}; use one of {sorted(TOKENIZATIONS)}")
        for name, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size),
                            ("max_length", max_length)):
            if value < 1:
                raise ZooError(f"GSM8KDataModule: {name} must be >= 1, got {value}")
        for name, value in (("num_train", num_train), ("num_test", num_test)):  # 0 was read as "no limit": all rows
            if value is not None and value < 1:
                raise ZooError(f"GSM8KDataModule: {name} must be >= 1 (or null for every row), got {value}")
        self.tokenizer = None
        self.is_release, self.read_rows = False, {}
        self.train_rows: list[dict] = []
        self.val_rows: list[dict] = []
        self.test_rows: list[dict] = []

    def _eval_rows(self, rows: list[dict[str, str]]) -> list[dict[str, str]]:
        t = self.hparams.eval_template
        return [{"prompt": t.format(question=r["question"]), **r} for r in rows]

    def setup(self, stage: Optional[str] = None) -> None:
        self._read()
        if stage == "fit" and not self.val_rows and self.trainer is not None:
            # num_val 0 (the paper's setting): no validation loop, rather than an empty loader Lightning warns about
            self.trainer.limit_val_batches = 0

    def _read(self) -> None:
        if self.tokenizer is not None:
            return
        from zoo.lm import load_tokenizer

        hp = self.hparams
        rank_zero_info(f"GSM8K source: {hp.source}" + (f" ({hp.path})" if hp.source == "local" else ""))
        train, test = load_gsm8k(hp.source, hp.path, hp.embedded_size, hp.seed, hp.embedded_kinds)
        self.read_rows = {"train": len(train), "test": len(test)}
        self.is_release = hp.source == "hub" or (hp.source == "local" and all(
            content_digest(f"{r['question']}\0{r['answer']}" for r in rows) == RELEASE_DIGESTS[split]
            for split, rows in (("train", train), ("test", test))))
        train = list(train)[: hp.num_train] if hp.num_train else list(train)
        if hp.num_val:
            if hp.num_val >= len(train):
                raise ZooError(f"num_val={hp.num_val} leaves no training rows (train has {len(train)})")
            train, val = train[: -hp.num_val], train[-hp.num_val:]
        else:
            val = []
        test = list(test)[: hp.num_test] if hp.num_test else list(test)
        self.tokenizer = load_tokenizer(hp.tokenizer)
        tokenize = TOKENIZATIONS[hp.tokenization]
        rows = [tokenize(self.tokenizer, hp.train_template.format(question=r["question"]), r["answer"], hp.max_length)
                for r in train]
        self.train_rows = [r for r in rows if r is not None]
        if len(self.train_rows) < len(rows):
            skipped = len(rows) - len(self.train_rows)
            if not self.train_rows:
                raise ZooError(f"every GSM8K training prompt fills max_length={hp.max_length} tokens, leaving no room "
                               "for the answer; raise max_length")
            rank_zero_warn(f"GSM8K: {skipped} of {len(rows)} training examples skipped: the prompt alone fills "
                           f"max_length={hp.max_length} (as llm-foundry's collator does)")
        self.val_rows, self.test_rows = self._eval_rows(val), self._eval_rows(test)

    def card_metadata(self) -> dict:
        """What data this run used, for its card: the Hub id only when the real GSM8K was read (the Hub, or local
        files whose rows are the release's)."""
        hp = self.hparams
        if hp.source == "embedded":
            kinds = "" if hp.embedded_kinds is None else f", templates {list(hp.embedded_kinds)}"
            return {"data_source": f"embedded: seeded generator of GSM8K-format problems{kinds} (not the GSM8K "
                                   "dataset)"}
        if not self.read_rows:
            self._read()
        if not self.is_release:
            n = self.read_rows
            return {"data_source": f"local files in the GSM8K format in {hp.path} ({n['train']} train / {n['test']} "
                                   "test rows; not the released GSM8K)"}
        where = "the Hub (openai/gsm8k, main)" if hp.source == "hub" else f"local files in {hp.path}"
        return {"datasets": ["openai/gsm8k"], "data_source": f"GSM8K from {where}"}

    def train_dataloader(self) -> DataLoader:
        return train_loader(self.train_rows, self.hparams.batch_size, shuffle=True,
                            collate_fn=_TrainCollate(self.tokenizer.pad_token_id), num_workers=self.hparams.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_rows, batch_size=self.hparams.eval_batch_size, collate_fn=_eval_collate)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_rows, batch_size=self.hparams.eval_batch_size, collate_fn=_eval_collate)
