"""IMLModule: causal-LM fine-tuning (or training from scratch) on the IML documents.

The paper fine-tunes Pythia with the HF Trainer: loss on the full text (no prompt masking), block size 48,
Adafactor at the Trainer's default learning rate 5e-5 with linear decay, no warm-up, no weight decay. Stage 2
starts from the stage-1 weights (`init_from`). Answers are scored by `callbacks.iml_tagging.IMLTagging`, which
uses this module's `model` and `tokenizer`.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Optional, Union

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from zoo.errors import ZooError
from zoo.hub import HubMixin, check_state_fits, load_checkpoint, load_state_dict_file, load_weights, resolve_weights
from zoo.lm import DType, build_causal_lm, linear_warmup_decay, load_tokenizer, right_pad

TINY_GPT_NEOX = {"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "intermediate_size": 256, "max_position_embeddings": 128, "rotary_pct": 0.25}


# The data settings that fix which entity is in which subset under which alias. Stage 2 is the paper's experiment
# only on the split stage 1 trained on: with another seed, file or count its "consistent" definitions name other
# entities, and the run would finish with meaningless scores.
SPLIT_HPARAMS = ("source", "path", "num_ents", "seed", "var_length", "test_frac", "equalize_gender", "encoding")


def check_stage1_split(stage1: dict[str, Any], stage2: dict[str, Any], ckpt: str) -> None:
    """Refuse a stage-2 datamodule whose split settings differ from those stage 1's checkpoint recorded."""
    keys = [k for k in stage1 if (k in SPLIT_HPARAMS or k.startswith("frac_")) and k in stage2]
    differ = [k for k in keys if stage1[k] != stage2[k] and not (k == "path" and _same_file(stage1[k], stage2[k]))]
    if differ:
        raise ZooError(f"stage 2 must use stage 1's data split, but init_from {ckpt} was trained with "
                       + ", ".join(f"{k}={stage1[k]!r}" for k in differ) + " and this run sets "
                       + ", ".join(f"{k}={stage2[k]!r}" for k in differ) + ": pass --data.init_args.<name> to match")


def _same_file(a: Any, b: Any) -> bool:
    try:
        return a is not None and b is not None and os.path.samefile(a, b)
    except OSError:
        return False


def load_init_state(init_from: str) -> dict[str, torch.Tensor]:
    """The stage-1 weights `init_from` names (a checkpoint, a Hub directory, a run directory or a glob)."""
    return load_weights(resolve_weights(init_from, "init_from", "run stage 1 first"))


def appends_eos(tokenizer) -> bool:
    ids = tokenizer("a")["input_ids"]
    return bool(ids) and ids[-1] == tokenizer.eos_token_id


def without_auto_eos(tokenizer):
    """ByT5's tokenizer ends every text with EOS, so a prompt "Q: ...\nA:" would end in EOS and a decoder-only
    LM would answer after an end-of-document token. Turn that off on this instance; EOS is then appended
    explicitly to training documents only (encode_for_lm)."""
    if appends_eos(tokenizer):
        tokenizer.build_inputs_with_special_tokens = lambda ids0, ids1=None: list(ids0) + list(ids1 or [])
    return tokenizer


def eos_to_append(tokenizer) -> bool:
    """Whether documents need an explicit EOS id (the tokenizer neither adds one itself nor lacks one)."""
    return not appends_eos(tokenizer) and tokenizer.eos_token_id is not None


def encode_for_lm(tokenizer, texts: list[str], block_size: int, add_eos: bool | None = None) -> dict[str, torch.Tensor]:
    """Full-text LM targets (no prompt masking, as in the paper); each document ends in EOS so greedy answers
    learn to stop; right padding is masked (the official code pads with EOS and trains on the padding too).
    EOS is appended as an id: as a "</s>" string some tokenizers strip the newline before it. `add_eos`:
    `eos_to_append(tokenizer)`, passed by callers that encode every step (it runs the tokenizer once)."""
    if add_eos is None:
        add_eos = eos_to_append(tokenizer)
    rows = []
    for ids in tokenizer(list(texts))["input_ids"]:
        ids = list(ids) + ([tokenizer.eos_token_id] if add_eos else [])
        rows.append(ids[:block_size])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids, attention_mask = right_pad(rows, pad)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class IMLModule(HubMixin, L.LightningModule):
    def __init__(
        self,
        model: Union[str, dict[str, Any]] = TINY_GPT_NEOX,
        tokenizer: str = "byt5",
        block_size: int = 48,
        lr: float = 5e-5,
        optimizer: Literal["adafactor", "adamw"] = "adafactor",
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        lr_schedule: Literal["linear", "constant"] = "linear",
        torch_dtype: Optional[DType] = None,
        init_from: Optional[str] = None,
    ):
        """
        Args:
            model: HF causal LM name/path (pretrained, e.g. "EleutherAI/pythia-2.8b-deduped") or a config dict
                (random init, e.g. a tiny GPT-NeoX); `vocab_size` and special token ids default to the tokenizer's.
            tokenizer: HF tokenizer name/path, or "byt5" (file-free bytes).
            block_size: tokens per training document, truncated beyond (paper: 48 Pythia tokens).
            lr / optimizer / weight_decay / warmup_steps / lr_schedule: HF Trainer defaults of the paper
                (Adafactor without relative step, 5e-5, linear decay to 0).
            init_from: stage-1 weights for stage 2: a .ckpt, a HubMixin directory, or a run directory (glob
                allowed: newest match). Loaded when fitting starts; resuming with --ckpt_path overrides it.
        """
        super().__init__()
        if block_size < 1:  # 0 was a reshape error deep inside the transformer's attention
            raise ZooError(f"block_size must be >= 1, got {block_size}")
        self.save_hyperparameters()
        self.tokenizer = without_auto_eos(load_tokenizer(tokenizer))
        self._add_eos = eos_to_append(self.tokenizer)  # fixed per tokenizer: not re-asked every step
        if isinstance(model, dict):
            cfg = dict(model)
            cfg.setdefault("vocab_size", len(self.tokenizer))
            for k in ("pad_token_id", "eos_token_id", "bos_token_id"):
                tok_id = getattr(self.tokenizer, k)
                if tok_id is not None:
                    cfg.setdefault(k, tok_id)
            if cfg["vocab_size"] < len(self.tokenizer):
                raise ZooError(f"model vocab_size {cfg['vocab_size']} < tokenizer size {len(self.tokenizer)}")
            model = cfg
        self.model = build_causal_lm(model, torch_dtype=torch_dtype)

    # ------------------------------------------------------------------ data -> tensors

    def encode(self, texts: list[str]) -> dict[str, torch.Tensor]:
        batch = encode_for_lm(self.tokenizer, texts, self.hparams.block_size, self._add_eos)
        return {k: v.to(self.device) for k, v in batch.items()}

    def lm_loss(self, texts: list[str]) -> torch.Tensor:
        return self.model(**self.encode(texts)).loss

    # ------------------------------------------------------------------ Lightning

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.hparams.init_from:
            # resolved once: a glob could match a newer run later
            path = resolve_weights(self.hparams.init_from, "init_from", "run stage 1 first")
            if path.suffix == ".safetensors":  # a published model: its data settings are in its card, not here
                state = load_state_dict_file(path)
            else:
                ckpt = load_checkpoint(path)
                state = ckpt["state_dict"]
                datamodule = getattr(self.trainer, "datamodule", None)
                if ckpt.get("datamodule_hyper_parameters") and getattr(datamodule, "hparams", None) is not None:
                    check_stage1_split(ckpt["datamodule_hyper_parameters"], dict(datamodule.hparams), str(path))
            self.prepare_state_dict_load(state)
            check_state_fits(self.state_dict(), state, f"init_from {self.hparams.init_from!r}")
            self.load_state_dict(state)
            rank_zero_info(f"IMLModule: initialised from {path}")

    def training_step(self, batch, batch_idx):
        loss = self.lm_loss(batch["text"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["text"]))
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self.lm_loss(batch["text"])
        self.log("val/loss", loss, batch_size=len(batch["text"]), sync_dist=True)
        return loss

    def test_step(self, batch, batch_idx):
        loss = self.lm_loss(batch["text"])
        self.log("test/loss", loss, batch_size=len(batch["text"]))
        return loss

    def configure_optimizers(self):
        hp = self.hparams
        params = [p for p in self.parameters() if p.requires_grad]
        if hp.optimizer == "adafactor":
            from transformers.optimization import Adafactor

            # what HF Trainer's optim="adafactor" builds: external lr, no parameter scaling / relative step
            opt = Adafactor(params, lr=hp.lr, scale_parameter=False, relative_step=False,
                            weight_decay=hp.weight_decay)
        elif hp.optimizer == "adamw":
            opt = torch.optim.AdamW(params, lr=hp.lr, weight_decay=hp.weight_decay)
        else:
            raise ZooError(f"unknown optimizer {hp.optimizer!r}; use 'adafactor' or 'adamw'")
        total = max(1, int(self.trainer.estimated_stepping_batches))
        factor = linear_warmup_decay(hp.warmup_steps, total, decay=hp.lr_schedule != "constant")
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def card_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tags": ["implicit-meta-learning", "causal-lm"], "pipeline_tag": "text-generation"}
        if isinstance(self.hparams.model, str):
            meta["base_model"] = self.hparams.model
        return meta
