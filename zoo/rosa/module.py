"""LightningModules: RoSA / QRoSA (`RoSAModule`), the PEFT LoRA baseline (`LoRABaselineModule`) and full
fine-tuning (`FullFinetuneModule`, the paper's FFT rows) on a causal LM.

All three train with the official GSM8K recipe (AdamW, β = (0.9, 0.999), no weight decay, linear warm-up for 20
optimizer steps then linear decay to 0, global batch 32 as micro-batch 1 × 32 accumulated) and evaluate with
the lm-eval-harness protocol (0-shot, greedy, stop strings, `#### N` exact match; `zoo.rosa.gsm8k`).

Checkpoints and Hub weights. The sparse support is data-dependent but its size is not (exactly int(d·numel)
per layer), so `sparse_index` (buffer), `sparse_ready` (buffer) and `sparse_values` (parameter) are allocated
at construction and simply loaded; `prepare_state_dict_load` (also run from `on_load_checkpoint`, so
`zoo test --ckpt_path last.ckpt` and resumed fits restore the masked layers) checks that the incoming mask
fits this model's layers and density and that the adapters are present, with a one-line error. When the
base model is a Hub name, checkpoints and `save_pretrained` hold the adapters only (LoRA factors, sparse
indices and values: tens of MB instead of 13 GB) and the frozen base is re-read from its name; a base built from
a config dict (random weights: smoke runs, tests) is saved in full (`adapters_only`). Hence `hub_strict` is
False for named bases; the adapter keys are checked explicitly instead.

The Fisher mask is made by Lightning's own loop (official `RosaScheduler`, schedule `wl64`): when `density > 0`
and no mask is given, the fit trains the LoRA factors alone for `mask_warmup_steps` optimizer steps, records
each micro-batch's full-weight gradient during the next `mask_grad_steps` steps (`FisherCollector` hooks on the
backward passes Lightning runs; under DDP each rank on its own shard, then the scores are averaged through
`trainer.strategy.reduce`), takes the per-layer top-k and writes `<run dir>/rosa_mask.safetensors`. Then either
the fit stops (`stop_after_mask`: the paper's first run, official `terminate_after_mask_generation`) and a
second run trains from the pretrained weights with `mask_path` pointing at that file (the paper's recipe), or
LoRA + sparse values train on in the same fit (the official one-run schedule).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Literal, Optional, Union

import lightning.pytorch as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.nn.parallel import DistributedDataParallel
from transformers.pytorch_utils import Conv1D

from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.lm import DType, build_causal_lm, generate, linear_warmup_decay, load_tokenizer
from zoo.rosa.gsm8k import STOP_STRINGS, GSM8KExactMatch, extract_answer, is_correct
from zoo.rosa.layer import check_sddmm_kernel
from zoo.rosa.mask import (
    ALL_LINEAR,
    FisherCollector,
    apply_rosa,
    check_density,
    find_targets,
    fisher_mask,
    load_mask,
    rosa_layers,
    save_mask,
    scores_from_means,
)
from zoo.rundir import newest_match

ADAPTER_KEYS = ("lora_A", "lora_B", "sparse_values", "sparse_index", "sparse_ready")
MASK_FILE = "rosa_mask.safetensors"  # written into the run directory by a fit that generates the mask


def check_positive(**values: float) -> None:
    """Learning rates and the generation budget: a rate of 0 trained nothing without a word, max_new_tokens 0 failed
    inside transformers' generate at the first evaluation."""
    for name, v in values.items():
        if not v > 0:
            raise ZooError(f"{name} must be positive, got {v}")


class CausalLMFinetune(HubMixin, L.LightningModule):
    """Shared training/evaluation of an adapted causal LM; subclasses build `self.model` and name param groups."""

    monitor = "val/exact_match"
    monitor_mode = "max"

    @property
    def adapters_only(self) -> bool:
        """Whether checkpoints and Hub copies hold the adapters alone: for a named base, whose frozen weights are
        re-read from its name (see the module docstring); a base from a config dict is saved in full."""
        return self.base_name is not None

    @property
    def hub_strict(self) -> bool:
        return not self.adapters_only

    def _init_common(self, model, tokenizer):
        self.base_name = model if isinstance(model, str) else None
        self.tokenizer = load_tokenizer(tokenizer or (model if isinstance(model, str) else "byt5"))
        self.val_em, self.test_em = GSM8KExactMatch(), GSM8KExactMatch()
        self._test_rows: list[dict] = []
        # Adapters-only checkpoints: Lightning must not demand the frozen weights.
        self.strict_loading = not self.adapters_only

    # --- training -----------------------------------------------------------------------------------------
    def training_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          labels=batch["labels"]).loss

    def training_step(self, batch, batch_idx):
        loss = self.training_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def param_groups(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def total_steps(self) -> int:
        """Optimizer steps of the whole fit (the LR schedule's length; a mask run that stops early keeps the
        full-length schedule, as composer's scheduler does in the official first run)."""
        return max(1, int(self.trainer.estimated_stepping_batches))

    def build_optimizer(self, groups: list[dict[str, Any]], total_steps: int):
        hp = self.hparams
        opt = torch.optim.AdamW(groups, betas=tuple(hp.betas), weight_decay=hp.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup_decay(hp.lr_warmup_steps, total_steps))
        return opt, sched

    def configure_optimizers(self):
        opt, sched = self.build_optimizer(self.param_groups(), self.total_steps())
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # --- evaluation ---------------------------------------------------------------------------------------
    def _generate(self, batch) -> list[str]:
        # no special tokens, as the official evaluation: lm-eval-harness (2c18e367, hf-causal-experimental)
        # encodes a causal LM's context with add_special_tokens=False, so Llama-2 sees no BOS there. The model is
        # evaluated unmerged; the official bf16 evaluation merges the adapters into bf16 weights first
        # (merge_adapter_bf16.py), whose rounding of W + ΔW is not reproduced here (cards/rosa.md)
        outs = generate(self.model, self.tokenizer, batch["prompt"], max_new_tokens=self.hparams.max_new_tokens,
                        stop=tuple(self.hparams.stop), add_special_tokens=False)
        return [o[0] for o in outs]

    def validation_step(self, batch, batch_idx):
        self.val_em.update(self._generate(batch), batch["answer"])
        self.log("val/exact_match", self.val_em, batch_size=len(batch["prompt"]), prog_bar=True)

    def test_step(self, batch, batch_idx):
        completions = self._generate(batch)
        self.test_em.update(completions, batch["answer"])
        self.log("test/exact_match", self.test_em, batch_size=len(batch["prompt"]))
        self._test_rows += [{"question": q, "completion": c, "reference": a}
                            for q, c, a in zip(batch["question"], completions, batch["answer"])]

    def on_test_epoch_end(self) -> None:
        if self.trainer is None or not self._test_rows:
            return
        rank = self.trainer.global_rank
        path = Path(self.trainer.default_root_dir) / f"gsm8k_test_generations{f'.rank{rank}' if rank else ''}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for r in self._test_rows:
                r = {**r, "extracted": extract_answer(r["completion"]),
                     "correct": is_correct(r["completion"], r["reference"])}
                f.write(json.dumps(r) + "\n")
        rank_zero_info(f"GSM8K generations written to {path}")
        self._test_rows = []

    # --- checkpoints / Hub --------------------------------------------------------------------------------
    def is_adapter_key(self, key: str) -> bool:
        return any(f".{k}" in key for k in ADAPTER_KEYS)

    def hub_state_dict(self) -> dict[str, torch.Tensor]:
        state = self.state_dict()
        if not self.adapters_only:  # e.g. a random-init base from a config dict: only the full weights rebuild it
            return state
        return {k: v for k, v in state.items() if self.is_adapter_key(k)}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.adapters_only:
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if self.is_adapter_key(k)}

    def prepare_state_dict_load(self, state_dict: dict[str, torch.Tensor]) -> None:
        mine = self.state_dict()
        missing = [k for k in mine if self.is_adapter_key(k) and k not in state_dict]
        if missing:
            raise ZooError(f"weights lack the adapters of this {type(self).__name__} (e.g. {missing[0]}); "
                           f"were they saved with the same target_modules and r?")

    def card_metadata(self) -> dict[str, Any]:
        # the data it was trained on is the datamodule's to say (datasets / data_source)
        return {"tags": ["rosa", "peft", "lora", "gsm8k"], "pipeline_tag": "text-generation",
                "base_model": self.base_name or None}


class RoSAModule(CausalLMFinetune):
    """RoSA (and QRoSA with `quantize: nf4`): LoRA + sparse adapters on every target linear of a causal LM."""

    def __init__(
        self,
        model: Union[str, dict[str, Any]] = "meta-llama/Llama-2-7b-hf",
        tokenizer: Optional[str] = None,
        torch_dtype: Optional[DType] = None,
        target_modules: Union[str, list[str]] = ALL_LINEAR,
        r: int = 16,
        lora_alpha: float = 16.0,
        lora_dropout: float = 0.05,
        density: float = 0.018,
        quantize: Optional[Literal["nf4"]] = None,
        mask_path: Optional[str] = None,
        mask_warmup_steps: int = 64,
        mask_grad_steps: int = 1,
        fisher_mode: Literal["mean_squared", "mean"] = "mean_squared",
        stop_after_mask: bool = False,
        sddmm: Literal["auto", "csr", "gather", "blocked"] = "auto",
        lr: float = 2e-4,
        lora_lr: float = 7e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        lr_warmup_steps: int = 20,
        max_new_tokens: int = 256,
        stop: list[str] = list(STOP_STRINGS),
    ):
        """
        Args:
            model: base causal LM: a Hub name / local path (pretrained) or a config dict (random weights).
            tokenizer: tokenizer name ("byt5" for the file-free byte tokenizer); default: the model's name.
            torch_dtype: dtype of the frozen base ("bfloat16" in the paper); adapters are float32 (the official
                `rosa_dtype: bf16` keeps A, B, the values and their AdamW states in bf16: cards/rosa.md).
            target_modules: "all-linear" (every linear except the LM head) or module names (PEFT matching).
            r: LoRA rank (0 = sparse adapters only, `spa_only`).
            lora_alpha: LoRA α; the low-rank branch is scaled by α/r.
            lora_dropout: dropout on the low-rank branch's input.
            density: fraction d of each target weight that is sparse-adapted (0 = LoRA only, `lora_only`).
            quantize: "nf4" stores the frozen target weights in NF4 with double quantisation (QRoSA).
            mask_path: a saved mask (`<run dir>/rosa_mask.safetensors` of a run that generated it; a glob such as
                `runs/rosa_gsm8k_mask/*/rosa_mask.safetensors` takes its newest match): LoRA + sparse values train
                with it from step 0 (the paper's second run, official `mask_load_path`). It is read when a fit
                starts, not at construction: checkpoints and Hub weights hold the mask, so `zoo test`,
                `from_pretrained` and copies on other machines never need the file. Without it (density > 0) a
                fit generates the mask itself, through the schedule below.
            mask_warmup_steps: LoRA-only optimizer steps before the gradients are collected (official schedule
                `wl64`: 64). With r = 0 there is no LoRA to warm up and collection starts at once (`spa_only`).
            mask_grad_steps: optimizer steps whose micro-batch gradients form the Fisher scores (official
                `spa_num_grads`: 1, i.e. 32 micro-batches at the paper's accumulation).
            fisher_mode: "mean_squared" (running mean of G², the empirical diagonal Fisher; official default) or
                "mean" (|mean of G|).
            stop_after_mask: end the fit as soon as the mask is saved (official `terminate_after_mask_generation`:
                the paper's first run); otherwise LoRA + sparse values train on in the same fit (the official
                one-run schedule; under DDP this needs `strategy: ddp_find_unused_parameters_true`, since the
                sparse values take no part in the first steps).
            sddmm: kernel of the sparse value gradient: "auto" (PyTorch's CSR SDDMM where the build has it, else
                gather/blocked by density), "csr", "gather" or "blocked" (all exact; see `zoo.rosa.layer`).
            lr: learning rate of the sparse values (paper 2e-4).
            lora_lr: learning rate of the LoRA factors A, B (paper 7e-4, a separate param group).
            weight_decay: AdamW weight decay (paper 0).
            betas: AdamW betas.
            lr_warmup_steps: linear warm-up in optimizer steps, then linear decay to 0 (paper 20).
            max_new_tokens: generation budget at evaluation (lm-eval-harness default 256).
            stop: stop strings for greedy decoding (lm-eval-harness gsm8k).
        """
        super().__init__()
        self.save_hyperparameters()
        check_positive(lr=lr, lora_lr=lora_lr, max_new_tokens=max_new_tokens)
        check_density(density)
        check_sddmm_kernel(sddmm)
        if r == 0 and density == 0:
            raise ZooError("r=0 and density=0 leave nothing to train; set r > 0 and/or density in (0, 1)")
        if mask_warmup_steps < 0 or mask_grad_steps < 1:
            raise ZooError(f"the RoSA mask schedule needs mask_warmup_steps >= 0 and mask_grad_steps >= 1, got "
                           f"{mask_warmup_steps} and {mask_grad_steps}")
        if fisher_mode not in ("mean_squared", "mean"):
            raise ZooError(f"unknown fisher_mode {fisher_mode!r}; use 'mean_squared' or 'mean'")
        if mask_path is not None and density == 0:
            raise ZooError("mask_path is set but density=0 (LoRA only) would ignore it")
        if stop_after_mask and (density == 0 or mask_path is not None):
            raise ZooError("stop_after_mask ends a fit that generates the RoSA mask: it needs density > 0 and no "
                           "mask_path")
        self.model = build_causal_lm(model, torch_dtype=torch_dtype)  # first: a missing base names the model
        self._init_common(model, tokenizer)
        self.layers = apply_rosa(self.model, target_modules, r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                                 density=density, quantize=quantize, sddmm=sddmm)
        if stop_after_mask and r > 0:  # a mask run never trains the values; DDP must not wait for their gradients
            for p in self.sparse_parameters():
                p.requires_grad_(False)
        self.fisher: Optional[FisherCollector] = None  # open while this fit collects the gradients of the mask
        self._collect_until = 0

    # --- the mask -----------------------------------------------------------------------------------------
    @property
    def has_mask(self) -> bool:
        return all(layer.mask_ready for layer in self.layers.values())

    @property
    def generates_mask(self) -> bool:
        """Whether a fit of this module makes the mask (density > 0, no mask_path, no mask from a checkpoint)."""
        return self.hparams.density > 0 and self.hparams.mask_path is None and not self.has_mask

    @property
    def ddp_find_unused_parameters(self) -> bool:
        """DDP's setting (callbacks/distributed.py): a fit that makes the mask leaves the sparse values idle until the
        mask exists. Read at setup, before a resumed checkpoint's mask is loaded, so a resume also gets it."""
        return self.generates_mask

    def load_mask_file(self) -> Path:
        """Set the mask saved at `mask_path` (its newest match if it is a glob); returns the file read."""
        path = newest_match(self.hparams.mask_path, "mask_path", "run the mask stage first (a fit with "
                            "stop_after_mask: true, e.g. zoo fit --config configs/rosa_gsm8k_mask.yaml)")
        self.set_masks(load_mask(path, self.layers))
        rank_zero_info(f"RoSA mask read from {path}")
        return Path(path)

    @property
    def mask_warmup(self) -> int:
        """LoRA-only steps before the collection (none with r = 0: nothing to warm up, as official `spa_only`)."""
        return self.hparams.mask_warmup_steps if self.hparams.r > 0 else 0

    def set_masks(self, masks: dict[str, torch.Tensor]) -> None:
        for name, layer in self.layers.items():
            layer.set_mask(masks[name])

    def masks(self) -> dict[str, torch.Tensor]:
        return {name: layer.sparse_index for name, layer in self.layers.items()}

    def save_mask(self, path: str | Path) -> Path:
        return save_mask(path, self.masks(), self.hparams.density)

    def prepare_state_dict_load(self, state_dict: dict[str, torch.Tensor]) -> None:
        for name, layer in self.layers.items():
            index = state_dict.get(f"model.{name}.sparse_index")
            if index is None:
                continue
            rows, cols = layer.weight_shape
            if index.numel() != layer.nnz or (index.numel() and int(index.max()) >= rows * cols):
                raise ZooError(f"the sparse mask of {name!r} in the weights ({index.numel()} entries) does not fit "
                               f"this model ({rows}x{cols} at density {self.hparams.density}: {layer.nnz} entries)")
        super().prepare_state_dict_load(state_dict)

    # --- optimisation -------------------------------------------------------------------------------------
    def lora_parameters(self) -> list[torch.nn.Parameter]:
        return [p for layer in self.layers.values() if layer.lora_A is not None
                for p in (layer.lora_A.weight, layer.lora_B.weight)]

    def sparse_parameters(self) -> list[torch.nn.Parameter]:
        return [layer.sparse_values for layer in self.layers.values() if layer.nnz]

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """A copy of the trainable adapter tensors."""
        return {k: v.detach().clone() for k, v in self.state_dict().items() if self.is_adapter_key(k)}

    def param_groups(self) -> list[dict[str, Any]]:
        groups = []
        if self.lora_parameters():
            groups.append({"params": self.lora_parameters(), "lr": self.hparams.lora_lr, "name": "lora"})
        sparse = [p for p in self.sparse_parameters() if p.requires_grad]
        if sparse:  # allocated at construction; until the mask exists they get no gradient and AdamW skips them
            groups.append({"params": sparse, "lr": self.hparams.lr, "name": "sparse"})
        return groups

    # --- the mask schedule (Lightning hooks) ----------------------------------------------------------------
    def setup(self, stage: str) -> None:
        # Before a resumed checkpoint is restored (which then brings its own, identical, mask).
        if stage == "fit" and self.hparams.mask_path is not None and not self.has_mask:
            self.load_mask_file()

    def on_fit_start(self) -> None:
        # After a resumed checkpoint is restored and the strategy has wrapped the model.
        if not self.generates_mask:
            return
        hp, trainer = self.hparams, self.trainer
        needed = self.mask_warmup + hp.mask_grad_steps
        if trainer.estimated_stepping_batches < needed:
            raise ZooError(f"this fit has {trainer.estimated_stepping_batches} optimizer steps, but the RoSA mask "
                           f"needs {needed} (mask_warmup_steps={self.mask_warmup} + mask_grad_steps="
                           f"{hp.mask_grad_steps}); train longer or pass a mask with mask_path")
        # The zoo's trainer turns find_unused_parameters on from `ddp_find_unused_parameters`; this guards a plain
        # Lightning Trainer with a DDP strategy that leaves it off
        wrapped = trainer.strategy.model
        idle = [p for p in self.sparse_parameters() if p.requires_grad]
        if idle and isinstance(wrapped, DistributedDataParallel) and not wrapped.find_unused_parameters:
            raise ZooError("generating the RoSA mask inside a DDP training run leaves the sparse values unused for "
                           "the first steps: use strategy ddp_find_unused_parameters_true, or run the mask stage "
                           "(stop_after_mask: true) and train with mask_path")
        then = "stop (mask stage)" if hp.stop_after_mask else "train LoRA + sparse values on"
        rank_zero_info(f"RoSA mask: {self.mask_warmup} LoRA-only steps, then the Fisher ({hp.fisher_mode}) over "
                       f"{hp.mask_grad_steps} step(s) of micro-batches, then {then}")

    def on_train_batch_start(self, batch, batch_idx) -> None:
        if self.fisher is None and self.generates_mask and self.trainer.global_step >= self.mask_warmup:
            self.fisher = FisherCollector(self.model, self.layers, self.hparams.fisher_mode).open()
            self._collect_until = self.trainer.global_step + self.hparams.mask_grad_steps

    # The collection is folded and the mask made in hooks that run before the callbacks' `on_train_batch_end`, where
    # `last.ckpt` is written every N steps: a checkpoint of the last collection step holds the mask, and one inside a
    # collection of several steps holds its sums (`on_save_checkpoint`), so a resumed fit makes the uninterrupted
    # run's mask (made in the module's `on_train_batch_end`, a step checkpoint had neither, and the resumed fit
    # collected the Fisher again over later micro-batches).
    def on_after_backward(self) -> None:
        if self.fisher is not None:
            self.fisher.end_microbatch()  # this micro-batch's backward (run by Lightning) is done

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        # Lightning counts the step after this hook: global_step + 1 steps have been taken
        if self.fisher is not None and self.trainer.global_step + 1 >= self._collect_until:
            self.finish_mask()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.fisher is not None:  # saved between optimizer steps: every micro-batch so far is folded
            checkpoint["rosa_fisher"] = {"total": dict(self.fisher.total), "count": self.fisher.count,
                                         "collect_until": self._collect_until}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint.get("rosa_fisher")
        if saved is not None:  # reopened when the resumed fit starts training (`on_train_start`)
            self.fisher = FisherCollector(self.model, self.layers, self.hparams.fisher_mode)
            self.fisher.total = dict(saved["total"])
            self.fisher.count, self._collect_until = int(saved["count"]), int(saved["collect_until"])

    def on_train_end(self) -> None:
        if self.fisher is not None:  # stopped before the collection ended (e.g. interrupted): drop the hooks
            self.fisher.close()
            self.fisher = None

    def fisher_scores(self, fisher: FisherCollector) -> dict[str, torch.Tensor]:
        """This fit's Fisher scores per layer; under DDP the ranks' means (each over its own micro-batches, the same
        number on every rank) are averaged through the strategy, so every rank takes the same top-k of the mean over
        all micro-batches. With `fisher_mode: mean` the signed Ḡ is averaged and its absolute value taken after
        (averaging the ranks' |Ḡ| would score another quantity)."""
        means = fisher.means()
        if self.trainer.world_size > 1:
            means = {n: self.trainer.strategy.reduce(m.to(self.device), reduce_op="mean") for n, m in means.items()}
        return scores_from_means(means, fisher.mode)

    def finish_mask(self) -> None:
        """Top-k of the Fisher scores per layer → the mask: set it, save it into the run dir, stop if asked."""
        fisher, self.fisher = self.fisher, None
        fisher.close()
        masks = fisher_mask(self.fisher_scores(fisher), self.hparams.density)
        count = fisher.count
        del fisher  # the per-layer accumulators (one weight-sized fp32 tensor each)
        self.set_masks(masks)
        rank_zero_info(f"RoSA mask: Fisher over {count} micro-batches (per rank) after {self.mask_warmup} LoRA steps; "
                       f"{sum(m.numel() for m in masks.values()):,} sparse entries in {len(masks)} layers")
        if self.trainer.is_global_zero:
            path = save_mask(Path(self.trainer.default_root_dir) / MASK_FILE, masks, self.hparams.density)
            rank_zero_info(f"RoSA mask saved to {path} (train with it: model.init_args.mask_path)")
        if self.hparams.stop_after_mask:
            self.trainer.should_stop = True

    def on_train_start(self) -> None:
        if self.fisher is not None:  # a collection restored from a checkpoint (`on_load_checkpoint`)
            self.fisher.total = {n: t.to(self.device) for n, t in self.fisher.total.items()}
            self.fisher.open()
        hp = self.hparams
        if hp.stop_after_mask and hp.mask_path is None and hp.density > 0 and self.has_mask:
            self.trainer.should_stop = True  # resumed after this fit made its mask: the mask stage is over
        n_lora = sum(p.numel() for p in self.lora_parameters())
        n_sparse = sum(layer.nnz for layer in self.layers.values())
        rank_zero_info(f"RoSA: {len(self.layers)} adapted layers, {n_lora:,} LoRA + {n_sparse:,} sparse parameters")

    # --- merge / export -----------------------------------------------------------------------------------
    def merged_model(self) -> torch.nn.Module:
        """A copy of the base model with W + (α/r)BA + dense(S) folded in (bf16/fp32 bases only)."""
        if self.hparams.quantize:
            raise ZooError("QRoSA (NF4 base) cannot be merged, as in the official code; export adapters instead")
        merged = copy.deepcopy(self.model)
        for name, layer in rosa_layers(merged).items():
            layer.merge()
            parent_name, _, child = name.rpartition(".")
            setattr(merged.get_submodule(parent_name) if parent_name else merged, child, layer.base_layer)
        return merged

    def export(self, directory: str | Path, merged: bool = True) -> Path:
        """`merged=True`: a plain HF model directory (`from_pretrained`-able); else the adapters + mask alone."""
        directory = Path(directory)
        if merged:
            self.merged_model().save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)
        else:
            from safetensors.torch import save_file

            directory.mkdir(parents=True, exist_ok=True)
            state = {k: v.contiguous().cpu() for k, v in self.state_dict().items() if self.is_adapter_key(k)}
            save_file(state, str(directory / "rosa_adapters.safetensors"),
                      metadata={"base_model": json.dumps(self.hparams.model), "r": str(self.hparams.r),
                                "lora_alpha": str(self.hparams.lora_alpha), "density": str(self.hparams.density)})
        return directory


class LoRABaselineModule(CausalLMFinetune):
    """The LoRA baseline through PEFT's reference implementation (`LoraConfig` + `get_peft_model`)."""

    def __init__(
        self,
        model: Union[str, dict[str, Any]] = "meta-llama/Llama-2-7b-hf",
        tokenizer: Optional[str] = None,
        torch_dtype: Optional[DType] = None,
        target_modules: Union[str, list[str]] = ALL_LINEAR,
        r: int = 16,
        lora_alpha: float = 16.0,
        lora_dropout: float = 0.05,
        lora_lr: float = 7e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        lr_warmup_steps: int = 20,
        max_new_tokens: int = 256,
        stop: list[str] = list(STOP_STRINGS),
    ):
        """
        Args:
            model: base causal LM: a Hub name / local path (pretrained) or a config dict (random weights).
            tokenizer: tokenizer name ("byt5" for the file-free byte tokenizer); default: the model's name.
            torch_dtype: dtype of the frozen base ("bfloat16" in the paper).
            target_modules: "all-linear" or module names (passed to PEFT).
            r: LoRA rank.
            lora_alpha: LoRA α (scaling α/r).
            lora_dropout: LoRA dropout.
            lora_lr: learning rate of A and B (the official lora_only run uses LORA_LR = 7e-4).
            weight_decay: AdamW weight decay.
            betas: AdamW betas.
            lr_warmup_steps: linear warm-up steps, then linear decay to 0.
            max_new_tokens: generation budget at evaluation.
            stop: stop strings for greedy decoding.
        """
        super().__init__()
        self.save_hyperparameters()
        if r <= 0:
            raise ZooError(f"LoRA rank r must be positive, got {r}")
        check_positive(lora_lr=lora_lr, max_new_tokens=max_new_tokens)
        from peft import LoraConfig, get_peft_model

        base = build_causal_lm(model, torch_dtype=torch_dtype)
        self._init_common(model, tokenizer)
        targets = find_targets(base, target_modules)  # same matching rules and errors as RoSA
        # GPT-2's Conv1D stores W as (in, out): PEFT's fan_in_fan_out (PEFT would switch it on with a warning)
        fan_in_fan_out = any(isinstance(base.get_submodule(n), Conv1D) for n in targets)
        config = LoraConfig(r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, target_modules=targets,
                            fan_in_fan_out=fan_in_fan_out, task_type="CAUSAL_LM")
        self.model = get_peft_model(base, config)

    def param_groups(self) -> list[dict[str, Any]]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        return [{"params": params, "lr": self.hparams.lora_lr, "name": "lora"}]

    def merged_model(self) -> torch.nn.Module:
        return copy.deepcopy(self.model).merge_and_unload()


class FullFinetuneModule(CausalLMFinetune):
    """Full fine-tuning (the paper's FFT rows): every weight of the causal LM trains, with the same AdamW, warm-up
    and linear decay as the adapters. The official repository has no FFT script, so its learning rate is ours to
    choose (see `lr`). Checkpoints and Hub weights hold the whole model, also for a named base.

    `export_dir` also writes the fine-tuned model as a plain Hugging Face directory (`save_pretrained`: config,
    safetensors weights, tokenizer) when the fit ends, so another run can adapt it as its `model` (a local path):
    how the CPU reproduction makes its own small "pretrained" base (configs/sweeps/rosa_tiny.yaml).
    """

    def __init__(
        self,
        model: Union[str, dict[str, Any]] = "meta-llama/Llama-2-7b-hf",
        tokenizer: Optional[str] = None,
        torch_dtype: Optional[DType] = None,
        lr: float = 2e-5,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        lr_warmup_steps: int = 20,
        max_new_tokens: int = 256,
        stop: list[str] = list(STOP_STRINGS),
        export_dir: Optional[str] = None,
    ):
        """
        Args:
            model: causal LM: a Hub name / local path (pretrained) or a config dict (random weights).
            tokenizer: tokenizer name ("byt5" for the file-free byte tokenizer); default: the model's name.
            torch_dtype: dtype of the weights (full fine-tuning trains them in this dtype).
            lr: peak learning rate (not in the official code, which has no FFT script; 2e-5 is our default for
                a 7B model and a config's to change).
            weight_decay, betas, lr_warmup_steps: AdamW and the schedule, as the adapters'.
            max_new_tokens, stop: greedy decoding at evaluation, as the adapters'.
            export_dir: where to write the fine-tuned model as a Hugging Face directory when the fit ends; a
                relative path is taken inside the run directory (e.g. ``hf_model``). None: no export.
        """
        super().__init__()
        self.save_hyperparameters()
        check_positive(lr=lr, max_new_tokens=max_new_tokens)
        self.model = build_causal_lm(model, torch_dtype=torch_dtype)
        self._init_common(model, tokenizer)

    @property
    def adapters_only(self) -> bool:  # every weight is trained, so every weight is saved and must load
        return False

    def param_groups(self) -> list[dict[str, Any]]:
        return [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": self.hparams.lr,
                 "name": "full"}]

    def merged_model(self) -> torch.nn.Module:
        return self.model

    def card_metadata(self) -> dict[str, Any]:
        return {**super().card_metadata(), "tags": ["rosa", "full-fine-tuning", "gsm8k"]}

    def export(self, directory: str | Path) -> Path:
        """The model as a plain Hugging Face directory (`from_pretrained`-able), with its tokenizer."""
        directory = Path(directory)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        return directory

    def on_fit_end(self) -> None:
        if self.hparams.export_dir is None or self.trainer.global_rank != 0:
            return
        directory = Path(self.hparams.export_dir)
        if not directory.is_absolute():
            directory = Path(self.trainer.default_root_dir) / directory
        rank_zero_info(f"FFT: the fine-tuned model written to {self.export(directory)}")


__all__ = ["RoSAModule", "LoRABaselineModule", "FullFinetuneModule", "CausalLMFinetune"]
