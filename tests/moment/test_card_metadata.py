"""The MOMENT datamodules' card_metadata names a released dataset only when the local files read are recognisably
it (ETTh1.csv: 17,420 hourly rows from 2016-07-01; ECG5000 .ts: its @problemName with 500/4,500 cases of 140 steps
in 5 classes). A user's own file in the same format is named by its path in data_source, never as a dataset."""

import numpy as np
import pandas as pd

from datamodules.timeseries import ETTh1DataModule, UCRClassificationDataModule, embedded_ett


def _ett_csv(path, n_rows: int, start: str = "2016-07-01") -> str:
    df = embedded_ett(n_rows, seed=1)
    df["date"] = pd.date_range(start, periods=n_rows, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    df.to_csv(path, index=False)
    return str(path)


def test_etth1_is_claimed_only_for_the_released_file(tmp_path):
    released = _ett_csv(tmp_path / "ETTh1.csv", 17_420)
    dm = ETTh1DataModule(source="local", path=released)
    assert "datasets" not in dm.card_metadata()  # nothing read yet: nothing claimed
    dm.setup("fit")
    meta = dm.card_metadata()
    assert meta["datasets"] == ["ETTh1"] and released in meta["data_source"]
    # the user's own files in the ETTh1 schema: fewer rows; the same number of rows from another date
    (tmp_path / "mine").mkdir()
    for path, rows in ((_ett_csv(tmp_path / "mine" / "ETTh1.csv", 15_000), 15_000),
                       (_ett_csv(tmp_path / "plant.csv", 17_420, start="2019-01-01"), 17_420)):
        dm = ETTh1DataModule(source="local", path=path)
        dm.setup("fit")
        meta = dm.card_metadata()
        assert "datasets" not in meta, meta
        assert meta["data_source"] == f"local CSV in the ETTh1 schema: {path} ({rows} rows; not the released ETTh1; " \
                                      "forecasting)"


def _ts(path, name: str, n: int, length: int = 140, n_classes: int = 5, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    labels = " ".join(str(k) for k in range(1, n_classes + 1))
    header = f"@problemName {name}\n@timeStamps false\n@missing false\n@univariate true\n@equalLength true\n" \
             f"@seriesLength {length}\n@classLabel true {labels}\n@data\n"
    values = np.round(rng.normal(size=(n, length)), 2)
    classes = np.arange(n) % n_classes + 1  # every class occurs
    rows = [",".join(map(str, v)) + f":{k}" for v, k in zip(values.tolist(), classes.tolist(), strict=True)]
    path.write_text(header + "\n".join(rows) + "\n")
    return str(path)


def test_ucr_classification_is_claimed_by_the_files_problem_name_and_release_shapes(tmp_path):
    train, test = _ts(tmp_path / "ECG5000_TRAIN.ts", "ECG5000", 500), _ts(tmp_path / "ECG5000_TEST.ts", "ECG5000", 4500)
    dm = UCRClassificationDataModule(source="local", train_path=train, test_path=test, scaling="none")
    dm.setup("fit")
    meta = dm.card_metadata()
    assert meta["datasets"] == ["UCR/UEA ECG5000"] and train in meta["data_source"] and test in meta["data_source"]

    # the user's own .ts files: ECG5000's name with fewer cases, and another problem read with the default
    # dataset (ECG5000) left in the config
    small = (_ts(tmp_path / "small_TRAIN.ts", "ECG5000", 40), _ts(tmp_path / "small_TEST.ts", "ECG5000", 30))
    own = (_ts(tmp_path / "Pumps_TRAIN.ts", "Pumps", 500, n_classes=3), _ts(tmp_path / "Pumps_TEST.ts", "Pumps", 60,
                                                                            n_classes=3))
    for (tr, te), name in ((small, "ECG5000"), (own, "Pumps")):
        dm = UCRClassificationDataModule(source="local", dataset="ECG5000", train_path=tr, test_path=te)
        dm.setup("fit")
        meta = dm.card_metadata()
        assert "datasets" not in meta, meta
        assert tr in meta["data_source"] and te in meta["data_source"] and repr(name) in meta["data_source"]
