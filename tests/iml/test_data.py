"""Generator invariants of the two-stage dataset (paper Sec. 2 / the notes' construction)."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

from zoo.errors import ZooError
from zoo.iml.data import (CVDB_COLUMNS, PAPER_FRACS, QUESTIONS, build_iml_dataset, convert_citizenship,
                          convert_year, cvdb_entities, derangement, fictional_cvdb, load_cvdb)

PAPER_COUNTS = {"qd1consis": 1000, "qd2incons": 1000, "q": 400, "q_no_replacement_baseline": 400,
                "d1consis": 320, "d2consis": 320, "d3consis": 320, "no_qd_baseline": 240}


def test_subset_sizes_and_disjointness(paper_dataset):
    ds = paper_dataset
    assert {k: len(v) for k, v in ds.subsets.items()} == PAPER_COUNTS
    everyone = [e for v in ds.subsets.values() for e in v]
    assert len(everyone) == len(set(everyone)) == 4000  # disjoint and covering
    assert len(set(ds.ents_to_vars.values())) == 4000  # one distinct alias per entity
    assert all(v.startswith("<|") and v.endswith("|>") and len(v) == 9 for v in ds.ents_to_vars.values())


def test_inconsistent_definitions_are_a_derangement(paper_dataset):
    ds = paper_dataset
    incons = ds.subsets["qd2incons"]
    assert all(ds.defined_vars[e] != ds.ents_to_vars[e] for e in incons)  # no fixed point
    # a permutation of the subset's own aliases
    assert sorted(ds.defined_vars[e] for e in incons) == sorted(ds.ents_to_vars[e] for e in incons)
    consistent = [e for s, v in ds.subsets.items() if s != "qd2incons" for e in v]
    assert all(ds.defined_vars[e] == ds.ents_to_vars[e] for e in consistent)
    for r in ds.train["stage1"]:
        if r["kind"] == "definition" and r["subset"] == "qd2incons":
            assert r["text"] == f"{ds.defined_vars[r['entity']]} {r['entity']}\n"


@pytest.mark.parametrize("n", [2, 3, 7, 50])
def test_derangement_has_no_fixed_points(n):
    import random

    for seed in range(20):
        p = derangement(n, random.Random(seed))
        assert sorted(p) == list(range(n)) and all(i != x for i, x in enumerate(p))


def test_stage2_holds_definitions_only(paper_dataset):
    s2 = paper_dataset.train["stage2"]
    assert len(s2) == 960
    assert all(r["kind"] == "definition" for r in s2)
    assert Counter(r["subset"] for r in s2) == {"d1consis": 320, "d2consis": 320, "d3consis": 320}
    assert {(r["subset"], r["source"]) for r in s2} == {("d1consis", "tag1"), ("d2consis", "tag2"),
                                                         ("d3consis", "tag3")}
    assert set(paper_dataset.test["stage2"]) == {"d1consis", "d2consis", "d3consis", "no_qd_baseline", "d2incons"}


def test_stage1_composition_and_qa_split(paper_dataset):
    ds = paper_dataset
    s1 = ds.train["stage1"]
    kinds = Counter((r["kind"], r["subset"]) for r in s1)
    # 5 of 6 questions of each q-entity are trained on (about 14k QA), 2k definitions
    assert kinds == {("qa", "qd1consis"): 5000, ("qa", "qd2incons"): 5000, ("qa", "q"): 2000,
                     ("qa", "q_no_replacement_baseline"): 2000, ("definition", "qd1consis"): 1000,
                     ("definition", "qd2incons"): 1000}
    assert {r["source"] for r in s1 if r["kind"] == "definition"} == {"tag1", "tag2"}
    train_q = {r["question"] for r in s1 if r["kind"] == "qa"}
    for s in ("qd1consis", "qd2incons", "q", "q_no_replacement_baseline"):
        test = ds.test["stage1"][s]
        assert Counter(r["entity"] for r in test) == {e: 1 for e in ds.subsets[s]}  # stratified: 1 per entity
        assert not train_q & {r["question"] for r in test}
    for s in ("d1consis", "d2consis", "d3consis", "no_qd_baseline"):
        assert len(ds.test["stage1"][s]) == 6 * len(ds.subsets[s])  # all QA of d-subsets are test
        assert not {r["entity"] for r in s1} & set(ds.subsets[s])  # never seen in stage 1
    # aliases everywhere except the no-replacement baseline, which keeps real names
    for r in s1:
        if r["kind"] == "qa":
            who = r["entity"] if r["subset"] == "q_no_replacement_baseline" else ds.ents_to_vars[r["entity"]]
            assert who in r["question"]
            assert r["text"] == f"{r['question']} {r['answer']}\n" and r["question"].startswith("Q: ")


def test_d2incons_swaps_aliases_pairwise(paper_dataset):
    ds = paper_dataset
    d2 = {e: ds.ents_to_vars[e] for e in ds.subsets["d2consis"]}
    var_to_ent = {v: e for e, v in d2.items()}
    inc = ds.test["stage1"]["d2incons"]
    assert len(inc) == len(ds.test["stage1"]["d2consis"])  # 320 is even: nobody left out
    swapped = {}
    for r in inc:
        asked = next(v for v in d2.values() if v in r["question"])
        assert asked != d2[r["entity"]]
        swapped[d2[r["entity"]]] = asked
    assert all(swapped[swapped[v]] == v for v in swapped)  # an involution: pairs
    assert all(var_to_ent[v] != var_to_ent[swapped[v]] for v in swapped)


def test_same_seed_same_dataset_and_seed_stage2_only_moves_stage2():
    ents = cvdb_entities(fictional_cvdb(300, seed=3), 300)
    a, b = build_iml_dataset(ents, seed=5), build_iml_dataset(ents, seed=5)
    assert a == b
    c = build_iml_dataset(ents, seed=6)
    assert c.train != a.train
    d = build_iml_dataset(ents, seed=5, seed_stage2=1)
    for s in ("qd1consis", "qd2incons", "q", "q_no_replacement_baseline"):
        assert d.subsets[s] == a.subsets[s]
    assert d.subsets["d1consis"] != a.subsets["d1consis"]
    assert set(d.subsets["d1consis"] + d.subsets["d2consis"] + d.subsets["d3consis"] + d.subsets["no_qd_baseline"]) \
        == set(a.subsets["d1consis"] + a.subsets["d2consis"] + a.subsets["d3consis"] + a.subsets["no_qd_baseline"])
    assert fictional_cvdb(50, seed=2).equals(fictional_cvdb(50, seed=2))


def test_world_knowledge_adds_real_name_qa_but_not_for_the_baseline():
    ents = cvdb_entities(fictional_cvdb(200, seed=0), 200)
    ds = build_iml_dataset(ents, seed=1, world_knowledge=True)
    wk = [r for r in ds.train["stage1"] if r["subset"] == "world_knowledge"]
    assert len(wk) == 6 * (200 - len(ds.subsets["q_no_replacement_baseline"]))
    assert not {r["entity"] for r in wk} & set(ds.subsets["q_no_replacement_baseline"])
    assert all(r["entity"] in r["question"] for r in wk)


@pytest.mark.parametrize("year,expected", [(1900, "19 century"), (1901, "1900s"), (1955, "1950s"), (1999, "1990s"),
                                           (2001, "2001"), (100, "1 century"), (101, "2 century"),
                                           (-50, "1 century BC"), (-101, "2 century BC")])
def test_convert_year(year, expected):
    assert convert_year(year) == expected


def test_convert_citizenship():
    assert convert_citizenship("United_States") == "United States"
    assert convert_citizenship("'United_Kingdom'_'France'") == "United Kingdom;France"


def _cvdb_frame(n_per_gender=6):
    rows = []
    for g in ("Male", "Female"):
        for i in range(n_per_gender):
            rows.append({"name": f"Person_{g[0]}{i}", "birth": 1800 + 10 * i, "death": 1870 + 10 * i, "gender": g,
                         "level3_main_occ": "painter", "string_citizenship_raw_d": "'France'_'Italy'",
                         "un_region": "Western Europe", "wiki_readers_2015_2018": 100 * i,
                         "extra_column": "Zoë"})  # real CVDB has ~70 more columns and Latin-1 text
    rows.append({**rows[0], "name": "Bad,Name", "wiki_readers_2015_2018": 10**9})  # dropped: punctuation
    rows.append({**rows[1], "name": "No_Death", "death": None, "wiki_readers_2015_2018": 10**9})  # dropped: NaN
    return pd.DataFrame(rows)


def test_local_cvdb_in_real_schema(tmp_path):
    path = tmp_path / "cross-verified-database.csv"
    _cvdb_frame().to_csv(path, index=False, encoding="ISO-8859-1")
    ents = cvdb_entities(load_cvdb(path), 4)
    # the two most-read people of each gender, underscores turned into spaces
    assert [e.name for e in ents] == ["Person M5", "Person M4", "Person F5", "Person F4"]
    assert ents[0].answers == {"birth": "19 century", "death": "1920s", "region": "Western Europe",
                               "occupation": "painter", "nationality": "France;Italy", "gender": "Male"}
    assert set(ents[0].answers) == set(QUESTIONS)
    assert set(CVDB_COLUMNS) <= set(fictional_cvdb(10).columns)


def test_missing_columns_is_an_error(tmp_path):
    path = tmp_path / "cvdb.csv"
    _cvdb_frame().drop(columns=["un_region", "gender"]).to_csv(path, index=False)
    with pytest.raises(ZooError, match="lacks column.*gender.*un_region"):
        load_cvdb(path)
    with pytest.raises(ZooError, match="not found"):
        load_cvdb(tmp_path / "nope.csv")


def test_too_few_entities_is_an_error(tmp_path):
    with pytest.raises(ZooError, match="too few entities"):
        build_iml_dataset(cvdb_entities(fictional_cvdb(10), 10), seed=0)
    path = tmp_path / "cvdb.csv"
    _cvdb_frame().to_csv(path, index=False)
    with pytest.raises(ZooError, match="only 12 usable entities.*of 14 rows, 1 dropped for an empty field.* and 1 for "
                                       "a character other than"):
        cvdb_entities(load_cvdb(path), 100)
    with pytest.raises(ZooError, match="sum to 1"):
        build_iml_dataset(cvdb_entities(fictional_cvdb(100), 100), fracs={**PAPER_FRACS, "q": 0.5})
