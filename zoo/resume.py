"""Exact mid-epoch resume.

Lightning restores the loop counters of a mid-epoch checkpoint but a plain `DataLoader` restarts its
epoch from the first batch, so a resumed run would see other data than an uninterrupted one. torchdata's
`StatefulDataLoader` is saved in the checkpoint (Lightning stores the state of stateful loaders) and
continues exactly where it stopped, including the RandomSampler's permutation.
"""

from __future__ import annotations

import functools

from torch.utils.data import DataLoader

# Imported at module load, not inside the hook: Lightning patches DataLoader subclasses that exist when
# it calls `train_dataloader` (to re-create them with a DistributedSampler under DDP).
from torchdata.stateful_dataloader import StatefulDataLoader


def to_stateful(loader):
    """The same loader as a `StatefulDataLoader` (other objects pass through unchanged)."""
    if type(loader) is not DataLoader:
        return loader
    kwargs = dict(num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
                  timeout=loader.timeout, worker_init_fn=loader.worker_init_fn, generator=loader.generator,
                  persistent_workers=loader.persistent_workers)
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if loader.batch_size is None:  # a custom batch_sampler
        return StatefulDataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **kwargs)
    return StatefulDataLoader(loader.dataset, batch_size=loader.batch_size, sampler=loader.sampler,
                              drop_last=loader.drop_last, **kwargs)


def make_train_loader_stateful(holder) -> None:
    """Wrap `holder.train_dataloader` (a DataModule or LightningModule) so its loader is stateful."""
    original = getattr(holder, "train_dataloader", None)
    if original is None or getattr(original, "_zoo_stateful", False):
        return

    @functools.wraps(original)
    def train_dataloader():
        out = original()
        if isinstance(out, (list, tuple)):
            return type(out)(to_stateful(x) for x in out)
        if isinstance(out, dict):
            return {k: to_stateful(v) for k, v in out.items()}
        return to_stateful(out)

    train_dataloader._zoo_stateful = True
    holder.train_dataloader = train_dataloader
