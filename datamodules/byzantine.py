"""Machine-partitioned data for ByMI: the paper's image features (MNIST, F-MNIST, CIFAR-10 → ResNet18 → PCA-20) and
the Gaussian simulation.

Feature sources (explicit and logged, never a silent fallback):
* ``torchvision``: MNIST / FashionMNIST / CIFAR-10 from a local torchvision ``root`` (``download=False``), embedded by
  an ImageNet ResNet18 (timm weights from the HF cache, penultimate 512-d features), then PCA to ``n_components``
  fitted on the training split. Features are cached as .npz under ``cache_dir``.
* ``rdata``: the official release ``data/<dataset>_resnet18_pca_20.Rdata`` of mywang99/ByMI (R objects ``x_train``
  (N × 20), ``y_train`` (labels 1..10), ``x_test``, ``y_test``, as ``detect_realdata.R`` loads them).
* ``npz``: the same four arrays in a NumPy .npz file (precomputed features).
* ``digits`` (embedded): scikit-learn's 8×8 digits (pixels / 16), PCA to ``n_components``, a stratified test split.
* ``gaussian`` (embedded, `ByzantineDataModule` only): the simulation's location model, x ~ N(0, Σ) with
  Σ_ij = ρ^|i−j|; workers report half-sample means, drawn exactly from N(0, Σ/n_half).

`ByzantineDataModule` (for `zoo.bymi.ByMIExperiment`): fit = the master's own data as one full batch (θ₀ is fitted
on machine 0 alone) and validation on the test split (the official early stopping watches test accuracy); test =
one batch per repeat, a fresh stratified partition of the remaining training samples over the workers
(the master keeps its data). `MachineShardDataModule` (for DDP training): rank r holds machine r's shard.

Against the official ``byz_detect`` (see the card's deviations): there every repeat redraws the whole partition,
the master's share included (and refits θ₀); here the master is drawn once. Its class composition: the official
MNIST branch gives the master exactly n/10 samples of each class and deals the rest of its share to the workers;
here every machine, the master included, gets a class-proportional share (largest remainders). For F-MNIST and
CIFAR-10 (balanced classes, N divisible by the machine count) both give every machine n/10 of each class.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from zoo.backbones import timm_model
from zoo.data import first_non_finite, reading, refuse_unread_files, train_loader
from zoo.errors import ZooError, flat

FeatureSource = Literal["torchvision", "rdata", "npz", "digits"]
Dataset_ = Literal["mnist", "fmnist", "cifar10"]
HUB_IDS = {"mnist": "ylecun/mnist", "fmnist": "zalando-datasets/fashion_mnist", "cifar10": "uoft-cs/cifar10"}
RDATA_FILES = {"mnist": "mnist_resnet18_pca_20.Rdata", "fmnist": "fashion_resnet18_pca_20.Rdata",
               "cifar10": "cifar10_resnet18_pca_20.Rdata"}
ARRAYS = ("x_train", "y_train", "x_test", "y_test")


# ------------------------------------------------------------------------------------------------ features
def _labels(y_train: np.ndarray, y_test: np.ndarray, path: str) -> tuple[np.ndarray, np.ndarray]:
    """Class labels as 0..K−1 (the official R data use 1..10)."""
    classes = np.unique(y_train)
    if not np.isin(y_test, classes).all():
        unknown = sorted(set(np.unique(y_test).tolist()) - set(classes.tolist()))  # .tolist(): 3, not np.int64(3)
        raise ZooError(f"{path}: test labels {unknown} do not occur in y_train")
    return np.searchsorted(classes, y_train).astype(np.int64), np.searchsorted(classes, y_test).astype(np.int64)


def _as_array(obj, name: str, path: str) -> np.ndarray:
    # rdata turns an R factor into a pandas Categorical (levels 1..K), a data frame into pandas, a matrix with
    # dimnames into xarray
    if hasattr(obj, "codes"):
        obj = np.asarray(obj.codes) + 1
    elif hasattr(obj, "to_numpy"):
        obj = obj.to_numpy()
    elif hasattr(obj, "values") and not isinstance(obj, np.ndarray):
        obj = obj.values
    arr = np.asarray(obj)
    # text (an R character vector, a numpy string array) is not an object array: it reached np.isfinite, a TypeError
    if arr.dtype.kind not in "biuf":
        raise ZooError(f"{path}: {name} holds {arr.dtype} values, expected numbers")
    return arr


def _check_arrays(d: dict, path: str) -> tuple[np.ndarray, ...]:
    missing = [k for k in ARRAYS if k not in d]
    if missing:
        raise ZooError(f"{path} lacks {', '.join(missing)} (expected x_train, y_train, x_test, y_test)")
    x_tr, y_tr, x_te, y_te = (_as_array(d[k], k, path) for k in ARRAYS)
    if x_tr.ndim != 2 or x_te.ndim != 2 or x_tr.shape[1] != x_te.shape[1]:
        raise ZooError(f"{path}: x_train {x_tr.shape} and x_test {x_te.shape} must be matrices with the same columns")
    y_tr, y_te = y_tr.reshape(-1), y_te.reshape(-1)
    if len(y_tr) != len(x_tr) or len(y_te) != len(x_te):
        raise ZooError(f"{path}: {len(x_tr)}/{len(x_te)} feature rows but {len(y_tr)}/{len(y_te)} labels")
    for name, a in (("x_train", x_tr), ("x_test", x_te)):
        if found := first_non_finite(a):
            (i, j), n = found
            raise ZooError(f"{path}: {name}[{i}, {j}] is {a[i, j]}, expected a finite feature "
                           f"({n} non-finite entries in {name})")
    for name, y in (("y_train", y_tr), ("y_test", y_te)):
        # a NaN or -1 label became an 11th class (refused later by the model, naming no file) or a test class of its
        # own; the release's labels are 1..10 (R), a .npz's 0..K-1
        bad = np.flatnonzero(~np.isfinite(y) | (y < 0) | (y != np.round(y)))
        if len(bad):
            raise ZooError(f"{path}: {name}[{bad[0]}] is {y[bad[0]]}, expected a class label, a whole number >= 0 "
                           f"({len(bad)} such labels)")
    y_tr, y_te = _labels(y_tr, y_te, path)
    return x_tr.astype(np.float64), y_tr, x_te.astype(np.float64), y_te


def read_rdata(path: str) -> tuple[np.ndarray, ...]:
    """The official ``<dataset>_resnet18_pca_20.Rdata`` (read with the `rdata` package, no R needed)."""
    if not Path(path).is_file():
        raise ZooError(f"{path} not found; it is data/<dataset>_resnet18_pca_20.Rdata of github.com/mywang99/ByMI "
                       "(clone the repository and point data.init_args.path at the file)")
    import rdata

    try:
        objects = rdata.read_rda(path)
    except Exception as e:  # noqa: BLE001 - a parse error of any kind means: not an R data file
        raise ZooError(f"{path} is not a readable R data file ({type(e).__name__}: {e})") from e
    return _check_arrays(objects, path)


def read_npz(path: str) -> tuple[np.ndarray, ...]:
    if not Path(path).is_file():
        raise ZooError(f"{path} not found; write x_train, y_train, x_test, y_test with numpy.savez")
    with reading(path, ".npz of numeric arrays"), np.load(path, allow_pickle=False) as f:
        arrays = dict(f)
    return _check_arrays(arrays, path)


def digits_features(n_components: int, seed: int = 0, test_size: float = 0.2) -> tuple[np.ndarray, ...]:
    """Embedded: scikit-learn digits (pixels/16), stratified test split, PCA fitted on the training part."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(d.data / 16.0, d.target, test_size=test_size, stratify=d.target,
                                              random_state=seed)
    pca = PCA(n_components=n_components, random_state=seed).fit(x_tr)
    return pca.transform(x_tr), y_tr.astype(np.int64), pca.transform(x_te), y_te.astype(np.int64)


def _torchvision_images(dataset: str, root: str, train: bool) -> tuple[torch.Tensor, np.ndarray]:
    import torchvision

    cls = {"mnist": torchvision.datasets.MNIST, "fmnist": torchvision.datasets.FashionMNIST,
           "cifar10": torchvision.datasets.CIFAR10}[dataset]
    how = (f"download it once with `python -c \"import torchvision; torchvision.datasets.{cls.__name__}('{root}', "
           "download=True)\"`")
    folder = Path(root) / ("cifar-10-batches-py" if dataset == "cifar10" else f"{cls.__name__}/raw")
    try:
        ds = cls(root, train=train, download=False)
    except (RuntimeError, OSError, EOFError, ValueError, IndexError, AssertionError) as e:
        if isinstance(e, RuntimeError) and "not found" in str(e):  # torchvision: "Dataset not found [or corrupted]"
            raise ZooError(f"{cls.__name__} not found under {root} ({flat(e)}); {how}") from e
        # torchvision's MNIST parser checks a raw file's header with assert and reshapes its bytes (RuntimeError on
        # a truncated file): a damaged file ends there (CIFAR's pickles are MD5-checked first: "not found" above)
        raise ZooError(f"{cls.__name__} files in {folder} are damaged ({type(e).__name__}: {flat(e)}); "
                       f"{how}") from e
    data = torch.as_tensor(np.asarray(ds.data))
    images = data.unsqueeze(1) if data.dim() == 3 else data.permute(0, 3, 1, 2)  # (N, C, H, W) uint8
    return images, np.asarray(ds.targets, dtype=np.int64)


def resnet18_features(images: torch.Tensor, weights: Optional[str], image_size: int, batch_size: int) -> np.ndarray:
    """Penultimate (512-d, global-average-pooled) ResNet18 features of uint8 images (N, C, H, W).

    ``weights``: a timm name such as ``resnet18.tv_in1k`` (torchvision's ImageNet weights on the Hub), loaded from
    the HF cache; None = random initialisation (tests only). Grey images are repeated to 3 channels, resized to
    ``image_size`` and normalised with the weights' mean/std."""
    name = weights or "resnet18"
    net = timm_model(name, weights is not None, fallback="use source=rdata/npz", num_classes=0)
    cfg = net.pretrained_cfg
    mean = torch.tensor(cfg.get("mean", (0.485, 0.456, 0.406))).view(1, 3, 1, 1)
    std = torch.tensor(cfg.get("std", (0.229, 0.224, 0.225))).view(1, 3, 1, 1)
    net.eval()
    out = []
    with torch.no_grad():
        for chunk in images.split(batch_size):
            x = chunk.float() / 255.0
            if x.shape[1] == 1:
                x = x.expand(-1, 3, -1, -1)
            x = torch.nn.functional.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True,
                                                align_corners=False)
            out.append(net((x - mean) / std).double().numpy())
    return np.concatenate(out)


def torchvision_features(dataset: str, root: str, n_components: int, weights: Optional[str], image_size: int,
                         batch_size: int, cache_dir: Optional[str], seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.decomposition import PCA

    key = dict(dataset=dataset, weights=weights, image_size=image_size)
    cache = None
    if cache_dir:
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        cache = Path(cache_dir) / f"{dataset}_resnet18_{digest}.npz"
    if cache is not None and cache.exists():
        rank_zero_info(f"[byzantine] reusing cached ResNet18 features {cache}")
        with reading(cache, "feature cache (delete it to recompute)", (KeyError,)), \
                np.load(cache, allow_pickle=False) as f:
            f_tr, y_tr, f_te, y_te = (f[k] for k in ARRAYS)
    else:
        (im_tr, y_tr), (im_te, y_te) = (_torchvision_images(dataset, root, t) for t in (True, False))
        rank_zero_info(f"[byzantine] embedding {len(im_tr) + len(im_te)} {dataset} images with ResNet18 "
                       f"({weights or 'random init'}) at {image_size}px")
        f_tr, f_te = (resnet18_features(im, weights, image_size, batch_size) for im in (im_tr, im_te))
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, x_train=f_tr, y_train=y_tr, x_test=f_te, y_test=y_te)
    pca = PCA(n_components=n_components, random_state=seed).fit(f_tr)
    return pca.transform(f_tr), y_tr, pca.transform(f_te), y_te


def load_features(source: str, dataset: str, root: Optional[str], path: Optional[str], n_components: int,
                  weights: Optional[str], image_size: int, batch_size: int, cache_dir: Optional[str],
                  seed: int) -> tuple[np.ndarray, ...]:
    if source == "digits":
        out = digits_features(n_components, seed)
    elif source == "torchvision":
        if not root:
            raise ZooError("source='torchvision' needs data.init_args.root (a local torchvision dataset folder)")
        out = torchvision_features(dataset, root, n_components, weights, image_size, batch_size, cache_dir, seed)
    elif source in ("rdata", "npz"):
        if not path:
            raise ZooError(f"source={source!r} needs data.init_args.path"
                           + (f" (official file: data/{RDATA_FILES[dataset]})" if source == "rdata" else ""))
        out = read_rdata(path) if source == "rdata" else read_npz(path)
    else:
        raise ZooError(f"unknown feature source {source!r}; choose torchvision, rdata, npz, digits (or gaussian)")
    return out


def data_source_line(source: str, dataset: str, path: Optional[str], n_components: int) -> str:
    return {"torchvision": f"{dataset} (torchvision) → ResNet18 features → PCA-{n_components}",
            "rdata": f"features in the official ByMI .Rdata layout from {path}",
            "npz": f"precomputed features {path}",  # one's own file: the card names it by its path
            "digits": f"embedded: scikit-learn digits → PCA-{n_components}",
            "gaussian": "embedded: seeded Gaussian location model (simulation)"}[source]


# ------------------------------------------------------------------------------------------------ partitions
def stratified_partition(y: np.ndarray, pool: np.ndarray, machines: int, n: int, rng: np.random.Generator
                         ) -> np.ndarray:
    """``machines × n`` indices from ``pool`` such that every machine gets n samples and each class is spread as
    evenly as possible (the official driver splits every class evenly over the machines): a class-proportional
    subsample (largest remainders), shuffled within each class, dealt round-robin. Returns (machines, n)."""
    need = machines * n
    if need > len(pool):
        raise ZooError(f"{machines} machines x {n} samples = {need} exceed the {len(pool)} available samples")
    classes, counts = np.unique(y[pool], return_counts=True)
    quota = counts * need / len(pool)
    take = np.floor(quota).astype(int)
    take[np.argsort(-(quota - take), kind="stable")[: need - take.sum()]] += 1
    chosen = [rng.permutation(pool[y[pool] == c])[:k] for c, k in zip(classes, take)]
    ordered = np.concatenate(chosen)
    return ordered.reshape(n, machines).T.copy()


class _Repeats(Dataset):
    def __init__(self, n: int, make):
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.make(i)


def _one_batch(item: dict, train: bool = False) -> DataLoader:
    # the training loader is stateful, so that a resumed fit knows where it stood (see zoo.data.train_loader)
    data = _Repeats(1, lambda i: item)
    return train_loader(data, None, shuffle=False) if train else DataLoader(data, batch_size=None)


def ar1_cholesky(dim: int, rho: float) -> torch.Tensor:
    idx = torch.arange(dim, dtype=torch.float64)
    return torch.linalg.cholesky(rho ** (idx[:, None] - idx[None, :]).abs())


# ------------------------------------------------------------------------------------------------ experiment
class ByzantineDataModule(L.LightningDataModule):
    """Data for `ByMIExperiment`: machines (master = machine 0) with ``n_per_machine`` samples each.

    Args:
        source: ``torchvision``, ``rdata``, ``npz``, ``digits`` (embedded) or ``gaussian`` (embedded simulation).
        dataset: ``mnist``, ``fmnist`` or ``cifar10`` (torchvision / rdata).
        root: torchvision dataset folder. path: the .Rdata / .npz file.
        machines: m + 1, the master included (paper: 150 MNIST/F-MNIST, 125 CIFAR-10; simulation 201).
        n_per_machine: n (paper: 400; simulation: halves of 200).
        n_components: PCA dimension (paper: 20). n_repeats: test repeats (official rep_times = 10).
        weights, image_size, feature_batch_size, cache_dir: the ResNet18 embedding (torchvision source).
        dim, rho, n_master, repeats_per_batch: the Gaussian simulation (p, AR(1) correlation, the master's sample
            size (default n_per_machine), repeats drawn per test batch).
        seed: partitions and draws.
    """

    # the file options and the sources that read them (`refuse_unread_files`; cache_dir is a cache, not the data)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"root": ("torchvision",), "path": ("rdata", "npz")}

    def __init__(
        self,
        source: Literal["torchvision", "rdata", "npz", "digits", "gaussian"] = "digits",
        dataset: Dataset_ = "mnist",
        root: Optional[str] = None,
        path: Optional[str] = None,
        machines: int = 150,
        n_per_machine: int = 400,
        n_components: int = 20,
        n_repeats: int = 10,
        weights: Optional[str] = "resnet18.tv_in1k",
        image_size: int = 224,
        feature_batch_size: int = 256,
        cache_dir: Optional[str] = None,
        dim: int = 20,
        rho: float = 0.0,
        n_master: Optional[int] = None,
        repeats_per_batch: int = 500,
        seed: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        refuse_unread_files(self, source, locals())
        if machines < 2 or n_per_machine < 2 or n_repeats < 1 or repeats_per_batch < 1:
            raise ZooError(f"need machines >= 2, n_per_machine >= 2, n_repeats >= 1, repeats_per_batch >= 1; got "
                           f"{machines}, {n_per_machine}, {n_repeats}, {repeats_per_batch}")
        if n_per_machine % 2:
            raise ZooError(f"n_per_machine={n_per_machine} must be even (two equal halves per machine)")
        if not -1 < rho < 1:
            raise ZooError(f"rho must lie in (-1, 1), got {rho}")
        self.model_kind = "location" if source == "gaussian" else "logistic"
        self.n_features = dim if source == "gaussian" else n_components
        self.n_classes = 10
        self._arrays: Optional[tuple[np.ndarray, ...]] = None
        self._master: Optional[np.ndarray] = None

    def setup(self, stage: Optional[str] = None) -> None:
        hp = self.hparams
        if self._arrays is not None or self._master is not None:
            return
        rank_zero_info(f"[byzantine] source={hp.source}: {data_source_line(hp.source, hp.dataset, hp.path, hp.n_components)}")
        if hp.source == "gaussian":
            self._setup_gaussian()
            return
        x_tr, y_tr, x_te, y_te = load_features(hp.source, hp.dataset, hp.root, hp.path, hp.n_components, hp.weights,
                                               hp.image_size, hp.feature_batch_size, hp.cache_dir, hp.seed)
        if x_tr.shape[1] != hp.n_components:
            raise ZooError(f"the features have {x_tr.shape[1]} columns but n_components={hp.n_components}")
        self.n_classes = int(y_tr.max()) + 1
        self._arrays = (x_tr, y_tr, x_te, y_te)
        rng = np.random.default_rng(hp.seed)
        self._master = stratified_partition(y_tr, np.arange(len(y_tr)), hp.machines, hp.n_per_machine, rng)[0]
        self._pool = np.setdiff1d(np.arange(len(y_tr)), self._master)
        rank_zero_info(f"[byzantine] {len(y_tr)} training / {len(y_te)} test samples, {self.n_classes} classes; "
                       f"{hp.machines} machines x {hp.n_per_machine}")

    # --- gaussian simulation
    def _setup_gaussian(self) -> None:
        hp = self.hparams
        gen = torch.Generator().manual_seed(hp.seed)
        self._chol = ar1_cholesky(hp.dim, hp.rho)
        n0 = hp.n_master or hp.n_per_machine
        self._master = torch.randn(n0, hp.dim, generator=gen, dtype=torch.float64) @ self._chol.T
        self._val = torch.randn(n0, hp.dim, generator=gen, dtype=torch.float64) @ self._chol.T

    def _gaussian_block(self, i: int) -> dict:
        hp = self.hparams
        R = min(hp.repeats_per_batch, hp.n_repeats - i * hp.repeats_per_batch)
        gen = torch.Generator().manual_seed(hp.seed * 1_000_003 + 7919 * (i + 1))
        n_half, m = hp.n_per_machine // 2, hp.machines - 1
        draw = lambda: torch.randn(R, m, hp.dim, generator=gen, dtype=torch.float64) @ self._chol.T / n_half ** 0.5
        return {"xbar1": draw(), "xbar2": draw(), "x0": self._master, "n_half": n_half,
                "mu": torch.zeros(hp.dim, dtype=torch.float64)}

    # --- feature partitions
    def _partition(self, i: int) -> dict:
        hp = self.hparams
        x_tr, y_tr = self._arrays[0], self._arrays[1]
        rng = np.random.default_rng([hp.seed, i + 1])
        workers = stratified_partition(y_tr, self._pool, hp.machines - 1, hp.n_per_machine, rng)
        idx = np.concatenate([self._master[None], workers])
        return {"x": torch.from_numpy(x_tr[idx]), "y": torch.from_numpy(y_tr[idx])}

    def train_dataloader(self) -> DataLoader:
        if self.hparams.source == "gaussian":
            return _one_batch({"x": self._master}, train=True)
        x_tr, y_tr = self._arrays[0], self._arrays[1]
        return _one_batch({"x": torch.from_numpy(x_tr[self._master]), "y": torch.from_numpy(y_tr[self._master])},
                          train=True)

    def val_dataloader(self) -> DataLoader:
        if self.hparams.source == "gaussian":
            return _one_batch({"x": self._val})
        return _one_batch({"x": torch.from_numpy(self._arrays[2]), "y": torch.from_numpy(self._arrays[3])})

    def test_dataloader(self) -> DataLoader:
        hp = self.hparams
        if hp.source == "gaussian":
            blocks = -(-hp.n_repeats // hp.repeats_per_batch)
            return DataLoader(_Repeats(blocks, self._gaussian_block), batch_size=None)
        return DataLoader(_Repeats(hp.n_repeats, self._partition), batch_size=None)

    def card_metadata(self) -> dict:
        return feature_card_metadata(self.hparams, data_source_line(self.hparams.source, self.hparams.dataset,
                                                                    self.hparams.path, self.hparams.n_components),
                                     self._arrays)


def is_official_rdata(path: Optional[str], dataset: str, arrays: Optional[tuple[np.ndarray, ...]]) -> bool:
    """Whether an .Rdata file read is recognisably the release: its official name and ResNet18 → PCA-20 features
    of 10 classes (the layout alone fits any file written the same way)."""
    return (arrays is not None and Path(path or "").name == RDATA_FILES.get(dataset) and arrays[0].shape[1] == 20
            and len(np.unique(arrays[1])) == 10)


def feature_card_metadata(hp, data_source: str, arrays: Optional[tuple[np.ndarray, ...]]) -> dict:
    """A run card's provenance: the released dataset's Hub id where the run read it, and the ResNet18 that embedded
    the images (the classifier is trained on its features) as the base model."""
    meta = {"data_source": data_source}
    if hp.source == "torchvision" or (hp.source == "rdata" and is_official_rdata(hp.path, hp.dataset, arrays)):
        meta["datasets"] = [HUB_IDS[hp.dataset]]
    if hp.source == "torchvision" and hp.weights:
        meta["base_model"] = f"timm/{hp.weights}"
    return meta


# ------------------------------------------------------------------------------------------------ DDP shards
class MachineShardDataModule(L.LightningDataModule):
    """Feature data for DDP training where every rank is one machine: rank r (or ``machine``) trains on machine r's
    shard of a stratified partition into ``machines`` shards; validation and test use the test split.

    Args:
        source, dataset, root, path, n_components, weights, image_size, cache_dir: as `ByzantineDataModule`.
        machines: number of shards (≥ world size). n_per_machine: samples per shard.
        machine: the shard this process trains on (default: its global rank).
        batch_size: per-rank batch (default: the whole shard, full-batch gradient descent). seed: partition.
    """

    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = ByzantineDataModule.FILE_OPTIONS

    def __init__(
        self,
        source: FeatureSource = "digits",
        dataset: Dataset_ = "mnist",
        root: Optional[str] = None,
        path: Optional[str] = None,
        machines: int = 2,
        n_per_machine: int = 100,
        n_components: int = 20,
        machine: Optional[int] = None,
        batch_size: Optional[int] = None,
        weights: Optional[str] = "resnet18.tv_in1k",
        image_size: int = 224,
        cache_dir: Optional[str] = None,
        seed: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        refuse_unread_files(self, source, locals())
        if machines < 1 or n_per_machine < 1 or (batch_size is not None and batch_size < 1):
            raise ZooError(f"need machines >= 1, n_per_machine >= 1, batch_size >= 1; got {machines}, "
                           f"{n_per_machine}, {batch_size}")
        if machine is not None and not 0 <= machine < machines:
            raise ZooError(f"machine={machine} is outside the {machines} shards")
        self.n_features = n_components
        self.shards: Optional[np.ndarray] = None

    def setup(self, stage: Optional[str] = None) -> None:
        hp = self.hparams
        if self.shards is not None:
            return
        world = self.trainer.world_size if self._trainer_attached() else 1
        if world > hp.machines:
            raise ZooError(f"{world} ranks but only machines={hp.machines} shards; every rank needs its own machine")
        rank_zero_info(f"[byzantine] source={hp.source}: {data_source_line(hp.source, hp.dataset, hp.path, hp.n_components)}")
        x_tr, y_tr, x_te, y_te = load_features(hp.source, hp.dataset, hp.root, hp.path, hp.n_components, hp.weights,
                                               hp.image_size, 256, hp.cache_dir, hp.seed)
        self.arrays = (x_tr, y_tr, x_te, y_te)
        self.shards = stratified_partition(y_tr, np.arange(len(y_tr)), hp.machines, hp.n_per_machine,
                                           np.random.default_rng(hp.seed))

    def _trainer_attached(self) -> bool:
        return getattr(self, "trainer", None) is not None

    @property
    def machine(self) -> int:
        if self.hparams.machine is not None:
            return self.hparams.machine
        return self.trainer.global_rank if self._trainer_attached() else 0

    def shard(self, machine: int) -> TensorDataset:
        x_tr, y_tr = self.arrays[0], self.arrays[1]
        idx = self.shards[machine]
        return TensorDataset(torch.from_numpy(x_tr[idx]).float(), torch.from_numpy(y_tr[idx]))

    def train_dataloader(self) -> DataLoader:
        ds = self.shard(self.machine)
        # A one-replica DistributedSampler over this rank's own shard: Lightning leaves a DistributedSampler in
        # place (it would otherwise split the shard again across ranks) and still calls set_epoch to reshuffle.
        sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=self.hparams.seed)
        return train_loader(ds, self.hparams.batch_size or len(ds), sampler=sampler)

    def _test_split(self) -> DataLoader:
        x_te, y_te = self.arrays[2], self.arrays[3]
        return DataLoader(TensorDataset(torch.from_numpy(x_te).float(), torch.from_numpy(y_te)), batch_size=512)

    def val_dataloader(self) -> DataLoader:
        return self._test_split()

    def test_dataloader(self) -> DataLoader:
        return self._test_split()

    def card_metadata(self) -> dict:
        hp = self.hparams
        return feature_card_metadata(hp, f"{data_source_line(hp.source, hp.dataset, hp.path, hp.n_components)}, "
                                         f"{hp.machines} shards x {hp.n_per_machine}", getattr(self, "arrays", None))
