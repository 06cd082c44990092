"""`PerSampleClipper`: plain-torch per-sample clipping + Gaussian noise for any `nn.Module`.

Usage (no Lightning needed)::

    clipper = PerSampleClipper(model, mode="phantom", max_grad_norm=1.0)
    loss = per_sample_losses(model, batch).mean()    # batch-first, one loss term per sample
    loss.backward()
    norms = clipper.step(noise_multiplier=sigma, loss_reduction="mean", expected_batch_size=qN)
    optimizer.step()

`step` replaces every trainable `p.grad` by (Σ_i c_i g_i + N(0, σ²C²I)) / expected_batch_size with
c_i = min(1, C / (‖g_i‖ + 1e-6)) (the Opacus convention), forming Σ c_i g_i by book-keeping from
the captured activations and backprops rather than by a second backward (see the benchmark).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from zoo.dp.capture import ActivationCapture
from zoo.dp.norms import GHOST_TYPES, clipped_sum, contributions, per_sample_sq_norms
from zoo.errors import ZooError

Mode = Literal["phantom", "ghost", "per_sample"]


def trainable_modules(model: nn.Module, mode: Mode) -> list[nn.Module]:
    """Modules that own trainable parameters; ZooError for any layer the mode cannot clip."""
    if mode not in ("phantom", "ghost", "per_sample"):
        raise ZooError(f"DP clipping mode must be phantom, ghost or per_sample, got {mode!r}")
    if mode == "per_sample":
        from zoo.dp.opacus_samplers import grad_samplers

        supported = tuple(grad_samplers())
    else:
        supported = GHOST_TYPES
    mods, owners = [], {}
    for name, m in model.named_modules():
        own = [p for p in m.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        ok = type(m) in supported if mode == "per_sample" else isinstance(m, supported)
        if not ok:
            raise ZooError(
                f"DP clipping mode {mode!r} cannot handle layer '{name}' ({type(m).__name__}) "
                f"with trainable parameters; supported: "
                f"{sorted({t.__name__ for t in supported})[:12]} (or freeze it)"
            )
        if isinstance(m, nn.Embedding) and (m.sparse or m.max_norm is not None):
            raise ZooError(f"DP clipping: embedding '{name}' uses sparse=True or max_norm, unsupported")
        mods.append(m)
        for p in own:
            owners.setdefault(p, []).append((name, m))
    if mode == "ghost":
        for p, ms in owners.items():
            kinds = {type(m) for _, m in ms}
            if any(issubclass(k, nn.Embedding) for k in kinds) and any(issubclass(k, nn.Linear) for k in kinds):
                raise ZooError(
                    f"DP clipping mode 'ghost' cannot give exact norms for the tied weight shared by "
                    f"{[n for n, _ in ms]}; use mode='phantom'"
                )
    return mods


class PerSampleClipper:
    """Hooks a model, then computes per-sample norms, clipped sums and noisy gradients."""

    def __init__(self, model: nn.Module, mode: Mode = "phantom", max_grad_norm: float = 1.0):
        if max_grad_norm <= 0:
            raise ZooError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        self.model, self.mode, self.max_grad_norm = model, mode, max_grad_norm
        self.capture = ActivationCapture(trainable_modules(model, mode))
        self.params = [p for p in model.parameters() if p.requires_grad]  # parameters() already dedups tied weights
        self.last_norms: torch.Tensor | None = None

    def _batch_size(self) -> int:
        sizes = {r.backprop.shape[0] for r in self.capture.records if r.backprop is not None}
        if len(sizes) > 1:
            raise ZooError(f"DP clipping: captured layers disagree on the batch size {sorted(sizes)} (batch first?)")
        return sizes.pop() if sizes else 0

    def contributions(self, loss_reduction: str = "mean"):
        """(n, scale, contributions of the raw backprops). Per-sample gradients are `scale` times
        the contributions (n for a batch-mean loss); scaling the results instead of the captured
        backprops avoids copying the (B, T, M) logit gradients."""
        n = self._batch_size()
        scale = float(n) if loss_reduction == "mean" else 1.0
        return n, scale, contributions(self.capture.records, self.mode)

    def _norms(self, contribs, n, scale) -> torch.Tensor:
        p0 = self.params[0]
        return scale * per_sample_sq_norms(contribs, n, p0.device, p0.dtype).clamp_min(0).sqrt()

    def per_sample_norms(self, loss_reduction: str = "mean") -> torch.Tensor:
        n, scale, contribs = self.contributions(loss_reduction)
        return self._norms(contribs, n, scale)

    def clipped_grads(self, loss_reduction: str = "mean", check: bool = False):
        """(norms, {param: Σ_i c_i g_i}); `check` compares Σ_i g_i with the autograd `p.grad`."""
        n, scale, contribs = self.contributions(loss_reduction)
        norms = self._norms(contribs, n, scale)
        coef = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        if check:
            self._check_hooks_saw_everything(contribs, n)
        sums = {}
        for p in self.params:
            cs = contribs.get(p)
            sums[p] = clipped_sum(cs, coef.to(p.dtype) * scale) if cs else torch.zeros_like(p)
        self.last_norms = norms
        return norms, sums

    def _check_hooks_saw_everything(self, contribs, n):
        """A parameter used outside its module's forward would escape clipping: refuse it."""
        names = {p: k for k, p in self.model.named_parameters()}
        for p in self.params:
            cs = contribs.get(p)
            seen = clipped_sum(cs, torch.ones(n, dtype=p.dtype, device=p.device)) if cs else torch.zeros_like(p)
            ref = torch.zeros_like(p) if p.grad is None else p.grad
            tol = 1e-3 * (ref.abs().max().item() + 1e-12) + 1e-8
            if (seen - ref).abs().max().item() > tol:
                raise ZooError(
                    f"DP clipping: the gradient of parameter '{names.get(p, '?')}' is not fully explained "
                    f"by its layer's forward (used outside the module, or a non-batch-first layer?)"
                )

    def step(
        self,
        noise_multiplier: float,
        loss_reduction: str = "mean",
        expected_batch_size: float | None = None,
        generator: torch.Generator | None = None,
        check: bool = False,
    ) -> torch.Tensor:
        """Writes the private gradient into `p.grad`; returns the per-sample norms."""
        norms, sums = self.clipped_grads(loss_reduction, check)
        std = noise_multiplier * self.max_grad_norm
        for p in self.params:
            g = sums[p]  # a fresh tensor: noise and scaling in place
            if std > 0:
                g.add_(torch.normal(0.0, std, size=p.shape, device=p.device, dtype=p.dtype, generator=generator))
            if loss_reduction == "mean":
                if not expected_batch_size:
                    raise ZooError("DP clipping: loss_reduction='mean' needs expected_batch_size")
                g.div_(expected_batch_size)
            p.grad = g
        self.capture.clear()
        return norms

    def remove(self) -> None:
        self.capture.remove()
