"""MOMENT (Goswami et al., ICML 2024): RevIN -> patches -> patch embedding -> T5 encoder -> task head.

Channels are independent: a [B, C, 512] batch is folded into B * C univariate series for the encoder (paper,
Sec. 3.2), and the T5 attention mask is the patch view of ``input_mask`` (padding is not attended to).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from transformers import T5Config, T5EncoderModel

from zoo.errors import ZooError
from zoo.lm import config_errors
from zoo.moment.embedding import PatchEmbedding, patchify
from zoo.moment.heads import ClassificationHead, ForecastingHead, ReconstructionHead
from zoo.moment.masking import patch_view, random_patch_mask
from zoo.moment.revin import revin_denormalize, revin_normalize, revin_statistics

Task = Literal["reconstruction", "forecasting", "classification", "embedding"]
TASKS = ("reconstruction", "forecasting", "classification", "embedding")


@dataclass
class MomentConfig:
    """Everything that fixes MOMENT's architecture (the official config.json's fields, same names)."""

    t5_config: dict[str, Any]
    task_name: str = "reconstruction"
    seq_len: int = 512
    patch_len: int = 8
    add_positional_embedding: bool = True  # momentfm's default when the checkpoint's config does not say
    value_embedding_bias: bool = False
    orth_gain: float | None = 1.41
    patch_dropout: float = 0.1
    head_dropout: float = 0.1
    forecast_horizon: int | None = None
    n_channels: int | None = None  # classification only (the head's input is C * D)
    num_class: int | None = None
    reduction: Literal["concat", "mean"] = "concat"  # classification: how channels are combined
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def d_model(self) -> int:
        return int(self.t5_config["d_model"])

    @property
    def n_patches(self) -> int:
        return self.seq_len // self.patch_len

    def check(self) -> MomentConfig:
        if self.task_name not in TASKS:
            raise ZooError(f"unknown MOMENT task {self.task_name!r}: choose one of {', '.join(TASKS)}")
        if "d_model" not in self.t5_config:
            raise ZooError("t5_config needs d_model (and the other T5Config fields)")
        if self.seq_len % self.patch_len:
            raise ZooError(f"seq_len {self.seq_len} is not a multiple of patch_len {self.patch_len}")
        if self.task_name == "forecasting" and not (self.forecast_horizon and self.forecast_horizon > 0):
            raise ZooError(f"forecasting needs a positive forecast_horizon, got {self.forecast_horizon}")
        if self.task_name == "classification":
            if not (self.num_class and self.num_class > 1):
                raise ZooError(f"classification needs num_class >= 2, got {self.num_class}")
            if self.reduction not in ("concat", "mean"):
                raise ZooError(f"classification reduction must be 'concat' or 'mean', got {self.reduction!r}")
            if self.reduction == "concat" and not (self.n_channels and self.n_channels > 0):
                raise ZooError(f"classification with reduction 'concat' needs n_channels >= 1, got {self.n_channels}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MOMENT(nn.Module):
    """The MOMENT network for one task. Submodule names: ``patch_embedding``, ``encoder`` (the T5 encoder stack),
    ``head``; `zoo.moment.checkpoints.MOMENTFM_KEY_TABLE` maps the official state dict onto them."""

    def __init__(self, config: MomentConfig):
        super().__init__()
        self.config = config.check()
        c = config
        self.patch_embedding = PatchEmbedding(c.d_model, c.n_patches, c.patch_len, c.add_positional_embedding,
                                              c.value_embedding_bias, c.orth_gain, c.patch_dropout)
        # The encoder stack of a T5EncoderModel built from the checkpoint's T5 config (flan-t5-{small,base,large}
        # shapes). Its token embedding is never used (inputs are patch embeddings) but is kept: the official
        # checkpoints hold it, and loading stays strict.
        try:
            self.encoder = T5EncoderModel(T5Config.from_dict(dict(c.t5_config))).get_encoder()
        except config_errors() as e:  # transformers' checks (feed_forward_proj's form, its activation)
            raise ZooError(f"cannot build MOMENT's T5 encoder from t5_config: {type(e).__name__}: {e}") from e
        self.head = self._build_head()

    def _build_head(self) -> nn.Module:
        c = self.config
        if c.task_name == "reconstruction":
            return ReconstructionHead(c.d_model, c.patch_len, c.head_dropout, c.orth_gain)
        if c.task_name == "forecasting":
            return ForecastingHead(c.n_patches, c.d_model, c.forecast_horizon, c.head_dropout)
        if c.task_name == "classification":
            width = c.d_model * (c.n_channels if c.reduction == "concat" else 1)
            return ClassificationHead(width, c.num_class, c.head_dropout)
        return nn.Identity()

    # ---------------------------------------------------------------------------------------------- checks
    def _check_input(self, x: torch.Tensor, input_mask: torch.Tensor | None) -> torch.Tensor:
        c = self.config
        if x.ndim != 3:
            raise ZooError(f"MOMENT takes [batch, channels, {c.seq_len}] series, got shape {tuple(x.shape)}")
        if x.shape[-1] > c.seq_len:
            raise ZooError(f"series of length {x.shape[-1]} is longer than MOMENT's {c.seq_len} steps: cut it into "
                           f"windows of {c.seq_len} (e.g. a sliding window) or downsample it")
        if x.shape[-1] < c.seq_len:
            raise ZooError(f"series of length {x.shape[-1]} is shorter than {c.seq_len}: left-pad it to {c.seq_len} "
                           f"and set input_mask to 0 on the padding")
        if input_mask is None:
            input_mask = torch.ones(x.shape[0], x.shape[-1], dtype=torch.long, device=x.device)
        if tuple(input_mask.shape) != (x.shape[0], x.shape[-1]):
            raise ZooError(f"input_mask must have shape {(x.shape[0], x.shape[-1])}, got {tuple(input_mask.shape)}")
        if bool((patch_view(input_mask, c.patch_len).sum(-1) == 0).any()):
            bad = torch.nonzero(patch_view(input_mask, c.patch_len).sum(-1) == 0).flatten().tolist()
            raise ZooError(f"series {bad[:5]} of the batch have no fully observed patch of {c.patch_len} steps "
                           "(input_mask is 0 almost everywhere): nothing to encode")
        return input_mask

    # ---------------------------------------------------------------------------------------------- encoder
    def encode(self, x: torch.Tensor, input_mask: torch.Tensor, embed_mask: torch.Tensor) -> torch.Tensor:
        """Normalised series [B, C, L] -> encoder outputs [B, C, N, D]; ``embed_mask`` [B, L] picks which patches
        become ``[MASK]``, ``input_mask`` which patches are attended to."""
        b, ch, _ = x.shape
        h = self.patch_embedding(patchify(x, self.config.patch_len), embed_mask)  # [B, C, N, D]
        n, d = h.shape[2], h.shape[3]
        attention = patch_view(input_mask, self.config.patch_len).repeat_interleave(ch, dim=0)
        out = self.encoder(inputs_embeds=h.reshape(b * ch, n, d), attention_mask=attention).last_hidden_state
        return out.reshape(b, ch, n, d)

    # ---------------------------------------------------------------------------------------------- tasks
    def reconstruct(self, x: torch.Tensor, input_mask: torch.Tensor | None = None,
                    mask: torch.Tensor | None = None, mask_ratio: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Reconstruction of every time step [B, C, L] and the mask used [B, L] (1 = observed). Without ``mask``
        one is drawn with ``mask_ratio`` (0 for inference: every observed patch kept). RevIN statistics come from
        the steps both observed and unmasked, as in pre-training."""
        self._need("reconstruction")
        input_mask = self._check_input(x, input_mask)
        if mask is None:
            mask = random_patch_mask(input_mask, mask_ratio, self.config.patch_len)
        stats = revin_statistics(x, mask * input_mask)
        h = self.encode(revin_normalize(x, stats), input_mask, mask)
        return revin_denormalize(self.head(h), stats), mask

    def forecast(self, x: torch.Tensor, input_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Forecast [B, C, H]. No patch is replaced by ``[MASK]`` (the official code embeds padded patches too)."""
        self._need("forecasting")
        input_mask = self._check_input(x, input_mask)
        stats = revin_statistics(x, input_mask)
        h = self.encode(revin_normalize(x, stats), input_mask, torch.ones_like(input_mask))
        return revin_denormalize(self.head(h), stats)

    def _features(self, x: torch.Tensor, input_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        input_mask = self._check_input(x, input_mask)
        stats = revin_statistics(x, input_mask)
        return self.encode(revin_normalize(x, stats), input_mask, input_mask), input_mask

    def classify(self, x: torch.Tensor, input_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, classes]."""
        self._need("classification")
        c = self.config
        if c.reduction == "concat" and x.shape[1] != c.n_channels:
            raise ZooError(f"the classification head was built for {c.n_channels} channel(s) "
                           f"(concatenated: {c.n_channels} x {c.d_model} features) but the series have {x.shape[1]}")
        h, _ = self._features(x, input_mask)  # [B, C, N, D]
        if c.reduction == "concat":
            # [B, N, D * C] with the channel index fastest, the official layout of the head's weight columns
            h = h.permute(0, 2, 3, 1).flatten(2)
        else:
            h = h.mean(dim=1)
        return self.head(h)

    def embed(self, x: torch.Tensor, input_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Series embedding [B, D]: mean over channels, then the mean over the observed patches."""
        h, input_mask = self._features(x, input_mask)
        h = h.mean(dim=1)  # [B, N, D]
        w = patch_view(input_mask, self.config.patch_len).unsqueeze(-1).to(h.dtype)  # [B, N, 1]
        return (w * h).sum(1) / w.sum(1)

    def forward(self, x: torch.Tensor, input_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        task = self.config.task_name
        if task == "reconstruction":
            return self.reconstruct(x, input_mask, **kwargs)[0]
        if task == "forecasting":
            return self.forecast(x, input_mask)
        if task == "classification":
            return self.classify(x, input_mask)
        return self.embed(x, input_mask)

    def _need(self, task: str) -> None:
        if self.config.task_name != task:
            raise ZooError(f"this MOMENT was built for {self.config.task_name!r}, not {task!r} (its head differs); "
                           f"build it with task_name={task!r}")

    # ---------------------------------------------------------------------------------------------- freezing
    def freeze(self, embedder: bool = True, encoder: bool = True, head: bool = False) -> MOMENT:
        """Linear probing (the official default): embedder and encoder frozen, head trained."""
        for module, frozen in ((self.patch_embedding, embedder), (self.encoder, encoder), (self.head, head)):
            for p in module.parameters():
                p.requires_grad_(not frozen)
        # the T5 token embedding never sees an input (it gets no gradient, so AdamW would not touch it either);
        # trainable, it would stop DDP, which expects a gradient for every trainable parameter
        self.encoder.embed_tokens.weight.requires_grad_(False)
        return self
