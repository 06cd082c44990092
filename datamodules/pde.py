"""PDE operator-learning data for DiffOAS: ``(a, f) -> u`` pairs of Darcy flow, Helmholtz or solute diffusion.

Sources (explicit, logged, never a silent fallback):
* ``generate``: the training set is made on the fly by ``method`` (``diffoas``, ``gmres`` or ``direct``) with
  a seeded generator (``zoo.diffoas.generate``); optionally cached as .npz under ``cache_dir``.
* ``local``: ``train_path`` / ``test_path`` point to dataset files: this project's own (written by
  ``zoo.diffoas.generate.save_dataset`` / ``python -m zoo.diffoas.generate --out FILE ...``; .npz, .h5 or
  .safetensors, with generation metadata) or released ones from other generators: the official DiffOAS Darcy
  scripts' ``darcy_{train,test}_{s}_fGRF.pt`` (a torch dict ``x``/``y``/``f``, read with ``weights_only=True``),
  the FNO benchmark's ``piececonst_*.mat`` (``coeff``/``sol``; MAT v5 or v7.3) and PDEBench's
  ``2D_DarcyFlow_beta*.hdf5`` (``nu``/``tensor``). The layout is detected from the container and its keys and
  logged with the mapping of its fields to (coefficient, source, solution); ``zoo.diffoas.formats`` documents
  each mapping.

The test set is always solver-generated (paper, Sec. 5.1: 100 GMRES samples), whatever the training method; a local
test file made by DiffOAS is rejected (FNO and PDEBench files count as solver-generated, ``method`` =
``external-solver``). Validation is the last ``n_val`` samples of the training data (same method).

Batches are ``(x, y)``: ``x`` (B, C+1, s, s) = coefficient channels and the right-hand side; ``y`` (B, 1, s, s) = u.
(The official scripts store ``x`` = coefficients only, ``f`` beside it; their training code is unreleased. ``f`` is
an input here because it varies per sample: card, deviations.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, TensorDataset

from zoo.diffoas.formats import EXTERNAL_SOLVER
from zoo.diffoas.generate import PDEData, generate, get_problem, load_dataset, save_dataset
from zoo.data import SplitLoaders, reading, refuse_unread_files, train_loader
from zoo.errors import ZooError

SOLVER_METHODS = ("gmres", "direct", EXTERNAL_SOLVER)
TEST_SEED_OFFSET = 1_000_003  # test data come from an independent stream


def to_tensors(data: PDEData) -> TensorDataset:
    x = np.concatenate([data.a, data.f[:, None]], axis=1)
    return TensorDataset(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(data.u[:, None], dtype=torch.float32))


def normalization_stats(ds: TensorDataset) -> dict[str, torch.Tensor]:
    """Per-channel input mean/std and output std of an (a, f) -> u tensor dataset (the model's normaliser).

    Li et al.'s FNO scripts normalise point by point (UnitGaussianNormalizer); per channel is our choice (card)."""
    x, y = ds.tensors
    return {
        "in_mean": x.mean(dim=(0, 2, 3)),
        "in_std": x.std(dim=(0, 2, 3)).clamp_min(1e-8),
        "out_std": y.std().clamp_min(1e-12).reshape(1),
    }


class PDEDataModule(SplitLoaders, L.LightningDataModule):
    """Args:
    problem: ``darcy`` | ``helmholtz`` | ``diffusion`` (paper, Appendix B.2).
    method: how the training data are made: ``diffoas`` (the paper's method), ``gmres`` (the baseline) or
        ``direct`` (sparse LU).
    grid_size: nodes per side s incl. the boundary (paper: 102 / 152 / 252); None = the paper's.
    n_train, n_val, n_test: sample counts (the paper: 1,000 GMRES or 10,000 DiffOAS training samples, 100 test).
        With ``source: local`` the first n_train + n_val samples of the training file are used, and the whole test
        file (n_test is for generated data).
    n_basis: DiffOAS basis solutions (paper: 30 / 50 / 50); None = the paper's.
    action: DiffOAS operator action, ``stencil`` (matrix-free, default) or ``sparse`` (assembled matrix, as the official
        scripts); the same operator, equal to rounding.
    source: ``generate`` or ``local`` (then ``train_path`` and ``test_path`` are required: this project's files or
        the released formats listed above).
    test_solver: solver of the test set (``gmres`` as the paper, or ``direct``).
    rtol: GMRES relative tolerance (paper: 1e-5, SciPy's default).
    cache_dir: if set, generated sets are saved there and reused when their settings match.
    dtype: storage precision of generated sets (computed in float64 either way); float32 halves memory at paper
        scale (10,000 samples on a 252^2 grid are ~20 GB in float64).
    """

    # the file options and the sources that read them (`refuse_unread_files`; cache_dir is a cache, not the data: the
    # configs set it for generate, and a user switching to local keeps it)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"train_path": ("local",), "test_path": ("local",)}

    def __init__(
        self,
        problem: Literal["darcy", "helmholtz", "diffusion"] = "darcy",
        method: Literal["diffoas", "gmres", "direct"] = "diffoas",
        grid_size: Optional[int] = None,
        n_train: int = 1000,
        n_val: int = 20,
        n_test: int = 100,
        n_basis: Optional[int] = None,
        action: Literal["stencil", "sparse"] = "stencil",
        source: Literal["generate", "local"] = "generate",
        train_path: Optional[str] = None,
        test_path: Optional[str] = None,
        test_solver: Literal["gmres", "direct"] = "gmres",
        rtol: float = 1e-5,
        seed: int = 0,
        batch_size: int = 20,
        num_workers: int = 0,
        cache_dir: Optional[str] = None,
        dtype: Literal["float64", "float32"] = "float64",
    ):
        super().__init__()
        self.save_hyperparameters()
        self.problem = get_problem(problem)
        if source not in ("generate", "local"):
            raise ZooError(f"unknown PDE data source {source!r}: choose 'generate' or 'local'")
        refuse_unread_files(self, source, locals())
        if source == "local" and (not train_path or not test_path):
            raise ZooError("source='local' needs train_path and test_path (write them with "
                           "`python -m zoo.diffoas.generate --out FILE ...`)")
        if batch_size < 1:
            raise ZooError(f"batch_size must be >= 1, got {batch_size}")
        if n_train < 1 or n_val < 0 or n_test < 1:
            raise ZooError(f"sample counts must be n_train >= 1, n_val >= 0, n_test >= 1; got {n_train}, {n_val}, {n_test}")
        self.train_data: PDEData | None = None
        self.test_data: PDEData | None = None
        self._sets: dict[str, TensorDataset] = {}

    @property
    def in_channels(self) -> int:
        return len(self.problem.channels) + 1

    # -------------------------------------------------------------------------------------------- building
    def _generate(self, method: str, n: int, seed: int) -> PDEData:
        hp = self.hparams
        kw = dict(seed=seed, rtol=hp.rtol, dtype=hp.dtype)
        if method == "diffoas":
            kw.update(n_basis=hp.n_basis, action=hp.action)
        key = dict(problem=hp.problem, method=method, grid=hp.grid_size, n=n, **kw)
        path = None
        if hp.cache_dir:
            digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
            path = Path(hp.cache_dir) / f"{hp.problem}_{method}_n{n}_{digest}.npz"
            if path.exists():
                rank_zero_info(f"[pde] reusing cached {path}")
                with reading(path, "PDE dataset (a cached file: delete it to regenerate)"):
                    return load_dataset(path)
        # at paper scale this takes minutes to hours (GMRES at 62,500 unknowns): say so before the wait
        rank_zero_info(f"[pde] generating {n} {hp.problem} samples by {method} on a {hp.grid_size}x{hp.grid_size} "
                       f"grid" + (f" (cached in {path} for later runs)" if path is not None else ""))
        data = generate(hp.problem, method, n, hp.grid_size, **kw)
        rank_zero_info(f"[pde] generated {n} {hp.problem} samples by {method} in {data.meta['time_total_s']:.2f} s")
        if path is not None:
            save_dataset(data, path)
        return data

    def _load(self, path: str, role: str) -> PDEData:
        with reading(path, f"PDE dataset ({role} file)"):  # zoo.diffoas.formats names most damage; BadZipFile too
            data = load_dataset(path)
        meta = data.meta  # its metadata, shapes and values are checked by load_dataset
        rank_zero_info(f"[pde] {role} file {path}: format {meta.get('format', 'zoo (save_dataset)')}, "
                       f"fields {meta.get('fields', 'a, f, u as written')}, {len(data)} samples, "
                       f"grid {meta.get('grid_size')}, method {meta.get('method')!r}")
        if meta.get("problem") != self.hparams.problem:
            raise ZooError(f"{role} file {path} holds {meta.get('problem')!r} data, not {self.hparams.problem!r}")
        if self.hparams.grid_size is not None and meta.get("grid_size") != self.hparams.grid_size:
            raise ZooError(f"{role} file {path} has grid {meta.get('grid_size')}, config says {self.hparams.grid_size}")
        return data

    def setup(self, stage: Optional[str] = None) -> None:
        hp = self.hparams
        if self.test_data is None:
            if hp.source == "local":
                self.test_data = self._load(hp.test_path, "test")
                if self.test_data.meta.get("method") not in SOLVER_METHODS:
                    raise ZooError(f"test file {hp.test_path} was made by {self.test_data.meta.get('method')!r}; "
                                   f"the test set must be solver-generated ({', '.join(SOLVER_METHODS)})")
            else:
                self.test_data = self._generate(hp.test_solver, hp.n_test, hp.seed + TEST_SEED_OFFSET)
            rank_zero_info(f"[pde] source={hp.source}: test set {len(self.test_data)} samples "
                           f"({self.test_data.meta.get('method')})")
            self._sets["test"] = to_tensors(self.test_data)
        if stage in ("fit", "validate", None) and self.train_data is None:
            n = hp.n_train + hp.n_val
            if hp.source == "local":
                self.train_data = self._load(hp.train_path, "train")
                if len(self.train_data) < n:
                    raise ZooError(f"train file {hp.train_path} has {len(self.train_data)} samples, "
                                   f"n_train + n_val = {n} requested")
            else:
                self.train_data = self._generate(hp.method, n, hp.seed)
            rank_zero_info(f"[pde] source={hp.source}: training data {hp.n_train} + {hp.n_val} val samples "
                           f"({self.train_data.meta.get('method')}, {self.train_data.meta.get('time_total_s', 0):.2f} s)")
            full = to_tensors(self.train_data)
            x, y = full.tensors
            self._sets["train"] = TensorDataset(x[: hp.n_train], y[: hp.n_train])
            self._sets["val"] = TensorDataset(x[hp.n_train : n], y[hp.n_train : n])

    def run_metrics(self) -> dict[str, float]:
        """What preparing this run's data measured (recorded in summary.json as data/...): generation time of the
        training set (CPU and wall seconds; GMRES's or DiffOAS's, the paper's comparison), its size, and the largest
        relative PDE residual of its pairs."""
        out: dict[str, float] = {}
        if self.train_data is not None:
            meta = self.train_data.meta
            out.update({"data/n_train": float(self.hparams.n_train),
                        "data/gen_wall_s": float(meta.get("time_total_s", float("nan"))),
                        "data/gen_cpu_s": float(meta.get("cpu_total_s", float("nan"))),
                        "data/max_residual": float(self.train_data.residuals()[: self.hparams.n_train].max())})
        return out

    def normalization_stats(self) -> dict[str, torch.Tensor]:
        """Per-channel input mean/std and output std of the training set (used by the model's normaliser)."""
        if "train" not in self._sets:
            self.setup("fit")
        return normalization_stats(self._sets["train"])

    # -------------------------------------------------------------------------------------------- loaders
    def eval_loader(self, split: str) -> DataLoader:
        return DataLoader(self._sets[split], batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "local":
            return {"data_source": f"{hp.problem}: training file {hp.train_path}, test file {hp.test_path}"}
        return {"data_source": f"generated for this run: {hp.problem} on a {hp.grid_size or self.problem.grid_size}^2 "
                               f"grid, training data by {hp.method}, test data by {hp.test_solver} (seed {hp.seed})"}

    def train_dataloader(self):
        return train_loader(self._sets["train"], self.hparams.batch_size, shuffle=True,
                            num_workers=self.hparams.num_workers)
