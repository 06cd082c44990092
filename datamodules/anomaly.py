"""Multi-class industrial anomaly detection data: MVTec AD, VisA, MPDD from local folders, and an embedded texture set.

Sources (explicit, logged, never a silent fallback):
* ``mvtec`` / ``mpdd``: the released layout (MPDD is released in MVTec AD's):
  ``<root>/<class>/train/good/*.png``, ``<root>/<class>/test/<defect>/*.png`` (``good`` = normal) and
  ``<root>/<class>/ground_truth/<defect>/<stem>_mask.png`` (0 / 255).
* ``visa``: the released ``VisA_20220922`` folder with its split CSV (``split_csv/1cls.csv``: columns
  ``object,split,label,image,mask``; ``label`` normal|anomaly; paths relative to the root; masks non-zero on
  defects).
* ``textures``: seeded crops of scikit-image's bundled ``brick``, ``grass`` and ``gravel`` textures (train from the
  left 60 % of each texture, test from the right 40 %), half of the test crops with a synthetic scratch (a thick
  random line segment in a saturated colour on the grey texture) whose pixels are the mask.

Multi-class setting: one training set over all classes (normal images only). Batches are dicts: ``image``
(B, 3, H, W, ImageNet-normalised), ``mask`` (B, 1, H, W in {0, 1}), ``label`` (B,: 1 anomalous), ``class_id`` (B,).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from zoo.data import reading, refuse_unread_files, train_loader
from zoo.errors import ZooError

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
MVTEC_CLASSES = ("bottle", "cable", "capsule", "carpet", "grid", "hazelnut", "leather", "metal_nut", "pill", "screw",
                 "tile", "toothbrush", "transistor", "wood", "zipper")
VISA_CLASSES = ("candle", "capsules", "cashew", "chewinggum", "fryum", "macaroni1", "macaroni2", "pcb1", "pcb2",
                "pcb3", "pcb4", "pipe_fryum")
MPDD_CLASSES = ("bracket_black", "bracket_brown", "bracket_white", "connector", "metal_plate", "tubes")
TEXTURES = ("brick", "grass", "gravel")
SCRATCH_COLOURS = np.array([[0.9, 0.15, 0.1], [0.1, 0.75, 0.2], [0.15, 0.3, 0.95]], np.float32)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


@dataclass
class Sample:
    image: object  # a path, or an (H, W, 3) float array in [0, 1]
    mask: object  # a path, an (H, W) array, or None (normal)
    label: int
    class_id: int


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def mvtec_samples(root: Path, classes: list[str], split: Literal["train", "test"]) -> list[Sample]:
    """MVTec AD / MPDD layout; a missing train/good, test folder or mask is a ZooError naming it."""
    out = []
    for cid, cls in enumerate(classes):
        base = root / cls
        if split == "train":
            good = base / "train" / "good"
            if not good.is_dir() or not _images(good):
                raise ZooError(f"{good} is missing or has no images (expected the released <class>/train/good)")
            out += [Sample(p, None, 0, cid) for p in _images(good)]
            continue
        test = base / "test"
        if not test.is_dir():
            raise ZooError(f"{test} is missing (expected the released <class>/test/<defect>)")
        for defect in sorted(d for d in test.iterdir() if d.is_dir()):
            for p in _images(defect):
                if defect.name == "good":
                    out.append(Sample(p, None, 0, cid))
                    continue
                mask = base / "ground_truth" / defect.name / f"{p.stem}_mask.png"
                if not mask.is_file():
                    raise ZooError(f"mask {mask} of anomalous test image {p} is missing")
                out.append(Sample(p, mask, 1, cid))
    return out


def visa_samples(root: Path, classes: list[str], split: Literal["train", "test"],
                 split_csv: str = "split_csv/1cls.csv") -> list[Sample]:
    path = root / split_csv
    if not path.is_file():
        raise ZooError(f"VisA split file {path} is missing (download VisA_20220922.tar from "
                       f"github.com/amazon-science/spot-diff; it ships split_csv/1cls.csv)")
    with reading(path, "VisA split CSV"), open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and not {"object", "split", "label", "image", "mask"} <= set(rows[0]):
        raise ZooError(f"{path} lacks the columns object,split,label,image,mask (found {list(rows[0])})")
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for r in rows:
        if r["split"] not in ("train", "test"):  # another word would drop the row from both splits, silently
            raise ZooError(f"{path}: split {r['split']!r} of {r['image']} is not 'train' or 'test'")
        if r["split"] != split or r["object"] not in index:
            continue
        if r["label"] not in ("normal", "anomaly"):  # any other word would silently make a defect a normal image
            raise ZooError(f"{path}: label {r['label']!r} of {r['image']} is not 'normal' or 'anomaly'")
        label = 1 if r["label"] == "anomaly" else 0
        image = root / r["image"]
        mask = root / r["mask"] if label and r["mask"] else None
        if not image.is_file():
            raise ZooError(f"VisA image {image} listed in {path} is missing")
        if label and (mask is None or not mask.is_file()):
            raise ZooError(f"mask {mask} of anomalous VisA image {image} is missing")
        out.append(Sample(image, mask, label, index[r["object"]]))
    for c in classes:
        if split == "train" and not any(s.class_id == index[c] for s in out):
            listed = sorted({r["object"] for r in rows})  # your own data: its objects are the classes to set
            raise ZooError(f"{path} lists no train images of class {c!r} (its objects: {', '.join(listed)}; set "
                           f"data.classes to yours)")
    return out


def texture_samples(crop: int, n_train: int, n_test: int, anomaly_fraction: float, seed: int,
                    split: Literal["train", "test"]) -> list[Sample]:
    """The embedded multi-class set (seeded): crops of skimage's brick / grass / gravel, scratched test crops."""
    from skimage import data, draw
    from scipy import ndimage

    rng = np.random.default_rng(seed + (0 if split == "train" else 1_000_003))
    out = []
    for cid, name in enumerate(TEXTURES):
        tex = getattr(data, name)().astype(np.float32) / 255.0
        h, w = tex.shape
        lo, hi = (0, int(0.6 * w) - crop) if split == "train" else (int(0.6 * w), w - crop)
        n = n_train if split == "train" else n_test
        n_bad = 0 if split == "train" else int(round(anomaly_fraction * n))
        for i in range(n):
            y, x = rng.integers(0, h - crop + 1), rng.integers(lo, hi + 1)
            img = tex[y:y + crop, x:x + crop].copy()
            mask = None
            if i < n_bad:
                r0, c0, r1, c1 = rng.integers(crop // 8, crop - crop // 8, size=4)
                while abs(r1 - r0) + abs(c1 - c0) < crop // 3:  # a scratch, not a dot
                    r1, c1 = rng.integers(crop // 8, crop - crop // 8, size=2)
                line = np.zeros((crop, crop), bool)
                rr, cc = draw.line(r0, c0, r1, c1)
                line[rr, cc] = True
                mask = ndimage.binary_dilation(line, iterations=max(1, crop // 24))
            img = np.repeat(img[..., None], 3, axis=2)
            if mask is not None:
                # a coloured scratch on the grey texture (a saturated hue per scratch), so that it is a defect of
                # the texture and not one of its own dark or bright grains
                img[mask] = SCRATCH_COLOURS[rng.integers(len(SCRATCH_COLOURS))]
                mask = mask.astype(np.float32)
            out.append(Sample(img, mask, int(mask is not None), cid))
    return out


class AnomalyDataset(Dataset):
    def __init__(self, samples: list[Sample], image_size: Optional[int]):
        self.samples, self.image_size = samples, image_size
        self._size: Optional[tuple[int, int]] = None

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, s: Sample) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(s.image, Path):
            with reading(s.image, "image"), Image.open(s.image) as im:
                img = im.convert("RGB")
            if self.image_size:
                img = img.resize((self.image_size, self.image_size), Image.BILINEAR)
            image = np.asarray(img, np.float32) / 255.0
        else:
            image = s.image
        if s.mask is None:
            mask = np.zeros(image.shape[:2], np.float32)
        elif isinstance(s.mask, Path):
            with reading(s.mask, "mask image"), Image.open(s.mask) as im:
                m = im.convert("L")
            if self.image_size:
                m = m.resize((self.image_size, self.image_size), Image.NEAREST)
            mask = (np.asarray(m) > 0).astype(np.float32)
        else:
            mask = s.mask
        if mask.shape != image.shape[:2]:
            raise ZooError(f"mask {s.mask} is {mask.shape[1]}x{mask.shape[0]} but its image {s.image} is "
                           f"{image.shape[1]}x{image.shape[0]}")
        return image, mask

    def __getitem__(self, i: int) -> dict:
        s = self.samples[i]
        image, mask = self._load(s)
        size = image.shape[:2]
        if self._size is None:
            self._size = size
        elif size != self._size and not self.image_size:
            raise ZooError(f"images of mixed sizes ({self._size[1]}x{self._size[0]} and {size[1]}x{size[0]} at "
                           f"{s.image}) and no data.image_size to resize them to")
        image = (image - IMAGENET_MEAN) / IMAGENET_STD
        return {"image": torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))),
                "mask": torch.from_numpy(mask)[None], "label": torch.tensor(s.label),
                "class_id": torch.tensor(s.class_id)}


class AnomalyDataModule(L.LightningDataModule):
    """Args:
        source: ``mvtec`` | ``visa`` | ``mpdd`` (local released folders under ``root``) or ``textures`` (embedded).
        root: the dataset folder (the one holding the class folders; for VisA the one holding ``split_csv``).
        classes: subset of classes (default: all of the dataset's; the multi-class model trains on all of them).
        image_size: resize every image and mask to this square size (paper setting: 224 as UniAD; required when
            the images differ in size). ``None`` keeps the files' size.
        batch_size, num_workers: loaders.
        seed: the training shuffle and the texture generator.
        crop, n_train, n_test, anomaly_fraction: the texture set (per class).
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"root": ("mvtec", "visa", "mpdd"),
                                                          "visa_split_csv": ("visa",)}

    def __init__(self, source: Literal["mvtec", "visa", "mpdd", "textures"] = "textures", root: Optional[str] = None,
                 classes: Optional[list[str]] = None, image_size: Optional[int] = 224, batch_size: int = 8,
                 num_workers: int = 0, seed: int = 0, crop: int = 64, n_train: int = 64, n_test: int = 32,
                 anomaly_fraction: float = 0.5, visa_split_csv: str = "split_csv/1cls.csv"):
        super().__init__()
        self.save_hyperparameters()
        refuse_unread_files(self, source, locals())
        self.class_names: list[str] = []
        self._sets: dict[str, AnomalyDataset] = {}

    def _classes(self) -> list[str]:
        hp = self.hparams
        default = {"mvtec": MVTEC_CLASSES, "visa": VISA_CLASSES, "mpdd": MPDD_CLASSES, "textures": TEXTURES}
        if hp.source not in default:
            raise ZooError(f"source {hp.source!r} is not one of {sorted(default)}")
        classes = list(hp.classes or default[hp.source])
        if hp.source == "textures" and not set(classes) <= set(TEXTURES):
            raise ZooError(f"texture classes must be among {TEXTURES}, got {classes}")
        return classes

    def _samples(self, split: Literal["train", "test"]) -> list[Sample]:
        hp = self.hparams
        classes = self.class_names
        if hp.source == "textures":
            samples = texture_samples(hp.crop, hp.n_train, hp.n_test, hp.anomaly_fraction, hp.seed, split)
            keep = [TEXTURES.index(c) for c in classes]
            return [Sample(s.image, s.mask, s.label, keep.index(s.class_id)) for s in samples if s.class_id in keep]
        if not hp.root:
            raise ZooError(f"data.root is required for source={hp.source!r} (the local {hp.source} folder)")
        root = Path(hp.root)
        if not root.is_dir():
            raise ZooError(f"dataset root {root} does not exist (download {hp.source} and point data.root at it)")
        if hp.source == "visa":
            return visa_samples(root, classes, split, hp.visa_split_csv)
        if not hp.classes and not any((root / c).is_dir() for c in classes):
            found = sorted(d.name for d in root.iterdir() if (d / "train" / "good").is_dir())
            raise ZooError(f"{root} holds none of the {hp.source} classes ({', '.join(classes[:3])}, ...)"
                           + (f"; for your own data set data.classes to its class folders: {found}" if found else ""))
        return mvtec_samples(root, classes, split)

    def setup(self, stage: Optional[str] = None) -> None:
        hp = self.hparams
        self.class_names = self._classes()
        image_size = None if hp.source == "textures" else hp.image_size
        for split in ("train", "test"):
            if split in self._sets or (split == "train" and stage not in ("fit", None)):
                continue
            samples = self._samples(split)
            self._sets[split] = AnomalyDataset(samples, image_size)
            n_bad = sum(s.label for s in samples)
            rank_zero_info(f"[anomaly] source={hp.source} ({'embedded skimage textures' if hp.source == 'textures' else hp.root}): "
                           f"{split} {len(samples)} images ({n_bad} anomalous) over {len(self.class_names)} classes")

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "textures":
            return {"data_source": f"embedded: seeded {hp.crop}px crops of scikit-image brick/grass/gravel, "
                                   f"synthetic scratches in the test split"}
        # no "datasets": MVTec AD, VisA and MPDD have no official Hub id, and a local folder is not a Hub dataset
        return {"data_source": f"local {hp.source} folder {hp.root} (released layout), classes "
                               f"{','.join(self.class_names)}"}

    def train_dataloader(self):
        return train_loader(self._sets["train"], self.hparams.batch_size, shuffle=True, seed=self.hparams.seed,
                            num_workers=self.hparams.num_workers)

    def test_dataloader(self):
        return DataLoader(self._sets["test"], batch_size=self.hparams.batch_size, shuffle=False,
                          num_workers=self.hparams.num_workers)

    def predict_dataloader(self):
        return self.test_dataloader()
