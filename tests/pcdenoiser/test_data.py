"""RestorationDataModule: the released formats (DIV2K/Set12 8-bit PNGs, Levin's kevin_*.png and kernels_12.mat), the
embedded scikit-image source with seeded synthetic kernels, degradations, resumable patches, refusals."""

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.io import savemat

from datamodules.restoration import RestorationDataModule, load_kernels, read_image
from zoo.errors import ZooError
from zoo.pcdenoiser import CircularBlur


def _levin_like(i: int) -> np.ndarray:
    """An 8-bit grey 19x19 kernel image like kevin_i.png: a short diagonal stroke."""
    k = np.zeros((19, 19), dtype=np.uint8)
    for t in range(3 + i):
        k[9 - i // 2 + t // 2, 6 + t] = 255 - 20 * t
    return k


@pytest.fixture
def local_data(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "DIV2K_train_HR").mkdir()
    for n in ("0001.png", "0002.png"):  # DIV2K HR: 8-bit RGB PNG
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8), "RGB").save(tmp_path / "DIV2K_train_HR" / n)
    (tmp_path / "Set12").mkdir()
    for n in ("01.png", "02.png"):  # Set12: 8-bit grey PNG
        Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8), "L").save(tmp_path / "Set12" / n)
    (tmp_path / "kernels").mkdir()
    for i in range(1, 9):
        Image.fromarray(_levin_like(i), "L").save(tmp_path / "kernels" / f"kevin_{i}.png")
    cell = np.empty((1, 12), dtype=object)  # DPIR's kernels_12.mat: a 1x12 cell of 25x25 float32, key 'kernels'
    for i in range(12):
        k = rng.random((25, 25)).astype(np.float32)
        cell[0, i] = k / k.sum()
    savemat(tmp_path / "kernels_12.mat", {"kernels": cell})
    return tmp_path


def test_kernel_files_in_their_released_formats(local_data):
    pngs = load_kernels(str(local_data / "kernels"))
    assert len(pngs) == 8 and all(abs(k.sum() - 1) < 1e-12 for k in pngs)
    np.testing.assert_allclose(pngs[0], _levin_like(1) / _levin_like(1).sum(), rtol=1e-12)  # /255 then /sum
    mat = load_kernels(str(local_data / "kernels_12.mat"))
    assert len(mat) == 8 and mat[0].shape == (25, 25)
    with pytest.raises(ZooError, match="lacks kevin_8.png"):
        (local_data / "kernels" / "kevin_8.png").unlink()
        load_kernels(str(local_data / "kernels"))
    with pytest.raises(ZooError, match="official repository"):
        load_kernels(str(local_data / "nope.mat"))


def test_local_training_patches_are_grey_luma_and_resume_exactly(local_data):
    dm = RestorationDataModule(source="local", train_dir=str(local_data / "DIV2K_train_HR"),
                               test_dir=str(local_data / "Set12"), patch_size=16, batch_size=2, samples_per_epoch=4)
    dm.setup("fit")
    noisy, clean, sigma = dm._train[1]
    assert clean.shape == (1, 16, 16) and 0 <= float(sigma) <= 60 / 255
    # grey = ITU-R 601 luma of the RGB PNG (as OpenCV's IMREAD_GRAYSCALE in the official code); the patch is one
    # crop of it under one of the 8 flips/rotations
    rgb = np.asarray(Image.open(local_data / "DIV2K_train_HR" / "0002.png"), dtype=np.float64)
    luma = np.asarray(Image.open(local_data / "DIV2K_train_HR" / "0002.png").convert("L"), dtype=np.float64)
    assert np.abs(luma - rgb @ [0.299, 0.587, 0.114]).max() <= 1.0
    windows = np.lib.stride_tricks.sliding_window_view(luma / 255, (16, 16)).reshape(-1, 16, 16)
    p = clean[0].numpy().astype(np.float64)
    variants = [np.rot90(q, r) for q in (p, p[:, ::-1]) for r in range(4)]
    assert any(np.abs(windows - v).reshape(len(windows), -1).max(1).min() < 1e-6 for v in variants)
    # item = (seed, epoch, index): epoch 1 draws other patches, the same ones on every call (resume exactly)
    again = dm._train[1]
    torch.testing.assert_close(again[0], noisy)
    assert not torch.equal(dm._train[1 + 4][1], clean)
    batch = next(iter(dm.train_dataloader()))
    assert batch[0].shape == (2, 1, 16, 16)
    colour = RestorationDataModule(source="local", train_dir=str(local_data / "DIV2K_train_HR"),
                                   test_dir=str(local_data / "Set12"), channels=3, patch_size=16, batch_size=2,
                                   samples_per_epoch=4)
    colour.setup("fit")
    assert colour._train[0][1].shape == (3, 16, 16)  # colour keeps the RGB planes


def test_local_deblur_test_set_is_blur_plus_noise(local_data):
    dm = RestorationDataModule(source="local", test_dir=str(local_data / "Set12"),
                               kernels_path=str(local_data / "kernels"),
                               task="deblur", noise_sigma=0.05)
    dm.setup("test")
    items = [dm._test[i] for i in range(len(dm._test))]
    assert len(items) == 16 and {it["kernel_index"] for it in items} == set(range(8))
    it = items[3]
    blurred = CircularBlur(it["kernel"].double(), (32, 32)).A(it["clean"][None].double())[0]
    noise = (it["observed"].double() - blurred).std()
    assert 0.04 < float(noise) < 0.06
    # a test-only run reads no DIV2K, and a 2-image folder named Set12 is not the released Set12 (12 images)
    assert "datasets" not in dm.card_metadata() and str(local_data / "Set12") in dm.card_metadata()["data_source"]


def test_local_poisson_deblurring_of_an_uncut_image_cropped_to_a_multiple_of_8(local_data):
    """BSD68 images are 481x321 (the official script reads BSD68 cut to multiples of 8 by cut8.m)."""
    rng = np.random.default_rng(1)
    (local_data / "BSD68").mkdir()
    Image.fromarray(rng.integers(0, 256, (41, 35), dtype=np.uint8), "L").save(local_data / "BSD68" / "test001.png")
    dm = RestorationDataModule(source="local", test_dir=str(local_data / "BSD68"), kernels_path=str(local_data /
                               "kernels" / "kevin_1.png"), task="poisson_deblur", peak=100.0, crop_multiple=8)
    dm.setup("test")
    (it,) = [dm._test[i] for i in range(len(dm._test))]
    assert it["clean"].shape == (1, 40, 32) and it["task"] == "poisson_deblur"
    counts = (it["observed"].double() * 100).numpy()
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-4)  # Poisson counts / peak
    blurred = CircularBlur(it["kernel"].double(), (40, 32)).A(it["clean"][None].double())[0]
    # E[f] = K x and Var[f] = K x / peak: the standardised residual has mean ~0 and variance ~1 over 1280 pixels
    resid = (it["observed"].double() - blurred) / (blurred.clamp_min(1e-3) / 100).sqrt()
    assert abs(float(resid.mean())) < 0.15 and 0.8 < float(resid.var()) < 1.2
    assert "datasets" not in dm.card_metadata()  # one image: not the released BSD68 (68 images)
    with pytest.raises(ZooError, match="crop_multiple"):
        RestorationDataModule(source="local", crop_multiple=0)
    with pytest.raises(ZooError, match="task 'deblur' needs blur kernels"):  # was an empty test set, without a word
        RestorationDataModule(source="skimage", skimage_test=["camera"], image_size=16, task="deblur",
                              n_synthetic_kernels=0).setup("test")


def test_skimage_source_with_synthetic_kernels_for_every_task():
    for task in ("deblur", "poisson", "poisson_deblur", "sisr", "denoise"):
        dm = RestorationDataModule(source="skimage", skimage_test=["camera", "chelsea"], image_size=32, task=task,
                                   n_synthetic_kernels=2, synthetic_kernel_size=7, peak=10.0)
        dm.setup("test")
        it = dm._test[0]
        assert it["clean"].shape == (1, 32, 32) and it["task"] == task
        if task == "sisr":
            assert it["observed"].shape == (1, 16, 16)
        if task == "poisson":  # counts / peak
            counts = (it["observed"] * 10).numpy()
            np.testing.assert_allclose(counts, np.round(counts), atol=1e-5)
        if task == "poisson_deblur":
            counts = (it["observed"] * 10).numpy()
            np.testing.assert_allclose(counts, np.round(counts), atol=1e-5)
        if task in ("deblur", "sisr", "poisson_deblur"):
            assert len(dm._test) == 4 and dm.kernel_source.startswith("synthetic")
            assert abs(float(it["kernel"].sum()) - 1) < 1e-5
        assert "embedded" in dm.card_metadata()["data_source"]


def test_datamodule_refusals(tmp_path):
    with pytest.raises(ZooError, match=r"\[0, 1\] units"):
        RestorationDataModule(source="skimage", noise_sigma=12.75)
    with pytest.raises(ZooError, match="Poisson peak"):
        RestorationDataModule(source="skimage", peak=0)
    with pytest.raises(ZooError, match="does not exist"):
        RestorationDataModule(source="local", test_dir=str(tmp_path / "Set12"), task="denoise").setup("test")
    dm = RestorationDataModule(source="skimage", image_size=16, task="deblur", synthetic_kernel_size=21)
    with pytest.raises(ZooError, match="larger than the image"):
        dm.setup("test")


def test_palette_and_cmyk_images_are_read_as_their_colours_not_their_indices(tmp_path):
    # an 8-bit palette PNG (and a CMYK JPEG) is an 8-bit image too: its pixels are the palette's colours, so the grey
    # read must match PIL's own conversion, not the raw palette indices
    rgb = np.random.default_rng(0).integers(0, 256, (24, 24, 3), dtype=np.uint8)
    Image.fromarray(rgb, "RGB").quantize(16).save(tmp_path / "pal.png")
    Image.fromarray(rgb, "RGB").convert("CMYK").save(tmp_path / "cmyk.jpg")
    for name in ("pal.png", "cmyk.jpg"):
        with Image.open(tmp_path / name) as im:
            grey, colour = np.asarray(im.convert("L")) / 255.0, np.asarray(im.convert("RGB")) / 255.0
        np.testing.assert_allclose(read_image(tmp_path / name, 1)[0], grey, atol=1e-6)
        np.testing.assert_allclose(read_image(tmp_path / name, 3).transpose(1, 2, 0), colour, atol=1e-6)


def test_a_training_image_smaller_than_the_patch_is_named_by_its_path(tmp_path):
    # the patches are cut lazily: the error must say which of the user's files to fix, not its index in the folder
    (tmp_path / "train").mkdir()
    Image.fromarray(np.zeros((40, 40), np.uint8), "L").save(tmp_path / "train" / "a.png")
    Image.fromarray(np.zeros((20, 24), np.uint8), "L").save(tmp_path / "train" / "small.png")
    dm = RestorationDataModule(source="local", train_dir=str(tmp_path / "train"), test_dir=str(tmp_path / "train"),
                               patch_size=32, batch_size=1)
    dm.setup("fit")
    with pytest.raises(ZooError, match=r"train/small.png is 20x24, smaller than patch_size 32"):
        dm._train[1]
