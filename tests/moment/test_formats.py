"""The released formats, read by our readers and datamodules, against aeon's readers and momentfm's datasets."""

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.timeseries import (
    ETTh1DataModule,
    PretrainingDataModule,
    UCRAnomalyDataModule,
    UCRClassificationDataModule,
    embedded_ett,
)
from zoo.errors import ZooError
from zoo.moment.formats import AEON_CLASSIFICATION, bundled_dir, read_kdd_tsad_csv, read_ts, read_ucr_anomaly

# aeon 1.6.0 pins an older pandas and numba than the project has; with --no-deps its readers still work
AEON_MISSING = "aeon does not import (pip install --no-deps aeon==1.6.0, then pip install numba Deprecated)"

TS_TEXT = """# written as the UCR/UEA archive writes them
@problemName Tiny
@timeStamps false
@missing true
@univariate false
@dimensions 2
@equalLength true
@seriesLength 4
@classLabel true a b
@data
1.0,2.0,3.0,4.0:0.5,?,0.5,0.5:a
-1,-2,-3,-4:1,1,1,1:b
"""


def test_ts_reader_handles_multivariate_and_missing(tmp_path):
    p = tmp_path / "Tiny_TRAIN.ts"
    p.write_text(TS_TEXT)
    data = read_ts(p)
    assert data.n_channels == 2 and data.labels.tolist() == ["a", "b"]
    assert np.isnan(data.series[0][1, 1]) and data.series[1][0].tolist() == [-1, -2, -3, -4]
    p.write_text(TS_TEXT.replace(":b\n", ":c\n"))
    with pytest.raises(ZooError, match="'c' is not among @classLabel"):
        read_ts(p)
    # labelled cases under a header that says there are none: the label is named as the likely cause
    hint = r" \(its last field is one value, as a class label is, but the header says @classLabel false\)$"
    p.write_text(TS_TEXT.replace("@classLabel true a b", "@classLabel false"))
    with pytest.raises(ZooError, match=r":11: not a number \(could not convert string to float: 'a'\)" + hint):
        read_ts(p)
    p.write_text(TS_TEXT.replace("@classLabel true a b", "@classLabel false").replace(":a\n", ":1\n"))
    with pytest.raises(ZooError, match=r":11: channels of one case have different lengths \[4, 4, 1\]" + hint):
        read_ts(p)
    p.write_text(TS_TEXT.replace(":0.5,?,0.5,0.5:a", ":0.5,0.5:a"))  # a short channel alone: no such hint
    with pytest.raises(ZooError, match=r"different lengths \[4, 2\]$"):
        read_ts(p)


@pytest.mark.parametrize("name", AEON_CLASSIFICATION)
def test_ts_reader_agrees_with_aeon(name):
    aeon_datasets = pytest.importorskip("aeon.datasets", reason=AEON_MISSING)
    for split in ("TRAIN", "TEST"):
        path = bundled_dir("aeon", name) / f"{name}_{split}.ts"
        x_ref, y_ref = aeon_datasets.load_from_ts_file(str(path))
        ours = read_ts(path)
        np.testing.assert_array_equal(ours.as_array(), np.asarray(x_ref))
        # aeon lower-cases class labels (BasicMotions' "Standing" comes back "standing"); ours keeps the file's
        np.testing.assert_array_equal(np.char.lower(ours.labels.astype(str)), y_ref)


def test_ucr_anomaly_txt_labels_agree_with_aeons_kdd_135(tmp_path):
    pytest.importorskip("aeon", reason=AEON_MISSING)
    bundled = read_kdd_tsad_csv(bundled_dir("aeon", "KDD-TSAD_135"), "135_UCR_Anomaly_InternalBleeding16")
    txt = tmp_path / "135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"  # the archive's own file name
    txt.write_text("\n".join(f"{v:.5f}" for v in bundled.values))
    ours = read_ucr_anomaly(txt)
    assert ours.train_end == bundled.train_end == 1200
    np.testing.assert_array_equal(ours.labels, bundled.labels)
    np.testing.assert_allclose(ours.values, bundled.values, atol=1e-5)


def test_tsb_uad_out_file_without_header(tmp_path):
    rng = np.random.default_rng(0)
    values = rng.normal(size=2000)
    labels = np.zeros(2000, dtype=int)
    labels[1500:1520] = 1
    p = tmp_path / "198_UCR_Anomaly_tiny_1000_1500_1520.out"
    pd.DataFrame({0: values, 1: labels.astype(float)}).to_csv(p, header=False, index=False)
    s = read_ucr_anomaly(p)
    assert s.values.shape == (2000,) and s.train_end == 1000 and s.labels.sum() == 20  # no row read as a header
    dm = UCRAnomalyDataModule(source="local", path=str(p))
    dm.setup("test")
    w = dm.sets["test"]
    assert len(w) == 2 and [x["start"] for x in w] == [0, 488]  # 1000 test points: 0..511 and the end-aligned 488..999
    # the archive's naming is what the reader needs, so it does not tell the release from one's own series
    assert dm.card_metadata() == {"data_source": f"a series in the UCR anomaly archive's format and naming: {p}"}


@pytest.fixture
def ett_dir(tmp_path):
    """ETTh1.csv in its released format (header, hourly dates, 17,420 rows) at ../data/ETTh1.csv of a work dir."""
    (tmp_path / "data").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    df = embedded_ett(17_420, seed=3)
    df["date"] = df["date"].dt.strftime("%Y-%m-%d %H:%M:%S")
    df.to_csv(tmp_path / "data" / "ETTh1.csv", index=False)
    return tmp_path


def test_etth1_windows_match_momentfm_informer_dataset(ett_dir, monkeypatch, momentfm):
    from momentfm.data.informer_dataset import InformerDataset

    monkeypatch.chdir(ett_dir / "work")  # InformerDataset reads ../data/ETTh1.csv
    dm = ETTh1DataModule(source="local", path=str(ett_dir / "data" / "ETTh1.csv"), forecast_horizon=192)
    dm.setup("fit")
    for split in ("train", "test"):
        ref = InformerDataset(data_split=split, forecast_horizon=192)
        ours = dm.sets[split]
        assert len(ours) == len(ref)
        for i in (0, len(ref) // 2, len(ref) - 1):
            x, y, _ = ref[i]
            torch.testing.assert_close(ours[i]["x"], torch.as_tensor(x, dtype=torch.float32))
            torch.testing.assert_close(ours[i]["y"], torch.as_tensor(y, dtype=torch.float32))
    assert len(dm.sets["train"]) == 8640 - 512 - 192 + 1 and len(dm.sets["test"]) == 2880 - 192 + 1


def test_ett_header_is_checked(tmp_path):
    p = tmp_path / "ETTh1.csv"
    p.write_text("date,a,b\n2016-07-01 00:00:00,1,2\n")
    with pytest.raises(ZooError, match="not the ETT schema"):
        ETTh1DataModule(source="local", path=str(p)).setup("fit")
    with pytest.raises(ZooError, match="ETTh1.csv is in the moment repo"):
        ETTh1DataModule(source="local", path=str(tmp_path / "none.csv")).setup("fit")


def test_ucr_classification_matches_momentfm_dataset(tmp_path, monkeypatch, momentfm):
    from momentfm.data.classification_dataset import ClassificationDataset

    rng = np.random.default_rng(0)
    (tmp_path / "data").mkdir()
    (tmp_path / "work").mkdir()
    header = "@problemName ECG5000\n@timeStamps false\n@missing false\n@univariate true\n@equalLength true\n" \
             "@seriesLength 140\n@classLabel true 1 2 3 4 5\n@data\n"
    for split, n in (("TRAIN", 40), ("TEST", 30)):
        rows = [",".join(f"{v:.6f}" for v in rng.normal(size=140)) + f":{rng.integers(1, 6)}" for _ in range(n)]
        (tmp_path / "data" / f"ECG5000_{split}.ts").write_text(header + "\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path / "work")
    dm = UCRClassificationDataModule(source="local", train_path="../data/ECG5000_TRAIN.ts",
                                     test_path="../data/ECG5000_TEST.ts")
    dm.setup("fit")
    for split in ("train", "test"):
        ref = ClassificationDataset(data_split=split)
        ours = dm.sets[split]
        assert len(ours) == len(ref)
        for i in (0, 7):
            x, mask, label = ref[i]
            torch.testing.assert_close(ours[i]["x"], torch.as_tensor(x, dtype=torch.float32))
            np.testing.assert_array_equal(ours[i]["input_mask"].numpy(), mask)  # left padding, 0 there
            assert int(ours[i]["label"]) == int(label)


def test_longer_series_than_512_are_refused(tmp_path):
    header = "@problemName Long\n@univariate true\n@equalLength true\n@classLabel true 1 2\n@data\n"
    p = tmp_path / "Long_TRAIN.ts"
    p.write_text(header + ",".join(["0.5"] * 600) + ":1\n" + ",".join(["0.1"] * 600) + ":2\n")
    dm = UCRClassificationDataModule(source="local", train_path=str(p), test_path=str(p), scaling="none")
    with pytest.raises(ZooError, match="longer than MOMENT's 512 steps: cut it into windows"):
        dm.setup("fit")


@pytest.mark.parametrize("scaling", ["per_timestep", "none"])
def test_infinite_ts_values_are_refused(tmp_path, scaling):
    # per_timestep: else sklearn's "Input X contains infinity" traceback; none: else padded in as 1.8e308
    header = "@problemName Inf\n@univariate true\n@equalLength true\n@classLabel true 1 2\n@data\n"
    p = tmp_path / "Inf_TRAIN.ts"
    p.write_text(header + "0.5,0.2,0.1:1\n0.1,inf,0.3:2\n0.2,?,0.4:1\n")
    dm = UCRClassificationDataModule(source="local", train_path=str(p), test_path=str(p), scaling=scaling)
    with pytest.raises(ZooError, match=r"Inf_TRAIN.ts: case 1 holds an infinite value .*write a missing step as '\?'"):
        dm.setup("fit")


def test_unequal_lengths_need_scaling_none(tmp_path):
    header = "@problemName Uneq\n@univariate true\n@equalLength false\n@classLabel true 1 2\n@data\n"
    p = tmp_path / "Uneq_TRAIN.ts"
    p.write_text(header + "0.5,0.2,0.1:1\n0.1,0.3:2\n")
    with pytest.raises(ZooError, match="cases of unequal lengths \\[2, 3\\].*--data.init_args.scaling none"):
        UCRClassificationDataModule(source="local", train_path=str(p), test_path=str(p)).setup("fit")
    dm = UCRClassificationDataModule(source="local", train_path=str(p), test_path=str(p), scaling="none")
    dm.setup("fit")
    assert dm.sets["train"][1]["input_mask"].sum() == 2  # left-padded to 512, the two steps observed


@pytest.mark.parametrize("cells", [{(5, "OT"): np.inf}, {(r, "HUFL"): np.nan for r in range(4)}])
def test_ett_values_that_stay_non_finite_are_refused(tmp_path, cells):
    # an inf (else sklearn's traceback) or a gap at the start, which the cubic interpolation leaves (else nan loss)
    df = embedded_ett(1200, seed=3)
    for (row, col), value in cells.items():
        df.loc[row, col] = value
    p = tmp_path / "mine.csv"
    df.to_csv(p, index=False)
    (row, col), value = next(iter(cells.items()))
    dm = ETTh1DataModule(source="local", path=str(p), train_rows=700, val_rows=200, test_rows=200)
    with pytest.raises(ZooError, match=rf"mine.csv .*non-finite {col} \({value}\) in data row {row} \(line {row + 2}"):
        dm.setup("fit")


def test_file_options_with_a_non_local_source_are_refused(tmp_path):
    # the smoke configs say source: embedded; a path added alone would be ignored and the run trained on seeded data
    with pytest.raises(ZooError, match="path=.* is read only with source='local'.*--data.init_args.source local"):
        ETTh1DataModule(source="embedded", path=str(tmp_path / "mine.csv"))
    with pytest.raises(ZooError, match="train_path='a.ts', test_path='b.ts' are read only with source='local', but "
                                       "source='aeon'"):
        UCRClassificationDataModule(source="aeon", train_path="a.ts", test_path="b.ts")


def test_bundled_pretraining_mix_uses_training_parts_only():
    pytest.importorskip("aeon", reason=AEON_MISSING)
    dm = PretrainingDataModule(sources=["aeon:GunPoint", "aeon:KDD-TSAD_135", "aeon:Airline"], val_fraction=0.0)
    dm.setup("fit")
    # GunPoint: 50 training cases of 150 steps; KDD-135: 1,200 training points -> 3 windows; Airline: 1 series
    assert len(dm.sets["train"]) == 50 + 3 + 1
    item = dm.sets["train"][0]
    assert item["x"].shape == (1, 512) and item["input_mask"].shape == (512,)


def test_bad_datamodule_arguments():
    with pytest.raises(ZooError, match="unknown pre-training source"):
        PretrainingDataModule(sources=["aeon:Nope"])
    with pytest.raises(ZooError, match="needs path"):
        ETTh1DataModule(source="local")
    with pytest.raises(ZooError, match="batch_size must be at least 1"):
        UCRClassificationDataModule(source="embedded", batch_size=0)
    # a stride of 0 was a ZeroDivisionError; a val_rows of 0 'gave no window of 512 steps' without naming val_rows
    with pytest.raises(ZooError, match="stride and eval_stride must be >= 1 .*got 0, None"):
        ETTh1DataModule(source="embedded", stride=0)
    with pytest.raises(ZooError, match="train_rows, val_rows and test_rows must be positive, got 8640, 0, 2880"):
        ETTh1DataModule(source="embedded", val_rows=0)
    # embedded data sized to nothing: was an IndexError, a "low >= high" and a StandardScaler error mid-run, and a
    # negative train_end was taken from the end of the series
    with pytest.raises(ZooError, match="n_train, n_test >= 1 and n_classes >= 2, got 60, 0 and 3"):
        UCRClassificationDataModule(source="embedded", embedded_n_test=0).setup("fit")
    for length, end in ((0, 1536), (4096, 0), (4096, -1), (2036, 1536)):
        with pytest.raises(ZooError, match=f"train_end {end}, length {length}"):
            UCRAnomalyDataModule(source="embedded", embedded_length=length, embedded_train_end=end).setup("test")
    UCRAnomalyDataModule(source="embedded", embedded_length=2037, embedded_train_end=1536).setup("test")  # the least


def test_each_evaluation_stage_reads_its_family_split():
    """The anomaly series has no validation part (validation scores the test windows) and the pre-training mix has no
    test part (every stage reads the held-out windows): `EVAL_SPLITS` routes each stage."""
    anomaly = UCRAnomalyDataModule(source="embedded", embedded_length=2048, embedded_train_end=1024)
    anomaly.setup("fit")
    for loader in (anomaly.val_dataloader(), anomaly.test_dataloader(), anomaly.predict_dataloader()):
        assert loader.dataset is anomaly.sets["test"]
    mix = PretrainingDataModule(sources=["embedded:ett"], val_fraction=0.2, embedded_ett_rows=1024)
    mix.setup("fit")
    assert set(mix.sets) == {"train", "val"}
    assert mix.card_metadata()["data_source"].startswith("embedded: pre-training mix: embedded:ett")
    for loader in (mix.val_dataloader(), mix.test_dataloader(), mix.predict_dataloader()):
        assert loader.dataset is mix.sets["val"]
    ett = ETTh1DataModule(source="embedded", n_rows=2048, train_rows=1024, val_rows=512, test_rows=512)
    ett.setup("fit")
    assert ett.val_dataloader().dataset is ett.sets["val"]
    assert ett.test_dataloader().dataset is ett.predict_dataloader().dataset is ett.sets["test"]
