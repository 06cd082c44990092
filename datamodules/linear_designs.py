"""Problem instances for minimum-norm interpolation: designs X (n × d), responses y = Xw* + ξ, ground truth w*.

Sources (explicit, logged, never a silent fallback):
* ``generate`` (the paper's setting, which is synthetic): a seeded generator of designs with i.i.d. isotropic
  rows — entries i.i.d. of a unit-variance sub-Gaussian law named by ``law`` (``gaussian``, ``rademacher``,
  ``uniform`` on [−√3, √3]) — a ground truth ``w_star`` (``e1``; ``sparse``: the first ``sparsity`` coordinates
  equal to 1/√s; ``dense``: every coordinate 1/√d; ‖w*‖₂ = 1 in all three) and ``n_noise`` draws of
  ξ ~ N(0, σ²I) per design. Instance i is drawn from its own stream (seed, i): the same instance whatever the
  batch size, worker count or number of instances.
* ``local``: the user's own problems from an ``.npz`` (``numpy.savez``) with keys
    ``X``       (n, d) one design, or (B, n, d) B designs;
    ``y``       one response per design — (n,) / (B, n) — or K responses per design — (K, n) / (B, K, n);
    ``w_star``  optional, (d,) shared or (B, d); without it only ‖ŵ‖_p and supports can be reported.

Batches are lists of instance dicts ``{"index", "X" (n, d), "y" (K, n), "w_star" (d,) or None, "law", "sigma"}``,
float64, the schema `zoo.minnorm.MinNormExperiment` reads.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from zoo.data import first_non_finite, refuse_unread_files
from zoo.errors import ZooError

LAWS = ("gaussian", "rademacher", "uniform")
GROUND_TRUTHS = ("e1", "sparse", "dense")


def sample_design(law: str, n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """n × d design with i.i.d. entries of mean 0 and variance 1 (isotropic rows), float64."""
    if law == "gaussian":
        return rng.standard_normal((n, d))
    if law == "rademacher":
        return rng.choice(np.array([-1.0, 1.0]), size=(n, d))
    if law == "uniform":
        return rng.uniform(-math.sqrt(3.0), math.sqrt(3.0), size=(n, d))
    raise ZooError(f"unknown design law {law!r}: choose one of {', '.join(LAWS)}")


def ground_truth(kind: str, d: int, sparsity: int = 1) -> np.ndarray:
    """w* with ‖w*‖₂ = 1: e₁, s-sparse (first s coordinates 1/√s) or dense (all 1/√d)."""
    w = np.zeros(d)
    if kind == "e1":
        w[0] = 1.0
    elif kind == "sparse":
        if not 1 <= sparsity <= d:
            raise ZooError(f"sparsity must be in [1, d={d}], got {sparsity}")
        w[:sparsity] = 1.0 / math.sqrt(sparsity)
    elif kind == "dense":
        w[:] = 1.0 / math.sqrt(d)
    else:
        raise ZooError(f"unknown w_star {kind!r}: choose one of {', '.join(GROUND_TRUTHS)}")
    return w


class GeneratedDesigns(Dataset):
    def __init__(self, law: str, n: int, d: int, sigma: float, w_star: np.ndarray, n_instances: int, n_noise: int,
                 seed: int):
        self.law, self.n, self.d, self.sigma, self.w_star = law, n, d, sigma, w_star
        self.n_instances, self.n_noise, self.seed = n_instances, n_noise, seed

    def __len__(self) -> int:
        return self.n_instances

    def __getitem__(self, i: int) -> dict[str, Any]:
        rng = np.random.default_rng([self.seed, i])
        X = sample_design(self.law, self.n, self.d, rng)
        noise = self.sigma * rng.standard_normal((self.n_noise, self.n))
        y = X @ self.w_star + noise
        return {"index": i, "X": torch.from_numpy(X), "y": torch.from_numpy(y),
                "w_star": torch.from_numpy(self.w_star.copy()), "law": self.law, "sigma": self.sigma}


def load_npz(path: str | Path) -> list[dict[str, Any]]:
    """Instances from a user's .npz (schema in the module docstring), validated with one-line errors."""
    path = Path(path)
    if not path.exists():
        raise ZooError(f"{path} not found: write your problems with numpy.savez({path.name!r}, X=X, y=y[, w_star=w])")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: np.asarray(f[k]) for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # EOFError: empty; BadZipFile: truncated
        raise ZooError(f"{path} is not a readable .npz of numeric arrays ({e})") from e
    for key in ("X", "y"):
        if key not in arrays:
            raise ZooError(f"{path} has no {key!r} array (keys: {sorted(arrays)}); expected X, y and optionally w_star")
    X, y = arrays["X"], arrays["y"]
    for key, a in arrays.items():
        if not np.issubdtype(a.dtype, np.number):
            raise ZooError(f"{path}: {key!r} has dtype {a.dtype}, expected numbers")
    if X.ndim == 2:
        X, y = X[None], y[None]
    if X.ndim != 3:
        raise ZooError(f"{path}: X has shape {X.shape}, expected (n, d) or (B, n, d)")
    B, n, d = X.shape
    if not B or not n or not d:  # an empty design list would otherwise fail later on dataset[0], a traceback
        raise ZooError(f"{path}: X has shape {arrays['X'].shape}, expected at least one design of n >= 1 rows, d >= 1")
    if y.ndim == 2:
        y = y[:, None, :]
    # y of shape (0, n) is K = 0 responses: it fit the shapes and ended in an IndexError at test time
    if y.ndim != 3 or y.shape[0] != B or y.shape[-1] != n or not y.shape[1]:
        raise ZooError(f"{path}: y has shape {arrays['y'].shape}, which does not fit X of shape {arrays['X'].shape} "
                       "(one response (n,) or K >= 1 responses (K, n) per design)")
    w = arrays.get("w_star")
    if w is not None:
        w = np.broadcast_to(w, (B, d)) if w.shape in ((d,), (B, d)) else None
        if w is None:
            raise ZooError(f"{path}: w_star has shape {arrays['w_star'].shape}, expected ({d},) or ({B}, {d})")
    for key in ("X", "y", "w_star"):
        # a NaN reached the solver, which refused "y has 4 non-finite entries" (w*'s NaN had become y's) naming no file
        if key in arrays and (found := first_non_finite(arrays[key])):
            at, n = found
            raise ZooError(f"{path}: {key}{list(at)} is {arrays[key][at]}, expected a finite number "
                           f"({n} non-finite entries in {key})")
    if n >= d:
        raise ZooError(f"{path}: X has shape {arrays['X'].shape}: n={n} rows and d={d} columns per design, but "
                       "minimum-norm interpolation needs n < d (more unknowns than equations)")
    return [{"index": b, "X": torch.from_numpy(X[b].astype(np.float64)), "y": torch.from_numpy(y[b].astype(np.float64)),
             "w_star": None if w is None else torch.from_numpy(np.array(w[b], dtype=np.float64)),
             "law": "local", "sigma": math.nan} for b in range(B)]


def collate_instances(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(batch)


class LinearDesignsDataModule(L.LightningDataModule):
    """Problem instances for `zoo test` (evaluation only: there is nothing to train).

    Args:
        source: ``generate`` (seeded synthetic designs, the paper's setting) or ``local`` (``path`` to an .npz).
        law: entry law of generated designs: ``gaussian``, ``rademacher`` or ``uniform`` (all unit variance).
        n, d: samples and dimension (need n < d).
        sigma: noise level σ of ξ ~ N(0, σ²I).
        w_star: ``e1``, ``sparse`` (``sparsity`` nonzeros) or ``dense``; ‖w*‖₂ = 1.
        n_instances: designs (Monte-Carlo repetitions over X).
        n_noise: noise draws per design (≥ 2 so that Var(ŵ | X) can be estimated).
        seed: generator seed (instance i uses the stream (seed, i)).
        path: the .npz for ``source: local``.
        batch_size: instances per test batch.
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("local",)}

    def __init__(self, source: Literal["generate", "local"] = "generate",
                 law: Literal["gaussian", "rademacher", "uniform"] = "gaussian", n: int = 200, d: int = 2000,
                 sigma: float = 0.5, w_star: Literal["e1", "sparse", "dense"] = "e1", sparsity: int = 5,
                 n_instances: int = 20, n_noise: int = 4, seed: int = 0, path: Optional[str] = None,
                 batch_size: int = 1, num_workers: int = 0):
        super().__init__()
        self.save_hyperparameters()
        if source not in ("generate", "local"):
            raise ZooError(f"unknown linear-design source {source!r}: choose 'generate' or 'local'")
        refuse_unread_files(self, source, locals())
        if source == "local" and not path:
            raise ZooError("source='local' needs data.path: an .npz with X, y (and optionally w_star)")
        if source == "generate":
            if law not in LAWS:
                raise ZooError(f"unknown design law {law!r}: choose one of {', '.join(LAWS)}")
            if not 1 <= n < d:
                raise ZooError(f"need 1 <= n < d for interpolation, got n={n}, d={d}")
            if not (math.isfinite(sigma) and sigma >= 0):
                raise ZooError(f"sigma must be finite and >= 0, got {sigma}")
            if n_instances < 1 or n_noise < 1:
                raise ZooError(f"need n_instances >= 1 and n_noise >= 1, got {n_instances}, {n_noise}")
            ground_truth(w_star, d, sparsity)  # validates w_star / sparsity now, not at test time
        if batch_size < 1:
            raise ZooError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset: Dataset | list | None = None

    def data_source(self) -> str:
        hp = self.hparams
        if hp.source == "local":
            return f"local: {hp.path}"
        truth = f"{hp.sparsity}-sparse" if hp.w_star == "sparse" else hp.w_star
        return (f"embedded: seeded {hp.law} designs, n={hp.n}, d={hp.d}, w*={truth}, sigma={hp.sigma:g}, "
                f"{hp.n_instances} designs x {hp.n_noise} noise draws, seed {hp.seed}")

    def setup(self, stage: Optional[str] = None) -> None:
        if self.dataset is not None:
            return
        hp = self.hparams
        if hp.source == "local":
            self.dataset = load_npz(hp.path)
            inst = self.dataset[0]
            rank_zero_info(f"[linear_designs] source=local ({hp.path}, .npz): {len(self.dataset)} designs, "
                           f"n={inst['X'].shape[0]}, d={inst['X'].shape[1]}, {inst['y'].shape[0]} responses each, "
                           f"w_star {'given' if inst['w_star'] is not None else 'absent'}")
        else:
            w = ground_truth(hp.w_star, hp.d, hp.sparsity)
            self.dataset = GeneratedDesigns(hp.law, hp.n, hp.d, hp.sigma, w, hp.n_instances, hp.n_noise, hp.seed)
            rank_zero_info(f"[linear_designs] source=generate: {self.data_source()}")

    def _loader(self) -> DataLoader:
        if self.dataset is None:
            self.setup("test")
        return DataLoader(self.dataset, batch_size=self.hparams.batch_size, shuffle=False,
                          num_workers=self.hparams.num_workers, collate_fn=collate_instances)

    def test_dataloader(self) -> DataLoader:
        return self._loader()

    def predict_dataloader(self) -> DataLoader:
        return self._loader()

    def card_metadata(self) -> dict:
        return {"data_source": self.data_source()}
