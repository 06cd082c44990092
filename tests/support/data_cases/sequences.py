"""Sequence and series data read from local copies of the releases: DPFormer's interaction logs (MovieLens-1M
``ratings.dat``, folder and zip; Amazon ratings csv, 2023 csv and JSON lines, 2014 gzipped 5-core reviews), MOMENT's
series (ETTh1.csv, UCR/UEA ``.ts`` train/test, UCR anomaly ``.txt`` and TSB-UAD ``.out``), and GFN-PG's files (BN
observations csv, ``DAG-<n>-list.npy``, the pickled ``{'x', 'y'}`` oracle). Small data sets written in the released
formats (as `datamodules.seqrec`, `zoo.moment.formats` and `datamodules.gfn_envs` document them); the formats the
generic changes do not know (``::`` lines, zip, ``.ts``, whitespace and header-less value lists, pickles, gzip) get
their own changes here."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import pickle
import random
import string
import zipfile
from pathlib import Path

import numpy as np
from fuzz_data import BOGUS, Case, jsonl_changes

CELLS = (("a word", BOGUS), ("empty", ""), ("nan", "nan"), ("inf", "inf"), ("-1", "-1"), ("a fraction", "2.5"))


def row_changes(lines: list[str], sep: str, what: str = "field") -> list[tuple[str, str]]:
    """A header-less table of `sep`-separated lines: each field dropped from every row, each field of row 1 a word,
    empty, nan, inf, -1 or a fraction, an extra field in row 1, one row only, no rows."""
    rows = [ln.split(sep) for ln in lines]

    def dump(rs):
        return "".join(sep.join(r) + "\n" for r in rs)

    out = [("no rows", ""), ("one row only", dump(rows[:1])), ("an extra field in row 1", dump([rows[0] + ["1"],
                                                                                                 *rows[1:]]))]
    for j in range(len(rows[0])):
        out.append((f"{what} {j + 1} dropped", dump([r[:j] + r[j + 1:] for r in rows])))
        out += [(f"{what} {j + 1} {label} in row 1", dump([[*rows[0][:j], cell, *rows[0][j + 1:]], *rows[1:]]))
                for label, cell in CELLS]
    return out


# ================================================================================================ DPFormer
def _id(rng: random.Random, first: str, n: int) -> str:
    return first + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(n))


def interactions(n_users: int = 14, n_items: int = 12, seed: int = 0) -> list[tuple[str, str, float, int]]:
    """(reviewerID, ASIN, rating, Unix time) with Amazon-shaped IDs (users 'A' + 13 characters, ASINs 10), 3 to 6
    interactions per user, in no particular order (as the dumps)."""
    rng = random.Random(seed)
    users = [_id(rng, "A", 13) for _ in range(n_users)]
    items = [_id(rng, "B00", 7) for _ in range(n_items)]
    rows = []
    for k, u in enumerate(users):
        t0 = 1_300_000_000 + rng.randrange(10**7)
        rows += [(u, i, float(rng.randint(1, 5)), t0 + 86400 * j) for j, i in enumerate(rng.sample(items, 3 + k % 4))]
    rng.shuffle(rows)
    return rows


def _amazon(folder: Path, path: Path) -> list[str]:
    return ["--data.init_args.source=amazon", f"--data.init_args.path={path}"]


def amazon_ratings_csv(folder: Path) -> list[str]:
    """2014 ``ratings_<Category>.csv``: header-less ``user,item,rating,timestamp``."""
    path = folder / "ratings_Beauty.csv"
    path.write_text("".join(f"{u},{i},{r},{t}\n" for u, i, r, t in interactions()))
    return _amazon(folder, path)


def amazon_2023_csv(folder: Path) -> list[str]:
    """2023 ``<Category>.csv``: header ``user_id,parent_asin,rating,timestamp``, timestamps in ms."""
    path = folder / "Beauty_and_Personal_Care.csv"
    path.write_text("user_id,parent_asin,rating,timestamp\n"
                    + "".join(f"{u},{i},{r},{t * 1000}\n" for u, i, r, t in interactions()))
    return _amazon(folder, path)


def amazon_2023_jsonl(folder: Path) -> list[str]:
    """2023 ``<Category>.jsonl`` reviews."""
    path = folder / "Beauty_and_Personal_Care.jsonl"
    path.write_text("".join(json.dumps({"rating": r, "title": "ok", "text": "Nice.", "images": [], "asin": i + "V",
                                        "parent_asin": i, "user_id": u, "timestamp": t * 1000, "helpful_vote": 0,
                                        "verified_purchase": True}) + "\n" for u, i, r, t in interactions()))
    return _amazon(folder, path)


def amazon_2014_reviews(folder: Path) -> list[str]:
    """2014 ``reviews_<Category>_5.json.gz``: gzipped JSON lines (reviewerID, asin, overall, unixReviewTime...)."""
    path = folder / "reviews_Beauty_5.json.gz"
    text = "".join(json.dumps({"reviewerID": u, "asin": i, "reviewerName": "Andrea", "helpful": [3, 4],
                               "reviewText": "Nice.", "overall": r, "summary": "ok", "unixReviewTime": t,
                               "reviewTime": "01 30, 2014"}) + "\n" for u, i, r, t in interactions())
    path.write_bytes(gzip.compress(text.encode()))
    return _amazon(folder, path)


def gzipped_jsonl_changes(path: Path) -> list[tuple[str, bytes]]:
    if not path.name.endswith(".json.gz"):
        return []
    text = gzip.decompress(path.read_bytes()).decode()
    return [(label, gzip.compress(t.encode())) for label, t in jsonl_changes(text)]


MOVIELENS_ROWS = [(u, m, r, t) for u in range(1, 11) for m, r, t in
                  zip(random.Random(u).sample([1193, 661, 914, 3408, 2355, 1197, 1287, 2804, 594, 919], 3 + u % 4),
                      itertools.cycle((5, 3, 4, 2)), range(978300760 - u * 1000, 978300760 - u * 1000 + 600, 97))]


def movielens_text() -> str:
    return "".join(f"{u}::{m}::{r}::{t}\n" for u, m, r, t in MOVIELENS_ROWS)


def movielens_folder(folder: Path) -> list[str]:
    """The ml-1m folder: ratings.dat (``UserID::MovieID::Rating::Timestamp``, Latin-1) and movies.dat."""
    d = folder / "ml-1m"
    d.mkdir()
    (d / "ratings.dat").write_text(movielens_text(), encoding="latin-1")
    (d / "movies.dat").write_text("1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n", encoding="latin-1")
    return ["--data.init_args.source=movielens", f"--data.init_args.path={d}"]


def movielens_zip(folder: Path) -> list[str]:
    """ml-1m.zip: member ml-1m/ratings.dat."""
    path = folder / "ml-1m.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ml-1m/ratings.dat", movielens_text())
        z.writestr("ml-1m/README", "SUMMARY\n")
    return ["--data.init_args.source=movielens", f"--data.init_args.path={path}"]


def movielens_line_changes(text: str) -> list[tuple[str, str]]:
    lines = text.splitlines()
    return [*row_changes(lines, "::"),
            ("a header line", "UserID::MovieID::Rating::Timestamp\n" + text),
            ("tab-separated rows", text.replace("::", "\t")),
            ("only blank lines", "\n\n")]


def movielens_changes(path: Path) -> list[tuple[str, bytes]]:
    if path.name == "ratings.dat":
        return [(label, t.encode("latin-1")) for label, t in movielens_line_changes(path.read_text("latin-1"))]
    if path.suffix != ".zip":
        return []
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}

    def rezip(files: dict[str, bytes]) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for n, data in files.items():
                z.writestr(n, data)
        return buf.getvalue()

    text = members["ml-1m/ratings.dat"].decode("latin-1")
    out = [(f"ratings.dat {label}", rezip({**members, "ml-1m/ratings.dat": t.encode("latin-1")}))
           for label, t in movielens_line_changes(text)]
    out += [("no ratings.dat member", rezip({n: d for n, d in members.items() if not n.endswith("ratings.dat")})),
            ("an empty zip", rezip({}))]
    return out


# ================================================================================================ MOMENT
def ett_csv(folder: Path) -> list[str]:
    """ETTh1.csv: header ``date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT``, hourly rows ``YYYY-MM-DD HH:MM:SS`` from
    2016-07-01, values with 3 decimals (640 rows: train 560 + val 40 + test 40)."""
    from datamodules.timeseries import embedded_ett

    df = embedded_ett(640, 0)
    path = folder / "ETTh1.csv"
    df.to_csv(path, index=False, date_format="%Y-%m-%d %H:%M:%S", float_format="%.3f")
    return ["--data.init_args.source=local", f"--data.init_args.path={path}", "--data.init_args.train_rows=560",
            "--data.init_args.val_rows=40", "--data.init_args.test_rows=40"]


def ett_changes(path: Path) -> list[tuple[str, bytes]]:
    if path.name != "ETTh1.csv":
        return []
    lines = path.read_text().splitlines(keepends=True)
    date = lines[1].split(",", 1)
    out = [("a date in another format in row 1", "".join([lines[0], "2016/07/01 00:00," + date[1], *lines[2:]])),
           ("rows in reverse order", "".join([lines[0], *lines[:0:-1]])),
           ("row 2 repeated", "".join([*lines[:3], lines[2], *lines[3:]])),
           ("300 rows only", "".join(lines[:301]))]
    return [(label, t.encode()) for label, t in out]


TS_HEADER = ("# a small set written as the UCR/UEA archive writes its .ts files\n@problemName Tiny\n@timeStamps false\n"
             "@missing false\n@univariate true\n@equalLength true\n@seriesLength 24\n@classLabel true 1 2 3\n@data\n")


def _ts_cases(n: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, 24)
    lines = []
    for k in range(n):
        label = k % 3 + 1
        x = np.exp(-((t - label / 4) ** 2) / 0.01) + rng.normal(0, 0.1, 24)
        lines.append(",".join(f"{v:.4f}" for v in x) + f":{label}")
    return "".join(ln + "\n" for ln in lines)


def ucr_ts(folder: Path) -> list[str]:
    """Tiny_TRAIN.ts / Tiny_TEST.ts: univariate, equal-length (24 steps), classes 1..3."""
    (folder / "Tiny_TRAIN.ts").write_text(TS_HEADER + _ts_cases(12, 0))
    (folder / "Tiny_TEST.ts").write_text(TS_HEADER + _ts_cases(9, 1))
    return ["--data.init_args.source=local", f"--data.init_args.train_path={folder / 'Tiny_TRAIN.ts'}",
            f"--data.init_args.test_path={folder / 'Tiny_TEST.ts'}"]


def ts_changes(path: Path) -> list[tuple[str, bytes]]:
    if path.suffix != ".ts":
        return []
    text = path.read_text()
    head, _, body = text.partition("@data\n")
    head += "@data\n"
    cases = body.splitlines()
    values, label = cases[0].rsplit(":", 1)
    steps = values.split(",")

    def with_first(case: str) -> str:
        return head + "\n".join([case, *cases[1:]]) + "\n"

    out = [("no cases (header only)", head), ("no @data line", head.replace("@data\n", "") + body),
           ("an empty file", ""), ("@classLabel false", text.replace("@classLabel true 1 2 3", "@classLabel false")),
           ("@classLabel without label 3", text.replace("@classLabel true 1 2 3", "@classLabel true 1 2")),
           ("one case only", head + cases[0] + "\n"),
           ("every case of class 1", head + "".join(c.rsplit(":", 1)[0] + ":1\n" for c in cases)),
           ("case 1 without its label", with_first(values)),
           ("case 1 with an empty label", with_first(values + ":")),
           ("case 1 label a word", with_first(values + ":" + BOGUS)),
           ("case 1 a second channel", with_first(values + ":" + values + ":" + label)),
           ("case 1 one step shorter", with_first(",".join(steps[1:]) + ":" + label)),
           ("case 1 of 600 steps", with_first(",".join(steps * 25) + ":" + label)),
           ("case 1 every step missing", with_first(",".join("?" * len(steps)) + ":" + label)),
           ("a blank case line", head + "\n".join([cases[0], " ", *cases[1:]]) + "\n")]
    out += [(f"case 1 step 1 {name}", with_first(",".join([cell, *steps[1:]]) + ":" + label))
            for name, cell in (*CELLS, ("missing (?)", "?"))]
    return [(label, t.encode()) for label, t in out]


ANOMALY = "001_UCR_Anomaly_Tiny_1024_1500_1530"


def _anomaly_series() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    t = np.arange(2048)
    values = np.sin(2 * np.pi * t / 50) + 0.3 * np.sin(2 * np.pi * t / 13) + rng.normal(0, 0.05, 2048)
    values[1500:1530] = np.sin(2 * np.pi * t[1500:1530] / 11)
    labels = np.zeros(2048, dtype=int)
    labels[1500:1530] = 1
    return values, labels


def ucr_anomaly_txt(folder: Path) -> list[str]:
    """A UCR anomaly archive file: ``NNN_UCR_Anomaly_<name>_<trainEnd>_<begin>_<end>.txt``, one value a line."""
    path = folder / f"{ANOMALY}.txt"
    path.write_text("".join(f"  {v:.7e}\n" for v in _anomaly_series()[0]))
    return ["--data.init_args.source=local", f"--data.init_args.path={path}"]


def ucr_anomaly_out(folder: Path) -> list[str]:
    """TSB-UAD's copy: the same name with ``.out``, header-less ``value,label`` rows (label 0.0/1.0)."""
    values, labels = _anomaly_series()
    path = folder / f"{ANOMALY}.out"
    path.write_text("".join(f"{v},{float(lab)}\n" for v, lab in zip(values, labels)))
    return ["--data.init_args.source=local", f"--data.init_args.path={path}"]


def anomaly_changes(path: Path) -> list[tuple[str, bytes]]:
    lines = path.read_text().splitlines()
    if path.suffix == ".txt":
        out = [("no points", ""), (f"{len(lines) // 2} points only", "\n".join(lines[: len(lines) // 2]) + "\n"),
               ("1000 points only (fewer than the training part)", "\n".join(lines[:1000]) + "\n"),
               ("all on one line", " ".join(v.strip() for v in lines) + "\n"),
               ("comma-separated", ",".join(v.strip() for v in lines) + "\n"),
               ("a constant series", "".join("1.0\n" for _ in lines))]
        out += [(f"point 1 {label}", "\n".join([cell, *lines[1:]]) + "\n") for label, cell in CELLS]
    elif path.suffix == ".out":
        out = row_changes(lines, ",", "column")
        out += [("a header row", "value,label\n" + "\n".join(lines) + "\n"),
                ("label 2 in row 1", "\n".join([lines[0].split(",")[0] + ",2.0", *lines[1:]]) + "\n"),
                ("every label 0", "".join(ln.split(",")[0] + ",0.0\n" for ln in lines)),
                ("1000 rows only (fewer than the training part)", "\n".join(lines[:1000]) + "\n"),
                ("a constant training part", "".join(("1.0," + ln.split(",")[1] if k < 1024 else ln) + "\n"
                                                     for k, ln in enumerate(lines)))]
    else:
        return []
    return [(label, t.encode()) for label, t in out]


# ================================================================================================ GFN-PG
def bn_csv(folder: Path) -> list[str]:
    """BN observations: the official DataFrame.to_csv(index=False), header A..E, one sample a row."""
    from datamodules.gfn_envs import sample_erdos_renyi_linear_gaussian

    _, frame = sample_erdos_renyi_linear_gaussian(5, 5, 30, np.random.default_rng(0))
    path = folder / "data.csv"
    frame.to_csv(path, index=False)
    return ["--data.init_args.source=local", f"--data.init_args.data_path={path}"]


def dag_list(folder: Path) -> list[str]:
    """The official DAG-<n>-list.npy layout (np.save of (N, n*n) int rows), for 3 nodes (25 DAGs)."""
    from zoo.gfnpg import enumerate_dags

    path = folder / "DAG-3-list.npy"
    np.save(path, enumerate_dags(3).numpy().astype(np.int64))
    return [f"--data.init_args.dag_list_path={path}", "--data.init_args.n_nodes=3", "--data.init_args.n_edges=2"]


def _every_sequence(nbase: int, length: int) -> np.ndarray:
    return np.array(list(itertools.product(range(nbase), repeat=length)), dtype=np.int64)


def oracle(folder: Path) -> list[str]:
    """TFbind8's oracle as released (tfbind8-exact-v0-all.pkl): a pickled dict, x (4^8, 8) int, y (4^8, 1) float32,
    rows in base-4 order."""
    x = _every_sequence(4, 8)
    y = np.random.default_rng(0).uniform(size=(len(x), 1)).astype(np.float32)
    path = folder / "tfbind8-exact-v0-all.pkl"
    path.write_bytes(pickle.dumps({"x": x, "y": y}))
    return ["--data.init_args.source=local", f"--data.init_args.oracle_path={path}"]


def oracle_changes(path: Path) -> list[tuple[str, bytes]]:
    if path.suffix != ".pkl":
        return []
    data = pickle.loads(path.read_bytes())  # our own template
    x, y = data["x"], data["y"]
    nan, inf, neg, big = y.copy(), y.copy(), x.copy(), x.copy()
    nan[0, 0], inf[0, 0], neg[0, 0], big[0, 0] = np.nan, np.inf, -1, 4
    changed = {"'x' dropped": {"y": y}, "'y' dropped": {"x": x}, "'x' of strings": {"x": x.astype(str), "y": y},
               "'y' of strings": {"x": x, "y": y.astype(str)}, "'x' flattened": {"x": x.reshape(-1), "y": y},
               "'y' (N, 2)": {"x": x, "y": np.concatenate([y, y], 1)}, "'x' empty": {"x": x[:0], "y": y[:0]},
               "'y' one row short": {"x": x, "y": y[:-1]}, "'y' with a NaN": {"x": x, "y": nan},
               "'y' with an inf": {"x": x, "y": inf}, "'y' all -1": {"x": x, "y": -np.ones_like(y)},
               "'y' as (N,) float64": {"x": x, "y": y[:, 0].astype(np.float64)},
               "'x' with a -1": {"x": neg, "y": y}, "'x' with symbol 4": {"x": big, "y": y},
               "'x' rows 1 and 2 swapped": {"x": x[[1, 0, *range(2, len(x))]], "y": y},
               "'x' of floats": {"x": x.astype(np.float64), "y": y}, "'y' of ints": {"x": x, "y": (y * 10).astype(int)},
               "'y' a list": {"x": x, "y": y[:, 0].tolist()}}
    out = [(label, pickle.dumps(d)) for label, d in changed.items()]
    out += [("a list, not a dict", pickle.dumps([x, y])), ("gzipped", gzip.compress(path.read_bytes())),
            ("an empty dict", pickle.dumps({}))]
    return out


# a few iterations: what is read is checked when the environment is built, before the first one
GFN_SHORT = ["--data.init_args.n_iterations=4", "--trainer.val_check_interval=4"]

CASES = [
    Case("dpformer_movielens_folder", "configs/smoke/dpformer_movielens.yaml", movielens_folder,
         keep=("*/movies.dat",), more=movielens_changes),
    Case("dpformer_movielens_zip", "configs/smoke/dpformer_movielens.yaml", movielens_zip, more=movielens_changes),
    Case("dpformer_amazon_ratings_csv", "configs/smoke/dpformer_amazon.yaml", amazon_ratings_csv),
    Case("dpformer_amazon_2023_csv", "configs/smoke/dpformer_amazon.yaml", amazon_2023_csv),
    Case("dpformer_amazon_2023_jsonl", "configs/smoke/dpformer_amazon.yaml", amazon_2023_jsonl),
    Case("dpformer_amazon_2014_reviews", "configs/smoke/dpformer_amazon.yaml", amazon_2014_reviews,
         more=gzipped_jsonl_changes),
    Case("moment_ett", "configs/smoke/moment_etth1.yaml", ett_csv, more=ett_changes),
    Case("moment_ucr_ts", "configs/smoke/moment_ecg5000.yaml", ucr_ts, more=ts_changes),
    Case("moment_ucr_anomaly_txt", "configs/smoke/moment_ucr_anomaly.yaml", ucr_anomaly_txt, more=anomaly_changes),
    Case("moment_ucr_anomaly_out", "configs/smoke/moment_ucr_anomaly.yaml", ucr_anomaly_out, more=anomaly_changes),
    Case("gfnpg_bn_csv", "configs/smoke/gfnpg_bn5.yaml", bn_csv, args=GFN_SHORT),
    Case("gfnpg_dag_list", "configs/smoke/gfnpg_bn5.yaml", dag_list, args=GFN_SHORT),
    Case("gfnpg_oracle", "configs/smoke/gfnpg_tfbind8.yaml", oracle, args=GFN_SHORT, more=oracle_changes),
]
