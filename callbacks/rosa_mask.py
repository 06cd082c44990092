"""RoSA's mask warm-up (the official `grad-acc` schedule `wl64`) as a phase that runs at the start of `fit`.

1. Warm-up: train the LoRA factors only for `warmup_steps` optimizer steps (paper: 64), with the module's own
   optimizer recipe (AdamW, LoRA lr, warm-up + linear decay) and micro-batches accumulated as in the main run.
2. Collection: for `collect_steps` optimizer steps' worth of micro-batches (official `spa_num_grads` = 1, i.e.
   32 micro-batches), hooks form each micro-batch's full-weight gradient G = dOᵀX of every frozen target weight
   and keep the running mean of G² (empirical diagonal Fisher) — `zoo.rosa.mask.FisherCollector`.
3. Mask: per layer, the top int(d·numel) entries; saved as `<run dir>/rosa_mask.safetensors`.
4. Restart: the adapters go back to their initial values (the warmed-up LoRA is discarded, as in the official
   two-run recipe `restarter_llama2.sh`), the RNG state is restored, and the normal fit trains LoRA + sparse
   values from step 0 with a fresh optimizer. The result equals running the official "generate masks" run and
   then a second run with `mask_path`.

It does nothing when the model already has its mask (`mask_path`, a resumed checkpoint) or when density is 0.
Under DDP the ranks take disjoint micro-batches, the warm-up steps with the cross-rank mean LoRA gradient (so the
ranks stay in sync, as a DDP warm-up run would), and the Fisher scores are averaged across ranks before the top-k,
so every rank gets the same mask, collected over world_size x the micro-batches of one rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from zoo.errors import ZooError
from zoo.rosa.mask import FisherCollector, fisher_mask, save_mask


def _batches(loader, rank: int = 0, world_size: int = 1):
    """Endless micro-batches; under DDP rank r takes every world_size-th batch (offset r), so the ranks see disjoint
    data as in the main run (the datamodule's loader is not wrapped in Lightning's DistributedSampler here)."""
    while True:  # re-iterate (reshuffles) if the warm-up needs more than an epoch
        empty = True
        for i, batch in enumerate(loader):
            if i % world_size == rank:
                empty = False
                yield batch
        if empty:
            raise ZooError(f"the training dataloader has no batch for rank {rank} of {world_size}; "
                           "cannot compute the RoSA mask")


def _all_reduce_mean(trainer: L.Trainer, grads: list[torch.Tensor]) -> None:
    """Replace each gradient by its cross-rank mean, in one collective over a flat buffer (not one per tensor)."""
    if not grads:
        return
    flat = trainer.strategy.reduce(torch.cat([g.reshape(-1) for g in grads]), reduce_op="mean")
    for g, mean in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(mean.view_as(g))


class RoSAMaskWarmup(Callback):
    def __init__(self, warmup_steps: int = 64, collect_steps: int = 1, accumulate_grad_batches: Optional[int] = None,
                 mode: Literal["mean_squared", "mean"] = "mean_squared", mask_file: str = "rosa_mask.safetensors",
                 log_every_n_steps: int = 8):
        """
        Args:
            warmup_steps: LoRA-only optimizer steps before collecting gradients (paper schedule `wl64`: 64).
            collect_steps: optimizer steps' worth of micro-batches whose gradients form the Fisher
                (official `spa_num_grads`: 1).
            accumulate_grad_batches: micro-batches per step (default: the trainer's `accumulate_grad_batches`).
            mode: "mean_squared" (empirical diagonal Fisher, official default) or "mean" (|mean gradient|).
            mask_file: file name of the saved mask inside the run directory.
            log_every_n_steps: how often to print the warm-up loss.
        """
        super().__init__()
        if warmup_steps < 0 or collect_steps < 1:
            raise ZooError(f"RoSAMaskWarmup needs warmup_steps >= 0 and collect_steps >= 1, "
                           f"got {warmup_steps} and {collect_steps}")
        self.warmup_steps, self.collect_steps = warmup_steps, collect_steps
        self.accumulate_grad_batches, self.mode = accumulate_grad_batches, mode
        self.mask_file, self.log_every_n_steps = mask_file, log_every_n_steps
        self.mask_path: Optional[Path] = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from zoo.rosa.module import RoSAModule

        if not isinstance(pl_module, RoSAModule):
            raise ZooError(f"RoSAMaskWarmup needs a zoo.rosa.RoSAModule, got {type(pl_module).__name__}")
        if pl_module.hparams.density == 0:
            rank_zero_info("RoSA mask warm-up skipped: density 0 (LoRA only)")
            return
        if pl_module.has_mask:
            rank_zero_info("RoSA mask warm-up skipped: the model already has its mask (mask_path or checkpoint)")
            return
        masks = self.compute_mask(trainer, pl_module)
        pl_module.set_masks(masks)
        if trainer.is_global_zero:
            self.mask_path = save_mask(Path(trainer.default_root_dir) / self.mask_file, masks,
                                       pl_module.hparams.density)
            rank_zero_info(f"RoSA mask saved to {self.mask_path} (reuse it with model.mask_path)")

    @staticmethod
    def reduce_scores(trainer: L.Trainer, scores: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
        """Average each rank's Fisher scores across ranks (DDP), so the top-k gives every rank the same mask."""
        if trainer.world_size > 1:
            scores = {n: trainer.strategy.reduce(s.to(device), reduce_op="mean") for n, s in scores.items()}
        return scores

    def compute_mask(self, trainer: L.Trainer, module) -> dict[str, torch.Tensor]:
        accum = self.accumulate_grad_batches or trainer.accumulate_grad_batches
        if trainer.datamodule is None:
            raise ZooError("RoSAMaskWarmup needs a datamodule (it reads its train_dataloader)")
        batches = _batches(trainer.datamodule.train_dataloader(), trainer.global_rank, trainer.world_size)
        initial = module.adapter_state()
        rng = torch.random.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        was_training = module.training
        module.train()

        def micro_batch() -> torch.Tensor:
            batch = trainer.strategy.batch_to_device(next(batches))
            with trainer.precision_plugin.forward_context():
                loss = module.training_loss(batch)
            (loss / accum).backward()
            return loss.detach()  # no host sync per micro-batch; read only when logged

        params = module.lora_parameters()
        if params and self.warmup_steps:  # spa_only (r = 0) has nothing to warm up
            opt, sched = module.build_optimizer([{"params": params, "lr": module.hparams.lora_lr}],
                                                module.total_steps())
            for step in range(self.warmup_steps):
                loss = torch.stack([micro_batch() for _ in range(accum)]).double().mean()
                if trainer.world_size > 1:  # a DDP warm-up: every rank steps with the mean gradient, stays in sync
                    _all_reduce_mean(trainer, [p.grad for p in params if p.grad is not None])
                if trainer.gradient_clip_val:
                    torch.nn.utils.clip_grad_norm_(params, trainer.gradient_clip_val)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                if (step + 1) % self.log_every_n_steps == 0 or step + 1 == self.warmup_steps:
                    rank_zero_info(f"RoSA mask warm-up: step {step + 1}/{self.warmup_steps}, "
                                   f"LoRA-only loss {float(loss):.4f}")
            del opt, sched
        with FisherCollector(module.model, module.layers, self.mode) as fisher:
            for _ in range(self.collect_steps * accum):
                micro_batch()
                fisher.end_microbatch()
        for p in module.parameters():
            p.grad = None
        scores = self.reduce_scores(trainer, fisher.scores(), module.device)
        masks = fisher_mask(scores, module.hparams.density)
        rank_zero_info(f"RoSA mask: Fisher over {fisher.count} micro-batches after {self.warmup_steps} LoRA steps; "
                       f"{sum(m.numel() for m in masks.values()):,} sparse entries in {len(masks)} layers")
        # Restart from the pretrained weights and the initial adapters, as a second run would.
        module.load_state_dict(initial, strict=False)
        torch.random.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        module.train(was_training)
        return masks
