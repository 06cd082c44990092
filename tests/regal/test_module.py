"""ReGALModule under a real Trainer with scripted LLMs: fit runs one tuple per step and grows the codebank, the
codebank survives a checkpoint and save_pretrained/from_pretrained, test prompts follow the paper's layout
(top helpers with success rates, budget_split * N refactored + the rest primitive examples), bad settings."""

from __future__ import annotations

import json
import re

import lightning as L
import pytest

from datamodules.regal import ReGALDataModule
from zoo.errors import ZooError
from zoo.regal.module import ReGALModule

FMT = "def fmt(d):\n    # the date in MM/DD/YYYY\n    return d.strftime('%m/%d/%Y')"
SPEC = {"backend": "hf", "model": "never-built"}  # every answer comes from the scripted LLMs below


def refactorer(dm, scripted):
    """Rewrites each tuple's programs to use one shared helper (the same behaviour, so it verifies)."""
    by_query = {e["query"]: e for e in dm.train}

    def answer(prompt: str) -> str:
        shown = sorted((prompt.find(f"QUERY {i}: "), q) for q in by_query for i in range(1, 6)
                       if f"QUERY {i}: {q}\n" in prompt)
        out = []
        for i, (_, q) in enumerate(shown, 1):
            prog = by_query[q]["program"].replace('.strftime("%m/%d/%Y")', "").replace("answer = ", "answer = fmt(")
            prog = re.sub(r"answer = fmt\((.*)\n", r"answer = fmt(\1)\n", prog)
            out.append(f"NEW PROGRAM {i}:\n" + (FMT + "\n" if i == 1 else "") + prog)
        return "\n".join(out)

    return scripted(fn=answer)


def synthesizer(dm, scripted):
    gold = {e["query"]: e["answer"].split("#### ")[-1] for e in dm.test}

    def answer(prompt: str) -> str:
        query = prompt.rsplit("# Query: ", 1)[1].split("\n")[0]
        if "# Success rate:" in prompt:  # the ReGAL condition: use the helper
            m, d, y = gold[query].split("/")
            return f" I will use fmt.\nanswer = fmt(date({int(y)}, {int(m)}, {int(d)}))\nprint(answer)\n[/PYTHON]"
        return " no helpers.\nprint('01/01/1900')\n[/PYTHON]"  # baseline: wrong on purpose

    return scripted(fn=answer)


@pytest.fixture
def fitted(tmp_path, scripted):
    dm = ReGALDataModule("date", "embedded", n_train=6, n_test=3, test_batch_size=3, seed=2)
    dm.setup("fit")
    model = ReGALModule("date", refactorer=SPEC, sandbox_workers=2, cpu_seconds=2, wall_timeout=4,
                        refactor_every=5, prune_min_uses=4)
    model._llms["refactorer"] = refactorer(dm, scripted)
    model._llms["synthesizer"] = synthesizer(dm, scripted)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm)
    return model, dm, trainer, tmp_path


def test_fit_grows_the_codebank_and_test_compares_both_conditions(fitted):
    model, dm, trainer, run = fitted
    assert trainer.global_step == len(dm.tuples) == 2 and [r["verified"] for r in model.reports] == [3, 3]
    assert list(model.bank.helpers) == ["fmt"] and model.bank.helpers["fmt"].was_success == [True] * 6
    assert trainer.callback_metrics["train/codebank_size"] == 1
    assert "def fmt" in (run / "codebank" / "codebank.py").read_text()
    assert len((run / "refactor_log.jsonl").read_text().splitlines()) == 2

    (metrics,) = trainer.test(model, datamodule=dm, verbose=False)
    assert metrics["test/acc_regal"] == 100.0 and metrics["test/acc_baseline"] == 0.0
    assert metrics["test/gain"] == 100.0 and metrics["test/codebank_size"] == 1
    prompts = model._llms["synthesizer"].prompts
    regal = [p for p in prompts if "# Success rate:" in p]
    base = [p for p in prompts if "# Success rate:" not in p]
    assert len(regal) == len(base) == 3
    icl = regal[0].split("# Examples:")[1].split("[/PYTHON]")[0]
    # int(0.6 * 5) = 3 refactored examples (they call fmt, with a thought) and 2 primitive ones
    assert icl.count("# Query:") == 5 and icl.count("I will use the helper functions: fmt") == 3
    assert "# Success rate: 6/6" in regal[0]
    assert base[0].split("# Examples:")[1].split("[/PYTHON]")[0].count("# Query:") == 5 and "fmt" not in base[0]
    records = [json.loads(line) for line in (run / "test_records.jsonl").read_text().splitlines()]
    assert len(records) == 6 and {r["condition"] for r in records} == {"baseline", "regal"}


def test_codebank_survives_checkpoint_and_hub_round_trip(fitted, tmp_path):
    model, dm, trainer, run = fitted
    ckpt = tmp_path / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    again = ReGALModule.load_from_checkpoint(ckpt)
    assert again.bank.to_json() == model.bank.to_json() and len(again.examples) == 6
    model.save_pretrained(tmp_path / "hub")
    pulled = ReGALModule.from_pretrained(tmp_path / "hub")
    assert pulled.bank.to_json() == model.bank.to_json() and pulled.reports == model.reports


def test_pruning_at_test_time_drops_rarely_used_helpers(fitted):
    model, dm, trainer, _ = fitted
    model.hparams.prune_min_uses = 7  # fmt has 6 uses
    trainer.test(model, datamodule=dm, verbose=False)
    assert trainer.callback_metrics["test/helpers_pruned"] == 1 and len(model._synth.bank) == 0
    assert len(model.bank) == 1  # the trained codebank itself is untouched


def test_pruned_helpers_rewrites_stay_date_examples_as_officially(fitted):
    """Official `read_data_from_logdir` (transcribed): the refactored examples are the verified rewrites of the
    *saved* test_cases.jsonl, dropped only for LOGO/TextCraft when they call a pruned helper (Date: no filter)."""
    model, dm, trainer, run = fitted
    model.hparams.prune_min_uses = 7  # fmt (6 uses) is pruned
    trainer.test(model, datamodule=dm, verbose=False)
    saved = [c for line in (run / "codebank" / "test_cases.jsonl").read_text().splitlines()
             for c in json.loads(line)]
    official = {c["query"] for c in saved if c["success"]}  # task "python": do_filter = False
    assert len(official) == 6 and len(model._synth.bank) == 0
    assert {e["query"] for e in model._synth.refactored} == official
    from zoo.regal.synthesis import refactored_pool  # the LOGO/TextCraft rule on the same log: all dropped
    assert refactored_pool(model._synth.bank, True, model.bank) == []


@pytest.mark.parametrize("kwargs, match", [
    ({}, "needs an LLM"),
    ({"refactorer": SPEC, "conditions": ["regal", "oracle"]}, "conditions must be"),
    ({"refactorer": SPEC, "budget_split": 1.5}, "budget_split"),
    ({"refactorer": SPEC, "refactor_every": 0}, "refactor_every"),
    ({"refactorer": SPEC, "domain": "date", "add_comments": True}, "add_comments is the LOGO step"),
    ({"refactorer": SPEC, "domain": "math"}, "unknown ReGAL domain"),
    ({"refactorer": SPEC, "domain": "textcraft"}, "TextCraft needs an environment"),
])
def test_bad_settings_are_clear_errors(kwargs, match):
    with pytest.raises(ZooError, match=match):
        ReGALModule(**kwargs)


class SaveAfterFirstTuple(L.Callback):
    """What a killed run leaves: the checkpoint written after its first tuple."""

    def __init__(self, path):
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            trainer.save_checkpoint(self.path)


def test_resume_after_one_tuple_gives_the_uninterrupted_codebank(tmp_path, scripted):
    def run(root, ckpt=None, callbacks=()):
        dm = ReGALDataModule("date", "embedded", n_train=6, n_test=3, seed=2)
        dm.setup("fit")
        model = ReGALModule("date", refactorer=SPEC, sandbox_workers=1, cpu_seconds=2, wall_timeout=4)
        model._llms["refactorer"] = refactorer(dm, scripted)
        trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                            callbacks=list(callbacks))
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
        return model, trainer

    whole, _ = run(tmp_path / "a", callbacks=[SaveAfterFirstTuple(tmp_path / "first.ckpt")])
    resumed, trainer = run(tmp_path / "b", tmp_path / "first.ckpt")
    assert trainer.global_step == 2 and [r["ids"] for r in resumed.reports] == [r["ids"] for r in whole.reports]
    assert resumed.bank.to_json() == whole.bank.to_json() and len(resumed._llms["refactorer"].prompts) == 1


class NoModel:
    """The LLM client of a replay: it must never be reached."""

    def __call__(self, prompt: str) -> str:
        raise AssertionError("replay_only reached the model")


def test_replay_only_reproduces_a_finished_run_from_its_llm_cache(tmp_path, scripted, rows):
    """cards/regal.md: every answer is cached in llm_cache.jsonl and a finished run replays without any model."""

    def run(root, cache, clients, replay_only=False, test=True):
        dm = ReGALDataModule("date", "embedded", n_train=6, n_test=3, test_batch_size=3, seed=2)
        dm.setup("fit")
        model = ReGALModule("date", refactorer=SPEC, sandbox_workers=2, cpu_seconds=2, wall_timeout=4,
                            refactor_every=5, prune_min_uses=4, llm_cache=str(cache), replay_only=replay_only)
        for role, client in clients(dm).items():
            model.llm(role)._client = client  # the real CachedLLM and ResponseCache stay in front of it
        trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
        trainer.fit(model, datamodule=dm)
        metrics = trainer.test(model, datamodule=dm, verbose=False)[0] if test else None
        return model, metrics

    cache = tmp_path / "llm_cache.jsonl"
    first, metrics = run(tmp_path / "a", cache, lambda dm: {"refactorer": refactorer(dm, scripted),
                                                            "synthesizer": synthesizer(dm, scripted)})
    llms = first._llms.values()
    assert sum(x.calls for x in llms) == sum(x.misses for x in llms) == len(rows(cache)) == 2 + 6
    assert list(first.bank.helpers) == ["fmt"] and metrics["test/gain"] == 100.0
    written = cache.read_text()

    replay, again = run(tmp_path / "b", cache, lambda dm: {"refactorer": NoModel(), "synthesizer": NoModel()},
                        replay_only=True)
    assert [(x.calls, x.misses) for x in replay._llms.values()] == [(x.calls, 0) for x in llms]
    assert replay.bank.to_json() == first.bank.to_json() and replay.reports == first.reports
    assert (tmp_path / "b" / "codebank" / "codebank.py").read_text() == \
        (tmp_path / "a" / "codebank" / "codebank.py").read_text()
    assert again == metrics
    assert rows(tmp_path / "b" / "test_records.jsonl") == rows(tmp_path / "a" / "test_records.jsonl")
    assert cache.read_text() == written  # a replay adds nothing

    # one answer missing (the first tuple's refactoring): the replay stops there, naming the role and the cache
    lines = written.splitlines(keepends=True)
    assert json.loads(lines[0])["role"] == "refactorer"
    short = tmp_path / "short_cache.jsonl"
    short.write_text("".join(lines[1:]))
    with pytest.raises(ZooError, match=rf"refactorer: no cached response for this prompt in "
                                       rf"{re.escape(str(short))} \(replay_only\)"):
        run(tmp_path / "c", short, lambda dm: {"refactorer": NoModel(), "synthesizer": NoModel()},
            replay_only=True, test=False)


def test_zero_sandbox_workers_is_refused_before_the_fit():
    # ReGAL's fit ran on (its programs reach the sandbox only once the LLM writes one that parses), CRUXEval's test
    # failed at its first batch
    from zoo.checks import check_init_args

    with pytest.raises(ZooError, match="model.init_args.sandbox_workers = 0: sandbox limits must be positive"):
        check_init_args({"sandbox_workers": 0}, {})
