"""AnomalyDataModule: MVTec AD / MPDD folders and VisA's split CSV in their released formats (checked against
anomalib's MVTec AD reader), the embedded texture set, and the refusals."""

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.anomaly import AnomalyDataModule
from zoo.errors import ZooError


def _png(path: Path, size=(20, 20), value=None, mode="RGB"):
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(str(path)))
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    arr = rng.integers(0, 255, shape, dtype=np.uint8) if value is None else np.full(shape, value, np.uint8)
    Image.fromarray(arr, mode).save(path)
    return arr


def _mvtec(root: Path, classes=("bottle", "wood")):
    for c in classes:
        for i in range(2):
            _png(root / c / "train" / "good" / f"{i:03d}.png")
        _png(root / c / "test" / "good" / "000.png")
        _png(root / c / "test" / "scratch" / "000.png")
        m = np.zeros((20, 20), np.uint8)
        m[5:9, 2:12] = 255  # released masks are 0 / 255 single-channel PNGs
        (root / c / "ground_truth" / "scratch").mkdir(parents=True)
        Image.fromarray(m, "L").save(root / c / "ground_truth" / "scratch" / "000_mask.png")
    return root


def _dm(**kw):
    dm = AnomalyDataModule(**kw)
    dm.setup("fit")
    return dm


def test_mvtec_layout(tmp_path):
    root = _mvtec(tmp_path / "mvtec")
    dm = _dm(source="mvtec", root=str(root), classes=["bottle", "wood"], image_size=16, batch_size=8)
    train, test = dm._sets["train"], dm._sets["test"]
    assert len(train) == 4 and len(test) == 4
    batch = next(iter(dm.test_dataloader()))
    assert batch["image"].shape == (4, 3, 16, 16) and batch["mask"].shape == (4, 1, 16, 16)
    assert batch["label"].tolist() == [0, 1, 0, 1] and batch["class_id"].tolist() == [0, 0, 1, 1]
    m = batch["mask"][1, 0]
    assert set(m.unique().tolist()) == {0.0, 1.0} and m[:4].sum() == 0 and m[5:7, 2:9].all()
    assert batch["mask"][0].sum() == 0
    assert "data_source" in dm.card_metadata() and "datasets" not in dm.card_metadata()


def test_own_classes_in_the_mvtec_layout_need_their_names(tmp_path):
    root = _mvtec(tmp_path / "own", classes=("widget",))
    with pytest.raises(ZooError, match=r"holds none of the mvtec classes.*set data.classes .*\['widget'\]"):
        _dm(source="mvtec", root=str(root))
    assert len(_dm(source="mvtec", root=str(root), classes=["widget"], image_size=16)._sets["train"]) == 2


def test_mvtec_matches_anomalib_reader(tmp_path):
    pytest.importorskip("anomalib", reason="anomalib is in the vpdm extra (anomalib==2.2.0, the last release "
                                           "without jsonargparse<4.47): pip install -e '.[vpdm]'")
    from anomalib.data.datasets.image.mvtecad import make_mvtec_ad_dataset

    root = _mvtec(tmp_path / "mvtec", classes=("bottle",))
    dm = _dm(source="mvtec", root=str(root), classes=["bottle"])
    for split in ("train", "test"):
        ref = make_mvtec_ad_dataset(root / "bottle", split=split)
        ours = dm._sets[split].samples
        assert sorted(str(s.image) for s in ours) == sorted(ref.image_path)
        ref_labels = dict(zip(ref.image_path, ref.label_index))
        ref_masks = dict(zip(ref.image_path, ref.mask_path))
        for s in ours:
            assert s.label == ref_labels[str(s.image)]
            assert (str(s.mask) if s.mask else None) == (ref_masks[str(s.image)] or None)


def test_visa_split_csv(tmp_path):
    root = tmp_path / "VisA_20220922"
    rows = []
    for i, (split, label) in enumerate([("train", "normal"), ("train", "normal"), ("test", "normal"),
                                        ("test", "anomaly")]):
        kind = "Anomaly" if label == "anomaly" else "Normal"
        img = f"candle/Data/Images/{kind}/{i:03d}.JPG"
        Image.fromarray(np.full((18, 24, 3), 100, np.uint8)).save(_mkparent(root / img), "JPEG")
        mask = ""
        if label == "anomaly":
            mask = f"candle/Data/Masks/Anomaly/{i:03d}.png"
            m = np.zeros((18, 24), np.uint8)
            m[2:5, 3:9] = 1  # VisA masks: non-zero on the defect
            Image.fromarray(m, "L").save(_mkparent(root / mask))
        rows.append({"object": "candle", "split": split, "label": label, "image": img, "mask": mask})
    _mkparent(root / "split_csv" / "1cls.csv")
    with open(root / "split_csv" / "1cls.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["object", "split", "label", "image", "mask"])
        w.writeheader()
        w.writerows(rows)
    dm = _dm(source="visa", root=str(root), classes=["candle"], image_size=None)
    assert len(dm._sets["train"]) == 2
    item = dm._sets["test"][1]
    assert item["label"] == 1 and item["mask"].shape == (1, 18, 24) and item["mask"].sum() == 18


def _mkparent(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def test_textures_are_seeded_and_masked():
    a = _dm(source="textures", crop=32, n_train=4, n_test=4, seed=3)
    b = _dm(source="textures", crop=32, n_train=4, n_test=4, seed=3)
    assert a.class_names == ["brick", "grass", "gravel"]
    ta, tb = a._sets["test"], b._sets["test"]
    assert len(a._sets["train"]) == 12 and len(ta) == 12
    for i in range(len(ta)):
        x, y = ta[i], tb[i]
        assert torch.equal(x["image"], y["image"])
        assert bool(x["label"]) == bool(x["mask"].sum() > 0)
    assert sum(int(ta[i]["label"]) for i in range(len(ta))) == 6


def test_refusals(tmp_path):
    root = _mvtec(tmp_path / "mvtec")
    (root / "wood" / "ground_truth" / "scratch" / "000_mask.png").unlink()
    with pytest.raises(ZooError, match="mask .*000_mask.png of anomalous test image"):
        _dm(source="mvtec", root=str(root), classes=["bottle", "wood"])
    for p in (root / "bottle" / "train" / "good").iterdir():
        p.unlink()
    with pytest.raises(ZooError, match="train/good is missing or has no images"):
        _dm(source="mvtec", root=str(root), classes=["bottle"])
    with pytest.raises(ZooError, match="does not exist"):
        _dm(source="mpdd", root=str(tmp_path / "nope"))
    mixed = tmp_path / "mixed"
    _png(mixed / "a" / "train" / "good" / "0.png", size=(20, 20))
    _png(mixed / "a" / "train" / "good" / "1.png", size=(24, 20))
    (mixed / "a" / "test").mkdir()
    dm = _dm(source="mvtec", root=str(mixed), classes=["a"], image_size=None)
    with pytest.raises(ZooError, match="mixed sizes .* no data.image_size"):
        next(iter(dm.train_dataloader()))


def _visa_csv(root: Path, rows: list[dict]) -> None:
    with open(_mkparent(root / "split_csv" / "1cls.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["object", "split", "label", "image", "mask"])
        w.writeheader()
        w.writerows(rows)


def test_visa_labels_other_than_normal_or_anomaly_are_refused(tmp_path):
    # a mistyped label ("Anomaly") made the defect a normal test image: a run with no anomalies and a nan AUROC
    root = tmp_path / "own_visa"
    for n in ("a.png", "b.png"):
        _png(root / "widget" / n)
    _png(root / "widget" / "m.png", mode="L", value=1)
    _visa_csv(root, [{"object": "widget", "split": "train", "label": "normal", "image": "widget/a.png", "mask": ""},
                     {"object": "widget", "split": "test", "label": "Anomaly", "image": "widget/b.png",
                      "mask": "widget/m.png"}])
    with pytest.raises(ZooError, match="label 'Anomaly' of widget/b.png is not 'normal' or 'anomaly'"):
        _dm(source="visa", root=str(root), classes=["widget"])
    # own objects without data.classes: the error names them
    with pytest.raises(ZooError, match=r"no train images of class 'candle' \(its objects: widget; set data.classes"):
        _dm(source="visa", root=str(root))
