"""Contents of the sequence and series data files that the readers used to let through or answer with a traceback
(found by `tests/support/fuzz_data.py`, cases in `tests/support/data_cases/sequences.py`): each is now refused in one
line naming the file, the row or case and the field. Tiny files written in the released formats, read by the
datamodules directly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datamodules.gfn_envs import read_observations
from datamodules.seqrec import SeqRecDataModule
from datamodules.timeseries import UCRAnomalyDataModule, UCRClassificationDataModule
from zoo.errors import ZooError

# ------------------------------------------------------------------------------------------------ DPFormer
USERS, ITEMS = ["A1B2C3D4E5F6G7", "A7G6F5E4D3C2B1"], ["B000000001", "B000000002", "B000000003"]


def _seqrec(path, source="amazon"):
    dm = SeqRecDataModule(source=source, path=str(path), max_len=4, batch_size=2)
    dm.setup("fit")
    return dm


def _reviews(tmp_path, key, value, key_user="reviewerID", key_item="asin", key_time="unixReviewTime"):
    """2014 5-core reviews, 2 users x 3 items, with `key` of the second review set to `value`."""
    rows = [{key_user: u, key_item: i, "overall": 5.0, key_time: 1_300_000_000 + 86400 * j}
            for u in USERS for j, i in enumerate(ITEMS)]
    rows[1][key] = value
    path = tmp_path / "reviews_Beauty_5.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # Infinity as Python's json writes it
    return path


@pytest.mark.parametrize("key, value, match", [
    ("unixReviewTime", float("inf"), "unixReviewTime is not a finite number: 'inf'"),  # was an OverflowError
    ("unixReviewTime", float("-inf"), "unixReviewTime is not a finite number: '-inf'"),
    ("reviewerID", None, "reviewerID is null; expected a non-empty ID string"),  # was grouped as user 'None'
    ("reviewerID", "", "reviewerID is ''; expected a non-empty ID string"),
    ("reviewerID", ["A1"], r"reviewerID is \['A1'\]; expected"),
    ("asin", None, "asin is null; expected a non-empty ID string"),
    ("asin", {"id": 1}, "asin is {'id': 1}; expected"),
    ("asin", True, "asin is True; expected"),
])
def test_amazon_json_review_fields(tmp_path, key, value, match):
    with pytest.raises(ZooError, match=rf"reviews_Beauty_5.json:2: {match}"):
        _seqrec(_reviews(tmp_path, key, value))


def test_amazon_json_numeric_ids_are_read(tmp_path):
    dm = _seqrec(_reviews(tmp_path, "reviewerID", 17))  # a user's own file may number its users
    assert len(dm.sequences) == 1  # user 17 has one review, the other user three


@pytest.mark.parametrize("header, row, match", [
    (False, ",B000000002,5.0,1300086400", "ratings_Beauty.csv:2: the user ID is empty"),
    (False, "A1B2C3D4E5F6G7,,5.0,1300086400", "ratings_Beauty.csv:2: the item ID is empty"),
    (True, " ,B000000002,5.0,1300086400000", "ratings_Beauty.csv:3: the user ID is empty"),
])
def test_amazon_csv_empty_id(tmp_path, header, row, match):
    rows = [f"{u},{i},5.0,{1_300_000_000 + 86400 * j}" for u in USERS for j, i in enumerate(ITEMS)]
    rows[1] = row  # was grouped under user (or item) ""
    path = tmp_path / "ratings_Beauty.csv"
    path.write_text("user_id,parent_asin,rating,timestamp\n" * header + "\n".join(rows) + "\n")
    # header-less: the order named, as the ID shapes cannot tell it once an ID is gone
    dm = SeqRecDataModule(source="amazon", path=str(path), columns=None if header else "user,item,rating,timestamp")
    with pytest.raises(ZooError, match=match):
        dm.setup("fit")


@pytest.mark.parametrize("field, match", [(0, "the UserID is empty"), (1, "the MovieID is empty")])
def test_movielens_empty_id(tmp_path, field, match):
    rows = [[str(u), str(m), "5", str(978300760 + m)] for u in (1, 2) for m in (10, 20, 30)]
    rows[1][field] = ""  # was grouped under user (or movie) ""
    path = tmp_path / "ratings.dat"
    path.write_text("".join("::".join(r) + "\n" for r in rows), encoding="latin-1")
    with pytest.raises(ZooError, match=rf"ratings.dat:2: {match}"):
        _seqrec(path, "movielens")


# ------------------------------------------------------------------------------------------------ GFN-PG observations
@pytest.mark.parametrize("cell, match", [
    ("inf", r"observation 2 \(line 3\), column 'B' is inf"),  # reached BGe, refused there naming no file
    ("-inf", r"observation 2 \(line 3\), column 'B' is -inf"),
    ("", r"observation 2 \(line 3\), column 'B' is nan"),  # named no row
    ("nan", r"observation 2 \(line 3\), column 'B' is nan"),
])
def test_bn_observation_not_finite(tmp_path, cell, match):
    path = tmp_path / "data.csv"
    path.write_text(f"A,B,C\n0.1,0.2,0.3\n0.4,{cell},0.6\n0.7,0.8,0.9\n")
    with pytest.raises(ZooError, match=rf"data.csv: {match}; every observation needs a finite number"):
        read_observations(str(path), 3)


def test_bn_observations_header_only(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("A,B,C\n")  # was "must hold numbers only" (its empty columns read as text)
    with pytest.raises(ZooError, match="data.csv holds its header only: no observations"):
        read_observations(str(path), 3)


# ------------------------------------------------------------------------------------------------ MOMENT .ts
TS_HEAD = "@problemName Tiny\n@univariate {uni}\n@equalLength true\n@classLabel true 1 2\n@data\n"


@pytest.mark.parametrize("uni, case", [
    ("true", "?,?,?:2"),  # trained on a case of padding only (the encoder refused it naming a batch position)
    ("true", "nan,nan,nan:2"),
    ("false", "0.1,?,0.3:?,0.2,?:2"),  # each step missing in one channel: no step observed in both
])
@pytest.mark.parametrize("split", ["train", "test"])
def test_ts_case_without_an_observed_step(tmp_path, uni, case, split):
    good = "0.5,0.2,0.1:1\n0.1,0.3,0.2:2\n"
    if uni == "false":
        good = "0.5,0.2,0.1:0.1,0.1,0.1:1\n0.1,0.3,0.2:0.2,0.2,0.2:2\n"
    bad, ok = tmp_path / "Tiny_BAD.ts", tmp_path / "Tiny_OK.ts"
    bad.write_text(TS_HEAD.format(uni=uni) + good + case + "\n")
    ok.write_text(TS_HEAD.format(uni=uni) + good)
    paths = {"train_path": str(bad), "test_path": str(ok)} if split == "train" else \
        {"train_path": str(ok), "test_path": str(bad)}
    dm = UCRClassificationDataModule(source="local", **paths)
    with pytest.raises(ZooError, match=r"Tiny_BAD.ts: case 2 \(counting from 0 after @data\) has no observed step"):
        dm.setup("fit")


def test_ts_case_with_some_steps_missing_is_read(tmp_path):
    p = tmp_path / "Tiny_TRAIN.ts"
    p.write_text(TS_HEAD.format(uni="true") + "0.5,0.2,0.1:1\n0.1,0.3,0.2:2\n?,?,0.4:2\n")
    dm = UCRClassificationDataModule(source="local", train_path=str(p), test_path=str(p))
    dm.setup("fit")
    assert dm.sets["train"].mask[2].sum() == 1


# ------------------------------------------------------------------------------------------------ MOMENT anomaly
def _out_file(tmp_path, labels):
    values = np.sin(np.arange(len(labels)) / 3.0)
    path = tmp_path / "001_UCR_Anomaly_Tiny_20_24_26.out"
    path.write_text("".join(f"{v},{float(lab)}\n" for v, lab in zip(values, labels)))
    return path


@pytest.mark.parametrize("anomalous", [[], [3, 4]])  # none at all; only inside the training part
def test_anomaly_test_part_without_an_anomaly(tmp_path, anomalous):
    labels = np.zeros(40, dtype=int)
    labels[anomalous] = 1
    dm = UCRAnomalyDataModule(source="local", path=str(_out_file(tmp_path, labels)))
    # was read and scored: an adjusted F1 of 0 whatever the scores
    with pytest.raises(ZooError, match=r"_26.out: the test part \(points 20..39\) holds no anomalous point"):
        dm.setup("test")


def test_anomaly_test_part_with_its_anomaly_is_read(tmp_path):
    labels = np.zeros(40, dtype=int)
    labels[24:26] = 1
    dm = UCRAnomalyDataModule(source="local", path=str(_out_file(tmp_path, labels)))
    dm.setup("test")
    assert dm.series.labels[20:].sum() == 2
