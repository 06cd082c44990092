"""What the fuzzing of data contents (tests/support/fuzz_data.py, cases in data_cases/corpora.py) found in the
local corpora, tables and graphs: each changed file, in its released format, must be refused in one line that names
the file, the row and the field, not raise a traceback or run on garbage."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy.io import savemat

from datamodules.graphs import GraphDataModule, read_mat, read_snap
from datamodules.iml import IMLDataModule
from datamodules.intersectional import BiasTableDataModule, read_toxic
from datamodules.memorization import MemorizationDataModule, read_extraction_csv
from datamodules.prompts import PromptsDataModule, read_coco_captions, read_diffusiondb
from zoo.dpodiff.embedded import EMBEDDED_PROMPTS
from zoo.errors import ZooError


def write_csv(path, header, rows):
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return path


# ------------------------------------------------------------------------------------------------ unlearning
def extraction(path, n=2, offset=0, text=None):
    rows = [[f"d{offset + i}", "pile-cc", f"a sequence of text number {offset + i} of the benchmark"] for i in range(n)]
    if text is not None:
        rows[0][2] = text
    return write_csv(path, ["doc_id", "corpus", "text"], rows)


@pytest.mark.parametrize("text", ["", "   "])
def test_an_extraction_row_without_text_is_refused(tmp_path, text):
    path = extraction(tmp_path / "heldout.csv", text=text)  # was a sequence of 0 tokens, scored or trained on
    with pytest.raises(ZooError, match=r"heldout.csv:2: text is empty \(doc_id 'd0'\)"):
        read_extraction_csv(path)


@pytest.mark.parametrize("name", ["heldout", "background"])
def test_a_header_only_heldout_or_background_file_is_refused(tmp_path, name):
    # was: the utility perplexity over no sequence, or the file read as "no background" (not named)
    paths = {"forget": extraction(tmp_path / "forget.csv"), "unseen": extraction(tmp_path / "unseen.csv", offset=10)}
    paths[name] = extraction(tmp_path / f"{name}.csv", n=0)
    dm = MemorizationDataModule(source="local", **{f"{k}_path": str(p) for k, p in paths.items()}, seq_len=16)
    with pytest.raises(ZooError, match=rf"the {name} set is empty: .*{name}.csv holds no rows"):
        dm.setup()


# ------------------------------------------------------------------------------------------------ dpodiff
def coco(tmp_path, first):
    anns = [first, {"image_id": 9, "id": 2, "caption": "Two cats."}]
    (tmp_path / "captions_val2014.json").write_text(json.dumps({"images": [{"id": 9}], "annotations": anns}))
    return tmp_path / "captions_val2014.json"


@pytest.mark.parametrize("first,shown", [
    ({"image_id": 9, "id": 1, "caption": None}, r"caption None"),  # was the prompt 'None'
    ({"image_id": 9, "id": 1, "caption": 7}, r"caption 7"),  # was the prompt '7'
    ({"image_id": 9, "id": 1, "caption": ["x"]}, r"caption \['x'\]"),
    ({"image_id": 9, "id": 1}, "no caption"),
    ([1, 2], "a JSON list"),
])
def test_a_coco_caption_that_is_not_a_string_is_refused(tmp_path, first, shown):
    with pytest.raises(ZooError, match=rf"captions_val2014.json: annotations\[0\] has {shown}; .*caption is a string"):
        read_coco_captions(coco(tmp_path, first))


def test_coco_annotations_that_are_not_a_list_and_blank_captions(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"annotations": {"0": {"caption": "a dog"}}}))
    with pytest.raises(ZooError, match=r"c.json: annotations is a JSON dict, not a list"):
        read_coco_captions(tmp_path / "c.json")
    # a blank caption is no prompt (it was kept as the prompt ''), as a blank line of a text file
    assert read_coco_captions(coco(tmp_path, {"image_id": 9, "id": 1, "caption": "  "})) == ["Two cats."]


@pytest.mark.parametrize("values,shown", [([7, 8], r"7 \(int\)"), ([np.nan, 1.5], r"1.5 \(float\)"),
                                          ([["x"], ["y"]], r"\['x'\] \(list\)")])
def test_a_diffusiondb_prompt_that_is_not_text_is_refused(tmp_path, values, shown):
    pd.DataFrame({"image_name": ["a.webp", "b.webp"], "prompt": values}).to_parquet(tmp_path / "metadata.parquet")
    with pytest.raises(ZooError, match=rf"metadata.parquet: prompt in row \d is {shown}.*not text"):
        read_diffusiondb(tmp_path / "metadata.parquet")  # was the prompt '7' (astype(str))


@pytest.mark.parametrize("score,shown", [(float("nan"), "nan"), (float("inf"), "inf"), (-1, "-1.0")])
def test_a_score_that_is_no_loss_is_refused(tmp_path, score, shown):
    # a NaN failed both filters (the prompt silently dropped); an inf or a negative score passed one
    (tmp_path / "scores.json").write_text(json.dumps({EMBEDDED_PROMPTS[0]: score, EMBEDDED_PROMPTS[1]: 0.9}))
    dm = PromptsDataModule(scores_path=str(tmp_path / "scores.json"), filter="below")
    with pytest.raises(ZooError, match=rf"scores.json: the score of '{EMBEDDED_PROMPTS[0]}' is {shown}; .*>= 0"):
        dm.setup("test")


# ------------------------------------------------------------------------------------------------ bggn
@pytest.mark.parametrize("cell", ["", "NA"])
def test_a_toxic_comment_without_text_is_refused(tmp_path, cell):
    path = write_csv(tmp_path / "all_data_with_identities.csv", ["id", "comment_text", "toxicity", "male"],
                     [[1, "you are nice", 0.0, 0.0], [2, "no identities", 0.5, ""], [3, cell, 0.8, 1.0]])
    # was a TypeError in the embedding cache's key (pandas reads the cell as a float NaN)
    with pytest.raises(ZooError, match=r"comment_text is empty \(or NA\) in data row 3 \(header not counted"):
        read_toxic(str(path), ["male"])


@pytest.mark.parametrize("column,cell,shown", [
    ("bias", "-1", r"bias is -1.0 in row 1 .*mean loss, >= 0"),
    ("count", "-1", r"count is -1 in row 1 .*whole number >= 1"),
    ("count", "0", r"count is 0 in row 1"),
    ("count", "", r"count is missing or not finite in row 1"),
    ("count", "inf", r"count is missing or not finite in row 1"),
    ("count", "2.5", r"count is 2.5, not a whole number in row 1"),  # was cast to 2
])
def test_a_bias_table_row_with_a_negative_bias_or_no_count_is_refused(tmp_path, column, cell, shown):
    rows = [[0, 0, 5, 0.1], [0, 1, 5, 0.2], [1, 0, 5, 0.3], [1, 1, 5, 0.4]]
    rows[1][["s0", "s1", "count", "bias"].index(column)] = cell
    path = write_csv(tmp_path / "bias_table.csv", ["s0", "s1", "count", "bias"], rows)
    with pytest.raises(ZooError, match=rf"bias table .*bias_table.csv: {shown}"):
        BiasTableDataModule(source="table", table_path=str(path)).setup("fit")


# ------------------------------------------------------------------------------------------------ iml
@pytest.mark.parametrize("column", ["birth", "death", "wiki_readers_2015_2018"])
def test_an_infinite_cvdb_year_or_page_count_is_refused(tmp_path, column):
    header = ["birth", "death", "gender", "name", "level3_main_occ", "string_citizenship_raw_d", "un_region",
              "wiki_readers_2015_2018"]
    rows = [[1800 + k, 1870 + k, "Male" if k % 2 else "Female", f"Person_{k}", "painter", "France", "Europe",
             1000 + k] for k in range(40)]
    rows[3][header.index(column)] = "inf"  # was an OverflowError in convert_year, or a person ranked first
    path = write_csv(tmp_path / "cvdb.csv", header, rows)
    dm = IMLDataModule(source="local", path=str(path), num_ents=40)
    with pytest.raises(ZooError, match=rf"cvdb.csv': {column} is inf in data row 4 \(name 'Person_3'.*finite"):
        dm.setup("fit")


# ------------------------------------------------------------------------------------------------ graphs
KARATE_LIKE = sp.csc_matrix(np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=float))


@pytest.mark.parametrize("value,shown", [
    (np.array([["0", "1"], ["1", "0"]]), r"text \(a MATLAB char array\)"),  # was scipy.sparse's ValueError on a <U1 dtype
    ({"x": KARATE_LIKE}, "a struct"),  # was numpy's truth-value ValueError
    (KARATE_LIKE.astype(complex) * 1j, "a complex matrix"),  # the imaginary parts were dropped silently
    (np.array([KARATE_LIKE, KARATE_LIKE], dtype=object), "a cell array or struct"),
])
def test_a_mat_key_that_is_not_a_real_matrix_is_refused(tmp_path, value, shown):
    savemat(tmp_path / "KarateA.mat", {"A": value})
    with pytest.raises(ZooError, match=rf"KarateA.mat: 'A' is {shown}, not the graph's adjacency"):
        read_mat(tmp_path / "KarateA.mat")
    with pytest.raises(ZooError, match=rf"KarateA.mat: 'A' is {shown}"):
        GraphDataModule(source="mat", path=str(tmp_path)).setup("test")


def test_a_suitesparse_problem_a_that_is_not_a_matrix_is_refused(tmp_path):
    savemat(tmp_path / "ca-GrQc.mat", {"Problem": {"A": "zz_bogus", "name": "SNAP/ca-GrQc"}})
    with pytest.raises(ZooError, match=r"ca-GrQc.mat: 'Problem.A' is text \(a MATLAB char array\)"):
        read_snap(tmp_path / "ca-GrQc.mat")
