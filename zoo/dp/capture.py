"""Capture of layer inputs (activations) and output gradients (backprops) for per-sample clipping.

One forward hook per module that owns trainable parameters. Each call of a module during a
grad-enabled forward creates a `Record`; a tensor hook on the module's output fills in the
backprop during the backward. Recording every call (not one slot per module) is what makes tied
and re-used weights exact: the per-sample gradient of a shared parameter is the sum of the
contributions of all its calls, and its squared norm includes every cross term.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Record:
    module: nn.Module
    inputs: list[torch.Tensor]  # tensor positional args, detached, batch first
    backprop: torch.Tensor | None = None  # dL/d(output), batch first


class ActivationCapture:
    """Registers hooks on `modules` and collects one `Record` per call.

    Only calls made while gradients are enabled, and whose output requires grad, are recorded,
    so validation and `torch.no_grad` forwards are ignored.
    """

    def __init__(self, modules: list[nn.Module]):
        self.records: list[Record] = []
        self.enabled = True
        self._handles = [m.register_forward_hook(self._forward_hook) for m in modules]

    def _forward_hook(self, module, args, output):
        if not (self.enabled and torch.is_grad_enabled()):
            return
        if not isinstance(output, torch.Tensor) or not output.requires_grad:
            return
        rec = Record(module, [a.detach() for a in args if isinstance(a, torch.Tensor)])
        self.records.append(rec)

        def _store(grad, rec=rec):
            # A module output used twice receives one summed gradient: exactly what we need.
            rec.backprop = grad.detach()

        output.register_hook(_store)

    def clear(self) -> None:
        self.records = []

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.clear()
