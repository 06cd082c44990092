"""Long-tail splits, the embedded digits source, MedMNIST .npz files in their real layout, bad roots."""

import numpy as np
import pytest
import torch

from datamodules.cifar_lt import CIFARLTDataModule, build_transforms, long_tail_counts, long_tail_indices
from datamodules.medmnist import KEYS, MedMNISTDataModule
from zoo.errors import ZooError
from zoo.score.module import shot_groups


def test_exponential_profile_matches_published_cifar10_lt_counts():
    # CIFAR-10-LT at IR 100 as published with LDAM-DRW / used by SCoRe (12,406 training images)
    counts = long_tail_counts(5000, 10, 100)
    assert counts == [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]
    assert sum(long_tail_counts(500, 100, 100)) == 10847  # CIFAR-100-LT at IR 100


def _official_counts(n_max, num_classes, ir):
    """The official create_class_imbal_indices' profile, transcribed: int(n_max * mu**i), mu = (1/IR)**(1/(C-1))."""
    mu = np.power(1 / ir, 1 / (num_classes - 1))
    return [int(n_max * np.power(mu, i)) for i in range(num_classes)]


@pytest.mark.parametrize("n_max, classes, ir, official_last", [(500, 100, 100, 4), (500, 100, 10, 49),
                                                                 (5000, 10, 50, 99), (5000, 10, 100, 50)])
def test_exponential_profile_keeps_n_max_over_ir_where_the_official_rounds_one_image_away(
        n_max, classes, ir, official_last):
    """Our deliberate choice (cifar_lt.long_tail_counts): the last class gets exactly n_max / IR (LDAM's published
    splits); the official mu**i can fall just below it, and int() then drops one image there, nowhere else. Whether
    it falls below depends on the last bit of the platform's pow (`official_last` is what one machine gave; another
    gave n_max / IR: 5.000000000000025 for 500 * mu**99), so the official count is either."""
    ours, official = long_tail_counts(n_max, classes, ir), _official_counts(n_max, classes, ir)
    assert ours[-1] == n_max // ir and official[-1] in (official_last, n_max // ir)
    assert ours[:-1] == official[:-1]


def test_step_profile_and_bad_profile():
    assert long_tail_counts(100, 4, 10, "step") == [100, 100, 10, 10]
    assert long_tail_counts(100, 4, 10, "step", step_classes=[0]) == [10, 100, 100, 100]
    with pytest.raises(ZooError, match="profile 'zipf'"):
        long_tail_counts(100, 4, 10, "zipf")
    with pytest.raises(ZooError, match=r"step_classes \[4\] are not classes of this dataset \(0..3\)"):
        long_tail_counts(100, 4, 10, "step", step_classes=[1, 4])  # was silently ignored
    with pytest.raises(ZooError, match="image_size must be >= 1, got 0"):  # was a torch traceback at setup
        CIFARLTDataModule(source="embedded", image_size=0)


def test_long_tail_indices_take_the_requested_counts():
    labels = np.repeat(np.arange(3), 20)
    idx = long_tail_indices(labels, [20, 7, 2], seed=1)
    assert np.bincount(labels[idx]).tolist() == [20, 7, 2]
    with pytest.raises(ZooError, match="class 2 has 20 images"):
        long_tail_indices(labels, [1, 1, 21])


def test_shot_groups():
    assert shot_groups([500, 100, 50, 20, 19]) == {"many": [0], "medium": [1, 2, 3], "few": [4]}


def test_embedded_cifar_lt_gives_two_view_batches():
    dm = CIFARLTDataModule(source="embedded", imbalance_ratio=10, batch_size=16, num_workers=0, image_size=16,
                           augment="light")
    dm.setup("fit")
    counts = dm.train_class_counts
    assert counts == long_tail_counts(counts[0], 10, 10)  # exponential profile from the smallest pool
    x, y, probe = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 2, 3, 16, 16) and x.dtype == torch.float32 and y.shape == (16,)
    assert probe.shape == (16, 3, 16, 16)  # the linear probe's own view
    assert not torch.equal(x[:, 0], x[:, 1])  # two different augmentations
    xe, ye = next(iter(dm.test_dataloader()))
    assert xe.shape[1:] == (3, 16, 16)
    assert np.bincount(dm.test_set.labels.numpy()).tolist() == [30] * 10  # balanced test split


def test_cifar_root_without_files_is_an_error(tmp_path):
    dm = CIFARLTDataModule(dataset="cifar100", source="local", root=str(tmp_path), num_workers=0)
    with pytest.raises(ZooError, match="cifar100 not found under .*cifar-100-python"):
        dm.setup("fit")
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"junk")
    with pytest.raises(ZooError, match=r"data_batch_1 \(checksum mismatch\), data_batch_2 \(missing\)"):
        CIFARLTDataModule(dataset="cifar10", source="local", root=str(tmp_path), num_workers=0).setup("fit")


def test_unknown_source_and_dataset():
    with pytest.raises(ZooError, match="unknown source 'hub'"):
        CIFARLTDataModule(source="hub")
    with pytest.raises(ZooError, match="unknown dataset 'svhn'"):
        CIFARLTDataModule(dataset="svhn")


def _write_medmnist(path, rgb=False, drop=None, multilabel=False):
    rng = np.random.default_rng(0)
    data = {}
    for split, n in (("train", 60), ("val", 12), ("test", 18)):
        shape = (n, 28, 28, 3) if rgb else (n, 28, 28)
        data[f"{split}_images"] = rng.integers(0, 256, shape, dtype=np.uint8)
        labels = np.arange(n) % 3
        data[f"{split}_labels"] = (rng.integers(0, 2, (n, 14)) if multilabel else labels.reshape(-1, 1)).astype(np.uint8)
    if drop:
        del data[drop]
    np.savez_compressed(path, **data)
    return data


@pytest.mark.parametrize("rgb", [False, True])
def test_medmnist_npz_in_real_layout(tmp_path, rgb):
    data = _write_medmnist(tmp_path / "dermamnist.npz", rgb=rgb)
    dm = MedMNISTDataModule(flag="dermamnist", root=str(tmp_path), batch_size=8, num_workers=0, augment="light")
    dm.setup("fit")
    c = 3 if rgb else 1
    assert dm.num_classes == 3 and dm.train_class_counts == [20, 20, 20]
    x = next(iter(dm.train_dataloader()))[0]
    assert x.shape == (8, 2, c, 28, 28)
    assert len(dm.val_set) == 12 and len(dm.test_set) == 18  # MedMNIST's own val split is used
    xe, ye = dm.test_set[5]
    img = torch.from_numpy(data["test_images"][5]).float() / 255
    img = img.permute(2, 0, 1) if rgb else img.unsqueeze(0)
    torch.testing.assert_close(xe, (img - 0.5) / 0.5)  # pixels read unchanged, normalised
    assert ye.item() == data["test_labels"][5, 0]


def test_medmnist_bad_files(tmp_path):
    with pytest.raises(ZooError, match="organamnist.npz' not found"):
        MedMNISTDataModule(root=str(tmp_path), num_workers=0).setup("fit")
    _write_medmnist(tmp_path / "organamnist.npz", drop="val_labels")
    with pytest.raises(ZooError, match=r"lacks keys \['val_labels'\]"):
        MedMNISTDataModule(root=str(tmp_path), num_workers=0).setup("fit")
    _write_medmnist(tmp_path / "chestmnist.npz", multilabel=True)
    with pytest.raises(ZooError, match="multi-label"):
        MedMNISTDataModule(flag="chestmnist", root=str(tmp_path), num_workers=0).setup("fit")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ZooError, match="cannot read MedMNIST file"):
        MedMNISTDataModule(root=str(tmp_path / "junk.npz"), num_workers=0).setup("fit")


def test_own_npz_with_wrong_dtypes_is_named_and_its_card_says_what_was_read(tmp_path):
    """A user's own .npz (README "Your own data"): numpy's default int64 pixels were scaled by int64's range (all
    black), float 0..255 ones not at all, and a negative label was a bincount traceback; the card named the flag
    and the size option ("organamnist ... 28x28") of a file the flag did not pick."""
    data = _write_medmnist(tmp_path / "good.npz")
    bad = {"train_images": data["train_images"].astype(np.int64), "val_images": data["val_images"].astype(np.float32),
           "test_images": np.zeros((18, 3, 28, 28), np.uint8)}  # the last: channels first
    for name, key, value, problem in (
            ("int64.npz", "train_images", bad["train_images"], r"train_images is int64 \(60, 28, 28\)"),
            ("float.npz", "val_images", bad["val_images"], r"val_images is float32"),
            ("first.npz", "test_images", bad["test_images"], r"test_images is uint8 \(18, 3, 28, 28\)"),
            ("neg.npz", "train_labels", data["train_labels"].astype(np.int64) - 1, r"train_labels must be .* -1"),
            ("flt.npz", "test_labels", data["test_labels"].astype(np.float32), r"test_labels must be integer")):
        np.savez(tmp_path / name, **{**data, key: value})
        with pytest.raises(ZooError, match=rf"{name}: {problem}"):
            MedMNISTDataModule(root=str(tmp_path / name), num_workers=0).setup("fit")
    big = {k: (np.zeros((len(v), 64, 64), np.uint8) if k.endswith("images") else v) for k, v in data.items()}
    np.savez(tmp_path / "big.npz", **big)
    dm = MedMNISTDataModule(root=str(tmp_path / "big.npz"), imbalance_ratio=None, num_workers=0)
    dm.setup("fit")
    assert dm.card_metadata()["data_source"] == (f"a file in the MedMNIST .npz format (64x64, as released) from "
                                                 f"{tmp_path / 'big.npz'}")
    assert MedMNISTDataModule(root=str(tmp_path)).card_metadata()["data_source"].startswith(
        "organamnist in the MedMNIST .npz format (28x28")  # found by its flag: named by it


def test_embedded_medmnist_has_the_real_keys():
    from datamodules.medmnist import embedded_medmnist

    d = embedded_medmnist()
    assert set(d) == set(KEYS)
    assert d["train_images"].dtype == np.uint8 and d["train_images"].shape[1:] == (28, 28)
    assert d["train_labels"].shape[1] == 1


def _official_probe_transform(t, size, mean, std):
    """trainval_ce.set_loader's train transform (trainval_stage2.py's loader), for CIFAR and MedMNIST alike:
    RandomResizedCrop(size, scale=(0.2, 1.)), RandomHorizontalFlip(), ToTensor(), Normalize(mean, std)."""
    from torchvision.transforms import v2

    crop, flip, to_float, norm = t.transforms
    assert isinstance(crop, v2.RandomResizedCrop) and tuple(crop.size) == (size, size) and crop.scale == (0.2, 1.0)
    assert crop.ratio == pytest.approx((3 / 4, 4 / 3))
    assert isinstance(flip, v2.RandomHorizontalFlip) and flip.p == 0.5
    assert isinstance(to_float, v2.ToDtype) and to_float.scale
    assert isinstance(norm, v2.Normalize) and list(norm.mean) == list(mean) and list(norm.std) == list(std)


def test_the_probe_view_goes_through_the_official_probe_transform(tmp_path):
    """The stage-2 probe trained on view 0 of SupCon's stage-1 augmentation (colour jitter, greyscale); the official
    trainval_stage2.py builds its own loader: crop + flip + normalise, nothing else."""
    dm = CIFARLTDataModule(source="embedded", imbalance_ratio=10, batch_size=16, num_workers=0, image_size=16)
    dm.setup("fit")
    assert dm.augment == "supcon" and dm.probe_augment == "crop"
    _official_probe_transform(dm.train_set.probe_transform, 16, (0.5,) * 3, (0.5,) * 3)
    _write_medmnist(tmp_path / "organamnist.npz")
    dm = MedMNISTDataModule(root=str(tmp_path), batch_size=8, num_workers=0, as_rgb=True)
    dm.setup("fit")
    _official_probe_transform(dm.train_set.probe_transform, 28, (0.5,) * 3, (0.5,) * 3)
    assert [type(t).__name__ for t in build_transforms("crop", 28, (0.5,), (0.5,), hflip=False).transforms] == [
        "RandomResizedCrop", "ToDtype", "Normalize"]  # hflip: false drops the flip here too


def test_probe_views_keep_their_colours_while_supcon_views_do_not(flat_colour_dermamnist):
    root, data = flat_colour_dermamnist
    dm = MedMNISTDataModule(flag="dermamnist", root=str(root), batch_size=48, num_workers=0, augment="supcon")
    dm.setup("fit")
    views, _, probe = next(iter(dm.train_dataloader()))
    colours = {tuple(c) for c in data["train_images"][:, 0, 0]}
    as_colour = [tuple(np.round((p[:, 0, 0].numpy() * 0.5 + 0.5) * 255).astype(np.uint8)) for p in probe]
    assert all(torch.equal(p, p[:, :1, :1].expand_as(p)) for p in probe) and set(as_colour) <= colours
    jittered = [tuple(np.round((v[:, 0, 0].numpy() * 0.5 + 0.5) * 255).astype(np.uint8)) not in colours
                for v in views[:, 0]]
    assert sum(jittered) > len(jittered) // 2  # SupCon's view 0: jittered (p 0.8) or grey (p 0.2) mostly


def test_as_rgb_repeats_grey_medmnist_to_three_channels(tmp_path):
    data = _write_medmnist(tmp_path / "organamnist.npz")
    dm = MedMNISTDataModule(root=str(tmp_path), num_workers=0, as_rgb=True)
    dm.setup("fit")
    assert dm.num_channels == 3 and dm.train_set.images.shape[1:] == (3, 28, 28)
    grey = torch.from_numpy(data["train_images"])
    assert all(torch.equal(dm.train_set.images[:, c], grey) for c in range(3))  # medmnist's convert("RGB")
    rgb = MedMNISTDataModule(flag="dermamnist", root=str(tmp_path), num_workers=0, as_rgb=True)
    _write_medmnist(tmp_path / "dermamnist.npz", rgb=True)
    rgb.setup("fit")
    assert rgb.num_channels == 3  # RGB files are unchanged


def test_unknown_augment_is_named():
    with pytest.raises(ZooError, match="unknown probe_augment 'jitter'; choose one of supcon, crop, light, none"):
        CIFARLTDataModule(probe_augment="jitter")
