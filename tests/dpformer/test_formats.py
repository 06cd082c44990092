"""SeqRecDataModule on files written as the datasets release them (not as the loader likes them).

* Amazon 2014 (jmcauley.ucsd.edu/data/amazon): ``ratings_Beauty.csv`` header-less ``user,item,rating,timestamp``;
  ``reviews_Beauty_5.json.gz`` one JSON review per line (reviewerID, asin, reviewerName, helpful, reviewText,
  overall, summary, unixReviewTime, reviewTime).
* Amazon 2018 (nijianmo.github.io/amazon): ``Beauty.csv`` header-less ``item,user,rating,timestamp``;
  ``Beauty_5.json.gz`` with the same keys plus verified, vote, style, image.
* Amazon 2023 (amazon-reviews-2023.github.io): ``Beauty_and_Personal_Care.csv.gz`` with header
  ``user_id,parent_asin,rating,timestamp`` (ms); ``Beauty_and_Personal_Care.jsonl`` (rating, title, text, images,
  asin, parent_asin, user_id, timestamp, helpful_vote, verified_purchase).
* MovieLens-1M: ``ml-1m/ratings.dat`` (``UserID::MovieID::Rating::Timestamp``), in the folder and in ml-1m.zip.
"""

import csv
import gzip
import io
import json
import random
import string
import zipfile
from pathlib import Path

import pytest

from datamodules.seqrec import SeqRecDataModule
from zoo.errors import ZooError

ROOT = Path(__file__).resolve().parents[2]


def _id(rng, first, n):
    return first + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(n))


def interactions(n_users=60, n_items=40, seed=0):
    """(reviewerID, asin, rating, unix time) with Amazon-shaped IDs: users 'A' + 13 chars, ASINs 10 chars."""
    rng = random.Random(seed)
    users = [_id(rng, "A", 13) for _ in range(n_users)]
    items = [_id(rng, "B00", 7) for _ in range(n_items - 5)] + ["".join(rng.choice(string.digits) for _ in range(9))
                                                              + "X" for _ in range(5)]  # ISBN-10 ASINs
    rows = []
    for k, u in enumerate(users):
        chosen = rng.sample(items, 3 + k % 6)
        if k < n_items:
            chosen[0] = items[k]  # every item is used
        t0 = 1_300_000_000 + rng.randrange(10**7)
        rows += [(u, i, float(rng.randint(1, 5)), t0 + 86400 * j) for j, i in enumerate(chosen)]
    rng.shuffle(rows)  # files are not sorted by user or time
    return rows


def write_csv(path, rows, header=None, gz=False):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(header)
    w.writerows(rows)
    data = buf.getvalue().encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_jsonl(path, records, gz=False):
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def review_2014(u, i, r, t):
    return {"reviewerID": u, "asin": i, "reviewerName": "Andrea", "helpful": [3, 4], "reviewText": "Nice.",
            "overall": r, "summary": "ok", "unixReviewTime": t, "reviewTime": "01 30, 2014"}


def review_2018(u, i, r, t):
    return {"overall": r, "verified": True, "reviewTime": "01 30, 2014", "reviewerID": u, "asin": i,
            "style": {"Size:": " 7"}, "reviewerName": "Andrea", "reviewText": "Nice.", "summary": "ok",
            "unixReviewTime": t, "vote": "2", "image": ["https://images-na.ssl-images-amazon.com/x.jpg"]}


def review_2023(u, i, r, t):
    return {"rating": r, "title": "ok", "text": "Nice.", "images": [], "asin": i + "V", "parent_asin": i,
            "user_id": u, "timestamp": t * 1000, "helpful_vote": 0, "verified_purchase": True}


def load(path, **kw):
    dm = SeqRecDataModule(source="amazon", path=str(path), max_len=10, batch_size=4, **kw)
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def rows():
    return interactions()


@pytest.fixture(scope="module")
def reference(rows, tmp_path_factory):
    dm = load(write_csv(tmp_path_factory.mktemp("ref") / "ratings_Beauty.csv", rows))
    assert len(dm.sequences) == 60 and dm.num_items == 40
    return dm.sequences


def test_2014_ratings_csv_users_then_items(rows, reference):
    counts = {}
    for u, *_ in rows:
        counts[u] = counts.get(u, 0) + 1
    assert sorted(map(len, reference)) == sorted(counts.values())


def test_2018_ratings_csv_items_then_users_is_not_transposed(tmp_path, rows, reference, info_log):
    f = write_csv(tmp_path / "Beauty.csv", [(i, u, r, t) for u, i, r, t in rows])
    dm = load(f)
    assert len(dm.sequences) == 60 and dm.num_items == 40  # was users=40 items=60
    assert dm.sequences == reference
    assert "columns item,user,rating,timestamp (detected" in "\n".join(info_log)
    assert load(f, columns="item,user,rating,timestamp").sequences == reference


@pytest.mark.parametrize("name, to_row, header", [
    ("ratings_Beauty.csv.gz", lambda u, i, r, t: (u, i, r, t), None),
    ("Beauty.csv.gz", lambda u, i, r, t: (i, u, r, t), None),
    ("Beauty_and_Personal_Care.csv.gz", lambda u, i, r, t: (u, i, r, t * 1000),
     ["user_id", "parent_asin", "rating", "timestamp"]),
])
def test_gzipped_csv_dumps(tmp_path, rows, reference, info_log, name, to_row, header):
    f = write_csv(tmp_path / name, [to_row(*r) for r in rows], header=header, gz=True)
    assert load(f).sequences == reference
    assert "gzip" in "\n".join(info_log)


@pytest.mark.parametrize("name, make, gz", [
    ("reviews_Beauty_5.json.gz", review_2014, True),
    ("reviews_Beauty_5.json", review_2014, False),
    ("Beauty_5.json.gz", review_2018, True),
    ("Beauty_and_Personal_Care.jsonl", review_2023, False),
])
def test_json_lines_reviews(tmp_path, rows, reference, info_log, name, make, gz):
    f = write_jsonl(tmp_path / name, [make(*r) for r in rows], gz=gz)
    assert load(f).sequences == reference
    assert "JSON lines" in "\n".join(info_log)


def test_undecidable_headerless_csv_names_the_option(tmp_path):
    f = write_csv(tmp_path / "ratings.csv", [("u1", "i1", 5.0, 100), ("u1", "i2", 4.0, 200), ("u1", "i3", 4.0, 300)])
    with pytest.raises(ZooError, match="cannot be told from its IDs.*data.init_args.columns"):
        load(f)
    assert load(f, columns="user,item,rating,timestamp").sequences == [[1, 2, 3]]
    with pytest.raises(ZooError, match="no user with >= 3 interactions"):  # the other order, as asked: 3 users
        load(f, columns="item,user,rating,timestamp")
    with pytest.raises(ZooError, match="header.*remove data.init_args.columns"):
        load(write_csv(tmp_path / "h.csv", [("u", "i", 1, 2)], header=["user_id", "parent_asin", "rating",
                                                                       "timestamp"]),
             columns="user,item,rating,timestamp")


def test_bad_json_lines_name_file_and_line(tmp_path, rows):
    recs = [json.dumps(review_2014(*r)) for r in rows[:5]]
    f = tmp_path / "reviews_Beauty_5.json"
    f.write_text("\n".join(recs[:3] + ['{"reviewerID": "A1", "asin": '] + recs[3:]) + "\n")
    with pytest.raises(ZooError, match=r"reviews_Beauty_5.json:4: not a JSON object"):
        load(f)
    bad = [review_2014(*r) for r in rows[:5]]
    del bad[3]["asin"]
    with pytest.raises(ZooError, match=r":4: review lacks key 'asin'") as e:
        load(write_jsonl(tmp_path / "r.json", bad))
    assert "Nice." not in str(e.value)  # names the row and its keys, does not dump the row
    with pytest.raises(ZooError, match="needs a user"):
        load(write_jsonl(tmp_path / "meta.json", [{"asin": "B000000001", "title": "x"}]))
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(b'{"reviewerID": "A1", "asin": "B1"}\n' * 50)[:40])
    with pytest.raises(ZooError, match="cannot read"):
        load(tmp_path / "t.json.gz")


def test_movielens_ml1m_folder_and_zip(tmp_path):
    d = tmp_path / "ml-1m"
    d.mkdir()
    text = "1::10::5::300\n1::20::4::100\n1::30::3::200\n2::20::5::10\n2::50::1::20\n2::10::2::30\n"
    (d / "ratings.dat").write_text(text, encoding="latin-1")
    (d / "movies.dat").write_text("10::Toy Story (1995)::Animation\n", encoding="latin-1")
    by_folder = SeqRecDataModule(source="movielens", path=str(d), max_len=4, batch_size=2)
    by_folder.setup("fit")
    assert by_folder.sequences == [[1, 2, 3], [1, 4, 3]]  # time order; items numbered as first met
    with zipfile.ZipFile(tmp_path / "ml-1m.zip", "w") as z:
        z.writestr("ml-1m/ratings.dat", text)
        z.writestr("ml-1m/README", "MovieLens")
    by_zip = SeqRecDataModule(source="movielens", path=str(tmp_path / "ml-1m.zip"), max_len=4, batch_size=2)
    by_zip.setup("fit")
    assert by_zip.sequences == by_folder.sequences
    (tmp_path / "empty").mkdir()
    with pytest.raises(ZooError, match="holds no ratings.dat"):
        SeqRecDataModule(source="movielens", path=str(tmp_path / "empty")).setup("fit")


def test_zero_batch_size_is_refused():
    with pytest.raises(ZooError, match="batch_size >= 1"):
        SeqRecDataModule(batch_size=0)
    with pytest.raises(ZooError, match="columns applies to source=amazon"):
        SeqRecDataModule(columns="user,item,rating,timestamp")


def test_smoke_config_on_a_small_real_file(in_tmp):
    """53 users: one Poisson batch per epoch, fewer than the smoke config's 6-step validation interval."""
    from zoo.cli import main

    f = write_csv(in_tmp / "ratings_Beauty.csv", interactions(n_users=53, n_items=30, seed=1))
    cfg = str(ROOT / "configs" / "smoke" / "dpformer_amazon.yaml")
    assert main(["fit", "--config", cfg, "--wandb_mode", "disabled", "--data.init_args.source", "amazon",
                 "--data.init_args.path", str(f)]) == 0
    (run,) = Path("runs", "dpformer_amazon").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 6 and "val/ndcg10" in summary["fit"]  # validated at step 6, over 6 epochs


def test_hand_written_csv_with_blank_lines_and_a_date_timestamp(tmp_path, rows):
    """A user's own csv (README "Your own data"): blank lines, as a trailing newline leaves, are skipped as in the
    JSON lines reader (they were rows of 0 fields, an error); a date where the Unix time belongs is named."""
    text = "user_id,item_id,rating,timestamp\n\n" + "".join(f"{u},{i},{r},{t}\n" for u, i, r, t in rows) + "\n\n"
    (tmp_path / "own.csv").write_text(text)
    assert len(load(tmp_path / "own.csv").sequences) == 60
    (tmp_path / "bare.csv").write_text("\n" + "".join(f"{u},{i},{r},{t}\n" for u, i, r, t in rows) + "\n")
    assert len(load(tmp_path / "bare.csv").sequences) == 60  # header-less: the ASIN detection skips them too
    lines = text.splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + ",2014-01-30"
    (tmp_path / "dated.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ZooError, match=r"dated.csv:6: the timestamp '2014-01-30' is not a number"):
        load(tmp_path / "dated.csv")
