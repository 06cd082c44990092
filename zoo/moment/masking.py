"""Masks of MOMENT (1 = observed / kept, 0 = hidden), at time-step and at patch level.

A patch is observed only if all of its time steps are (``convert_seq_to_patch_view`` in the official code). The
pre-training mask hides a uniformly random subset of the *observed* patches: ``ceil(n_obs * (1 - mask_ratio))``
of them are kept (paper, Sec. 3.3: mask ratio 0.3). Unobserved (padded) patches are never kept.
"""

from __future__ import annotations

import torch

from zoo.errors import ZooError


def patch_view(mask: torch.Tensor, patch_len: int) -> torch.Tensor:
    """[B, L] time-step mask -> [B, L // patch_len] patch mask (1 only where every step of the patch is 1)."""
    if mask.shape[-1] % patch_len:
        raise ZooError(f"mask length {mask.shape[-1]} is not a multiple of the patch length {patch_len}")
    return (mask.unflatten(-1, (-1, patch_len)).sum(-1) == patch_len).long()


def sequence_view(patch_mask: torch.Tensor, patch_len: int) -> torch.Tensor:
    """[B, P] patch mask -> [B, P * patch_len] time-step mask."""
    return patch_mask.repeat_interleave(patch_len, dim=-1)


def random_patch_mask(input_mask: torch.Tensor, mask_ratio: float, patch_len: int,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """The pre-training mask [B, L] (time-step view, long): keeps ``ceil(n_obs * (1 - mask_ratio))`` observed
    patches per series, chosen uniformly at random; all other patches are 0.

    Same draw as the official ``Masking.generate_mask``: one ``torch.rand(B, P)``, unobserved patches pushed last
    by giving them noise 1, then the ``len_keep`` smallest noises kept (vectorised instead of its per-row loop).
    """
    if not 0.0 <= mask_ratio < 1.0:
        raise ZooError(f"mask_ratio must be in [0, 1), got {mask_ratio}")
    observed = patch_view(input_mask, patch_len)  # [B, P]
    b, p = observed.shape
    # the same float32 product the official code rounds up (n_obs is a long tensor times a Python float)
    len_keep = torch.ceil(observed.sum(-1, keepdim=True) * (1 - mask_ratio)).long()
    noise = torch.rand(b, p, device=input_mask.device, generator=generator)
    noise = torch.where(observed == 1, noise, torch.ones_like(noise))
    rank = torch.argsort(torch.argsort(noise, dim=1), dim=1)
    return sequence_view((rank < len_keep).long(), patch_len)
