"""The one place zoo reaches into Opacus for per-sample gradients of single layers (the `per_sample` mode).

Opacus exports a `compute_*_grad_sample(layer, activations, backprops)` function per layer type; which layer type
each serves is Opacus' registry (`GradSampleModule.GRAD_SAMPLERS`), not a public API. So the table below names the
public functions explicitly, and `tests/dpformer/test_opacus_adapter.py` fails loudly if Opacus ever registers a
different function for one of these types (or renames one).
"""

from __future__ import annotations

from typing import Callable

from torch import nn


def grad_samplers() -> dict[type[nn.Module], Callable]:
    """Layer type -> Opacus' per-sample gradient function (imported on use: Opacus is an optional extra)."""
    from opacus.grad_sample import (compute_conv_grad_sample, compute_embedding_grad_sample,
                                    compute_group_norm_grad_sample, compute_instance_norm_grad_sample,
                                    compute_layer_norm_grad_sample, compute_linear_grad_sample,
                                    compute_rms_norm_grad_sample)

    return {
        nn.Linear: compute_linear_grad_sample,
        nn.Embedding: compute_embedding_grad_sample,
        nn.LayerNorm: compute_layer_norm_grad_sample,
        nn.RMSNorm: compute_rms_norm_grad_sample,
        nn.GroupNorm: compute_group_norm_grad_sample,
        nn.InstanceNorm1d: compute_instance_norm_grad_sample,
        nn.InstanceNorm2d: compute_instance_norm_grad_sample,
        nn.InstanceNorm3d: compute_instance_norm_grad_sample,
        nn.Conv1d: compute_conv_grad_sample,
        nn.Conv2d: compute_conv_grad_sample,
        nn.Conv3d: compute_conv_grad_sample,
    }
