"""Pretrained image backbones (timm, torchvision) with one-line errors when their weights are not on this machine.

Both libraries download on first use; offline, timm raises huggingface_hub's LocalEntryNotFoundError and torchvision
a URLError. Raised inside a module's ``__init__``, jsonargparse folds either into a "Does not validate against any of
the Union subtypes" traceback, so the loaders here turn them into a ZooError that names the weights and how to get
them."""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.errors import ZooError


def timm_model(name: str, pretrained: bool, fallback: str = "", **kwargs: Any) -> nn.Module:
    """``timm.create_model(name, pretrained=pretrained, **kwargs)``. ``fallback``: what else the user can set
    (e.g. "set model.init_args.pretrained: false"), appended to the error."""
    import timm

    try:
        return timm.create_model(name, pretrained=pretrained, **kwargs)
    except RuntimeError as e:  # timm: "Unknown model (...)" and bad feature options
        raise ZooError(f"timm model {name!r} could not be built ({e})") from e
    except IndexError as e:  # timm indexes its stage list with each of out_indices
        raise ZooError(f"timm model {name!r} has no feature stage for some of out_indices "
                       f"{list(kwargs.get('out_indices', ()))}") from e
    except OSError as e:  # offline and not in the HF cache (LocalEntryNotFoundError is a FileNotFoundError)
        cfg = timm.models.get_pretrained_cfg(name)
        repo = getattr(cfg, "hf_hub_id", None) or f"timm/{name}"
        raise ZooError(f"pretrained weights of timm model {name!r} are not in the HF cache ({type(e).__name__}); "
                       f"fetch them once with `huggingface-cli download {repo}`"
                       + (f" or {fallback}" if fallback else "")) from e


def torchvision_model(name: str, weights: Any, fallback: str = "", **kwargs: Any) -> nn.Module:
    """``torchvision.models.<name>(weights=weights, **kwargs)``; ``weights`` is a torchvision ``Weights`` enum member
    or None (random initialisation)."""
    import torch
    import torchvision

    try:
        return getattr(torchvision.models, name)(weights=weights, **kwargs)
    except OSError as e:  # offline: torchvision downloads into torch.hub's cache and raises URLError
        raise ZooError(f"{name} weights {weights} are not in torch's cache ({type(e).__name__}); fetch {weights.url} "
                       f"once into {torch.hub.get_dir()}/checkpoints/" + (f" or {fallback}" if fallback else "")) from e
