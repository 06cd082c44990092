"""The objective: spherical CLIP distance between the generated image and the ORIGINAL prompt (paper Sec. 3).

d(x, y) = 2·arcsin(‖x̂ − ŷ‖/2)² on unit vectors, which equals θ²/2 with θ the angle between them
(‖x̂ − ŷ‖ = 2 sin(θ/2)). Improvement minimises it; an attack maximises it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def spherical_dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    return (x - y).norm(dim=-1).div(2).arcsin().pow(2).mul(2)


def clip_text_features(stack, prompt: str) -> torch.Tensor:
    tok = stack.tokenizer(prompt, padding="max_length", max_length=stack.tokenizer.model_max_length,
                          truncation=True, return_tensors="pt")
    clip = stack.clip
    out = clip.text_model(input_ids=tok.input_ids.to(clip.device))
    return clip.text_projection(out.pooler_output)


def clip_image_features(stack, image: torch.Tensor) -> torch.Tensor:
    """image: (B, 3, H, W) in [0, 1]. Resized to CLIP's input size (antialiased bilinear, torchvision >= 0.17's
    tensor `Resize`) and normalised with CLIP's mean/std.

    The official code transposes H and W before resizing (`image.transpose(1, 3)` on a BHWC tensor), feeding CLIP
    a mirrored-and-rotated image; we keep the image upright. Its environment (files/install_env.sh: torchvision
    0.15) resizes tensors *without* antialiasing (antialias=None then meant off for tensors); we antialias, as
    CLIP's own preprocessing does (cards/dpodiff.md, deviations)."""
    clip = stack.clip
    x = image.to(clip.dtype)
    if x.shape[-2:] != (stack.clip_size, stack.clip_size):
        x = F.interpolate(x, size=(stack.clip_size, stack.clip_size), mode="bilinear", antialias=True,
                          align_corners=False)
    x = (x - stack.image_mean.to(x)) / stack.image_std.to(x)
    out = clip.vision_model(pixel_values=x)
    return clip.visual_projection(out.pooler_output)


def clip_loss(stack, image: torch.Tensor, text_features: torch.Tensor) -> torch.Tensor:
    """Mean spherical distance of the images to the original prompt's CLIP text features."""
    return spherical_dist(clip_image_features(stack, image), text_features.to(stack.clip.dtype)).mean()
