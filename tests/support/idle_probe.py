"""A callback for the smoke tests: the trainable parameters each backward pass of a fit leaves without a gradient.

DDP without `find_unused_parameters` stops at the step after a backward that left a registered parameter idle
("Expected to have finished reduction in the prior iteration"). A module whose steps do that must declare
`ddp_find_unused_parameters` (callbacks/distributed.py turns it on) or train in one process. This finds an
undeclared one in a one-process fit of every smoke config; tests/test_ddp.py trains one module per DDP pattern.
"""

from __future__ import annotations

import lightning.pytorch as pl

SEEN: list[dict] = []  # one record per fit in this process: the module's class, its declaration, idle backwards


class IdleParameters(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the parameters DDP would have registered: those that require a gradient when the module is wrapped
        self.params = {n for n, p in pl_module.named_parameters() if p.requires_grad}
        self.record = {"module": type(pl_module), "params": len(self.params), "idle": [],
                       "declared": bool(getattr(pl_module, "ddp_find_unused_parameters", False))}
        SEEN.append(self.record)
        self.touched: set[str] = set()
        self.hooks = [p.register_post_accumulate_grad_hook(lambda _, n=n: self.touched.add(n))
                      for n, p in pl_module.named_parameters() if n in self.params]

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        # every backward, automatic or `manual_backward` (a step of two players has two): DDP reduces per backward
        self.touched.clear()

    def on_after_backward(self, trainer, pl_module) -> None:
        idle = self.params - self.touched
        if idle:
            self.record["idle"].append((trainer.global_step, sorted(idle)))

    def on_train_end(self, trainer, pl_module) -> None:
        for h in self.hooks:
            h.remove()
