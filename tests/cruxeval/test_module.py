"""CRUXEvalModule + CRUXEvalDataModule: generation, scoring, run-dir artifacts, bad input."""

import json

import lightning as L
import pytest

from datamodules.cruxeval import CRUXEvalDataModule
from zoo.cruxeval import CRUXEvalModule
from zoo.errors import ZooError

TINY = {"model_type": "llama", "vocab_size": 384, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "max_position_embeddings": 2048}


def _module(**kw):
    args = dict(model=TINY, tokenizer="byt5", n_samples=2, ks=[1, 2], max_new_tokens=4, sandbox_workers=1,
                cpu_seconds=1, wall_timeout=2, memory_mb=256)
    args.update(kw)
    return CRUXEvalModule(**args)


def _rows(n=4):
    dm = CRUXEvalDataModule(source="embedded", batch_size=2, limit=n)
    dm.setup("test")
    return dm, dm.rows


@pytest.mark.parametrize("mode", ["output", "input"])
def test_test_loop_scores_known_answers_and_saves_artifacts(tmp_path, monkeypatch, mode):
    dm, rows = _rows(4)
    gold = {r["id"]: (r["output"] if mode == "output" else f"f({r['input']})") for r in rows}
    module = _module(mode=mode)

    def complete(batch):  # sample 1 right, sample 2 wrong (direct-prompt completions, as the model writes them)
        out = []
        for r in batch:
            right = f"assert f({r['input']}) == {gold[r['id']]}" if mode == "output" else \
                f"assert {gold[r['id']]} == {r['output']}"
            out.append([right + "\n", "assert f(0) == None\n"])
        return out

    monkeypatch.setattr(module, "complete", complete)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        default_root_dir=str(tmp_path))
    metrics = trainer.test(module, datamodule=dm)[0]
    assert metrics["test/pass@1"] == pytest.approx(50.0)
    assert metrics["test/pass@2"] == pytest.approx(100.0)
    gens = json.loads((tmp_path / f"generations_{mode}_test.json").read_text())
    assert set(gens) == set(gold) and all(g[0] == gold[k] for k, g in gens.items())
    verdicts = [json.loads(x) for x in (tmp_path / f"verdicts_{mode}_test.jsonl").read_text().splitlines()]
    assert [v["passed"] for v in verdicts] == [[True, False]] * 4
    assert all(v["verdicts"][1]["reason"] for v in verdicts)


def test_tiny_lm_generates_and_bad_rows_do_not_crash():
    module = _module()
    _, rows = _rows(2)
    records = module.evaluate(rows + [{"id": "broken", "code": "def f(x): return x"}])
    assert [len(r["completions"]) for r in records[:2]] == [2, 2]
    assert all(len(r["verdicts"]) == 2 and all(v["reason"] for v in r["verdicts"]) for r in records[:2]
               if not any(r["passed"]))
    assert records[2]["completions"] is None and "malformed row" in records[2]["error"]
    assert records[2]["pass_at"] == {"pass@1": 0.0}
    module.teardown("test")


def test_cot_completion_without_tag_is_a_failure_with_reason(monkeypatch):
    module = _module(cot=True, n_samples=1, ks=[1])
    _, rows = _rows(1)
    monkeypatch.setattr(module, "complete", lambda batch: [["The answer is 3."] for _ in batch])
    rec = module.evaluate(rows)[0]
    assert rec["passed"] == [False] and rec["verdicts"][0]["reason"] == "no [ANSWER] tag in the completion"
    module.teardown("test")


def test_bad_arguments():
    with pytest.raises(ZooError, match="k <= n_samples"):
        _module(n_samples=2, ks=[1, 5])
    with pytest.raises(ZooError, match="mode"):
        _module(mode="both")
    with pytest.raises(ZooError, match=r"k <= n_samples for every k in ks=\[\]"):  # ran and reported no pass@k
        _module(ks=[])
    with pytest.raises(ZooError, match="max_new_tokens must be >= 1, got 0"):  # was transformers' ValueError
        _module(max_new_tokens=0)
    with pytest.raises(ZooError, match="explicit tokenizer"):
        CRUXEvalModule(model=TINY)


def test_datamodule_sources(tmp_path, shared_data):
    with pytest.raises(ZooError, match="needs data.path"):
        CRUXEvalDataModule(source="local")
    dm = CRUXEvalDataModule(source="local", path=str(tmp_path / "missing.jsonl"))
    with pytest.raises(ZooError, match="not found"):
        dm.setup("test")
    dm = CRUXEvalDataModule(source="hub", hub_name="cruxeval-org/definitely-not-cached")
    with pytest.raises(ZooError, match="could not load"):
        dm.setup("test")
    real = shared_data / "cruxeval.jsonl"
    if real.exists():
        dm = CRUXEvalDataModule(source="local", path=str(real), batch_size=5)
        dm.setup("test")
        assert len(dm.rows) == 800 and set(dm.rows[0]) == {"code", "input", "output", "id"}
        assert len(next(iter(dm.test_dataloader()))) == 5


def test_the_card_names_cruxeval_only_for_the_released_rows(tmp_path, shared_data):
    """A local file is the benchmark on a run's card only when its rows are the release's (any order, any limit);
    a file of one's own problems in the same schema is named by its path, another Hub dataset by its own id."""
    rows = [json.loads(line) for line in (shared_data / "cruxeval.jsonl").read_text().splitlines()]
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))
    release = CRUXEvalDataModule(source="local", path=str(shuffled), limit=3)
    assert release.card_metadata()["datasets"] == ["cruxeval-org/cruxeval"]
    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps(r) + "\n" for r in [*rows[:799], {**rows[799], "output": "0"}]))
    meta = CRUXEvalDataModule(source="local", path=str(own)).card_metadata()
    assert "datasets" not in meta and f"local file {own} in the CRUXEval format (800 rows" in meta["data_source"]
    assert CRUXEvalDataModule(source="hub").card_metadata()["datasets"] == ["cruxeval-org/cruxeval"]
    assert CRUXEvalDataModule(source="hub", hub_name="me/mine").card_metadata()["datasets"] == ["me/mine"]


def test_malformed_rows_of_a_local_file_are_named(tmp_path):
    """A user's own jsonl (README "Your own data") with a row lacking a field: still scored as a failure (one bad line
    never stops a run), but warned about with the row and the reason; it was seen only as test/failed_rows."""
    rows = [{"code": "def f(x):\n    return x * 2", "input": str(k), "output": str(2 * k), "id": f"mine_{k}"}
            for k in range(4)]
    del rows[2]["output"]
    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(UserWarning, match=r"own.jsonl: 1 of 4 rows are malformed .* row 3: .*field\(s\) output"):
        CRUXEvalDataModule(source="local", path=str(own)).setup("test")


def test_hub_round_trip_of_a_random_init_model(tmp_path):
    import torch

    module = _module()
    module.save_pretrained(tmp_path / "m")
    back = CRUXEvalModule.from_pretrained(tmp_path / "m")
    assert back.hparams.mode == "output" and back.hparams.n_samples == 2
    for (k, a), (_, b) in zip(module.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k


def test_greedy_decoding_repeats_one_completion():
    module = _module(temperature=0.0)
    _, rows = _rows(1)
    comps = module.complete(rows)
    assert len(comps[0]) == 2 and comps[0][0] == comps[0][1]


def test_sampling_has_no_top_k_cutoff_like_the_official_vllm_sampler():
    # Official inference (inference/generation_arguments.py): SamplingParams(top_k=-1), i.e. no top-k; transformers
    # fills an unset top_k with its global default 50. An LM head whose logits are a fixed, strictly decreasing ramp
    # over the ids (nearly uniform: e^-0.38 from first to last) makes a top-50 cutoff keep ids 0..49 only (pad, EOS,
    # unk and the bytes 0..46 in ByT5), i.e. fewer than 50 distinct characters; without it, ~95 printable bytes.
    import torch

    module = _module(n_samples=16, max_new_tokens=64, temperature=1.0, top_p=1.0)
    head = torch.nn.Linear(module.lm.config.hidden_size, module.lm.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(-1e-3 * torch.arange(module.lm.config.vocab_size, dtype=torch.float32))
    module.lm.lm_head = head
    _, rows = _rows(1)
    torch.manual_seed(0)
    texts = module.complete(rows)[0]
    assert len(set("".join(texts))) > 60
