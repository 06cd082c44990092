"""ConditionalDataModule: the released CSV formats, training-set standardisation, balancing, and bad data."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from data_cases.arrays import CPS_HEADER, cps_rows  # tests/support: the fuzzer writes the same rows

from datamodules.conditional import SCHEMAS, ConditionalDataModule
from zoo.errors import ZooError


def write_cps(folder: Path, rows: dict[str, list[str]]) -> Path:
    """CSV files exactly as the official datasets/cps/*.csv: header line, floats written as `1.0`."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, lines in rows.items():
        (folder / f"{split}.csv").write_text("\n".join([CPS_HEADER, *lines]) + "\n")
    return folder


@pytest.fixture
def cps_dir(tmp_path):
    return write_cps(tmp_path / "cps", {"train": cps_rows(12, 2, 0) + cps_rows(3, 1, 1, base_age=60),
                                        "val": cps_rows(2, 21, 2), "test": cps_rows(3, 31, 3)})


def test_reads_the_released_cps_format_and_standardises_with_training_statistics(cps_dir):
    dm = ConditionalDataModule(dataset="cps", source="local", data_dir=str(cps_dir), balance=False)
    dm.setup("fit")
    train = pd.read_csv(cps_dir / "train.csv")
    assert list(train.columns) == CPS_HEADER.split(",")
    assert dm.train_x.shape == (15, 9) and sum(len(g) for g in dm.train_groups_raw) == 27
    x = train[list(SCHEMAS["cps"].x)].to_numpy()  # the model's x order: t, age, education, re74, re75, ...
    stats = dm.standardisation()
    np.testing.assert_allclose(stats["x_mean"].numpy(), x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats["x_std"].numpy(), x.std(0, ddof=1) + 1e-5, rtol=1e-6)
    np.testing.assert_allclose(stats["y_std"].item(), train.re78.std(ddof=1) + 1e-5, rtol=1e-6)
    assert stats["y_lower"].item() == 0.0
    xs, _ = dm.train_groups()
    np.testing.assert_allclose(xs, (dm.train_x - x.mean(0)) / (x.std(0, ddof=1) + 1e-5))
    (batch,) = [b for b in dm.test_dataloader()]
    assert len(batch) == 3 and batch[0][0].shape == (9,) and len(batch[0][1]) == 31
    # evaluation groups are in raw units
    test = pd.read_csv(cps_dir / "test.csv")
    assert sorted(float(y) for _, ys_ in batch for y in ys_) == sorted(test.re78.tolist())
    assert "local cps CSV files" in dm.card_metadata()["data_source"]


def test_balance_resamples_two_n_rows_with_equal_treatment_weight(cps_dir):
    dm = ConditionalDataModule(dataset="cps", source="local", data_dir=str(cps_dir), balance=True)
    dm.setup("fit")
    train = dm.frames["train"]
    assert len(train) == 2 * 27
    # weights (1 - t̄) t + t̄ (1 - t) give the treated rows total weight t̄(1 - t̄) n, the controls the same
    assert 0.3 < train.t.mean() < 0.7
    again = ConditionalDataModule(dataset="cps", source="local", data_dir=str(cps_dir), balance=True)
    again.setup("fit")
    pd.testing.assert_frame_equal(train, again.frames["train"])  # the official fixed random_state


def test_ecm_and_toy_files_in_their_released_format(tmp_path):
    rng = np.random.default_rng(0)
    ecm = tmp_path / "cancer"
    ecm.mkdir()
    for split, n_cov, per in (("train", 6, 1), ("val", 2, 25), ("test", 2, 25)):
        rows = ["Barrett,aspirinEffect,statinEffect,drugIndex,initialAge,QALY"]
        for c in range(n_cov):
            b, a, s, age = rng.uniform(0, 0.1), rng.uniform(), rng.uniform(), rng.integers(55, 81)
            for _ in range(per):
                for drug in (1, 2):
                    rows.append(f"{b},{a},{s},{drug},{float(age)},{rng.normal(15, 5)}")
        (ecm / f"{split}.csv").write_text("\n".join(rows) + "\n")
    dm = ConditionalDataModule(dataset="ecm", source="local", data_dir=str(ecm), min_eval_samples=25)
    dm.setup("fit")
    assert dm.x_dim == 5 and len(dm.train_x) == 12 and len(dm.eval_sets["test"]) == 4
    toy = tmp_path / "toy1"
    toy.mkdir()
    for split in ("train", "val", "test"):
        lines = ["x1,x2,x3,y"] + [f"{c},{-c},{0.5 * c},{v}" for c in range(3) for v in rng.normal(size=20)]
        (toy / f"{split}.csv").write_text("\n".join(lines) + "\n")
    dm = ConditionalDataModule(dataset="toy1", source="local", data_dir=str(toy))
    dm.setup("fit")
    assert dm.train_x.tolist() == [[0, 0, 0], [1, -1, 0.5], [2, -2, 1.0]]


def test_appearance_order_is_the_files_order_of_first_sight(tmp_path):
    # the official code keeps its distinct covariates in the order the training file first shows them; ours are
    # lexicographic, and train_appearance_order maps one to the other
    toy = tmp_path / "toy1"
    toy.mkdir()
    rows = {"train": [(2, 5), (0, 1), (2, 6), (1, 2), (0, 3)]}  # (covariate c, y): first sight 2, 0, 1
    rows["val"] = rows["test"] = [(c, v) for c in range(2) for v in range(30)]
    for split, pairs in rows.items():
        (toy / f"{split}.csv").write_text("x1,x2,x3,y\n" + "\n".join(f"{c},0,0,{v}" for c, v in pairs) + "\n")
    dm = ConditionalDataModule(dataset="toy1", source="local", data_dir=str(toy))
    assert dm.train_appearance_order().tolist() == [2, 0, 1]
    xs, groups = dm.train_groups()
    assert np.argsort(xs[:, 0]).tolist() == [0, 1, 2] and [len(g) for g in groups] == [2, 1, 2]


@pytest.mark.parametrize("dataset", ["toy1", "toy2", "ecm", "cps"])
def test_embedded_sources_are_seeded_and_batch_both_ways(dataset):
    kw = {"dataset": dataset, "source": "embedded", "n_train_covariates": 10, "n_train_samples": 3,
          "n_val_covariates": 2, "n_test_covariates": 3, "n_eval_draws": 25, "batch_size": 4}
    dm = ConditionalDataModule(**kw)
    dm.setup("fit")
    assert len(dm.train_x) == 10 and all(len(g) == 3 for g in dm.train_groups_raw)
    (idx,) = next(iter(dm.train_dataloader()))
    assert idx.dtype == torch.int64 and len(idx) == 4
    rows = ConditionalDataModule(**kw, batch_by="row")
    y, x = next(iter(rows.train_dataloader()))
    assert y.shape == (4,) and x.shape == (4, dm.x_dim)
    np.testing.assert_array_equal(rows.train_x, dm.train_x)  # same seed, same draws
    assert "embedded" in dm.card_metadata()["data_source"]
    if dataset == "cps":
        assert "not the real data" in dm.card_metadata()["data_source"]


def write_bad(tmp_path, train: str, test: str | None = None, val: str | None = None) -> str:
    good = "\n".join(cps_rows(2, 25, 5))
    for split, body in (("train", train), ("val", val or good), ("test", test or good)):
        (tmp_path / f"{split}.csv").write_text(CPS_HEADER + "\n" + body + "\n")
    return str(tmp_path)


@pytest.mark.parametrize("t", ["0.0", "2.0"])
def test_balance_needs_a_binary_treatment_with_both_groups(tmp_path, t):
    # all controls (weights sum to zero) or a t outside {0, 1} (negative weights): a ZooError, not pandas' ValueError
    rows = [f"{t}," + r.split(",", 1)[1] for r in cps_rows(4, 2, 0)]
    d = write_bad(tmp_path, "\n".join(rows))
    with pytest.raises(ZooError, match=r"balance=True needs t in \{0, 1\} with both treated and control rows"):
        ConditionalDataModule(dataset="cps", source="local", data_dir=d, balance=True).setup("fit")
    ConditionalDataModule(dataset="cps", source="local", data_dir=d, balance=False).setup("fit")


def test_data_dir_with_the_embedded_source_is_refused(tmp_path):
    # the smoke configs say source: embedded; a data_dir added alone would be ignored and the run trained on draws
    with pytest.raises(ZooError, match="data_dir=.* is read only with source='local'.*--data.init_args.source local"):
        ConditionalDataModule(dataset="toy1", source="embedded", data_dir=str(tmp_path))


def test_missing_column(tmp_path):
    (tmp_path / "train.csv").write_text("t,age,education,black,hispanic,married,nodegree,re74,re78\n1,2,3,0,0,0,0,0,5\n")
    dm = ConditionalDataModule(dataset="cps", source="local", data_dir=str(tmp_path))
    with pytest.raises(ZooError, match=r"lacks column\(s\) \['re75'\]"):
        dm.setup("fit")


def test_single_distinct_covariate(tmp_path):
    d = write_bad(tmp_path, "\n".join(cps_rows(1, 4, 0)))
    with pytest.raises(ZooError, match="only 1 distinct covariate"):
        ConditionalDataModule(dataset="cps", source="local", data_dir=d).setup("fit")


def test_test_covariate_with_too_few_samples(tmp_path):
    d = write_bad(tmp_path, "\n".join(cps_rows(4, 2, 0)), test="\n".join(cps_rows(2, 25, 1) + cps_rows(1, 3, 2, 70)))
    with pytest.raises(ZooError, match="test: covariate .* has 3 observation.*min_eval_samples=20"):
        ConditionalDataModule(dataset="cps", source="local", data_dir=d).setup("fit")


@pytest.mark.parametrize("value", ["nan", "inf", ""])
def test_non_finite_y(tmp_path, value):
    rows = cps_rows(4, 2, 0)
    rows[3] = rows[3].rsplit(",", 1)[0] + "," + value
    d = write_bad(tmp_path, "\n".join(rows))
    with pytest.raises(ZooError, match="non-finite re78 .* in row 3"):
        ConditionalDataModule(dataset="cps", source="local", data_dir=d).setup("fit")


def test_negative_earnings_and_missing_files(tmp_path):
    rows = cps_rows(4, 2, 0)
    rows[0] = rows[0].rsplit(",", 1)[0] + ",-1.0"
    d = write_bad(tmp_path, "\n".join(rows))
    with pytest.raises(ZooError, match="re78 below its lower bound 0.0"):
        ConditionalDataModule(dataset="cps", source="local", data_dir=d).setup("fit")
    with pytest.raises(ZooError, match="train file .* not found: put the official datasets/cps/train.csv"):
        ConditionalDataModule(dataset="cps", source="local", data_dir=str(tmp_path / "nowhere")).setup("fit")
    with pytest.raises(ZooError, match="needs data_dir"):
        ConditionalDataModule(dataset="cps", source="local")
    with pytest.raises(ZooError, match="only cps has"):
        ConditionalDataModule(dataset="toy1", balance=True)


def test_real_cps_files_reproduce_the_checked_counts(official_cps_dir):
    dm = ConditionalDataModule(dataset="cps", source="local", data_dir=str(official_cps_dir), balance=False)
    dm.setup("fit")
    assert (len(dm.frames["train"]), len(dm.train_x)) == (15_255, 13_745)
    assert (len(dm.frames["val"]), len(dm.eval_sets["val"])) == (488, 19)
    assert (len(dm.frames["test"]), len(dm.eval_sets["test"])) == (434, 12)
    assert min(len(g) for g in dm.eval_sets["test"].groups) > 30
