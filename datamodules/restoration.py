"""Image data for the pseudo-contractive denoiser: noisy training patches and degraded test sets.

Sources (explicit, logged, never a silent fallback):
* ``local``: the paper's data from local folders in their released format: DIV2K HR (``DIV2K_train_HR/*.png``,
  8-bit RGB, read grey as ITU-R 601 luma like OpenCV's IMREAD_GRAYSCALE in the official code, or colour) for
  training; Set12 (``01.png``..``12.png``, 8-bit grey) for testing; Levin's 8 kernels from the official repository,
  either ``kernels/kevin_1.png``..``kevin_8.png`` (8-bit grey, normalised to sum 1 as the official scripts do) or
  ``kernels/kernels_12.mat`` (MAT v5, key ``kernels``: a 1x12 cell of 25x25 float32; Levin's are the first 8),
  and the SISR kernel ``kernels/sisr_kernel.png``.
* ``skimage``: scikit-image's bundled images (camera, astronaut, coins, moon, text, brick, grass, gravel,
  chelsea; grey by the same luma), centre-cropped square and resized to ``image_size``; with no ``kernels_path``,
  seeded synthetic kernels (alternately Gaussian and motion-blur random walks), logged as such.

Training items are ``(noisy, clean, sigma)``: a random ``patch_size`` crop of one image, one of the 8 flips /
rotations, sigma ~ U[sigma_min, sigma_max] (official DatasetFDnCNN: DIV2K, 64 px, sigma in [0, 60]/255). Every
item's randomness comes from (seed, epoch, index) (`_EpochPatchSampler`), so a resumed run sees the same patches.
Evaluation items are dicts: ``clean``, ``observed``, ``kernel``, ``kernel_index``, ``task``, ``sf``,
``noise_sigma``, ``name``. Tasks: ``denoise`` (Gaussian noise), ``deblur`` (circular blur + Gaussian noise, no
clipping, as the official ``gen_data``), ``poisson`` (Poisson(peak x) / peak), ``poisson_deblur`` (Poisson(peak K x)
/ peak, the official ``PnP_main_PnPIHQS_poisson_deblur.py``), ``sisr`` (blur, keep every sf-th pixel, Gaussian
noise).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from zoo.data import EpochSampler, reading, refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.pcdenoiser.denoisers import check_sigma
from zoo.pcdenoiser.operators import BlurDownsample, CircularBlur, check_kernel

SKIMAGE_IMAGES = ("camera", "astronaut", "coins", "moon", "text", "brick", "grass", "gravel", "chelsea")
LEVIN_PNGS = tuple(f"kevin_{i}.png" for i in range(1, 9))
IMAGE_SUFFIXES = (".png", ".bmp", ".tif", ".tiff", ".jpg", ".jpeg")
# What the released sets look like, so that a card names a set only when the folder read is recognisably it (a user's
# own folder is named by its path in data_source, never as a dataset): DIV2K HR is 0001.png..0800.png (train) and
# 0801.png..0900.png (validation); a test set is its released folder name with its image count.
DIV2K_HR_NAMES = frozenset(f"{i:04d}.png" for i in range(1, 901))
DIV2K_MIN_IMAGES = 800
BENCHMARK_SIZES = {"Set12": 12, "BSD68": 68, "CBSD68": 68, "BSD68_cut": 68}  # BSD68_cut: BSD68 cut by cut8.m


# ---------------------------------------------------------------------------------------------- images
def to_channels(img: np.ndarray, channels: int) -> np.ndarray:
    """uint8 (H, W) or (H, W, 3|4) -> float32 (C, H, W) in [0, 1]; grey by ITU-R 601 luma (PIL 'L', as OpenCV)."""
    pil = Image.fromarray(img)
    pil = pil.convert("L" if channels == 1 else "RGB")
    arr = np.asarray(pil, dtype=np.float32) / 255.0
    return arr[None] if channels == 1 else arr.transpose(2, 0, 1)


def read_image(path: Path, channels: int) -> np.ndarray:
    try:
        with Image.open(path) as im:
            im.load()
            # a palette (P, PA) or CMYK/YCbCr image's array holds palette indices or other channels, not grey/RGB
            # values: let PIL map it to RGB first (as OpenCV's imread does), else it would be read silently wrong
            arr = np.asarray(im.convert("RGB") if im.mode in ("P", "PA", "CMYK", "YCbCr", "LAB", "HSV") else im)
    except (OSError, ValueError) as e:
        raise ZooError(f"image {path} cannot be read ({e})") from e
    if arr.dtype != np.uint8:
        raise ZooError(f"image {path} is {arr.dtype}, expected an 8-bit image")
    return to_channels(arr, channels)


def list_images(folder: str, what: str, hint: str) -> list[Path]:
    p = Path(folder)
    if not p.is_dir():
        raise ZooError(f"{what} folder {folder!r} does not exist; {hint}")
    files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ZooError(f"{what} folder {folder!r} holds no images ({', '.join(IMAGE_SUFFIXES)}); {hint}")
    return files


def is_div2k_hr(names: list[str]) -> bool:
    """At least 800 images, all named as DIV2K's HR release names them."""
    return len(names) >= DIV2K_MIN_IMAGES and set(names) <= DIV2K_HR_NAMES


def benchmark_set(folder: str, names: list[str]) -> str | None:
    """The benchmark set a test folder is: its name, when that is a known set's and it holds that set's count."""
    name = Path(folder).name
    return name if BENCHMARK_SIZES.get(name) == len(names) else None


def skimage_image(name: str, channels: int, size: Optional[int]) -> np.ndarray:
    from skimage import data

    if name not in SKIMAGE_IMAGES:
        raise ZooError(f"unknown scikit-image image {name!r}; choose from {', '.join(SKIMAGE_IMAGES)}")
    img = getattr(data, name)()
    if img.ndim == 3 and img.shape[2] == 4:
        img = img[..., :3]
    if size is not None:
        h, w = img.shape[:2]
        s = min(h, w)
        top, left = (h - s) // 2, (w - s) // 2
        img = np.asarray(Image.fromarray(img[top:top + s, left:left + s]).resize((size, size), Image.BICUBIC))
    return to_channels(img, channels)


# ---------------------------------------------------------------------------------------------- kernels
def load_kernels(path: str) -> list[np.ndarray]:
    """Levin's kernels: a folder with kevin_1..8.png, a kernels_12.mat (first 8), or one kernel PNG (SISR)."""
    p = Path(path)
    if p.is_dir():
        files = [p / n for n in LEVIN_PNGS]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ZooError(f"kernel folder {path!r} lacks {', '.join(missing)} (the official repository's kernels/)")
        return [_png_kernel(f) for f in files]
    if not p.is_file():
        raise ZooError(f"kernels_path {path!r} does not exist; take kernels/ from the official repository "
                       f"(PnP Ishikawa.zip) or leave it empty for seeded synthetic kernels")
    if p.suffix == ".png":
        return [_png_kernel(p)]
    if p.suffix == ".mat":
        from scipy.io import loadmat
        from scipy.io.matlab import MatReadError

        try:
            mat = loadmat(p)
        except (ValueError, NotImplementedError, OSError, MatReadError) as e:  # MatReadError: empty or truncated
            raise ZooError(f"kernel file {path} is not a MAT v5 file ({e})") from e
        if "kernels" not in mat:
            raise ZooError(f"kernel file {path} has no 'kernels' cell (keys: {sorted(k for k in mat if k[0] != '_')})")
        cell = mat["kernels"]
        ks = []
        for i in range(min(cell.size, 8)):  # Levin's 8 come first (DPIR's kernels_12.mat)
            where = f"kernel {i + 1} of {path}"
            try:
                k = np.asarray(cell.flat[i], dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ZooError(f"{where} is not an array of numbers ({e})") from e
            ks.append(normalised_kernel(k, where))
        return ks
    raise ZooError(f"kernel file {path} must be a .png, a .mat or a folder of kevin_*.png")


def _png_kernel(path: Path) -> np.ndarray:
    with reading(path, "kernel image"), Image.open(path) as im:
        k = np.asarray(im.convert("L"), dtype=np.float64) / 255.0
    return normalised_kernel(k, f"kernel image {path}")  # the official scripts normalise the 8-bit images to sum 1


def normalised_kernel(k: np.ndarray, where: str) -> np.ndarray:
    """A user's blur kernel scaled to sum 1, once it is known to be one: a 2-D array of finite, non-negative
    values, not all zero (an empty or 1-D cell entry failed in the convolution, a NaN or a zero sum came out as a
    NaN kernel that the solvers refused without naming the file)."""
    if k.ndim != 2 or k.size == 0:
        raise ZooError(f"{where} is not a 2-D kernel (shape {k.shape})")
    if not np.isfinite(k).all() or (k < 0).any() or k.sum() <= 0:
        raise ZooError(f"{where} must hold finite, non-negative values, not all zero")
    return k / k.sum()


def gaussian_kernel(size: int, rng: np.random.Generator) -> np.ndarray:
    """An anisotropic Gaussian with random widths (0.6..2.5 px) and orientation."""
    sx, sy = rng.uniform(0.6, 2.5, size=2)
    th = rng.uniform(0, np.pi)
    r = np.arange(size) - (size - 1) / 2
    X, Y = np.meshgrid(r, r)
    u, v = np.cos(th) * X + np.sin(th) * Y, -np.sin(th) * X + np.cos(th) * Y
    k = np.exp(-0.5 * ((u / sx) ** 2 + (v / sy) ** 2))
    return k / k.sum()


def motion_kernel(size: int, rng: np.random.Generator, steps: int = 64) -> np.ndarray:
    """A camera-shake path (random walk with inertia) splatted bilinearly on a size x size grid, centred."""
    vel = rng.normal(size=2)
    pos, path = np.zeros(2), []
    for _ in range(steps):
        vel = 0.9 * vel + 0.35 * rng.normal(size=2)
        pos = pos + vel * (size / 4) / steps * 2
        path.append(pos.copy())
    path = np.array(path)
    path -= path.mean(0)
    limit = (size - 1) / 2 - 1
    scale = min(1.0, limit / max(np.abs(path).max(), 1e-9))
    path = path * scale + (size - 1) / 2
    k = np.zeros((size, size))
    for y, x in path:
        y0, x0 = int(np.floor(y)), int(np.floor(x))
        ty, tx = y - y0, x - x0
        for dy, wy in ((0, 1 - ty), (1, ty)):
            for dx, wx in ((0, 1 - tx), (1, tx)):
                k[min(y0 + dy, size - 1), min(x0 + dx, size - 1)] += wy * wx
    return k / k.sum()


def synthetic_kernels(n: int, size: int, seed: int) -> list[np.ndarray]:
    """n seeded kernels, alternately Gaussian and motion blur."""
    rng = np.random.default_rng([seed, 7919])
    return [gaussian_kernel(size, rng) if i % 2 == 0 else motion_kernel(size, rng) for i in range(n)]


# ---------------------------------------------------------------------------------------------- datasets
def augment(patch: np.ndarray, mode: int) -> np.ndarray:
    """One of the 8 dihedral transforms (KAIR's augment_img modes 0..7) of a (C, H, W) array."""
    out = np.rot90(patch, k=mode % 4, axes=(1, 2))
    return np.ascontiguousarray(out[:, :, ::-1] if mode >= 4 else out)


class NoisyPatches(Dataset):
    """Item `epoch * n + i`: a random patch of image i % len(images) with Gaussian noise, from (seed, epoch, i)."""

    def __init__(self, images: list, loader, n: int, patch_size: int, sigma_min: float, sigma_max: float, seed: int):
        self.images, self.loader, self.n = images, loader, n
        self.patch_size, self.sigma_min, self.sigma_max, self.seed = patch_size, sigma_min, sigma_max, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        epoch, i = divmod(int(index), self.n)
        rng = np.random.default_rng([self.seed, epoch, i])
        src = self.images[i % len(self.images)]
        img = self.loader(src)
        _, h, w = img.shape
        p = self.patch_size
        if h < p or w < p:  # a local image by its path (an index alone does not say which file to fix)
            what = src if isinstance(src, Path) else f"training image {src}"
            raise ZooError(f"{what} is {h}x{w}, smaller than patch_size {p}")
        top, left = rng.integers(0, h - p + 1), rng.integers(0, w - p + 1)
        clean = augment(img[:, top:top + p, left:left + p], int(rng.integers(0, 8)))
        sigma = float(rng.uniform(self.sigma_min, self.sigma_max))
        noisy = clean + sigma * rng.standard_normal(clean.shape).astype(np.float32)
        sigma_t = torch.tensor(sigma, dtype=torch.float32)
        return torch.from_numpy(noisy.astype(np.float32)), torch.from_numpy(clean), sigma_t


class _EpochPatchSampler(EpochSampler):
    """The stateful seeded shuffle of zoo.data, with the epoch folded into each index (epoch * n + i) so that a
    patch's crop and noise differ between epochs and resume exactly."""

    def permutation(self, epoch: int) -> list[int]:
        n = len(self.data_source)
        return [epoch * n + i for i in super().permutation(epoch)]


class ListDataset(Dataset):
    def __init__(self, items: list[dict]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


# ---------------------------------------------------------------------------------------------- datamodule
class RestorationDataModule(L.LightningDataModule):
    """Args:
    source: ``local`` (DIV2K / Set12 / Levin kernels from folders) or ``skimage`` (bundled images).
    train_dir, val_dir, test_dir: image folders (``local``); val_dir defaults to test_dir (denoising at val_sigma).
    kernels_path: Levin kernels (folder of kevin_*.png, kernels_12.mat) or one kernel PNG; None = synthetic.
    skimage_train, skimage_val, skimage_test: bundled image names (``skimage``); image_size: their side in px.
    channels: 1 (grey, the paper's Set12 experiments) or 3.
    patch_size, batch_size, sigma_min, sigma_max: training patches (official 64, 32, 0 and 60/255).
    samples_per_epoch: patches per epoch (None: one per training image, as the official dataset).
    task: evaluation task of the test set (``denoise``, ``deblur``, ``poisson``, ``poisson_deblur``, ``sisr``).
    noise_sigma: Gaussian noise of the test observations in [0, 1] units (official 12.75/255 or 17.85/255).
    val_sigma: noise of the validation denoising set (official sigma_test 25/255).
    peak: Poisson peak (official denoising 20, 15, 10; deblurring 100, 50). sf: SISR scale factor (official 2).
    crop_multiple: crop evaluation images (top-left) to a multiple of this size (official ``cut8.m``: 8, so that
        DRUNet's 3 down-samplings fit BSD68's 481x321); None keeps them whole.
    n_synthetic_kernels, synthetic_kernel_size: the seeded kernels used without kernels_path.
    max_test_images: keep only the first images of the test set (quick runs).
    seed: seed of the patches, the test noise and the synthetic kernels.
    """

    # the file options and the sources that read them (`refuse_unread_files`; kernels_path is read by both)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"train_dir": ("local",), "val_dir": ("local",),
                                                          "test_dir": ("local",)}

    def __init__(
        self,
        source: Literal["local", "skimage"] = "local",
        train_dir: Optional[str] = None,
        val_dir: Optional[str] = None,
        test_dir: Optional[str] = None,
        kernels_path: Optional[str] = None,
        skimage_train: list[str] = ["camera"],  # noqa: B006 - config values, never mutated
        skimage_val: list[str] = ["coins"],  # noqa: B006
        skimage_test: list[str] = list(SKIMAGE_IMAGES),  # noqa: B006
        image_size: Optional[int] = 64,
        channels: int = 1,
        patch_size: int = 64,
        batch_size: int = 32,
        sigma_min: float = 0.0,
        sigma_max: float = 60 / 255,
        samples_per_epoch: Optional[int] = None,
        task: Literal["denoise", "deblur", "poisson", "poisson_deblur", "sisr"] = "denoise",
        noise_sigma: float = 0.05,
        val_sigma: float = 25 / 255,
        peak: float = 20.0,
        sf: int = 2,
        crop_multiple: Optional[int] = None,
        n_synthetic_kernels: int = 2,
        synthetic_kernel_size: int = 15,
        max_test_images: Optional[int] = None,
        seed: int = 0,
        num_workers: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        if source not in ("local", "skimage"):
            raise ZooError(f"unknown image source {source!r}: choose 'local' or 'skimage'")
        refuse_unread_files(self, source, locals())
        if channels not in (1, 3):
            raise ZooError(f"channels must be 1 or 3, got {channels}")
        for name, s in (("sigma_min", sigma_min), ("sigma_max", sigma_max), ("noise_sigma", noise_sigma),
                        ("val_sigma", val_sigma)):
            check_sigma(s, name)
        if sigma_min > sigma_max:
            raise ZooError(f"sigma_min {sigma_min} > sigma_max {sigma_max}")
        if peak <= 0:
            raise ZooError(f"Poisson peak must be > 0, got {peak}")
        if patch_size < 8 or batch_size < 1:
            raise ZooError(f"patch_size must be >= 8 and batch_size >= 1, got {patch_size}, {batch_size}")
        if task not in ("denoise", "deblur", "poisson", "poisson_deblur", "sisr"):
            raise ZooError(f"unknown task {task!r}: choose denoise, deblur, poisson, poisson_deblur or sisr")
        if crop_multiple is not None and crop_multiple < 1:
            raise ZooError(f"crop_multiple must be >= 1 (or null), got {crop_multiple}")
        self.channels = channels
        self._train: Optional[Dataset] = None
        self._val: Optional[Dataset] = None
        self._test: Optional[Dataset] = None
        self.kernel_source = "none"
        self.image_names: dict[str, list[str]] = {}  # folder -> the image files setup listed there

    # ------------------------------------------------------------------ sources
    def _eval_images(self, role: str) -> list[tuple[str, np.ndarray]]:
        hp = self.hparams
        if hp.source == "local":
            folder = (hp.val_dir or hp.test_dir) if role == "val" else hp.test_dir
            if not folder:
                raise ZooError(f"source='local' needs test_dir (Set12 PNGs){' or val_dir' if role == 'val' else ''}")
            files = list_images(folder, role, "put the Set12 PNGs (01.png..12.png) there")
            self.image_names[folder] = [f.name for f in files]
            return [(f.name, read_image(f, hp.channels)) for f in files]
        names = hp.skimage_val if role == "val" else hp.skimage_test
        return [(n, skimage_image(n, hp.channels, hp.image_size)) for n in names]

    def _crop(self, images: list[tuple[str, np.ndarray]]) -> list[tuple[str, np.ndarray]]:
        m = self.hparams.crop_multiple
        if not m:
            return images
        out = []
        for n, img in images:
            h, w = img.shape[-2] // m * m, img.shape[-1] // m * m
            if h == 0 or w == 0:
                raise ZooError(f"image {n} ({img.shape[-2]}x{img.shape[-1]}) is smaller than crop_multiple {m}")
            out.append((n, img[..., :h, :w]))
        return out

    def _kernels(self) -> list[np.ndarray]:
        hp = self.hparams
        if hp.kernels_path:
            ks = load_kernels(hp.kernels_path)
            self.kernel_source = f"{hp.kernels_path} ({len(ks)} kernels)"
        else:
            if hp.n_synthetic_kernels < 1:
                raise ZooError(f"task {hp.task!r} needs blur kernels: set kernels_path or n_synthetic_kernels >= 1")
            ks = synthetic_kernels(hp.n_synthetic_kernels, hp.synthetic_kernel_size, hp.seed)
            self.kernel_source = (f"synthetic: {len(ks)} seeded Gaussian/motion kernels "
                                  f"{hp.synthetic_kernel_size}x{hp.synthetic_kernel_size} (seed {hp.seed})")
        rank_zero_info(f"[restoration] kernels: {self.kernel_source}")
        return ks

    # ------------------------------------------------------------------ degradations
    def _degrade(self, name: str, clean: np.ndarray, kernel: Optional[np.ndarray], kidx: int, idx: int) -> dict:
        hp = self.hparams
        # per (seed, kernel, image): the official gen_data reseeds np.random.seed(0) for every image instead
        # (cards/pcdenoiser.md, "Test noise")
        rng = np.random.default_rng([hp.seed, 104729, idx])
        x = torch.from_numpy(clean)[None].double()
        k = torch.zeros(1, 1, dtype=torch.float64) if kernel is None else torch.from_numpy(kernel)
        sigma = hp.noise_sigma
        if hp.task == "denoise":
            obs = x + sigma * torch.from_numpy(rng.standard_normal(x.shape))
        elif hp.task == "deblur":
            check_kernel(k, tuple(x.shape[-2:]))
            obs = CircularBlur(k, tuple(x.shape[-2:])).A(x) + sigma * torch.from_numpy(rng.standard_normal(x.shape))
        elif hp.task == "sisr":
            h, w = x.shape[-2:]
            x = x[..., : h - h % hp.sf, : w - w % hp.sf]  # modcrop
            low = BlurDownsample(k, tuple(x.shape[-2:]), hp.sf).A(x)
            obs = low + sigma * torch.from_numpy(rng.standard_normal(low.shape))
        elif hp.task == "poisson_deblur":
            check_kernel(k, tuple(x.shape[-2:]))
            sigma = 0.0
            # K x >= 0 up to FFT round-off (~1e-17), which numpy's Poisson sampler refuses: clip it to 0
            blurred = CircularBlur(k, tuple(x.shape[-2:])).A(x).clamp_min(0.0)
            obs = torch.from_numpy(rng.poisson(blurred.numpy() * hp.peak) / hp.peak)
        else:  # poisson
            sigma = 0.0
            obs = torch.from_numpy(rng.poisson(x.numpy() * hp.peak) / hp.peak)
        return {"clean": x[0].float(), "observed": obs[0].float(), "kernel": k.float(), "kernel_index": kidx,
                "task": hp.task, "sf": hp.sf if hp.task == "sisr" else 1, "noise_sigma": float(sigma), "name": name}

    def _eval_set(self, images: list[tuple[str, np.ndarray]], role: str) -> ListDataset:
        hp = self.hparams
        images = self._crop(images)
        if role == "val" or hp.task in ("denoise", "poisson"):
            items = []
            for i, (n, img) in enumerate(images):
                if role == "val":  # validation is denoising at val_sigma whatever the test task
                    rng = np.random.default_rng([hp.seed, 15485863, i])
                    x = torch.from_numpy(img)
                    obs = x + hp.val_sigma * torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))
                    items.append({"clean": x, "observed": obs, "kernel": torch.zeros(1, 1), "kernel_index": 0,
                                  "task": "denoise", "sf": 1, "noise_sigma": float(hp.val_sigma), "name": n})
                else:
                    items.append(self._degrade(n, img, None, 0, i))
            return ListDataset(items)
        kernels = self._kernels()
        items = [self._degrade(n, img, k, ki, ki * len(images) + i)
                 for ki, k in enumerate(kernels) for i, (n, img) in enumerate(images)]
        return ListDataset(items)

    # ------------------------------------------------------------------ Lightning
    def setup(self, stage: Optional[str] = None) -> None:
        hp = self.hparams
        if stage in ("fit", None) and self._train is None:
            if hp.source == "local":
                if not hp.train_dir:
                    raise ZooError("source='local' needs train_dir (DIV2K_train_HR PNGs) to fit")
                files = list_images(hp.train_dir, "training", "download DIV2K_train_HR and point train_dir at it")
                self.image_names[hp.train_dir] = [f.name for f in files]
                images, loader = files, (lambda f: read_image(f, hp.channels))
                what = f"{len(files)} images from {hp.train_dir}"
            else:
                cache = [skimage_image(n, hp.channels, hp.image_size) for n in hp.skimage_train]
                images, loader = list(range(len(cache))), (lambda i: cache[i])
                what = f"scikit-image {', '.join(hp.skimage_train)} at {hp.image_size or 'full'} px"
            n = hp.samples_per_epoch or len(images)
            self._train = NoisyPatches(images, loader, n, hp.patch_size, hp.sigma_min, hp.sigma_max, hp.seed)
            rank_zero_info(f"[restoration] source={hp.source}: training patches {hp.patch_size}px from {what}, "
                           f"{n} per epoch, sigma ~ U[{hp.sigma_min:.4g}, {hp.sigma_max:.4g}]")
        if stage in ("fit", "validate", None) and self._val is None:
            self._val = self._eval_set(self._eval_images("val"), "val")
            rank_zero_info(f"[restoration] validation: denoising {len(self._val)} images at sigma {hp.val_sigma:.4g}")
        if stage in ("test", "predict", None) and self._test is None:
            images = self._eval_images("test")[: hp.max_test_images]
            self._test = self._eval_set(images, "test")
            rank_zero_info(f"[restoration] source={hp.source}: test task {hp.task} on {len(images)} images, "
                           f"{len(self._test)} problems")

    def train_dataloader(self):
        sampler = _EpochPatchSampler(self._train, self.hparams.seed)
        return train_loader(self._train, self.hparams.batch_size, sampler=sampler, num_workers=self.hparams.num_workers,
                            drop_last=True)

    def val_dataloader(self):
        return DataLoader(self._val, batch_size=1, num_workers=self.hparams.num_workers)

    def test_dataloader(self):
        return DataLoader(self._test, batch_size=1, num_workers=self.hparams.num_workers)

    def predict_dataloader(self):
        return self.test_dataloader()

    def _image_names(self, folder: str) -> list[str]:
        """The image files setup listed in a folder; a folder this command did not read (the training folder of a
        `zoo test` run that writes into its fit run's card) is listed now, by name only (no image is opened)."""
        if folder not in self.image_names:
            p = Path(folder)
            return sorted(f.name for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES) if p.is_dir() else []
        return self.image_names[folder]

    def card_metadata(self) -> dict:
        hp = self.hparams
        task = {"denoise": f"denoising at sigma {hp.noise_sigma:.4g}",
                "deblur": f"deblurring, noise sigma {hp.noise_sigma:.4g}, kernels: {self.kernel_source}",
                "poisson": f"Poisson denoising at peak {hp.peak:g}",
                "poisson_deblur": f"Poisson deblurring at peak {hp.peak:g}, kernels: {self.kernel_source}",
                "sisr": f"x{hp.sf} super-resolution, noise sigma {hp.noise_sigma:.4g}, kernel: {self.kernel_source}"}
        if hp.source == "local":
            # the released sets this run reads, recognised by their files: DIV2K for training, Set12 (or BSD68_cut
            # for the official Poisson deblurring) for evaluation
            used = ["DIV2K"] if hp.train_dir and is_div2k_hr(self._image_names(hp.train_dir)) else []
            used += [s for d in (hp.val_dir, hp.test_dir) if d and (s := benchmark_set(d, self._image_names(d)))]
            val = f", validation {hp.val_dir}" if hp.val_dir else ""
            meta = {"data_source": f"local: training {hp.train_dir}{val}, test {hp.test_dir}; "
                                   f"test task {task[hp.task]}"}
            return {"datasets": list(dict.fromkeys(used)), **meta} if used else meta
        return {"data_source": f"embedded: scikit-image images ({', '.join(hp.skimage_train)} for training, "
                               f"{len(hp.skimage_test)} for testing) at {hp.image_size} px; test task {task[hp.task]}"}
