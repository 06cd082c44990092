"""Real ReGAL files in the sandbox (Date programs print their gold answers, TextCraft's GPT-4 programs reach their
goal in the crafting-commands environment), the datamodule on files in the released schemas, the embedded
generators, and bad rows."""

from __future__ import annotations

import json

import pytest

from datamodules.regal import ReGALDataModule, embedded_rows
from zoo.errors import ZooError
from zoo.regal.domains import extract_gold_answer, get_domain
from zoo.regal.examples import normalize, read_jsonl


def test_all_66_date_train_combined_programs_print_their_gold_answer(shared_data, executors, rows):
    d = shared_data / "regal" / "date"
    programs = read_jsonl(d / "train_combined.jsonl", "date", "train")
    gold = rows(d / "train_data.jsonl")  # the same 66 questions, in the same order, with their answers
    assert len(programs) == len(gold) == 66
    assert [e["query"] for e in programs] == [g["question"] for g in gold]
    ex = executors("date")
    outs = ex.run([(e["program"], "", e) for e in programs])
    answers = [extract_gold_answer(g["answer"]) for g in gold]
    assert [o.result for o in outs] == answers
    assert all(ex.domain.correct(o, {"answer": g["answer"]}, None) for o, g in zip(outs, gold))
    assert not ex.domain.correct(outs[0], {"answer": gold[1]["answer"]}, None)


def test_textcraft_training_programs_reach_their_goal(shared_data, executors):
    ex = executors("textcraft")
    examples = read_jsonl(shared_data / "regal" / "textcraft" / "train.jsonl", "textcraft", "train", limit=40)
    outs = ex.run([(e["program"], "", e) for e in examples])
    assert all(o.result is True for o in outs), [(e["query"], o.reason) for e, o in zip(examples, outs)
                                                  if o.result is not True][:3]
    # the same program for another goal (the recipe lists stay) does not reach it
    other = dict(examples[0], query="craft diamond block.")
    assert ex.run([(examples[0]["program"], "", other)])[0].result is False


def test_textcraft_environment_refuses_what_the_commands_do_not_allow(executors):
    ex = executors("textcraft")
    e = {"id": "t", "query": "craft oak boat.", "program": None, "answer": True,
         "metadata": "Crafting commands:\ncraft 4 oak planks using 1 oak logs\ncraft 1 oak boat using 5 oak planks\n"}
    ok = "get_object('2 oak logs')\nfor i in range(2):\n    craft_object('4 oak planks', ['1 oak logs'])\n" \
         "craft_object('1 oak boat', ['5 oak planks'])"
    too_few = ok.replace("range(2)", "range(1)")
    not_listed = "get_object('1 diamond')\nget_object('5 oak planks')\ncraft_object('1 oak boat', ['5 oak planks'])"
    outs = ex.run([(p, "", e) for p in (ok, too_few, not_listed)])
    assert [o.result for o in outs] == [True, False, False]
    assert "Could not find enough items" in outs[1].stdout and "Could not find diamond" in outs[2].stdout


def test_textcraft_without_an_environment_is_a_clear_error():
    with pytest.raises(ZooError, match="TextCraft needs an environment"):
        get_domain("textcraft")
    with pytest.raises(ZooError, match="unknown TextCraft environment"):
        get_domain("textcraft", "adapt")


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_datamodule_reads_the_released_schemas(tmp_path):
    (tmp_path / "logo").mkdir()
    prog = "for i in range(4):\n    forward(2)\n    left(90.0)"
    write(tmp_path / "logo" / "train_200.jsonl", [{"program": prog, "language": [f"a small square {i}"]}
                                                  for i in range(7)])
    write(tmp_path / "logo" / "test.jsonl", [{"program": prog, "language": ["a small square"]}])
    dm = ReGALDataModule("logo", "local", str(tmp_path / "logo"))
    dm.setup("fit")
    assert len(dm.train) == 7 and sorted(len(t) for t in dm.tuples) == [2, 5]
    assert dm.train[0] == {"id": "logo_train_0", "query": "a small square 0", "program": prog, "answer": None,
                           "metadata": None}
    assert "data_source" in dm.card_metadata() and "datasets" not in dm.card_metadata()
    batches = list(dm.train_dataloader())
    assert [len(b) for b in batches] == [len(t) for t in dm.tuples] and isinstance(batches[0][0], dict)

    (tmp_path / "date").mkdir()
    write(tmp_path / "date" / "train_combined.jsonl", [{"language": ["q1"], "program": "print(1)"}])
    write(tmp_path / "date" / "test.jsonl", [{"id": 7, "question": "q2", "answer": "#### 01/02/2003"}])
    dm = ReGALDataModule("date", "local", str(tmp_path / "date"))
    dm.setup("test")
    assert dm.test == [{"id": "date_7", "query": "q2", "program": None, "answer": "#### 01/02/2003",
                        "metadata": None}]

    (tmp_path / "tc").mkdir()
    meta = "Crafting commands:\ncraft 1 oak boat using 5 oak planks\n\n"
    write(tmp_path / "tc" / "train.jsonl", [{"idx": "env_3", "language": ["craft oak boat."], "program": "x = 1",
                                             "metadata": meta}])
    write(tmp_path / "tc" / "test_d2.jsonl", [{"idx": "env_9", "language": ["craft oak boat."], "answer": True,
                                               "metadata": meta}])
    dm = ReGALDataModule("textcraft", "local", str(tmp_path / "tc"))
    dm.setup("test")
    assert dm.test[0]["id"] == "textcraft_env_9" and dm.test[0]["answer"] is True and dm.test[0]["metadata"] == meta


def test_real_files_have_the_documented_sizes(shared_data):
    root = shared_data / "regal"
    sizes = {("logo", "train_200.jsonl"): 200, ("logo", "test.jsonl"): 111, ("logo", "dev_100.jsonl"): 100,
             ("date", "train_combined.jsonl"): 66, ("date", "test.jsonl"): 180, ("date", "dev.jsonl"): 113,
             ("textcraft", "train.jsonl"): 189, ("textcraft", "dev.jsonl"): 50, ("textcraft", "test_d2.jsonl"): 78}
    for (dom, f), n in sizes.items():
        assert len(read_jsonl(root / dom / f, dom, f)) == n, (dom, f)


@pytest.mark.parametrize("domain, row, match", [
    ("logo", {"language": ["a square"]}, "needs 'program'"),
    ("logo", {"program": "forward(1)"}, "has no query"),
    ("date", {"language": ["q"]}, "needs 'program'"),
    ("date", {"id": 1, "question": "q", "answer": None}, "needs 'program'"),  # scored every query wrong before
    ("textcraft", {"idx": "env_1", "language": ["craft x."], "metadata": "m", "answer": None}, "needs 'program'"),
    ("textcraft", {"language": ["craft x."], "program": "x"}, "needs 'idx'"),
    ("textcraft", {"idx": "env_1", "language": ["craft x."], "program": "x"}, "needs 'metadata'"),
    ("logo", [1, 2], "must be a JSON object"),
])
def test_rows_missing_a_field_are_clear_errors(domain, row, match):
    with pytest.raises(ZooError, match=match):
        normalize(domain, row, 0, "train", "f.jsonl:1")


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ZooError, match="not found.*regal_program_learning"):
        ReGALDataModule("logo", "local", str(tmp_path)).setup("fit")
    (tmp_path / "train_200.jsonl").write_text('{"program": "x"\n')
    with pytest.raises(ZooError, match=r"train_200.jsonl:1: not JSON"):
        ReGALDataModule("logo", "local", str(tmp_path)).setup("fit")
    with pytest.raises(ZooError, match="needs data.init_args.path"):
        ReGALDataModule("logo", "local")
    with pytest.raises(ZooError, match="source must be"):
        ReGALDataModule("logo", "hub", "x")


def test_embedded_generators_follow_the_schemas_and_their_programs_are_right(executors):
    for domain, keys in (("logo", {"program", "language"}), ("date", {"language", "program"}),
                         ("textcraft", {"idx", "language", "program", "metadata"})):
        rows = embedded_rows(domain, "train", 6, seed=1)
        assert all(set(r) == keys for r in rows) and rows == embedded_rows(domain, "train", 6, seed=1)
    test = embedded_rows("date", "test", 4, seed=1)
    assert all(set(r) == {"id", "question", "answer"} and r["answer"].startswith("#### ") for r in test)
    # a generated Date program prints the answer our own date arithmetic gives for its question
    dm = ReGALDataModule("date", "embedded", n_train=8, n_test=2, seed=3)
    dm.setup("fit")
    ex = executors("date")
    from datamodules.regal import date_case
    import random

    rng = random.Random("regal-date-train-3")
    cases = [date_case(rng) for _ in range(8)]
    assert [e["program"] for e in dm.train] == [c[1] for c in cases]
    assert [o.result for o in ex.run([(e["program"], "", e) for e in dm.train])] == [c[2] for c in cases]
    tc = ReGALDataModule("textcraft", "embedded", n_train=6, seed=0)
    tc.setup("fit")
    assert all(o.result is True for o in executors("textcraft").run([(e["program"], "", e) for e in tc.train]))
    lg = ReGALDataModule("logo", "embedded", n_train=6, seed=0)
    lg.setup("fit")
    assert all(o.ok and len(o.result) for o in executors("logo").run([(e["program"], "", e) for e in lg.train]))


def test_date_answers_that_are_not_mm_dd_yyyy_are_refused(tmp_path):
    # the programs print MM/DD/YYYY: a gold "2003-01-02" could never be matched, every query would score 0 silently
    write(tmp_path / "train_combined.jsonl", [{"language": ["q1"], "program": "print(1)"}])
    write(tmp_path / "test.jsonl", [{"id": 7, "question": "q2", "answer": "#### 01/02/2003"},
                                    {"id": 8, "question": "q3", "answer": "2003-01-02"}])
    with pytest.raises(ZooError, match=r"test.jsonl: row 8 has answer '2003-01-02', not '#### MM/DD/YYYY'"):
        ReGALDataModule("date", "local", str(tmp_path)).setup("test")
    write(tmp_path / "test.jsonl", [{"id": 8, "question": "q3", "answer": "01/02/2003"}])  # the gold without ####
    dm = ReGALDataModule("date", "local", str(tmp_path))
    dm.setup("test")
    assert dm.test[0]["answer"] == "01/02/2003"
