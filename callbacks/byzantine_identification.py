"""ByMI under DDP: every rank is a machine, a trusted rank plays the master, flagged ranks can be excluded.

`ByzantineIdentification` works with any LightningModule trained with a DDP strategy. Every ``every_n_steps``
optimizer steps:

1. each rank splits its local batch in two halves D1, D2 (stratified by the labels at ``label_index`` when asked)
   and needs ``g1, g2`` = the gradients of the module's loss on each half at the current parameters, optionally
   restricted to ``parameters`` (name globs) and/or compressed by a seeded random projection that every rank draws
   identically. Two ways, the same numbers:
   * **one pass** (``reuse_step_gradient=True``, where it is exact, see below): the training step's own backward
     computes this rank's local full-batch gradient g. On a check step the callback runs that step under DDP's
     ``no_sync()`` (entered in ``on_train_batch_start``, left in ``on_after_backward``), so ``.grad`` keeps the
     local g; one extra half-batch ``torch.autograd.grad`` gives g1, and for a loss that is the mean over the
     batch's B = n1 + n2 samples ``g2 = (B·g − n1·g1)/n2`` exactly. After the identification (in
     ``on_after_backward``, still before the optimizer step and gradient clipping) the callback averages the
     local gradients itself: the mean over all ranks or, with ``exclude``, over the unflagged ones, from every
     rank's local gradient in the check's one gather: rebuilt as g_r = (n1·g1_r + n2·g2_r)/B when the halves are
     the whole unprojected gradient, else carried in the gathered row (up to `GATHER_LOCAL_BYTES`, else a flat
     all-reduce). Cost: one half-batch forward/backward per check, and nothing on the other steps (DDP's own
     all-reduce runs there).
   * **two passes** (otherwise): ``torch.autograd.grad`` on each half, on the unwrapped module at the start of the
     step (DDP's reducer never sees these backward passes). Cost: about one full forward/backward per check.
   The identity needs the check's gradient to be the gradient of exactly this batch's mean loss, so the one-pass
   path is used only when it holds by construction: a DDP strategy, automatic optimization, no gradient
   accumulation, full precision (32/64-true: no loss scaling), no module that couples or randomises samples in
   training mode (dropout, batch norm), and ``training_loss`` (or ``training_step``) returning the loss that is
   backpropagated. What the callback cannot see (a sum-reduced or contrastive loss, functional dropout) is caught
   at the first check, which computes g2 both ways: if they differ (relative difference > `ONE_PASS_RTOL` on any
   rank), that check uses the direct g2 and every later check takes the two-pass path, with a warning.
2. ``trainer.strategy.all_gather`` collects (g1, g2) with each rank's half size in one tensor; the trusted rank
   also sends Σ₀, the covariance of its per-sample gradients (needed by the spectral filter), by broadcast;
3. every rank runs the same `zoo.bymi.bymi` (same inputs, same result): W per worker rank, the knockoff+ threshold
   and the flagged ranks. Rank 0 sends them straight to the trainer's loggers (``byzantine/W/rank<r>``,
   ``byzantine/threshold``, ``byzantine/n_flagged`` at the global step; ``LightningModule.log``'s result
   collection was the largest single item of a check's CPU profile) and appends the check's rows (step, rank, W,
   flagged, threshold) to ``<run dir>/byzantine/checks.csv``, a file kept open for the run and flushed after every
   check (so a crash right after a check still leaves its rows).
4. With ``action="exclude"`` the gradient is averaged over the unflagged ranks only (a flagged rank weighted 0, the
   others 1/#unflagged) from that step until the next check: with one pass, those steps also run under
   ``no_sync`` and the callback all-reduces after the backward (DDP's built-in all-reduce runs on the others);
   with two passes (where gradient accumulation may apply), by a DDP communication hook on every step.

The loss is the module's ``training_loss(batch)`` if it has one, otherwise its ``training_step(batch, idx)`` with
logging switched off for that call. Knockoff+ rejects only sets of at least ⌈1/α⌉ scores, so a world size with
fewer workers is an error; ``offset=0`` lifts this at the price of controlling only the modified FDR
E[V/(R + 1/α)] instead of the FDR. The master-only estimator is biased when the master's batch is no larger than
a worker's: its own sampling error enters every W as +‖μ̂ − μ‖²_Ω (the card quantifies this).

`ByzantineAttack` turns chosen ranks Byzantine, for demonstrations and tests: ``ood`` and ``label_flip`` corrupt
the rank's batch in place (both its training gradient and what it reports), ``grad`` and ``ipm`` replace the
split-half gradients the rank reports to the identification (its training gradient stays honest). It must come
before `ByzantineIdentification` in the callback list.
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import math
from pathlib import Path
from typing import Any, Literal, Optional

import lightning.pytorch as L
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from safetensors.torch import save_file

from zoo.bymi.attacks import ipm, ood_features, random_gradient
from zoo.bymi.identify import Estimator, bymi, check_finite
from zoo.bymi.models import covariance
from zoo.bymi.threshold import min_rejection_size
from zoo.errors import ZooError

PROJECTION_CHUNK = 1 << 20  # parameter entries per block of the random projection drawn at a time
PROJECTION_CACHE_BYTES = 256 << 20  # a projection matrix up to this size is drawn once and kept
# a one-pass check gathers every rank's local gradient with its split halves (one collective instead of a gather and
# an all-reduce) while the gathered (world, params) float64 block stays under this size; above it, a flat all-reduce
GATHER_LOCAL_BYTES = 64 << 20
EXTRA = 3  # entries after g1 | g2 in a check's gather row: this rank's n1, n2 and its one-pass test's outcome
CHECKS_CSV = "checks.csv"  # every check's rows (step, rank, W, flagged, threshold) in the run dir's byzantine/
ONE_PASS_RTOL = 1e-4  # first-check test of g2 = (B·g − n1·g1)/n2 against the direct g2 (float32 rounding: ~1e-6)
# training-mode modules under which a half's gradient is not the same function as in the full batch
COUPLING_MODULES = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
                    torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout, torch.nn.BatchNorm1d, torch.nn.BatchNorm2d,
                    torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm, torch.nn.LazyBatchNorm1d, torch.nn.LazyBatchNorm2d,
                    torch.nn.LazyBatchNorm3d)


# ------------------------------------------------------------------------------------------------ batches
def split_batch(batch: Any, generator: torch.Generator, stratify: bool = True, label_index: int | str = 1
                ) -> tuple[Any, Any]:
    """Two halves of a tuple/list/dict batch of tensors sharing dim 0; stratified by the integer labels at
    ``label_index`` (each class's samples shuffled and halved, odd extras alternating between the halves)."""
    if isinstance(batch, dict):
        tensors = batch
    elif isinstance(batch, (tuple, list)):
        tensors = dict(enumerate(batch))
    else:
        raise ZooError(f"cannot split a batch of type {type(batch).__name__}; use tuples, lists or dicts of tensors")
    n = len(next(iter(tensors.values())))
    if n < 2:
        raise ZooError(f"a batch of {n} sample cannot be split in two halves")
    # the split's random keys from the check's own generator; the index arithmetic in numpy (a dozen tiny ops: ~5 µs
    # each there against ~20-40 µs as torch ops, most of a check's former 0.6-0.9 ms split)
    keys = torch.rand(n, generator=generator, dtype=torch.float64).numpy()
    if stratify:
        if label_index not in tensors:
            raise ZooError(f"stratify=True but the batch has no element {label_index!r} with labels")
        y = tensors[label_index].reshape(-1).long().cpu().numpy()
        order = np.argsort(y * 2 + keys)  # by class, random within class (keys in [0, 1): no ties across classes)
        sorted_y = y[order]
        first = np.empty(n, dtype=bool)  # the first position of each class in the sorted order
        first[0] = True
        np.not_equal(sorted_y[1:], sorted_y[:-1], out=first[1:])
        start = np.flatnonzero(first)
        counts = np.empty_like(start)  # np.diff(start, append=n), without its broadcasting layer
        np.subtract(start[1:], start[:-1], out=counts[:-1])
        counts[-1] = n - start[-1]
        if (counts == 1).any():
            c = int(sorted_y[start[counts == 1][0]])
            raise ZooError(f"the batch has a single sample of class {c}, so a stratified half split would leave it "
                           "out of one half; use larger batches or stratify=False")
        cls = np.cumsum(first) - 1  # each sorted position's class index
        odd = counts % 2
        extra = ((np.cumsum(odd) - odd) % 2) * odd  # odd classes' extra sample alternates: D1, D2, D1, ...
        second = (np.arange(n) - start[cls]) < (counts // 2 + extra)[cls]
        idx2, idx1 = np.sort(order[second]), np.sort(order[~second])
    else:
        order = np.argsort(keys)
        idx1, idx2 = np.sort(order[n // 2:]), np.sort(order[: n // 2])
    idx1, idx2 = torch.from_numpy(idx1), torch.from_numpy(idx2)

    def take(idx):
        out = {k: v.index_select(0, idx if v.device.type == "cpu" else idx.to(v.device)) for k, v in tensors.items()}
        if isinstance(batch, dict):
            return out
        return type(batch)(out[i] for i in range(len(batch)))

    return take(idx1), take(idx2)


def module_loss(pl_module: L.LightningModule, batch: Any) -> torch.Tensor:
    """The module's scalar training loss on ``batch``: ``training_loss`` if defined, else ``training_step`` with
    ``self.log`` silenced for this call (so the extra forward passes never reach the loggers)."""
    if callable(getattr(pl_module, "training_loss", None)):
        out = pl_module.training_loss(batch)
    else:
        log = pl_module.log
        pl_module.log = lambda *a, **k: None
        try:
            out = pl_module.training_step(batch, 0)
        finally:
            pl_module.log = log
    if isinstance(out, dict):
        out = out.get("loss")
    if not isinstance(out, torch.Tensor) or out.numel() != 1:
        raise ZooError("ByzantineIdentification needs a scalar loss from training_loss/training_step")
    return out.reshape(())


class _LossOf(torch.nn.Module):
    """The module's loss as a forward pass, so that `torch.func.functional_call` can swap its parameters."""

    def __init__(self, module: L.LightningModule):
        super().__init__()
        self.module = module

    def forward(self, batch: Any) -> torch.Tensor:
        return module_loss(self.module, batch)


def check_same_selection(digests: torch.Tensor, names: list[str]) -> None:
    """Every rank's digest of (parameter names, shapes, projection) must be the same, or the gathered gradient rows
    would not line up coordinate by coordinate."""
    differ = (digests != digests[0]).nonzero().flatten().tolist()
    if differ:
        raise ZooError(f"ranks {differ} inspect other parameters than rank 0 ({len(names)} tensors here: "
                       f"{', '.join(names[:3])}, ...); ByzantineIdentification needs the same selection on every rank")


# ------------------------------------------------------------------------------------------------ callbacks
class ByzantineAttack(Callback):
    def __init__(self, ranks: list[int], attack: Literal["ood", "label_flip", "grad", "ipm"] = "ood",
                 n_classes: Optional[int] = None, feature_index: int | str = 0, label_index: int | str = 1,
                 ood_s: float = 0.7, ood_b: float = 1.0, ood_s2: float = 0.2, grad_sig: float = 0.7,
                 grad_b1: float = 0.8, ipm_c: float = 0.2, seed: int = 0):
        """
        Args:
            ranks: the Byzantine global ranks (never the trusted rank of the identification).
            attack: ``ood`` (features ← s·x + b·v + s2·ξ, one v for all attacked ranks), ``label_flip``
                (y ← K−1−y, needs n_classes), ``grad`` (random gradients) or ``ipm`` (−c × the normal mean).
            feature_index, label_index: where features and labels sit in a batch (tuple index or dict key).
            ood_s, ood_b, ood_s2, grad_sig, grad_b1, ipm_c: strengths (the paper's defaults).
            seed: the attack's own random stream (v, noise), independent of training.
        """
        super().__init__()
        if attack not in ("ood", "label_flip", "grad", "ipm"):
            raise ZooError(f"unknown attack {attack!r}; choose ood, label_flip, grad or ipm")
        if attack == "label_flip" and not n_classes:
            raise ZooError("label_flip needs n_classes")
        self.ranks, self.attack, self.n_classes = sorted(set(ranks)), attack, n_classes
        self.feature_index, self.label_index = feature_index, label_index
        self.ood = (ood_s, ood_b, ood_s2)
        self.grad = (grad_sig, grad_b1)
        self.ipm_c, self.seed = ipm_c, seed

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        bad = [r for r in self.ranks if not 0 <= r < trainer.world_size]
        if bad:
            raise ZooError(f"ByzantineAttack ranks {bad} do not exist in a world of {trainer.world_size}")

    def corrupt_batch(self, batch: Any, rank: int, step: int) -> None:
        """The data attacks, in place on this rank's batch (a no-op on normal ranks and for gradient attacks)."""
        if rank not in self.ranks or self.attack not in ("ood", "label_flip"):
            return
        if self.attack == "label_flip":
            y = batch[self.label_index]
            y.copy_(self.n_classes - 1 - y)
            return
        x = batch[self.feature_index]
        v = torch.randn(x.shape[-1], generator=torch.Generator().manual_seed(self.seed), dtype=torch.float64)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + 7919 * (step + 1) + rank)
        s, b, s2 = self.ood
        x.copy_(ood_features(x.detach().double().cpu(), v, gen, s, b, s2).to(x))

    def corrupt_reports(self, g1: torch.Tensor, g2: torch.Tensor, n_local: int, trusted: int, step: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """The gradient attacks on the gathered reports (world, d), identical on every rank."""
        if self.attack not in ("grad", "ipm"):
            return g1, g2
        byz = torch.zeros(g1.shape[0], dtype=torch.bool)
        byz[self.ranks] = True
        g = (g1 + g2) / 2
        if self.attack == "grad":
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
            g1, g2, _ = random_gradient(g1, g2, g, byz, n_local, gen, *self.grad)
        else:
            g1, g2, _ = ipm(g1, g2, g, byz, master=trusted, c_gamma=self.ipm_c)
        return g1, g2

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.corrupt_batch(batch, trainer.global_rank, trainer.global_step)


class ByzantineIdentification(Callback):
    def __init__(
        self,
        every_n_steps: int = 10,
        alpha: float = 0.1,
        estimator: Estimator = "filter",
        eps: float = 0.1,
        const_f: float = 1.2,
        trusted_rank: int = 0,
        offset: int = 1,
        parameters: Optional[list[str]] = None,
        projection_dim: Optional[int] = None,
        projection_seed: int = 0,
        action: Literal["log", "exclude"] = "log",
        stratify: bool = True,
        label_index: int | str = 1,
        sigma0_samples: int = 256,
        split_seed: int = 0,
        save_tensors: bool = False,
        max_dim: int = 4096,
        log_dir: Optional[str] = None,
        reuse_step_gradient: bool = True,
    ):
        """
        Args:
            every_n_steps: check at optimizer steps 0, N, 2N, ...
            alpha: target FDR. offset: 1 = knockoff+ (FDR), 0 = modified FDR (allows tiny worlds).
            estimator: μ̂ of ByMI: ``filter`` (Σ₀ from the trusted rank), ``geom``, ``master`` (the trusted rank's
                gradient) or ``filter_plus``. eps, const_f: assumed Byzantine share, ε' = const_f·ε.
            trusted_rank: the master; it is never flagged.
            parameters: glob patterns of parameter names to inspect (default: all trainable).
            projection_dim: compress gradients to this many coordinates with a Gaussian random projection
                (seed ``projection_seed``, the same matrix on every rank).
            action: ``log`` only, or ``exclude`` flagged ranks from the gradient average until the next check.
            stratify, label_index: split the batch stratified by the integer labels at this index/key.
            sigma0_samples: per-sample gradients of the trusted rank used for Σ₀ (filter only).
            split_seed: seed of the half splits (a stream per rank and step, independent of training).
            save_tensors: also save each check's gathered g1, g2 and W as ``byzantine/step_<N>.safetensors``.
            max_dim: largest gradient dimension accepted (Σ₀ and the spectral filter are dim × dim).
            log_dir: where ``byzantine/`` goes (default: the trainer's root dir, the zoo run dir).
            reuse_step_gradient: derive g2 from the training step's own local gradient where that is exact (one
                half-batch pass per check instead of two; see the module docstring); False: always two passes.
        """
        super().__init__()
        if every_n_steps < 1:
            raise ZooError(f"every_n_steps must be >= 1, got {every_n_steps}")
        if action not in ("log", "exclude"):
            raise ZooError(f"action must be 'log' or 'exclude', got {action!r}")
        if projection_dim is not None and projection_dim < 1:
            raise ZooError(f"projection_dim must be >= 1, got {projection_dim}")
        min_rejection_size(alpha, offset)  # validates alpha and offset
        if offset not in (0, 1):
            raise ZooError(f"offset must be 0 or 1, got {offset}")
        self.every_n_steps, self.alpha, self.estimator = every_n_steps, alpha, estimator
        self.eps, self.const_f, self.trusted_rank, self.offset = eps, const_f, trusted_rank, offset
        self.parameters, self.projection_dim, self.projection_seed = parameters, projection_dim, projection_seed
        self.action, self.stratify, self.label_index = action, stratify, label_index
        self.sigma0_samples, self.split_seed, self.save_tensors = sigma0_samples, split_seed, save_tensors
        self.max_dim, self.log_dir, self.reuse_step_gradient = max_dim, log_dir, reuse_step_gradient
        self.flagged: list[int] = []
        self.history: list[dict] = []
        self._weight = 1.0  # this rank's factor in the gradient average (1/world, or the masked mean's)
        self._last_step = -1
        self._names: list[str] = []
        self._params: list[torch.nn.Parameter] = []
        self._matrix: Optional[torch.Tensor] = None  # the cached projection (see _project)
        self.one_pass = False  # decided at fit start (see `one_pass_blocker`)
        self._verified = False  # the first one-pass check also computes g2 directly
        self._sync_off: Any = None  # DDP's no_sync() context, entered for a one-pass check step
        self._pending: Optional[tuple[Any, int]] = None  # (batch, step) of a one-pass check awaiting backward
        self._out_dir: Optional[Path] = None  # the CSV directory, once created
        self._csv_file: Any = None  # byzantine/checks.csv, open from the first check to teardown
        self._csv: Any = None
        self._sizes = (0, 0)  # the last split's half sizes (n1, n2)
        self._whole_model = False  # the selection is every trainable parameter, in order (see on_after_backward)
        self._dim = 0  # the identification's dimension (projection_dim or the selected parameters' size)
        self._row_buf: Optional[torch.Tensor] = None  # the check's gather row, kept between checks
        self._gather_buf: Optional[torch.Tensor] = None  # (world, row) receive buffer, kept between checks

    # -------------------------------------------------------------------------------------- set-up checks
    def _selected(self, pl_module: L.LightningModule) -> list[tuple[str, torch.nn.Parameter]]:
        params = [(n, p) for n, p in pl_module.named_parameters() if p.requires_grad]
        if self.parameters:
            params = [(n, p) for n, p in params if any(fnmatch.fnmatch(n, pat) for pat in self.parameters)]
        if not params:
            raise ZooError(f"ByzantineIdentification selects no trainable parameter (patterns {self.parameters})")
        return params

    def one_pass_blocker(self, trainer: L.Trainer, pl_module: L.LightningModule) -> Optional[str]:
        """Why g2 cannot be derived from the step's gradient in this run (None: it can)."""
        if not self.reuse_step_gradient:
            return "reuse_step_gradient=False"
        if not hasattr(trainer.strategy.model, "no_sync"):
            return "not a DDP strategy"
        if not pl_module.automatic_optimization:
            return "manual optimization"
        if trainer.accumulate_grad_batches != 1:
            return f"gradient accumulation over {trainer.accumulate_grad_batches} batches"
        if str(trainer.precision) not in ("32-true", "64-true", "32", "64"):
            return f"precision {trainer.precision} (scaled or low-precision gradients)"
        coupling = [n for n, m in pl_module.named_modules()
                    if isinstance(m, COUPLING_MODULES) and getattr(m, "p", 1) != 0]  # dropout with p = 0 is the identity
        if coupling:
            return f"training-mode dropout / batch norm in {', '.join(coupling[:3])}"
        return None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        world = trainer.world_size
        need = min_rejection_size(self.alpha, self.offset)
        if world < 2 or world - 1 < need:
            raise ZooError(
                f"ByzantineIdentification: world size {world} leaves {world - 1} worker(s), but knockoff+ at "
                f"alpha={self.alpha} can only flag sets of >= {need} workers; use more ranks, a larger alpha, or "
                "offset=0 (which controls only the modified FDR)")
        if not 0 <= self.trusted_rank < world:
            raise ZooError(f"trusted_rank={self.trusted_rank} is outside the world of {world} ranks")
        attacks = [i for i, c in enumerate(trainer.callbacks) if isinstance(c, ByzantineAttack)]
        me = trainer.callbacks.index(self)
        if any(i > me for i in attacks):
            raise ZooError("put ByzantineAttack before ByzantineIdentification in trainer.callbacks")
        if any(self.trusted_rank in trainer.callbacks[i].ranks for i in attacks):
            raise ZooError(f"the trusted rank {self.trusted_rank} cannot be attacked")
        params = self._selected(pl_module)
        self._names, self._params = [n for n, _ in params], [p for _, p in params]
        trainable = [p for p in pl_module.parameters() if p.requires_grad]
        self._whole_model = (len(trainable) == len(self._params)
                             and all(a is b for a, b in zip(trainable, self._params)))
        dim = self._dim = self.projection_dim or sum(p.numel() for _, p in params)
        if dim > self.max_dim:
            raise ZooError(f"the identification would work on {dim}-dimensional gradients (> max_dim={self.max_dim}); "
                           "set projection_dim or restrict `parameters`")
        # every rank must inspect the same coordinates, or the gathered rows would not line up
        signature = ";".join(f"{n}:{tuple(p.shape)}" for n, p in params) + f"|{self.projection_dim}"
        digest = torch.tensor([int(hashlib.sha1(signature.encode()).hexdigest()[:15], 16)], device=pl_module.device)
        check_same_selection(trainer.strategy.all_gather(digest).reshape(-1), self._names)
        self._weight = 1.0 / world
        if self.action == "exclude" and not hasattr(trainer.strategy.model, "register_comm_hook"):
            raise ZooError("action='exclude' needs a DDP strategy (strategy: ddp)")
        blocker = self.one_pass_blocker(trainer, pl_module)
        self.one_pass = blocker is None
        if self.action == "exclude" and not self.one_pass:
            # with one pass, masked steps run under no_sync and are averaged by hand (no accumulation there), so
            # the other steps keep DDP's built-in all-reduce; a Python hook would cost every step
            trainer.strategy.model.register_comm_hook(self, _masked_mean_hook)
        rank_zero_info("ByzantineIdentification: split-half gradients by "
                       + ("one extra half-batch pass per check (g2 from the step's local gradient)" if self.one_pass
                          else f"two half-batch passes per check ({blocker})"))

    # -------------------------------------------------------------------------------------- gradients
    def _project(self, flat: torch.Tensor) -> torch.Tensor:
        """(k, D) → (k, projection_dim) by a Gaussian matrix with N(0, 1/dim) entries from a seeded generator: the
        same on every rank and every check. Kept after its first use when it fits in PROJECTION_CACHE_BYTES (drawing
        it is most of a check's cost: 15,882 × 256 normals take ~0.2 s here); otherwise redrawn block by block at
        every call and never held whole."""
        if self.projection_dim is None:
            return flat
        k, D = self.projection_dim, flat.shape[1]
        if self._matrix is not None and self._matrix.shape[0] == D:
            return (flat.cpu() @ self._matrix).to(flat.device)
        gen = torch.Generator().manual_seed(self.projection_seed)
        keep = D * k * 8 <= PROJECTION_CACHE_BYTES
        out, blocks = torch.zeros(flat.shape[0], k, dtype=torch.float64), []
        for chunk in flat.cpu().split(PROJECTION_CHUNK, dim=1):
            block = torch.randn(chunk.shape[1], k, generator=gen, dtype=torch.float64) / math.sqrt(k)
            out += chunk @ block
            if keep:
                blocks.append(block)
        if keep:
            self._matrix = torch.cat(blocks)
        return out.to(flat.device)

    def split_generator(self, step: int, rank: int) -> torch.Generator:
        """The half split's own random stream at a check: one per step and rank, independent of training."""
        return torch.Generator().manual_seed(self.split_seed * 1_000_003 + 7919 * (step + 1) + rank)

    def _half_gradient(self, pl_module: L.LightningModule, half: Any, out: Optional[torch.Tensor] = None
                       ) -> torch.Tensor:
        """The flat float64 gradient of the module's loss on ``half`` (written into ``out`` when given)."""
        params = self._params or [p for _, p in self._selected(pl_module)]
        grads = torch.autograd.grad(module_loss(pl_module, half), params, allow_unused=True, materialize_grads=True)
        flat = [g.reshape(-1) for g in grads]
        return torch.cat(flat).double() if out is None else torch.cat(flat, out=out)  # cat casts into out's dtype

    def split_gradients(self, pl_module: L.LightningModule, batch: Any, generator: torch.Generator
                        ) -> tuple[torch.Tensor, torch.Tensor, int, Any]:
        """(g1, g2, n_half, first half) of this rank's batch at the current parameters, by two passes."""
        b1, b2 = split_batch(batch, generator, self.stratify, self.label_index)
        self._sizes = _batch_len(b1), _batch_len(b2)
        out = self._project(torch.stack([self._half_gradient(pl_module, b) for b in (b1, b2)]))  # one projection
        check_finite(f"rank {pl_module.global_rank}'s split-half gradients", out)
        return out[0], out[1], min(self._sizes), b1

    def split_gradients_from_step(self, pl_module: L.LightningModule, batch: Any, generator: torch.Generator,
                                  verify: bool = False, out: Optional[torch.Tensor] = None
                                  ) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
        """(g1, g2, n_half, mismatch) by one pass: g1 by autograd on D1, g2 = (B·g − n1·g1)/n2 from the local
        gradient g of the step's mean loss over B = n1 + n2 samples (this rank's unreduced ``.grad``). With
        ``verify``, g2 is also computed directly; mismatch = they differ, and then the direct g2 is returned.
        ``out`` (2, dim) float64: written in place (the check's gather row), g1 and g2 are its rows."""
        b1, b2 = split_batch(batch, generator, self.stratify, self.label_index)
        n1, n2 = self._sizes = _batch_len(b1), _batch_len(b2)
        D = sum(p.numel() for p in self._params)
        direct_rows = self.projection_dim is None and out is not None
        pair = out if direct_rows else torch.empty(2, D, dtype=torch.float64, device=self._params[0].device)
        g1, g2 = pair[0], pair[1]
        torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self._params],
                  out=g2)  # the local g, in float64
        self._half_gradient(pl_module, b1, out=g1)
        g2.mul_(n1 + n2).sub_(g1 * n1).div_(n2)  # ((n1 + n2)·g − n1·g1)/n2, op for op (the same rounding)
        mismatch = False
        if verify:
            direct = self._half_gradient(pl_module, b2)
            mismatch = bool((g2 - direct).norm() > ONE_PASS_RTOL * direct.norm() + 1e-30)
            if mismatch:
                g2.copy_(direct)
        if not direct_rows:
            pair = self._project(pair)
            if out is not None:
                out.copy_(pair)
                pair = out
        check_finite(f"rank {pl_module.global_rank}'s split-half gradients", pair)
        return pair[0], pair[1], min(n1, n2), mismatch

    def per_sample_gradients(self, pl_module: L.LightningModule, batch: Any) -> torch.Tensor:
        """The trusted rank's per-sample gradients (n, dim) for Σ₀: a vmap over samples when the module allows it,
        else one backward pass per sample."""
        params = self._selected(pl_module)
        tensors = batch if isinstance(batch, dict) else dict(enumerate(batch))
        n = min(len(next(iter(tensors.values()))), self.sigma0_samples)
        names = [name for name, _ in params]
        values = {f"module.{name}": p.detach() for name, p in params}
        wrapper = _LossOf(pl_module)

        def one(sample_params, *sample):
            item = dict(zip(tensors.keys(), (s.unsqueeze(0) for s in sample)))
            item = item if isinstance(batch, dict) else type(batch)(item[i] for i in range(len(batch)))
            return torch.func.functional_call(wrapper, sample_params, (item,))

        try:
            grads = torch.func.vmap(torch.func.grad(one), in_dims=(None, *([0] * len(tensors))))(
                values, *(t[:n] for t in tensors.values()))
            rows = torch.cat([grads[f"module.{name}"].reshape(n, -1) for name in names], dim=1).double()
        except Exception:  # noqa: BLE001 - modules that vmap cannot trace (in-place ops, data-dependent flow)
            rows = []
            for i in range(n):
                item = {k: v[i: i + 1] for k, v in tensors.items()}
                item = item if isinstance(batch, dict) else type(batch)(item[j] for j in range(len(batch)))
                loss = module_loss(pl_module, item)
                g = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True, materialize_grads=True)
                rows.append(torch.cat([x.reshape(-1) for x in g]).double())
            rows = torch.stack(rows)
        return self._project(rows)

    # -------------------------------------------------------------------------------------- the check
    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every_n_steps or step == self._last_step:
            if self.one_pass and self.action == "exclude" and self.flagged:  # the unflagged mean, by hand
                self._skip_sync(trainer)
            return
        self._last_step = step
        if self.one_pass:  # finished in on_after_backward, from this step's own local gradient
            self._pending = (batch, step)
            self._skip_sync(trainer)
            return
        g1, g2, _, _ = self.split_gradients(pl_module, batch, self.split_generator(step, trainer.global_rank))
        d = g1.shape[0]
        row = self._row(2 * d + EXTRA, g1.device)
        torch.cat([g1, g2], out=row[: 2 * d])
        self._identify(trainer, pl_module, batch, row, d, False, step, from_step=False)

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._pending is None:
            if self._sync_off is not None:  # an excluding step between checks
                self._restore_sync()
                self._average_kept_gradient(pl_module)
            return
        (batch, step), self._pending = self._pending, None
        self._restore_sync()
        verify = not self._verified
        grads = self._local_grads(pl_module)
        n_local = sum(g.numel() for g in grads)
        # every rank's local gradient g_r = (n1·g1_r + n2·g2_r)/B is in its gathered halves when they are the whole
        # unprojected gradient (then nothing else is sent); otherwise it rides in the row up to GATHER_LOCAL_BYTES
        rebuild = self.projection_dim is None and self._whole_model and len(grads) == len(self._params)
        carry = not rebuild and bool(grads) and trainer.world_size * n_local * 8 <= GATHER_LOCAL_BYTES
        d = self._dim
        # one preallocated float64 row per check, filled in place: [g1 | g2 | n1, n2, mismatch | local gradient]
        row = self._row(2 * d + EXTRA + (n_local if carry else 0), self._params[0].device)
        _, _, _, mismatch = self.split_gradients_from_step(
            pl_module, batch, self.split_generator(step, trainer.global_rank), verify=verify,
            out=row[: 2 * d].view(2, d))
        if carry:
            torch.cat([g.reshape(-1) for g in grads], out=row[2 * d + EXTRA:])
        averaged = self._identify(trainer, pl_module, batch, row, d, mismatch, step, from_step=True,
                                  local=grads if rebuild or carry else None, carried=carry)
        if not averaged:  # too large to gather, or g2 was not derived from g at some rank: the flat all-reduce
            self._average_kept_gradient(pl_module, grads)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._sync_off is not None:  # training_step returned None: no backward, nothing to identify
            self._pending = None
            self._restore_sync()

    def _skip_sync(self, trainer: L.Trainer) -> None:
        self._sync_off = trainer.strategy.model.no_sync()
        self._sync_off.__enter__()  # DDP decides at forward time whether the backward all-reduces

    def _restore_sync(self) -> None:
        if self._sync_off is not None:
            self._sync_off.__exit__(None, None, None)
            self._sync_off = None

    def _average_kept_gradient(self, pl_module: L.LightningModule,
                               grads: Optional[list[torch.Tensor]] = None) -> None:
        """The all-reduce that ``no_sync`` skipped: Σ_r weight_r · g_r over every trainable parameter (the mean, or
        the unflagged ranks' mean), written back into ``.grad`` before the optimizer. One flat all-reduce after the
        backward, without DDP's bucketed overlap of communication and computation."""
        grads = self._local_grads(pl_module) if grads is None else grads
        flat = torch.cat([g.reshape(-1) for g in grads]).mul_(self._weight)
        dist.all_reduce(flat)
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))

    @staticmethod
    def _local_grads(pl_module: L.LightningModule) -> list[torch.Tensor]:
        return [p.grad for p in pl_module.parameters() if p.requires_grad and p.grad is not None]

    def _row(self, length: int, device: torch.device) -> torch.Tensor:
        """The check's gather row (float64, kept between checks: allocated again only if its size changes)."""
        if self._row_buf is None or self._row_buf.numel() != length or self._row_buf.device != device:
            self._row_buf = torch.empty(length, dtype=torch.float64, device=device)
        return self._row_buf

    def _all_gather(self, trainer: L.Trainer, row: torch.Tensor) -> torch.Tensor:
        """(world, len) rows of every rank. Under an initialised process group: the collective that
        ``trainer.strategy.all_gather`` runs (``torch.distributed.all_gather`` over the world group), straight into
        a kept (world, len) buffer, without that method's autograd wrapper, zero-filled receive list and stacking
        copy (~1.0-1.2 vs ~0.6 ms of CPU for 2 × 47,648 float64 here). Otherwise the strategy's own."""
        if not (dist.is_available() and dist.is_initialized()):
            return trainer.strategy.all_gather(row).reshape(trainer.world_size, -1)
        world = dist.get_world_size()
        buf = self._gather_buf
        if buf is None or buf.shape != (world, row.numel()) or buf.device != row.device:
            buf = self._gather_buf = torch.empty(world, row.numel(), dtype=row.dtype, device=row.device)
        dist.all_gather(list(buf.unbind(0)), row)
        return buf

    def _identify(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, row: torch.Tensor, d: int,
                  mismatch: bool, step: int, from_step: bool, local: Optional[list[torch.Tensor]] = None,
                  carried: bool = False) -> bool:
        """Gather, identify, log. ``row`` = [g1 | g2 | (n1, n2, mismatch) | local gradient if ``carried``].

        With ``local`` (a one-pass check: this rank's unreduced ``.grad`` tensors) the step's gradient average (the
        mean, or with ``exclude`` the unflagged ranks' mean) is formed here, in float64, from every rank's local
        gradient in the one gather, instead of by a second collective: carried in the row, or rebuilt from the
        rank's halves as g_r = (n1·g1_r + n2·g2_r)/(n1 + n2) (the inverse of g2 = (B·g − n1·g1)/n2: equal to g_r to
        float64 rounding). Returns whether ``.grad`` holds the average
        now (False: the caller all-reduces)."""
        rank, world = trainer.global_rank, trainer.world_size
        # this rank's half sizes and the one-pass test's outcome ride in the same gather
        row[2 * d], row[2 * d + 1] = self._sizes
        row[2 * d + 2] = float(mismatch)
        gathered = self._all_gather(trainer, row).cpu()
        sizes = gathered[:, 2 * d: 2 * d + 2].numpy()  # (world, 2): every rank's n1, n2 (numpy: tiny ops)
        n_half = int(sizes.min())
        mismatches = gathered[:, 2 * d + 2].numpy()
        any_mismatch = bool(mismatches.any())
        if from_step:
            self._verified = True
            if any_mismatch:
                bad = np.flatnonzero(mismatches).tolist()
                rank_zero_warn(f"ByzantineIdentification: on ranks {bad} g2 derived from the step's gradient differs "
                               "from the direct g2 (a loss that is not the batch mean, or randomness in the forward "
                               "pass); this check used the direct g2, and later checks use two passes")
                self.one_pass = False
        G1, G2 = gathered[:, :d], gathered[:, d: 2 * d]
        reported = (G1.numpy(), G2.numpy())  # the ranks' own halves, before any attack rewrites G1, G2
        average = bool(local) and (carried or not any_mismatch)
        sigma0 = None
        if self.estimator == "filter":  # a tensor broadcast of the known (d, d) shape, not a pickled object
            sigma0 = (covariance(self.per_sample_gradients(pl_module, batch).cpu()) if rank == self.trusted_rank
                      else torch.empty(d, d, dtype=torch.float64)).to(row.device)
            dist.broadcast(sigma0, src=self.trusted_rank)
            sigma0 = sigma0.cpu()
        for cb in trainer.callbacks:
            if isinstance(cb, ByzantineAttack):
                G1, G2 = cb.corrupt_reports(G1, G2, 2 * n_half, self.trusted_rank, step)
        result = bymi(G1, G2, alpha=self.alpha, estimator=self.estimator, eps=self.eps, const_f=self.const_f,
                      n_half=n_half, sigma0=sigma0, master=self.trusted_rank, offset=self.offset)
        workers = result.workers.tolist()
        self.flagged = [w for w, f in zip(workers, result.flagged.tolist()) if f]
        if self.action == "exclude":
            self._weight = 0.0 if rank in self.flagged else 1.0 / (world - len(self.flagged))
        if average:  # Σ_r weight_r · g_r (the all-reduce that no_sync skipped), in numpy: a few (world, d) passes
            weights = np.full(world, 1.0 / world)
            if self.action == "exclude":
                weights[:] = 1.0 / (world - len(self.flagged))
                weights[self.flagged] = 0.0
            if carried:
                mean = np.einsum("r,rd->d", weights, gathered[:, 2 * d + EXTRA:].numpy())  # einsum: no BLAS threads
            else:  # g_r rebuilt from its halves: Σ_r w_r (n1_r g1_r + n2_r g2_r) / (n1_r + n2_r)
                scale = weights / sizes.sum(axis=1)
                mean = np.einsum("r,rd->d", scale * sizes[:, 0], reported[0])
                mean += np.einsum("r,rd->d", scale * sizes[:, 1], reported[1])
            mean = torch.from_numpy(mean)
            for g, part in zip(local, mean.split([g.numel() for g in local])):
                g.copy_(part.view_as(g))
        split = ("two passes" if not from_step else "direct g2 (the one-pass test failed)" if any_mismatch
                 else "one pass")
        record = {"step": step, "threshold": float(result.threshold), "flagged": list(self.flagged),
                  "W": dict(zip(workers, result.W.tolist())), "split": split}
        self.history.append(record)
        if trainer.is_global_zero:
            metrics = {f"byzantine/W/rank{r}": w for r, w in record["W"].items()}
            metrics.update({"byzantine/threshold": record["threshold"], "byzantine/n_flagged": len(self.flagged)})
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)
            self._write(trainer, record, G1, G2, result.W)
        return average

    def _write(self, trainer: L.Trainer, record: dict, G1: torch.Tensor, G2: torch.Tensor, W: torch.Tensor) -> None:
        """The check's rows in ``<dir>/byzantine/checks.csv`` (one file for the run, opened once and kept open,
        flushed after every check so that its rows are on disk even if a rank dies right after: ~0.01 ms, against
        ~0.2 ms to open, write and close a file per check); with ``save_tensors`` also ``step_<N>.safetensors``."""
        if self._csv is None:
            out = Path(self.log_dir or trainer.default_root_dir) / "byzantine"
            out.mkdir(parents=True, exist_ok=True)
            self._out_dir = out
            self._csv_file = open(out / CHECKS_CSV, "a", newline="")  # a resumed run appends to its own rows
            self._csv = csv.writer(self._csv_file)
            if self._csv_file.tell() == 0:
                self._csv.writerow(["step", "rank", "W", "flagged", "threshold"])
        step, threshold, flagged = record["step"], record["threshold"], record["flagged"]
        rows = [[step, self.trusted_rank, "", "trusted", threshold]]
        rows += [[step, r, repr(score), int(r in flagged), threshold] for r, score in record["W"].items()]
        self._csv.writerows(rows)
        self._csv_file.flush()
        if self.save_tensors:
            save_file({"g1": G1.contiguous(), "g2": G2.contiguous(), "W": W.contiguous()},
                      str(self._out_dir / f"step_{step:06d}.safetensors"), metadata={"split": record["split"]})

    def _close_csv(self) -> None:
        if self._csv_file is not None:
            self._csv_file.close()
            self._csv_file = self._csv = None

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._close_csv()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._close_csv()

    def state_dict(self) -> dict:
        return {"flagged": self.flagged, "last_step": self._last_step}

    def load_state_dict(self, state_dict: dict) -> None:
        self.flagged = list(state_dict.get("flagged", []))
        self._last_step = state_dict.get("last_step", -1)


def _batch_len(batch: Any) -> int:
    return len(next(iter(batch.values() if isinstance(batch, dict) else batch)))


def _masked_mean_hook(state, bucket):
    """DDP communication hook of ``exclude``: all-reduce the sum of ``weight_r · bucket_r`` (weight 0 for a flagged
    rank, 1/#kept otherwise), i.e. the mean gradient of the unflagged ranks (1/world each while nothing is flagged).

    (No annotations: DDP checks that ``bucket`` is annotated as ``dist.GradBucket`` or not at all, and this module's
    postponed annotations would be strings.)"""
    buffer = bucket.buffer()
    buffer.mul_(state._weight)
    fut = dist.all_reduce(buffer, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])
