"""MedMNIST (OrganAMNIST, DermaMNIST, ...) from the dataset's own ``.npz`` files, for SCoRe.

A MedMNIST v2/v3 file ``<flag>.npz`` (or ``<flag>_<size>.npz``) holds train/val/test splits under the
keys ``{split}_images`` (uint8 [N, H, W] grey or [N, H, W, 3] RGB, e.g. DermaMNIST, BloodMNIST, PathMNIST) and
``{split}_labels`` (int [N, 1]); images become [N, C, H, W] tensors and ``num_channels`` (1 or 3) is exposed for
the model's channel check. The data are used as shipped (already imbalanced) unless ``imbalance_ratio`` asks for a
synthetic long tail.
The embedded source writes scikit-learn's digits into exactly that layout.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import ClassVar, Literal, Optional

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info

from datamodules.cifar_lt import LongTailDataModule, embedded_digits
from zoo.data import refuse_unread_files
from zoo.errors import ZooError

SPLITS = ("train", "val", "test")
KEYS = tuple(f"{s}_{k}" for s in SPLITS for k in ("images", "labels"))


def embedded_medmnist(size: int = 28, val_per_class: int = 10) -> dict[str, np.ndarray]:
    """Digits as a MedMNIST-format dict (grey 28 x 28, labels [N, 1])."""
    (tx, ty), (ex, ey) = embedded_digits(size, channels=1)
    val = np.concatenate([np.flatnonzero(ty == c)[:val_per_class] for c in range(10)])
    train = np.setdiff1d(np.arange(len(ty)), val)
    out = {}
    for split, (x, y) in {"train": (tx[train], ty[train]), "val": (tx[val], ty[val]), "test": (ex, ey)}.items():
        out[f"{split}_images"] = x[:, 0].numpy()
        out[f"{split}_labels"] = y.reshape(-1, 1).astype(np.uint8)
    return out


def read_medmnist(path: Path) -> dict[str, np.ndarray]:
    """Load and validate a MedMNIST .npz; ZooError naming the problem otherwise."""
    if not path.is_file():
        flag = path.stem.split("_")[0]
        raise ZooError(
            f"MedMNIST file {str(path)!r} not found; download it once with `pip install medmnist && python -c "
            f"\"import medmnist as m; getattr(m, m.INFO['{flag}']['python_class'])(split='train', download=True, "
            f"root='{path.parent}')\"` or from https://zenodo.org/records/10519652")
    try:
        with np.load(path) as f:
            missing = [k for k in KEYS if k not in f.files]
            if missing:
                raise ZooError(f"MedMNIST file {str(path)!r} lacks keys {missing} (has {sorted(f.files)})")
            data = {k: f[k] for k in KEYS}
    except ZooError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # ZooError is a ValueError: re-raised above
        raise ZooError(f"cannot read MedMNIST file {str(path)!r}: {e}") from e
    for s in SPLITS:
        x, y = data[f"{s}_images"], data[f"{s}_labels"]
        if x.ndim not in (3, 4) or len(x) != len(y):
            raise ZooError(f"{path.name}: {s}_images {x.shape} and {s}_labels {y.shape} are not a MedMNIST split")
        if y.ndim == 2 and y.shape[1] != 1:
            raise ZooError(f"{path.name} is multi-label ({s}_labels {y.shape}); SCoRe needs single-label classes")
        # the transforms scale by the dtype's range: int64 pixels (numpy's default) became all black, float 0..255
        # ones 255x too bright, both silently; channels-first [N, 3, H, W] became W channels
        if x.dtype != np.uint8 or (x.ndim == 4 and x.shape[-1] not in (1, 3)):
            raise ZooError(f"{path.name}: {s}_images is {x.dtype} {x.shape}; MedMNIST images are uint8 [N, H, W] "
                           "(grey) or [N, H, W, 3] (RGB)")
        # the message's minimum is taken of integer labels only: of text labels it raised numpy's UFuncNoLoopError
        if not np.issubdtype(y.dtype, np.integer):
            raise ZooError(f"{path.name}: {s}_labels must be integer classes 0..K-1, got {y.dtype} values")
        negative = np.flatnonzero(y.reshape(-1) < 0)
        if negative.size:
            raise ZooError(f"{path.name}: {s}_labels must be integer classes 0..K-1, got {y.reshape(-1)[negative[0]]} "
                           f"in row {negative[0]} ({negative.size} negative labels)")
    return data


class MedMNISTDataModule(LongTailDataModule):
    """MedMNIST classification splits (train / val / test) with SCoRe's two-view training batches.

    Args:
        flag: MedMNIST dataset name, e.g. "organamnist", "dermamnist" (file ``<flag>.npz``).
        source: "local" reads ``<root>/<flag>.npz`` (or ``root`` itself when it is a file);
            "embedded" uses scikit-learn digits in the MedMNIST layout.
        root: folder holding the .npz files (MedMNIST's default is ~/.medmnist).
        size: image size of the file (28 -> ``<flag>.npz``, else ``<flag>_<size>.npz``).
        imbalance_ratio: None keeps MedMNIST's own imbalance; a number re-samples an exponential tail.
        as_rgb: repeat grey images to 3 channels, as the official code loads MedMNIST (``as_rgb=True``) for its
            3-channel ResNet; ``num_channels`` is then 3.
        augment, probe_augment, hflip, n_views: as for `CIFARLTDataModule` (the official OrganAMNIST recipe is
            "crop" with flips for stage 1 and the probe).
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"root": ("local",)}

    def __init__(self, flag: str = "organamnist", source: Literal["local", "embedded"] = "local",
                 root: str = "data/medmnist", size: int = 28, imbalance_ratio: Optional[float] = None,
                 imbalance_type: Literal["exp", "step"] = "exp", step_classes: Optional[list[int]] = None,
                 batch_size: int = 512, eval_batch_size: Optional[int] = None, num_workers: int = 4,
                 n_views: int = 2, augment: Literal["supcon", "crop", "light", "none"] = "supcon",
                 hflip: bool = True, seed: int = 0,
                 probe_augment: Literal["supcon", "crop", "light", "none"] | None = "crop", as_rgb: bool = False):
        super().__init__(batch_size, num_workers, n_views, augment, hflip, imbalance_ratio, imbalance_type,
                         step_classes, eval_batch_size, seed, probe_augment)
        if source not in ("local", "embedded"):
            raise ZooError(f"unknown source {source!r}; choose 'local' or 'embedded'")
        refuse_unread_files(self, source, locals())
        if batch_size < 1 or (eval_batch_size is not None and eval_batch_size < 1):
            raise ZooError(f"batch_size and eval_batch_size must be >= 1, got {batch_size}, {eval_batch_size}")
        self.flag, self.source, self.root, self.size, self.as_rgb = flag, source, root, size, as_rgb

    @property
    def path(self) -> Path:
        root = Path(self.root)
        if root.suffix == ".npz":
            return root
        return root / (f"{self.flag}.npz" if self.size == 28 else f"{self.flag}_{self.size}.npz")

    def card_metadata(self) -> dict:
        ir = f"imbalance ratio {self.imbalance_ratio:g}" if self.imbalance_ratio else "as released"
        if self.source == "embedded":
            return {"data_source": f"embedded: scikit-learn's digits standing in for MedMNIST ({ir}; not MedMNIST)"}
        # a root that is the .npz itself is any file in the format (the flag did not pick it), and its images' size is
        # what was read: the card said "organamnist ... 28x28" of a user's own 64x64 file
        what = "a file" if Path(self.root).suffix == ".npz" else self.flag
        h, w = getattr(self, "image_size", (self.size, self.size))
        return {"data_source": f"{what} in the MedMNIST .npz format ({h}x{w}, {ir}) from {self.path}"}

    def _load(self):
        if self.source == "embedded":
            rank_zero_info("[MedMNISTDataModule] source=embedded: scikit-learn digits in MedMNIST format")
            data = embedded_medmnist()
        else:
            rank_zero_info(f"[MedMNISTDataModule] source=local: {self.path}")
            data = read_medmnist(self.path)

        def split(s):
            x = torch.from_numpy(np.ascontiguousarray(data[f"{s}_images"]))
            x = x.unsqueeze(1) if x.dim() == 3 else x.permute(0, 3, 1, 2)
            if self.as_rgb and x.shape[1] == 1:  # medmnist's as_rgb: PIL convert("RGB") of a grey image
                x = x.expand(-1, 3, -1, -1)
            return x.contiguous(), data[f"{s}_labels"].reshape(-1).astype(np.int64)

        train, val, test = split("train"), split("val"), split("test")
        c = train[0].shape[1]
        self.num_channels = c  # checked against the model's in_chans (SCoReModule.setup)
        self.image_size = tuple(train[0].shape[2:])
        rank_zero_info(f"[MedMNISTDataModule] {self.flag}: {'RGB' if c == 3 else 'grey'} images "
                       f"{'(grey repeated to RGB) ' if self.as_rgb and data['train_images'].ndim == 3 else ''}"
                       f"{tuple(train[0].shape[2:])}, splits {len(train[1])}/{len(val[1])}/{len(test[1])}")
        return train, test, ((0.5,) * c, (0.5,) * c), val
