"""The Stable-Diffusion stack DPO-Diff optimises through: CLIP tokenizer and text encoder, UNet, VAE, scheduler,
and the CLIP model (ViT-B/32 in the paper) that scores images against the original prompt.

`load_stack` reads SD v1-4 and CLIP from the Hub (cache); `tiny_stack` builds the same components from configs with
random weights (nothing downloaded), with the real CLIP vocabulary from open-clip-torch's bundled BPE file.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import nn

from zoo.errors import ZooError
from zoo.lm import resolve_dtype

# SD v1-4's scheduler (scheduler/scheduler_config.json of CompVis/stable-diffusion-v1-4): PNDM, scaled-linear betas.
SD14_SCHEDULER = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
                      skip_prk_steps=True, steps_offset=1, set_alpha_to_one=False)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP preprocessing (preprocessor_config.json)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class SDStack(nn.Module):
    """Frozen components; the only thing DPO-Diff optimises is the prompt distribution outside this module."""

    def __init__(self, tokenizer, text_encoder: nn.Module, unet: nn.Module, vae: nn.Module, scheduler, clip: nn.Module,
                 clip_size: int, image_mean: Sequence[float] = CLIP_MEAN, image_std: Sequence[float] = CLIP_STD):
        super().__init__()
        self.tokenizer, self.scheduler = tokenizer, scheduler
        self.text_encoder, self.unet, self.vae, self.clip = text_encoder, unet, vae, clip
        self.clip_size = int(clip_size)
        self.register_buffer("image_mean", torch.tensor(image_mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("image_std", torch.tensor(image_std).view(1, 3, 1, 1), persistent=False)
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True):  # frozen: dropout stays off whatever Lightning does
        return super().train(False)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.unet.parameters()).dtype

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        s = self.unet.config.sample_size
        return (self.unet.config.in_channels, s, s)


def clip_tokenizer_from_open_clip(model_max_length: int = 77):
    """transformers' CLIPTokenizer over open-clip-torch's bundled BPE (bpe_simple_vocab_16e6, OpenAI CLIP's file).

    The vocabulary and merges are those of openai/clip-vit-base-patch32 and SD v1-4's tokenizer; only the special
    tokens are renamed to the transformers spelling. Offline: nothing is downloaded."""
    try:
        from open_clip.tokenizer import SimpleTokenizer, default_bpe
    except ImportError as e:  # pragma: no cover
        raise ZooError(f"the tiny stack's tokenizer needs open-clip-torch (pip install 'zoo[dpodiff]'): {e}") from e
    from transformers import CLIPTokenizer

    merges = gzip.open(default_bpe()).read().decode("utf-8").split("\n")[1:49152 - 256 - 2 + 1]
    rename = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocab = {rename.get(k, k): v for k, v in SimpleTokenizer().encoder.items()}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vocab.json").write_text(json.dumps(vocab))
        (Path(d) / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
        return CLIPTokenizer(str(Path(d) / "vocab.json"), str(Path(d) / "merges.txt"), pad_token="<|endoftext|>",
                             model_max_length=model_max_length)


def tiny_stack(seed: int = 0, unet_channels: Sequence[int] = (16, 32), vae_channels: Sequence[int] = (8, 16),
               latent_size: int = 8, hidden: int = 32, layers: int = 2, heads: int = 2, clip_image_size: int = 32,
               clip_patch: int = 8, norm_groups: int = 8, dtype: str = "float32") -> SDStack:
    """SD-shaped stack with random weights from configs (diffusers/transformers classes, tiny sizes)."""
    from diffusers import AutoencoderKL, PNDMScheduler, UNet2DConditionModel
    from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPTextModel

    tok = clip_tokenizer_from_open_clip()
    text = dict(vocab_size=tok.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=heads, max_position_embeddings=tok.model_max_length,
                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        text_encoder = CLIPTextModel(CLIPTextConfig(**text))
        n = len(unet_channels)
        unet = UNet2DConditionModel(
            sample_size=latent_size, in_channels=4, out_channels=4, block_out_channels=tuple(unet_channels),
            layers_per_block=1, norm_num_groups=norm_groups, cross_attention_dim=hidden, attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D",) * (n - 1) + ("DownBlock2D",),
            up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (n - 1))
        m = len(vae_channels)
        vae = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=tuple(vae_channels), latent_channels=4,
                            down_block_types=("DownEncoderBlock2D",) * m, up_block_types=("UpDecoderBlock2D",) * m,
                            norm_num_groups=norm_groups, sample_size=latent_size * 2 ** (m - 1))
        clip = CLIPModel(CLIPConfig(
            text_config=text, projection_dim=hidden,
            vision_config=dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                               num_attention_heads=heads, image_size=clip_image_size, patch_size=clip_patch)))
    stack = SDStack(tok, text_encoder, unet, vae, PNDMScheduler(**SD14_SCHEDULER), clip, clip_image_size)
    return stack.to(resolve_dtype(dtype))


def load_stack(model_id: str = "CompVis/stable-diffusion-v1-4", clip_id: str = "openai/clip-vit-base-patch32",
               torch_dtype: Optional[str] = "float16") -> SDStack:
    """SD components and the scoring CLIP from the Hub (or its cache). SD in `torch_dtype`, CLIP in float32 (as
    the official code loads it)."""
    from diffusers import AutoencoderKL, PNDMScheduler, UNet2DConditionModel
    from transformers import CLIPImageProcessor, CLIPModel, CLIPTextModel, CLIPTokenizer

    dtype = resolve_dtype(torch_dtype) or torch.float32
    try:
        tok = CLIPTokenizer.from_pretrained(model_id, subfolder="tokenizer")
        te = CLIPTextModel.from_pretrained(model_id, subfolder="text_encoder", torch_dtype=dtype)
        unet = UNet2DConditionModel.from_pretrained(model_id, subfolder="unet", torch_dtype=dtype)
        vae = AutoencoderKL.from_pretrained(model_id, subfolder="vae", torch_dtype=dtype)
        sched = PNDMScheduler.from_pretrained(model_id, subfolder="scheduler")
        clip = CLIPModel.from_pretrained(clip_id)
        proc = CLIPImageProcessor.from_pretrained(clip_id)
    except OSError as e:
        raise ZooError(f"cannot load {model_id!r} / {clip_id!r} from the Hub or its cache: {e}") from e
    size = proc.size["shortest_edge"] if isinstance(proc.size, dict) else int(proc.size)
    stack = SDStack(tok, te, unet, vae, sched, clip, size, proc.image_mean, proc.image_std)
    stack.clip.float()
    return stack


def build_stack(spec: str | dict[str, Any], clip_id: str, torch_dtype: Optional[str]) -> SDStack:
    """A Hub id (the paper's SD v1-4) or a dict of `tiny_stack` sizes (random init)."""
    if isinstance(spec, str):
        return load_stack(spec, clip_id, torch_dtype)
    if not isinstance(spec, dict):
        raise ZooError(f"stack must be a Hub id or a dict of tiny_stack sizes, got {type(spec).__name__}")
    import inspect

    allowed = set(inspect.signature(tiny_stack).parameters)
    bad = sorted(set(spec) - allowed)
    if bad:
        raise ZooError(f"unknown tiny stack keys {bad}; allowed: {sorted(allowed)}")
    # every key but seed and dtype sizes a part (a width, a count, a patch; a list of them, not empty): 0 or less
    # failed deep in diffusers
    sizes = {k: v if isinstance(v, (list, tuple)) else [v] for k, v in spec.items() if k not in ("seed", "dtype")}
    bad = [f"{k}={spec[k]}" for k, v in sizes.items() if not (v and all(isinstance(x, int) and x > 0 for x in v))]
    if bad:
        raise ZooError(f"tiny stack sizes must be positive integers, got {', '.join(bad)}")
    return tiny_stack(**spec)
