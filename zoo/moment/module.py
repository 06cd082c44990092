"""Lightning modules of MOMENT, one per way the paper uses it:

* `MOMENTForecastingModule`: long-horizon forecasting, linear probing by default (embedder and encoder frozen).
* `MOMENTReconstructionModule`: masked pre-training (random backbone) or fine-tuning of the reconstruction head;
  evaluated as zero-shot anomaly detection (reconstruction MSE, adjusted best F1) or imputation.
* `MOMENTClassificationModule`: a supervised classification head on the encoder.
* `MOMENTEmbeddingSVMModule`: zero-shot embeddings + the official SVM protocol (or an SVM on the raw series).

Each builds its `MOMENT` from ``pretrained`` (an official ``AutonLab/MOMENT-1-*`` checkpoint or local copy, or a
zoo run's checkpoint) or, with ``pretrained: null``, randomly from ``t5_config``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info

from zoo.attached import attached_datamodule
from zoo.errors import ZooError
from zoo.hub import HubMixin, load_checkpoint
from zoo.moment.checkpoints import load_converted, load_moment
from zoo.moment.masking import random_patch_mask
from zoo.moment.metrics import adjusted_best_f1, pretraining_loss, reconstruction_loss
from zoo.moment.model import MOMENT, MomentConfig
from zoo.moment.svm import fit_svm, refit_svm
from zoo.rundir import newest_match


def _zoo_checkpoint(pretrained: str) -> Path | None:
    """The .ckpt that ``pretrained`` names when it is a zoo run (file, run dir or glob), else None."""
    if any(c in pretrained for c in "*?["):
        pretrained = newest_match(pretrained, "pretrained", "run the pre-training stage first")
    p = Path(pretrained)
    if p.suffix == ".ckpt":
        if not p.is_file():
            raise ZooError(f"pretrained checkpoint {p} does not exist")
        return p
    if (p / "checkpoints" / "last.ckpt").is_file():
        return p / "checkpoints" / "last.ckpt"
    return None


def build_moment(task_name: str, pretrained: str | None, t5_config: dict | None, revision: str | None = None,
                 **fields: Any) -> tuple[MOMENT, str | None]:
    """(MOMENT for ``task_name``, the Hub id of its pre-trained weights or None). ``fields`` are MomentConfig
    fields of the task (horizon, classes, dropouts, ...); None values keep the checkpoint's / default value."""
    fields = {k: v for k, v in fields.items() if v is not None}
    if pretrained is None:
        if not t5_config:
            raise ZooError("give pretrained (e.g. AutonLab/MOMENT-1-large) or t5_config for a random backbone")
        return MOMENT(MomentConfig(t5_config=dict(t5_config), task_name=task_name, **fields)), None
    ckpt = _zoo_checkpoint(pretrained)
    if ckpt is None:
        model = load_moment(pretrained, task_name, revision, **fields)
        rank_zero_info(f"[moment] loaded {pretrained} for {task_name}")
        return model, None if Path(pretrained).is_dir() else pretrained
    payload = load_checkpoint(ckpt)
    cfg = payload.get("moment_config")
    if not isinstance(cfg, dict):
        raise ZooError(f"{ckpt} is not a MOMENT run's checkpoint (no moment_config)")
    arch = {k: v for k, v in cfg.items() if k in MomentConfig.__dataclass_fields__ and k not in
            ("task_name", "forecast_horizon", "n_channels", "num_class", "reduction", "head_dropout")}
    model = MOMENT(MomentConfig(**{**arch, "task_name": task_name, **fields}))
    state = {k[len("model."):]: v for k, v in payload["state_dict"].items() if k.startswith("model.")}
    if cfg.get("task_name") != task_name:
        state = {k: v for k, v in state.items() if not k.startswith("head.")}
    load_converted(model, state, f"checkpoint {ckpt}")
    rank_zero_info(f"[moment] initialised from {ckpt} ({cfg.get('task_name')} run) for {task_name}")
    return model, (cfg.get("extra") or {}).get("base_model")


class _MOMENTModule(HubMixin, L.LightningModule):
    """What every MOMENT module shares: the network in ``self.model``, its architecture in each checkpoint
    (``moment_config``, so a later stage can start from it), Hub configs that need no download."""

    model: MOMENT | None
    base_model: str | None = None
    tags: tuple[str, ...] = ()

    def _build(self, task_name: str, **fields: Any) -> None:
        hp = self.hparams
        self.model, self.base_model = build_moment(task_name, hp.pretrained, hp.t5_config, hp.revision, **fields)
        self.model.config.extra["base_model"] = self.base_model
        if getattr(hp, "gradient_checkpointing", False):
            self.model.encoder.gradient_checkpointing_enable()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.model is not None:
            checkpoint["moment_config"] = self.model.config.to_dict()

    def hub_config(self) -> dict:
        """A published module rebuilds from its own config (random init + its weights), not from the Hub id."""
        cfg = super().hub_config()
        if self.model is not None:
            args = cfg["model"]["init_args"]
            args.update(pretrained=None, t5_config=dict(self.model.config.t5_config),
                        add_positional_embedding=self.model.config.add_positional_embedding)
        return cfg

    def card_metadata(self) -> dict:
        return {"tags": ["moment", "time-series", *self.tags], "base_model": self.base_model}


def _freeze(model: MOMENT, embedder: bool, encoder: bool, head: bool) -> None:
    model.freeze(embedder=embedder, encoder=encoder, head=head)


def _trainable(module: L.LightningModule) -> list[torch.nn.Parameter]:
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise ZooError("every parameter is frozen: unfreeze the head (freeze_head: false) or more")
    return params


# ================================================================================================ forecasting
class MOMENTForecastingModule(_MOMENTModule):
    """Long-horizon forecasting with MOMENT (paper, Sec. 4, Table 3; official forecasting tutorial).

    Args:
        pretrained: official checkpoint (``AutonLab/MOMENT-1-large``/``-base``/``-small`` or a local copy), a zoo
            MOMENT run (.ckpt, run dir or glob), or None for a random backbone from ``t5_config``.
        t5_config: T5 encoder config (dict of ``T5Config`` fields) when ``pretrained`` is None.
        revision: Hub revision of ``pretrained``.
        forecast_horizon: H; the datamodule's must agree.
        head_dropout: dropout of the forecasting head (official 0.1).
        add_positional_embedding: None keeps the checkpoint's (momentfm's default: True).
        freeze_embedder, freeze_encoder: linear probing (the default) freezes both.
        lr: Adam learning rate = OneCycle's max_lr (tutorial 1e-4); weight_decay: Adam's (tutorial 0).
        scheduler: ``onecycle`` (pct_start 0.3, tutorial) or ``constant``.
        scheduler_interval: ``step`` (OneCycle as designed) or ``epoch`` (what the tutorial's loop does: it steps
            the OneCycle schedule once per epoch, so a 1-epoch run trains at max_lr / 25 throughout).
        gradient_checkpointing: recompute the encoder in the backward pass (saves memory).
    """

    tags = ("forecasting",)

    def __init__(self, pretrained: str | None = "AutonLab/MOMENT-1-large", t5_config: dict[str, Any] | None = None,
                 revision: str | None = None, forecast_horizon: int = 192, head_dropout: float = 0.1,
                 add_positional_embedding: bool | None = None, freeze_embedder: bool = True,
                 freeze_encoder: bool = True, lr: float = 1e-4, weight_decay: float = 0.0,
                 scheduler: Literal["onecycle", "constant"] = "onecycle", pct_start: float = 0.3,
                 scheduler_interval: Literal["step", "epoch"] = "step", gradient_checkpointing: bool = False):
        super().__init__()
        self.save_hyperparameters()
        if lr <= 0:
            raise ZooError(f"lr must be positive, got {lr}")
        self._build("forecasting", forecast_horizon=forecast_horizon, head_dropout=head_dropout,
                    add_positional_embedding=add_positional_embedding)
        _freeze(self.model, freeze_embedder, freeze_encoder, False)

    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        h = getattr(getattr(dm, "hparams", None), "forecast_horizon", None)
        if h is not None and getattr(dm.hparams, "task", "forecasting") == "forecasting" \
                and h != self.hparams.forecast_horizon:
            raise ZooError(f"model forecast_horizon {self.hparams.forecast_horizon} but the data forecast "
                           f"{h} steps: set both to the same H")

    def forward(self, x: torch.Tensor, input_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model.forecast(x, input_mask)

    def _step(self, batch: dict, stage: str) -> torch.Tensor:
        pred = self(batch["x"], batch["input_mask"])
        mse = torch.nn.functional.mse_loss(pred.float(), batch["y"])
        n = batch["x"].shape[0]
        self.log(f"{stage}/mse", mse, prog_bar=stage != "train", batch_size=n, sync_dist=stage != "train")
        if stage != "train":
            self.log(f"{stage}/mae", torch.nn.functional.l1_loss(pred.float(), batch["y"]), batch_size=n,
                     sync_dist=True)
        return mse

    def training_step(self, batch, batch_idx):
        loss = self._step(batch, "train")
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["x"].shape[0])
        return loss

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def predict_step(self, batch, batch_idx):
        return self(batch["x"], batch["input_mask"])

    def configure_optimizers(self):
        hp = self.hparams
        opt = torch.optim.Adam(_trainable(self), lr=hp.lr, weight_decay=hp.weight_decay)
        if hp.scheduler == "constant":
            return opt
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=hp.lr, total_steps=total, pct_start=hp.pct_start)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": hp.scheduler_interval}}


# ================================================================================================ reconstruction
def warmup_cosine_factor(step: int, epoch: int, max_epochs: int, init_lr: float, min_lr: float, warmup_lr: float,
                         warmup_steps: int) -> float:
    """The official pre-training schedule (``utils/optims.LinearWarmupCosineLRScheduler``) as a multiple of
    init_lr: during epoch 0 a linear warm-up from warmup_lr to init_lr over ``warmup_steps`` optimizer steps, from
    epoch 1 a cosine from init_lr towards min_lr over ``max_epochs`` epochs."""
    if epoch == 0:
        lr = min(init_lr, warmup_lr + (init_lr - warmup_lr) * step / max(warmup_steps, 1))
    else:
        lr = (init_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * epoch / max(max_epochs, 1))) + min_lr
    return lr / init_lr


class MOMENTReconstructionModule(_MOMENTModule):
    """Masked time-series modelling: pre-training (``pretrained: null``, random backbone) or fine-tuning of a
    checkpoint; evaluated zero-shot as anomaly detection or imputation (paper, Sec. 3.3 and 4).

    Args:
        pretrained, t5_config, revision, add_positional_embedding, gradient_checkpointing: as
            `MOMENTForecastingModule`.
        mask_ratio: share of observed patches hidden during training (paper: 0.3); used by the ``masked`` objective.
        train_objective: what ``fit`` minimises (and ``validate`` reports): ``masked`` (pre-training: MSE on the hidden
            observed steps) or ``reconstruction`` (the official anomaly-detection fine-tuning, moment-research
            ``tasks/anomaly_detection_finetune.py``: nothing hidden, MSE of the whole reconstruction).
        head_dropout: dropout before the reconstruction head (official 0.1).
        freeze_embedder, freeze_encoder, freeze_head: all trainable for pre-training.
        lr, min_lr, warmup_lr, warmup_steps: the official pre-training schedule (1e-4 -> 1e-5 cosine by epoch after
            1000 linear warm-up steps from 1e-5); weight_decay: AdamW's (0.05).
        scheduler: ``warmup_cosine`` (pre-training) or ``onecycle`` (the official anomaly-detection linear probing:
            OneCycle to ``lr`` with pct_start 0.3).
        evaluation: what ``test`` measures: ``anomaly`` (per-step squared reconstruction error of each test
            window, then the adjusted best F1 over the whole test series), ``imputation`` (MSE/MAE on randomly
            masked patches, each channel masked independently) or ``reconstruction`` (the pre-training loss).
        eval_mask_ratio, eval_seed: the imputation mask (tutorial: 0.25, seed 13).
        anomaly_n_splits: thresholds of the adjusted best F1 (official 100).
    """

    tags = ("reconstruction",)

    def __init__(self, pretrained: str | None = None, t5_config: dict[str, Any] | None = None,
                 revision: str | None = None, mask_ratio: float = 0.3,
                 train_objective: Literal["masked", "reconstruction"] = "masked", head_dropout: float = 0.1,
                 add_positional_embedding: bool | None = None, freeze_embedder: bool = False,
                 freeze_encoder: bool = False, freeze_head: bool = False, lr: float = 1e-4, min_lr: float = 1e-5,
                 warmup_lr: float = 1e-5, warmup_steps: int = 1000, weight_decay: float = 0.05,
                 scheduler: Literal["warmup_cosine", "onecycle"] = "warmup_cosine", pct_start: float = 0.3,
                 gradient_checkpointing: bool = False,
                 evaluation: Literal["anomaly", "imputation", "reconstruction"] = "anomaly",
                 eval_mask_ratio: float = 0.25, eval_seed: int = 13, anomaly_n_splits: int = 100):
        super().__init__()
        self.save_hyperparameters()
        for name, v in (("mask_ratio", mask_ratio), ("eval_mask_ratio", eval_mask_ratio)):
            if not 0.0 <= v < 1.0:
                raise ZooError(f"{name} must be in [0, 1), got {v}")
        if train_objective not in ("masked", "reconstruction"):
            raise ZooError(f"train_objective must be 'masked' or 'reconstruction', got {train_objective!r}")
        if lr <= 0 or min_lr < 0 or warmup_lr < 0 or warmup_steps < 0:
            raise ZooError(f"learning rates must be positive and warmup_steps >= 0 (lr={lr}, min_lr={min_lr}, "
                           f"warmup_lr={warmup_lr}, warmup_steps={warmup_steps})")
        self._build("reconstruction", head_dropout=head_dropout, add_positional_embedding=add_positional_embedding)
        _freeze(self.model, freeze_embedder, freeze_encoder, freeze_head)
        self._eval: list = []

    def forward(self, x, input_mask=None, mask=None):
        return self.model.reconstruct(x, input_mask, mask)[0]

    def _loss(self, batch: dict, generator: torch.Generator | None = None, objective: str = "masked") -> torch.Tensor:
        x, im = batch["x"], batch["input_mask"]
        if objective == "reconstruction":
            # official anomaly fine-tuning: the model's forward with mask=None hides nothing (mask = ones)
            recon, _ = self.model.reconstruct(x, im, torch.ones_like(im))
            return reconstruction_loss(recon.float(), x, im)
        mask = random_patch_mask(im, self.hparams.mask_ratio, self.model.config.patch_len, generator)
        recon, _ = self.model.reconstruct(x, im, mask)
        return pretraining_loss(recon.float(), x, im, mask)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch, objective=self.hparams.train_objective)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["x"].shape[0])
        return loss

    def on_validation_epoch_start(self) -> None:
        self._gen = torch.Generator(device=self.device).manual_seed(self.hparams.eval_seed)

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self._loss(batch, self._gen, self.hparams.train_objective), prog_bar=True, batch_size=batch["x"].shape[0],
                 sync_dist=True)

    def on_test_epoch_start(self) -> None:
        self._gen = torch.Generator(device=self.device).manual_seed(self.hparams.eval_seed)
        self._eval = []

    def test_step(self, batch, batch_idx):
        x, im = batch["x"], batch["input_mask"]
        ev = self.hparams.evaluation
        if ev == "reconstruction":
            self.log("test/loss", self._loss(batch, self._gen), batch_size=x.shape[0])
        elif ev == "anomaly":
            if "labels" not in batch:
                raise ZooError("evaluation 'anomaly' needs anomaly windows (labels per step): use UCRAnomalyDataModule")
            # zero-shot: nothing hidden (mask ratio 0 keeps every observed patch, as the official forward does)
            recon, _ = self.model.reconstruct(x, im, mask_ratio=0.0)
            score = ((x - recon.float()) ** 2).mean(1)  # [B, L], channels averaged
            self._eval.append((batch["start"].cpu(), batch["length"].cpu(), score.cpu(), batch["labels"].cpu(),
                               im.cpu()))
        else:
            b, c, n = x.shape
            xf, imf = x.reshape(b * c, 1, n), im.repeat_interleave(c, dim=0)  # each channel its own mask (tutorial)
            mask = random_patch_mask(imf, self.hparams.eval_mask_ratio, self.model.config.patch_len, self._gen)
            recon, _ = self.model.reconstruct(xf, imf, mask)
            hidden = ((mask == 0) & (imf == 1)).unsqueeze(1)
            err = (recon.float() - xf)[hidden]
            self._eval.append((err.pow(2).sum().item(), err.abs().sum().item(), err.numel()))

    def on_test_epoch_end(self) -> None:
        ev = self.hparams.evaluation
        if ev == "imputation" and self._eval:
            sq, ab, cnt = map(sum, zip(*self._eval))
            self.log("test/mse", sq / max(cnt, 1))
            self.log("test/mae", ab / max(cnt, 1))
        elif ev == "anomaly" and self._eval:
            scores, labels = self.assemble_series(self._eval)
            self.log("test/adj_best_f1", adjusted_best_f1(labels, scores, self.hparams.anomaly_n_splits))
            self.log("test/recon_mse", float(np.mean(scores)))
        self._eval = []

    @staticmethod
    def assemble_series(windows: list) -> tuple[np.ndarray, np.ndarray]:
        """Per-step scores and labels of the whole test series from its windows, in loader order; where windows
        overlap (the last one is aligned to the end) the earlier window's value is kept, as the tutorial does."""
        length = int(windows[0][1][0])
        scores, labels = np.full(length, np.nan), np.zeros(length, dtype=int)
        for starts, _, score, lab, im in windows:
            for s, sc, lb, m in zip(starts.tolist(), score.numpy(), lab.numpy(), im.numpy()):
                pos = s + np.arange(sc.shape[0])
                keep = (m > 0) & (pos >= 0) & (pos < length)
                pos, sc, lb = pos[keep], sc[keep], lb[keep]
                new = np.isnan(scores[pos])
                scores[pos[new]], labels[pos[new]] = sc[new], lb[new]
        if np.isnan(scores).any():
            raise ZooError(f"{int(np.isnan(scores).sum())} test steps were not scored (windows do not cover the series)")
        return scores, labels

    def configure_optimizers(self):
        hp = self.hparams
        opt = torch.optim.AdamW(_trainable(self), lr=hp.lr, weight_decay=hp.weight_decay)
        if hp.scheduler == "onecycle":
            total = max(int(self.trainer.estimated_stepping_batches), 1)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=hp.lr, total_steps=total, pct_start=hp.pct_start)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        max_epochs = self.trainer.max_epochs
        if not max_epochs or max_epochs < 0:  # a max_steps run: the epochs those steps take
            max_epochs = math.ceil(self.trainer.estimated_stepping_batches / max(1, self.trainer.num_training_batches))

        def factor(step: int) -> float:
            # As the official loop (tasks/pretrain.py): the optimiser starts at init_lr and the scheduler first
            # moves after the first update, so step 0 runs at init_lr, not warmup_lr (kept, being the official
            # run's; cards/moment.md); after that, Lightning's per-step scheduler call follows the update as the
            # official one does, with the epoch of the step just taken (so an epoch's first step keeps the rate
            # of the one before, officially too)
            if step == 0:
                return 1.0
            return warmup_cosine_factor(step, self.trainer.current_epoch, max_epochs, hp.lr, hp.min_lr,
                                        hp.warmup_lr, hp.warmup_steps)

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


# ================================================================================================ classification
class MOMENTClassificationModule(_MOMENTModule):
    """A classification head on MOMENT (official ``ClassificationHead``: channels concatenated, mean over patches,
    Linear), trained with cross-entropy; linear probing by default.

    Args:
        pretrained, t5_config, revision, add_positional_embedding: as `MOMENTForecastingModule`.
        n_channels, num_class: the head's input channels (concatenated) and classes; the data must agree.
        reduction: ``concat`` (the official default) or ``mean`` over channels.
        head_dropout, freeze_embedder, freeze_encoder, lr, weight_decay: head dropout, linear probing, Adam.
    """

    tags = ("classification",)

    def __init__(self, pretrained: str | None = "AutonLab/MOMENT-1-large", t5_config: dict[str, Any] | None = None,
                 revision: str | None = None, n_channels: int = 1, num_class: int = 2,
                 reduction: Literal["concat", "mean"] = "concat", head_dropout: float = 0.1,
                 add_positional_embedding: bool | None = None, freeze_embedder: bool = True,
                 freeze_encoder: bool = True, lr: float = 1e-4, weight_decay: float = 0.0):
        super().__init__()
        self.save_hyperparameters()
        self._build("classification", n_channels=n_channels, num_class=num_class, reduction=reduction,
                    head_dropout=head_dropout, add_positional_embedding=add_positional_embedding)
        _freeze(self.model, freeze_embedder, freeze_encoder, False)

    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        if dm is None or not hasattr(dm, "num_class"):
            return
        dm.setup(stage)
        hp = self.hparams
        if hp.reduction == "concat" and dm.n_channels != hp.n_channels:
            raise ZooError(f"the classification head takes {hp.n_channels} channel(s) but the data have "
                           f"{dm.n_channels}: set n_channels: {dm.n_channels}")
        if dm.num_class != hp.num_class:
            raise ZooError(f"the classification head has {hp.num_class} classes but the data have {dm.num_class}")

    def forward(self, x, input_mask=None):
        return self.model.classify(x, input_mask)

    def _step(self, batch: dict, stage: str) -> torch.Tensor:
        logits = self(batch["x"], batch["input_mask"]).float()
        loss = torch.nn.functional.cross_entropy(logits, batch["label"])
        acc = (logits.argmax(-1) == batch["label"]).float().mean()
        n = batch["x"].shape[0]
        self.log(f"{stage}/loss", loss, batch_size=n, sync_dist=stage != "train")
        self.log(f"{stage}/acc", acc, prog_bar=stage != "train", batch_size=n, sync_dist=stage != "train")
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def configure_optimizers(self):
        return torch.optim.Adam(_trainable(self), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


# ================================================================================================ SVM
class MOMENTEmbeddingSVMModule(_MOMENTModule):
    """Zero-shot representation learning (paper, Sec. 4; official classification tutorial): frozen MOMENT
    embeddings (mean over channels and observed patches) of the training cases fit an SVM (`zoo.moment.svm`);
    ``test`` scores it on the test cases. ``fit`` runs one pass without gradient steps.

    The fitted SVM is kept as the training features, labels and the chosen C (buffers): the RBF SVM refit from
    them is the same model, so a checkpoint or Hub copy holds plain tensors only.

    Args:
        pretrained, t5_config, revision, add_positional_embedding: as `MOMENTForecastingModule` (ignored for raw).
        features: ``moment`` (embeddings) or ``raw`` (the padded series themselves: the baseline).
        svm_max_samples: training cases the grid search sees at most (official 10,000).
        n_jobs: parallel grid-search jobs (official 10).
    """

    single_process = "its SVM is fitted on the embeddings of every training case, and a DDP process sees a share"
    tags = ("classification", "svm", "zero-shot")

    def __init__(self, pretrained: str | None = "AutonLab/MOMENT-1-large", t5_config: dict[str, Any] | None = None,
                 revision: str | None = None, features: Literal["moment", "raw"] = "moment",
                 add_positional_embedding: bool | None = None, svm_max_samples: int = 10_000, n_jobs: int = 1):
        super().__init__()
        self.save_hyperparameters()
        if features not in ("moment", "raw"):
            raise ZooError(f"features must be 'moment' or 'raw', got {features!r}")
        self.model = None
        if features == "moment":
            self._build("embedding", add_positional_embedding=add_positional_embedding)
            _freeze(self.model, True, True, True)
        self.register_buffer("svm_features", torch.zeros(0, 0, dtype=torch.float64))
        self.register_buffer("svm_labels", torch.zeros(0, dtype=torch.long))
        self.register_buffer("svm_C", torch.full((1,), -1.0, dtype=torch.float64))
        self._svm = None
        self._rows: list = []

    def prepare_state_dict_load(self, state_dict: dict[str, torch.Tensor]) -> None:
        for name in ("svm_features", "svm_labels"):
            key = next((k for k in state_dict if k.endswith(name)), None)
            if key is not None:
                setattr(self, name, torch.zeros_like(state_dict[key]))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # the embeddings gathered so far this epoch (tensors, so weights-only loading reads them): a fit resumed
        # mid-epoch fits the SVM on every training row, not only on those after the interruption
        checkpoint["svm_rows"] = [list(r) for r in self._rows]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self._rows = [tuple(r) for r in checkpoint.get("svm_rows", [])]

    def embed(self, batch: dict) -> torch.Tensor:
        x, im = batch["x"], batch["input_mask"]
        if self.model is None:
            return (x * im.unsqueeze(1)).flatten(1).double()
        with torch.no_grad():
            return self.model.embed(x, im).double()

    def on_train_epoch_start(self) -> None:
        self._rows = []

    def training_step(self, batch, batch_idx):
        # embeddings without dropout, as the tutorial's evaluation-mode model; set at every step, since Lightning
        # puts the module in training mode when a fit starts, and a fit resumed mid-epoch has no epoch start
        if self.model is not None and self.model.training:
            self.model.eval()
        self._rows.append((self.embed(batch).cpu(), batch["label"].cpu()))
        # fit once the epoch's last batch is embedded, so the epoch-end checkpoint holds the fitted SVM
        if batch_idx + 1 >= self.trainer.num_training_batches:
            self._fit_svm()

    def _fit_svm(self) -> None:
        feats = torch.cat([r[0] for r in self._rows]).numpy()
        labels = torch.cat([r[1] for r in self._rows]).numpy()
        clf, fit_x, fit_y = fit_svm(feats, labels, self.hparams.svm_max_samples, self.hparams.n_jobs)
        self.svm_features = torch.as_tensor(fit_x, dtype=torch.float64)
        self.svm_labels = torch.as_tensor(fit_y, dtype=torch.long)
        self.svm_C.fill_(float(clf.C))
        self._svm = clf
        self.log("train/acc", float(clf.score(feats, labels)))
        self.log("train/svm_C", float(clf.C))
        self._rows = []

    def configure_optimizers(self):
        return None  # nothing is trained by gradient: the SVM is fit at the end of the pass

    def svm(self):
        """The fitted SVM (refit from the stored training features after a checkpoint or Hub load)."""
        if self._svm is None:
            if float(self.svm_C) <= 0 or self.svm_features.numel() == 0:
                raise ZooError("the SVM is not fitted: run fit first (or test with the fit run's --ckpt_path)")
            self._svm = refit_svm(float(self.svm_C), self.svm_features.numpy(), self.svm_labels.numpy())
        return self._svm

    def on_test_epoch_start(self) -> None:
        if self.model is not None:
            self.model.eval()
        self._rows = []

    def test_step(self, batch, batch_idx):
        self._rows.append((self.embed(batch).cpu(), batch["label"].cpu()))

    def on_test_epoch_end(self) -> None:
        feats = torch.cat([r[0] for r in self._rows]).numpy()
        labels = torch.cat([r[1] for r in self._rows]).numpy()
        self.log("test/acc", float(self.svm().score(feats, labels)))
        self._rows = []
