"""RestorationDataModule.card_metadata names a released set only when the folder read is recognisably it: DIV2K's
HR PNGs (0001.png .. 0900.png, at least 800), a benchmark folder (Set12, BSD68, BSD68_cut, ...) with its image
count. A user's own folder in the same format is named by its path in data_source, never as a dataset."""

from pathlib import Path

import numpy as np
from PIL import Image

from datamodules.restoration import RestorationDataModule


def _pngs(folder: Path, names: list[str], mode: str = "L") -> str:
    """Tiny 8x8 8-bit PNGs (grey or RGB) under the given names."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    shape = (8, 8) if mode == "L" else (8, 8, 3)
    for n in names:
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(folder / n)
    return str(folder)


def _fit(train_dir: str, test_dir: str) -> RestorationDataModule:
    dm = RestorationDataModule(source="local", train_dir=train_dir, test_dir=test_dir, patch_size=8, batch_size=2,
                               samples_per_epoch=2)
    dm.setup("fit")  # lists the training folder, reads the validation (= test) folder
    return dm


def test_div2k_and_set12_are_claimed_only_for_their_released_files(tmp_path):
    div2k = _pngs(tmp_path / "DIV2K_train_HR", [f"{i:04d}.png" for i in range(1, 801)], "RGB")
    set12 = _pngs(tmp_path / "Set12", [f"{i:02d}.png" for i in range(1, 13)])
    meta = _fit(div2k, set12).card_metadata()
    assert meta["datasets"] == ["DIV2K", "Set12"]
    assert div2k in meta["data_source"] and set12 in meta["data_source"]
    # a `zoo test` of that run (it writes into the fit run's card) reads no training image, and still names DIV2K
    tested = RestorationDataModule(source="local", train_dir=div2k, test_dir=set12)
    tested.setup("test")
    assert tested.card_metadata()["datasets"] == ["DIV2K", "Set12"]

    # the user's own photos, in the same format: fewer images, other names, a folder with another count
    few = _pngs(tmp_path / "few", [f"{i:04d}.png" for i in range(1, 4)], "RGB")
    photos = _pngs(tmp_path / "my_photos", [f"IMG_{i:04d}.png" for i in range(1, 801)], "RGB")
    my_set = _pngs(tmp_path / "my_set", [f"{i:02d}.png" for i in range(1, 13)])
    set12_short = _pngs(tmp_path / "short" / "Set12", [f"{i:02d}.png" for i in range(1, 6)])
    for train_dir, test_dir in ((few, my_set), (photos, set12_short)):
        meta = _fit(train_dir, test_dir).card_metadata()
        assert "datasets" not in meta, meta
        assert train_dir in meta["data_source"] and test_dir in meta["data_source"]


def test_test_sets_are_claimed_by_name_and_image_count(tmp_path):
    bsd68_cut = _pngs(tmp_path / "BSD68_cut", [f"test{i:03d}.png" for i in range(1, 69)])
    kernel = tmp_path / "k.png"
    Image.fromarray(np.full((3, 3), 255, dtype=np.uint8), "L").save(kernel)
    dm = RestorationDataModule(source="local", test_dir=bsd68_cut, kernels_path=str(kernel), task="poisson_deblur",
                               peak=100.0, max_test_images=2)
    dm.setup("test")
    assert dm.card_metadata()["datasets"] == ["BSD68_cut"]
    # a folder that the user named after a benchmark but that holds other images is not that benchmark
    mine = _pngs(tmp_path / "mine" / "BSD68_cut", [f"test{i:03d}.png" for i in range(1, 11)])
    dm = RestorationDataModule(source="local", test_dir=mine, task="denoise")
    dm.setup("test")
    meta = dm.card_metadata()
    assert "datasets" not in meta and mine in meta["data_source"]
    # a validation folder is judged the same way: Set12 validates, the user's folder tests
    set12 = _pngs(tmp_path / "Set12", [f"{i:02d}.png" for i in range(1, 13)])
    dm = RestorationDataModule(source="local", val_dir=set12, test_dir=mine, task="denoise")
    dm.setup("validate")
    meta = dm.card_metadata()
    assert meta["datasets"] == ["Set12"] and mine in meta["data_source"] and set12 in meta["data_source"]
