"""Long-tailed CIFAR-10/100 (and an embedded long-tailed digits source) for SCoRe-style training.

The long-tail split is LDAM's (and, up to one image of rounding, the official SCoRe code's): class i keeps
n_i = floor(n_max * (1/IR)^(i / (C - 1))) training images ("exp"), or n_max for the head classes and
floor(n_max / IR) for the listed tail classes ("step"). Validation and test use the balanced test split,
as CIFAR-LT papers do. Training batches carry ``n_views`` augmented views per image: x is
[B, n_views, C, H, W] (SupCon's two-crop recipe), and, with ``probe_augment``, a third item: one view [B, C, H, W]
through the linear probe's own transform (the official stage 2 builds its own loader: crop + flip, no colour
jitter); evaluation batches carry one view, [B, C, H, W].
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar, Literal, Optional, Sequence

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from zoo.data import refuse_unread_files, train_loader
from zoo.errors import ZooError

CIFAR_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
_CIFAR_DIRS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
AUGMENTS = ("supcon", "crop", "light", "none")


def long_tail_counts(n_max: int, num_classes: int, imbalance_ratio: float, profile: str = "exp",
                     step_classes: Optional[Sequence[int]] = None) -> list[int]:
    """Images kept per class: exponential n_max * (1/IR)^(i/(C-1)), or step (tail classes get n_max/IR)."""
    if imbalance_ratio < 1:
        raise ZooError(f"imbalance_ratio must be >= 1 (n_max / n_min), got {imbalance_ratio}")
    if profile == "exp":
        if num_classes == 1:
            return [n_max]
        # The exponent is i/(C-1), as in LDAM's published CIFAR-LT splits, so the last class gets exactly n_max/IR.
        # The official create_class_imbal_indices computes int(n_max * mu**i) with mu = (1/IR)**(1/(C-1)) instead:
        # mu**(C-1) rounds just below 1/IR, and the last class loses one image where n_max/IR is a whole number
        # (CIFAR-100-LT IR 100: 4, not 5, 10,846 images, not the published 10,847; IR 10: 49, not 50; CIFAR-10-LT
        # IR 50: 99, not 100). We follow the published splits and the definition IR = n_max / n_min deliberately.
        return [max(1, math.floor(n_max * (1.0 / imbalance_ratio) ** (i / (num_classes - 1))))
                for i in range(num_classes)]
    if profile == "step":
        tail = set(range(num_classes // 2, num_classes) if step_classes is None else step_classes)
        if not tail <= set(range(num_classes)):
            raise ZooError(f"step_classes {sorted(tail - set(range(num_classes)))} are not classes of this "
                           f"dataset (0..{num_classes - 1})")
        return [max(1, math.floor(n_max / imbalance_ratio)) if i in tail else n_max for i in range(num_classes)]
    raise ZooError(f"unknown long-tail profile {profile!r}; choose 'exp' or 'step'")


def long_tail_indices(labels: np.ndarray, counts: Sequence[int], seed: int = 0) -> np.ndarray:
    """Indices of a long-tailed subset: a seeded random choice of counts[c] images of each class c."""
    rng = np.random.default_rng(seed)
    keep = []
    for c, n in enumerate(counts):
        idx = np.flatnonzero(labels == c)
        if len(idx) < n:
            raise ZooError(f"class {c} has {len(idx)} images, fewer than the {n} the long-tail profile asks")
        keep.append(np.sort(rng.choice(idx, size=n, replace=False)))
    return np.concatenate(keep)


def embedded_digits(image_size: int = 32, channels: int = 3, test_per_class: int = 30):
    """scikit-learn's bundled 8x8 digits as uint8 images [N, C, s, s] with a balanced test split."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.from_numpy(d.images).float().mul(255.0 / 16.0).unsqueeze(1)
    if image_size != 8:
        x = torch.nn.functional.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = x.round().clamp(0, 255).to(torch.uint8).expand(-1, channels, -1, -1).contiguous()
    y = d.target.astype(np.int64)
    test = np.concatenate([np.flatnonzero(y == c)[-test_per_class:] for c in range(10)])
    train = np.setdiff1d(np.arange(len(y)), test)
    return (x[train], y[train]), (x[test], y[test])


class ViewsDataset(Dataset):
    """uint8 images [N, C, H, W] + labels; returns n_views transformed views (stacked if > 1), the label and, with a
    ``probe_transform``, one more view through it (the linear probe's input)."""

    def __init__(self, images: torch.Tensor, labels: np.ndarray, transform, n_views: int = 1, probe_transform=None):
        self.images, self.labels = images, torch.as_tensor(labels, dtype=torch.long)
        self.transform, self.n_views, self.probe_transform = transform, n_views, probe_transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.n_views == 1:
            views = self.transform(img)
        else:
            views = torch.stack([self.transform(img) for _ in range(self.n_views)])
        if self.probe_transform is None:
            return views, self.labels[i]
        return views, self.labels[i], self.probe_transform(img)


def build_transforms(augment: str, size: int, mean, std, hflip: bool = True):
    """SupCon's two-crop augmentation ("supcon"), its crop without colour ("crop"), a milder crop ("light"), or none.

    "crop" is the official code's transform for the linear probe and the CE baseline (trainval_ce.set_loader, which
    trainval_stage2.py imports) and for OrganAMNIST's stage 1 (train_stage1.py): RandomResizedCrop(size, scale
    0.2-1) + horizontal flip, no colour jitter or greyscale.
    """
    tail = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    if augment == "none":
        return v2.Compose(tail)
    if augment == "crop":
        head = [v2.RandomResizedCrop(size, scale=(0.2, 1.0), antialias=True)]
    elif augment == "light":
        head = [v2.RandomResizedCrop(size, scale=(0.6, 1.0), ratio=(0.8, 1.25), antialias=True)]
    elif augment == "supcon":  # SupCon / SCoRe stage 1: crop 0.2-1, flip, jitter 0.4 (p 0.8), grey (p 0.2)
        head = [v2.RandomResizedCrop(size, scale=(0.2, 1.0), antialias=True),
                v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), v2.RandomGrayscale(p=0.2)]
    else:
        raise ZooError(f"unknown augment {augment!r}; choose 'supcon', 'crop', 'light' or 'none'")
    if hflip:
        head.insert(1, v2.RandomHorizontalFlip())
    return v2.Compose(head + tail)


class LongTailDataModule(L.LightningDataModule):
    """Shared plumbing: long-tail the training split, two-view training loader, balanced eval loaders."""

    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {}  # no source switch here: the subclasses declare theirs
    num_classes: int
    train_class_counts: list[int]

    def __init__(self, batch_size: int, num_workers: int, n_views: int, augment: str, hflip: bool,
                 imbalance_ratio: Optional[float], imbalance_type: str, step_classes: Optional[list[int]],
                 eval_batch_size: Optional[int], seed: int, probe_augment: str | None = "crop"):
        super().__init__()
        if n_views < 1:
            raise ZooError(f"n_views must be >= 1, got {n_views}")
        for name, value in (("augment", augment), ("probe_augment", probe_augment)):
            if value is not None and value not in AUGMENTS:
                raise ZooError(f"unknown {name} {value!r}; choose one of {', '.join(AUGMENTS)}")
        self.batch_size, self.num_workers, self.n_views = batch_size, num_workers, n_views
        self.augment, self.probe_augment, self.hflip, self.seed = augment, probe_augment, hflip, seed
        self.imbalance_ratio, self.imbalance_type, self.step_classes = imbalance_ratio, imbalance_type, step_classes
        self.eval_batch_size = eval_batch_size or batch_size

    def _load(self):  # -> (train_x, train_y), (test_x, test_y), (mean, std), val (None: val = test)
        raise NotImplementedError

    def setup(self, stage: Optional[str] = None) -> None:
        if getattr(self, "_ready", False):
            return
        (tx, ty), (ex, ey), (mean, std), val = self._load()
        self.num_classes = int(max(ty.max(), ey.max())) + 1
        if self.imbalance_ratio is not None:
            n_max = int(min(np.bincount(ty, minlength=self.num_classes)))
            counts = long_tail_counts(n_max, self.num_classes, self.imbalance_ratio, self.imbalance_type,
                                      self.step_classes)
            keep = long_tail_indices(ty, counts, self.seed)
            tx, ty = tx[torch.from_numpy(keep)], ty[keep]
        self.train_class_counts = np.bincount(ty, minlength=self.num_classes).tolist()
        rank_zero_info(f"[{type(self).__name__}] train class counts {self.train_class_counts}")
        size = tx.shape[-1]
        probe = (None if self.probe_augment is None
                 else build_transforms(self.probe_augment, size, mean, std, self.hflip))
        self.train_set = ViewsDataset(tx, ty, build_transforms(self.augment, size, mean, std, self.hflip),
                                      self.n_views, probe)
        plain = build_transforms("none", size, mean, std)
        self.val_set = ViewsDataset(*(val if val is not None else (ex, ey)), plain)
        self.test_set = ViewsDataset(ex, ey, plain)
        self._ready = True

    def _loader(self, ds, bs: int):
        return DataLoader(ds, batch_size=bs, num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self):
        # drop_last keeps every training batch at full size (class sets of a contrastive batch); the official loaders
        # keep the last partial batch (shuffled anew each epoch, so every image is still drawn in expectation)
        return train_loader(self.train_set, self.batch_size, shuffle=True, num_workers=self.num_workers,
                            drop_last=len(self.train_set) > self.batch_size, persistent_workers=self.num_workers > 0)

    def val_dataloader(self):
        return self._loader(self.val_set, self.eval_batch_size)

    def test_dataloader(self):
        return self._loader(self.test_set, self.eval_batch_size)


class CIFARLTDataModule(LongTailDataModule):
    """CIFAR-10-LT / CIFAR-100-LT from a local torchvision root, or long-tailed digits ("embedded").

    Args:
        dataset: "cifar10" or "cifar100" (ignored by the embedded source, which has 10 digit classes).
        source: "local" reads torchvision's python-pickle CIFAR files under ``root`` (never downloads);
            "embedded" uses scikit-learn's bundled digits, resized to ``image_size`` with 3 channels.
        root: folder holding ``cifar-10-batches-py`` / ``cifar-100-python``.
        imbalance_ratio: IR = n_max / n_min (default 10, the official train_stage1.py / trainval_ce.py default;
            CIFAR-LT papers also use 100); None keeps all data.
        imbalance_type: "exp" (exponential profile) or "step".
        step_classes: tail classes of the step profile (default: the second half).
        n_views: augmented views per training image (2 for SCoRe / SupCon, 1 for CE).
        augment: "supcon" (two-crop recipe), "crop" (its crop + flip without colour), "light" (milder crop) or
            "none".
        probe_augment: transform of the extra view each training item carries for the stage-2 linear probe
            ("crop": the official trainval_stage2.py's); None: no probe view (joint / CE training).
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"root": ("local",)}

    def __init__(self, dataset: Literal["cifar10", "cifar100"] = "cifar10",
                 source: Literal["local", "embedded"] = "local", root: str = "data/cifar",
                 imbalance_ratio: Optional[float] = 10.0, imbalance_type: Literal["exp", "step"] = "exp",
                 step_classes: Optional[list[int]] = None, batch_size: int = 512,
                 eval_batch_size: Optional[int] = None, num_workers: int = 4, n_views: int = 2,
                 augment: Literal["supcon", "crop", "light", "none"] = "supcon", hflip: bool = True,
                 image_size: int = 32, seed: int = 0,
                 probe_augment: Literal["supcon", "crop", "light", "none"] | None = "crop"):
        super().__init__(batch_size, num_workers, n_views, augment, hflip, imbalance_ratio, imbalance_type,
                         step_classes, eval_batch_size, seed, probe_augment)
        if dataset not in CIFAR_STATS:
            raise ZooError(f"unknown dataset {dataset!r}; choose 'cifar10' or 'cifar100'")
        if source not in ("local", "embedded"):
            raise ZooError(f"unknown source {source!r}; choose 'local' or 'embedded'")
        if image_size < 1:
            raise ZooError(f"image_size must be >= 1, got {image_size}")
        refuse_unread_files(self, source, locals())
        self.dataset, self.source, self.root, self.image_size = dataset, source, root, image_size

    def card_metadata(self) -> dict:
        ir = f"imbalance ratio {self.imbalance_ratio:g}" if self.imbalance_ratio else "balanced"
        if self.source == "embedded":
            return {"data_source": f"embedded: scikit-learn's 8x8 digits made long-tailed ({ir}; not CIFAR)"}
        name = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}[self.dataset]
        return {"datasets": [f"uoft-cs/{self.dataset}"],
                "data_source": f"{name}-LT ({ir}) from the torchvision files in {self.root}"}

    def _load(self):
        if self.source == "embedded":
            rank_zero_info("[CIFARLTDataModule] source=embedded: scikit-learn digits, made long-tailed")
            train, test = embedded_digits(self.image_size)
            return train, test, ((0.5,) * 3, (0.5,) * 3), None
        folder = Path(self.root) / _CIFAR_DIRS[self.dataset]
        if not folder.is_dir():
            raise ZooError(
                f"{self.dataset} not found under {self.root!r} (expected {folder}); fetch it once with "
                f"`python -c \"import torchvision; torchvision.datasets."
                f"{'CIFAR10' if self.dataset == 'cifar10' else 'CIFAR100'}('{self.root}', download=True)\"`")
        rank_zero_info(f"[CIFARLTDataModule] source=local: {self.dataset} from {folder} (torchvision's python "
                       "pickles, MD5-checked)")
        from torchvision import datasets

        cls = datasets.CIFAR10 if self.dataset == "cifar10" else datasets.CIFAR100
        self._check_files(cls, folder)
        try:
            tr, te = cls(self.root, train=True, download=False), cls(self.root, train=False, download=False)
        except RuntimeError as e:  # torchvision: "Dataset not found or corrupted" (its text suggests download=True)
            raise ZooError(f"{self.dataset} files under {folder} could not be loaded by torchvision "
                           f"({type(e).__name__}); {self._how_to_get(cls)}") from e

        def arrays(ds):
            return torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous(), np.asarray(ds.targets, np.int64)

        return arrays(tr), arrays(te), CIFAR_STATS[self.dataset], None

    def _how_to_get(self, cls) -> str:
        return (f"get {cls.filename} (md5 {cls.tgz_md5}) from {cls.url} and extract it into {self.root!r}, or fetch "
                f"it once with `python -c \"import torchvision; torchvision.datasets.{cls.__name__}('{self.root}', "
                f"download=True)\"` (this datamodule never downloads)")

    def _check_files(self, cls, folder: Path) -> None:
        """Every file of the release against the MD5 torchvision lists for it; the failures are named."""
        from torchvision.datasets.utils import check_integrity

        files = [*cls.train_list, *cls.test_list, (cls.meta["filename"], cls.meta["md5"])]
        bad = [f"{name} ({'checksum mismatch' if (folder / name).is_file() else 'missing'})"
               for name, md5 in files if not check_integrity(str(folder / name), md5)]
        if bad:
            raise ZooError(f"{self.dataset} files under {folder} fail their MD5 check: {', '.join(bad)}; "
                           f"{self._how_to_get(cls)}")
