"""A tiny regression module and datamodule for the framework tests (the product carries no toy model)."""

from __future__ import annotations

import os
import random
import signal
from typing import ClassVar

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from zoo.data import train_loader
from zoo.errors import ZooError
from zoo.hub import HubMixin


class ToyRegressor(HubMixin, pl.LightningModule):
    monitor = "val/loss"
    monitor_mode = "min"

    def __init__(self, hidden: int = 16, lr: float = 0.05, nan_at_step: int = -1, sleep: float = 0.0,
                 init_from: str | None = None, optimizer: str = "sgd", noise: float = 0.0,
                 epoch_decay: float = 1.0):
        super().__init__()
        if hidden <= 0:
            raise ZooError(f"hidden must be positive, got {hidden}")
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        if init_from:  # a second stage starting from a first stage's weights (as iml's and bggn's stages do)
            from zoo.hub import load_checkpoint

            self.load_state_dict(load_checkpoint(init_from)["state_dict"])

    def forward(self, x):
        return self.net(x).squeeze(-1)

    def training_step(self, batch, batch_idx):
        kill_at = os.environ.get("ZOO_TOY_KILL_AT")  # "step,micro": SIGKILL this process there (resume tests);
        if kill_at:  # an env var, not an init arg, so the resumed run's hyper-parameters equal the killed run's
            step, micro = map(int, kill_at.split(","))
            if self.global_step == step and batch_idx % self.trainer.accumulate_grad_batches == micro:
                os.kill(os.getpid(), signal.SIGKILL)
        interrupt_at = os.environ.get("ZOO_TOY_INTERRUPT_AT")  # a Ctrl-C at that global step (interrupt tests)
        if interrupt_at and self.global_step == int(interrupt_at):
            raise KeyboardInterrupt
        if self.hparams.sleep:
            import time

            time.sleep(self.hparams.sleep)
        x, y = batch
        if self.hparams.noise:  # draws from torch's, NumPy's and Python's global RNGs, as real modules do
            x = x + self.hparams.noise * (torch.randn_like(x) + float(np.random.randn()) + random.gauss(0.0, 1.0))
        loss = nn.functional.mse_loss(self(x), y)
        if self.global_step == self.hparams.nan_at_step:
            loss = loss * float("nan")
        self.log("train/loss", loss)
        return loss

    def on_train_epoch_end(self):
        # a rate decayed as each epoch ends, as a module's own schedule may be: the epoch's last.ckpt must hold it
        if self.hparams.epoch_decay != 1.0:
            for group in self.trainer.optimizers[0].param_groups:
                group["lr"] *= self.hparams.epoch_decay

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", nn.functional.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test/mse", nn.functional.mse_loss(self(x), y))

    def predict_step(self, batch, batch_idx):
        return self(batch[0])

    def configure_optimizers(self):
        if self.hparams.optimizer == "adam":  # state beyond the weights, for exact-resume checks
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def card_metadata(self):
        return {"tags": ["zoo", "toy"]}


class ToyData(pl.LightningDataModule):
    def __init__(self, n: int = 64, batch_size: int = 8, seed: int = 0, path: str | None = None,
                 shuffle: bool = False):
        super().__init__()
        self.n, self.batch_size, self.seed, self.path, self.shuffle = n, batch_size, seed, path, shuffle

    def setup(self, stage: str | None = None):
        if self.path is not None:
            import os

            if not os.path.exists(self.path):
                raise ZooError(f"data path {self.path} does not exist")
        g = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.n, 4, generator=g)
        y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(self.n, generator=g)
        self.ds = TensorDataset(x, y)

    def train_dataloader(self):
        # Under DDP with use_distributed_sampler=False the datamodule shards itself, in order, so the
        # union of the ranks' batches equals the single-process batch (Lightning's own sampler shuffles).
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1 and not trainer._accelerator_connector.use_distributed_sampler:
            from torch.utils.data import DistributedSampler

            sampler = DistributedSampler(self.ds, num_replicas=trainer.world_size, rank=trainer.global_rank,
                                         shuffle=False)
            return DataLoader(self.ds, batch_size=self.batch_size, sampler=sampler)
        return train_loader(self.ds, batch_size=self.batch_size, shuffle=self.shuffle)

    def val_dataloader(self):
        return DataLoader(self.ds, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.ds, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.ds, batch_size=self.batch_size)


class DeterminismProbe(pl.Callback):
    """Records, as training starts, whether PyTorch's deterministic mode is on and whether a kernel that adds in
    thread order otherwise (index_put_ with accumulate=True: the backward of indexing with repeated indices) gives
    one result over repeats, on at least two threads."""

    seen: ClassVar[dict] = {}

    def on_train_start(self, trainer, pl_module):
        threads = torch.get_num_threads()
        torch.set_num_threads(max(2, threads))
        try:
            g = torch.Generator().manual_seed(0)
            idx, src = torch.randint(0, 500, (20000,), generator=g), torch.randn(20000, 32, generator=g)
            results = [torch.zeros(500, 32).index_put_((idx,), src, accumulate=True) for _ in range(20)]
        finally:
            torch.set_num_threads(threads)
        DeterminismProbe.seen = {"mode": torch.are_deterministic_algorithms_enabled(),
                                 "repeats": all(torch.equal(r, results[0]) for r in results)}


class ToyWithIdleLayer(ToyRegressor):
    """The toy with a layer no loss uses: DDP stops at its second step unless the module declares it
    (`ddp_find_unused_parameters`, set here by `declare`); tests/test_ddp.py shows both."""

    def __init__(self, declare: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.spare = nn.Linear(4, 1)
        self.ddp_find_unused_parameters = declare
