"""`SCoReModule`: two-stage (SCoRe objective, then linear probe) or joint training on long-tailed data.

Stage 1 (epochs < ``stage1_epochs``) trains encoder + projection head with a SCoRe objective on the
two augmented views of each image; stage 2 (the remaining epochs of ``trainer.max_epochs``) freezes the
encoder (BatchNorm in eval mode) and trains the linear classifier with cross-entropy, as the official
`train_stage1.py` / `trainval_stage2.py` pair does. The probe trains on the third item of each training batch,
the datamodule's probe view (``probe_augment``), not on a stage-1 view: trainval_stage2.py builds its own loader
with trainval_ce.set_loader's transform (crop + flip, no colour jitter or greyscale). ``training="joint"`` adds
the objective to cross-entropy end to end (GLMC-style ``contrast_weight``); ``objective="ce"`` is the CE baseline.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Optional

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics import Metric

from zoo.attached import attached_datamodule, attached_trainer
from zoo.errors import ZooError
from zoo.hub import HubMixin
from zoo.score.losses import OBJECTIVES, SCoReLoss, flatten_views
from zoo.score.model import SCoReNet

# the setting's type: cross-entropy or a SCoRe objective, so the parser refuses a misspelt name before a run
Objective = Literal[("ce", *OBJECTIVES)]


def shot_groups(train_counts: Sequence[int], many: int = 100, few: int = 20) -> dict[str, list[int]]:
    """Many-shot (> many), medium-shot and few-shot (< few) classes by training-set size (Liu et al., 2019)."""
    groups = {"many": [], "medium": [], "few": []}
    for c, n in enumerate(train_counts):
        groups["many" if n > many else "few" if n < few else "medium"].append(c)
    return groups


class PerClassAccuracy(Metric):
    """Correct / total per class, summed across processes (DDP-safe)."""

    full_state_update = False

    def __init__(self, num_classes: int):
        super().__init__()
        self.add_state("correct", torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        k = self.total.numel()
        self.total += torch.bincount(target, minlength=k)
        self.correct += torch.bincount(target[preds == target], minlength=k)

    def compute(self) -> dict[str, torch.Tensor]:
        return {"correct": self.correct, "total": self.total}


def long_tail_metrics(correct: torch.Tensor, total: torch.Tensor, train_counts=None,
                      many: int = 100, few: int = 20) -> dict[str, float]:
    """Top-1, mean per-class accuracy and many/medium/few-shot accuracy (mean over the group's classes)."""
    present = total > 0
    per_class = torch.where(present, correct / total.clamp(min=1), torch.nan)
    out = {"acc": (correct.sum() / total.sum().clamp(min=1)).item(),
           "acc_balanced": per_class[present].mean().item() if present.any() else float("nan")}
    if train_counts is not None:
        for group, classes in shot_groups(train_counts, many, few).items():
            idx = [c for c in classes if present[c]]
            if idx:
                out[f"acc_{group}"] = per_class[idx].mean().item()
    return out | {f"acc_class_{c}": v.item() for c, v in enumerate(per_class)}


class SCoReModule(HubMixin, L.LightningModule):
    """SCoRe representation learning + linear probe, with top-1 / per-class / many-medium-few accuracy.

    Args:
        encoder: "resnet32_cifar" (CIFAR ResNet 6n+2), "tiny_cnn", or a timm name such as "resnet50".
        num_classes: classes of the dataset.
        in_chans: image channels.
        proj_dim: projection-head output (128 in SupCon and SCoRe).
        cifar_stem: 3x3 stride-1 stem without max-pool for timm ResNets on 32x32 images.
        width: width multiplier for the CIFAR ResNet / tiny CNN.
        objective: one of zoo.score.losses.OBJECTIVES ("fl_cf", "gc_cf", "logdet_cf", "supcon", ...) or "ce".
        training: "two_stage" (objective, then linear probe) or "joint" (CE + contrast_weight * objective).
        stage1_epochs: epochs of stage 1 in two-stage training (the probe runs for the remaining epochs).
        temperature, lamda, delta, gamma: objective hyper-parameters (see zoo.score.losses.score_loss).
        contrast_weight: weight of the objective in joint training.
        lr, momentum, weight_decay: SGD for stage 1 / joint training.
        lr_schedule: "cosine" (to lr * 1e-3, SupCon's eta_min) or "step" (x lr_decay at ``milestones``).
        warmup_epochs: linear warm-up of stage 1 (SupCon warms up for large batches), per training batch from
            ``warmup_from`` to the schedule's learning rate at the end of the warm-up (util.warmup_learning_rate).
        warmup_from: learning rate (absolute, not a factor of ``lr``) of the first warm-up batch; 0.01 in the
            official code.
        probe_lr, probe_weight_decay, probe_milestones, probe_lr_decay: stage-2 SGD (step schedule,
            milestones counted from the start of stage 2).
        many_threshold, few_threshold: training images per class that separate many/medium/few-shot.
    """

    monitor = "val/acc"
    monitor_mode = "max"
    # two-stage training: the classifier is idle in stage 1, the encoder and projection head in the probe stage
    ddp_find_unused_parameters = True

    def __init__(self, encoder: str = "resnet50", num_classes: int = 10, in_chans: int = 3, proj_dim: int = 128,
                 cifar_stem: bool = True, width: int = 1, objective: Objective = "fl_cf",
                 training: Literal["two_stage", "joint"] = "two_stage", stage1_epochs: int = 1000,
                 temperature: float = 0.07, lamda: float = 1.0, delta: float = 0.5, gamma: float = 0.5,
                 contrast_weight: float = 1.0, lr: float = 0.05, momentum: float = 0.9, weight_decay: float = 1e-4,
                 lr_schedule: Literal["cosine", "step"] = "cosine", milestones: Optional[list[int]] = None,
                 lr_decay: float = 0.1, warmup_epochs: int = 0, warmup_from: float = 0.01, probe_lr: float = 0.1,
                 probe_weight_decay: float = 0.0, probe_milestones: Optional[list[int]] = None,
                 probe_lr_decay: float = 0.2, many_threshold: int = 100, few_threshold: int = 20):
        super().__init__()
        self.save_hyperparameters()
        if objective != "ce" and objective not in OBJECTIVES:
            raise ZooError(f"unknown SCoRe objective {objective!r}; choose 'ce' or one of {', '.join(OBJECTIVES)}")
        if training not in ("two_stage", "joint"):
            raise ZooError(f"unknown training {training!r}; choose 'two_stage' or 'joint'")
        if objective == "ce" and training == "two_stage":
            raise ZooError("objective 'ce' trains end to end: set training: joint")
        if proj_dim < 1:
            raise ZooError(f"proj_dim must be >= 1, got {proj_dim}")
        if few_threshold > many_threshold:  # else a class could be many- and few-shot at once
            raise ZooError(f"few_threshold={few_threshold} exceeds many_threshold={many_threshold}")
        self.net = SCoReNet(encoder, num_classes, in_chans, proj_dim, cifar_stem, width)
        self.criterion = None if objective == "ce" else SCoReLoss(objective, temperature, lamda, delta, gamma)
        self.val_acc, self.test_acc = PerClassAccuracy(num_classes), PerClassAccuracy(num_classes)
        self.train_class_counts: Optional[list[int]] = None

    # ---- stages -------------------------------------------------------------------------------------

    @property
    def in_probe_stage(self) -> bool:
        return self.hparams.training == "two_stage" and self.current_epoch >= self.hparams.stage1_epochs

    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        counts = getattr(dm, "train_class_counts", None)
        if counts is not None:
            self.train_class_counts = list(counts)
        nc = getattr(dm, "num_classes", None)
        if nc is not None and nc != self.hparams.num_classes:
            raise ZooError(f"model.num_classes={self.hparams.num_classes} but the data has {nc} classes")
        if (stage == "fit" and self.hparams.training == "two_stage" and dm is not None
                and getattr(dm, "probe_augment", "") is None):
            raise ZooError("two-stage training's linear probe trains on the datamodule's probe view, and "
                           "data.probe_augment is null; set it (the official probe's transform is 'crop')")
        ch = getattr(dm, "num_channels", None)  # e.g. MedMNIST: grey (1) or RGB (3, DermaMNIST) by flag
        if ch is not None and ch != self.hparams.in_chans:
            raise ZooError(f"model.in_chans={self.hparams.in_chans} but the data has {ch}-channel images; "
                           f"set --model.init_args.in_chans {ch}")
        max_epochs = getattr(attached_trainer(self), "max_epochs", None)
        if stage == "fit" and self.hparams.training == "two_stage" and max_epochs is not None \
                and 0 <= max_epochs <= self.hparams.stage1_epochs:
            raise ZooError(f"trainer.max_epochs={max_epochs} ends within stage 1 (stage1_epochs="
                           f"{self.hparams.stage1_epochs}): the linear probe would be tested untrained; set "
                           f"max_epochs > stage1_epochs")

    def on_train_batch_start(self, batch, batch_idx) -> None:
        if self.in_probe_stage:
            self.net.encoder.eval()  # frozen features, running BN statistics (SupCon's linear stage)
            self.net.head.eval()
        elif self.current_epoch < self.hparams.warmup_epochs:
            # the official warm-up moves the learning rate every batch (util.warmup_learning_rate); the epoch
            # scheduler below only sets each warm-up epoch's first value
            n = self.trainer.num_training_batches
            if math.isfinite(n) and n > 0:
                lr = self._warmup_lr(self.current_epoch + batch_idx / n)
                groups = self.trainer.optimizers[0].param_groups
                for g in groups[:1] if self.hparams.training == "two_stage" else groups:
                    g["lr"] = lr

    def training_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        if self.in_probe_stage:
            if len(batch) < 3:  # the stage-1 views are SupCon's colour-jittered crops, not the probe's input
                raise ZooError("the probe stage needs training batches (views, labels, probe view): use a "
                               "datamodule with probe_augment set (CIFARLTDataModule, MedMNISTDataModule)")
            with torch.no_grad():
                h = self.net.encoder(batch[2])
            loss = F.cross_entropy(self.net.classifier(h), y)
            self.log("train/ce", loss, prog_bar=True)
        else:
            xs, ys = flatten_views(x, y) if x.dim() == 5 else (x, y)
            h = self.net.encoder(xs)
            loss = 0.0
            if self.criterion is not None:
                contrast = self.criterion(self.net.project(h), ys)
                self.log("train/contrast", contrast, prog_bar=True)
                loss = contrast if self.hparams.training == "two_stage" else self.hparams.contrast_weight * contrast
            if self.hparams.training == "joint":
                ce = F.cross_entropy(self.net.classifier(h), ys)
                self.log("train/ce", ce, prog_bar=True)
                loss = loss + ce
        self.log("train/loss", loss)
        self.log("train/stage", 2.0 if self.in_probe_stage else 1.0)
        return loss

    # ---- evaluation -----------------------------------------------------------------------------------

    def _eval_step(self, batch, metric: PerClassAccuracy):
        x, y = batch
        if x.dim() == 5:
            x = x[:, 0]
        metric.update(self.net(x).argmax(-1), y)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, self.val_acc)

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, self.test_acc)

    def _log_epoch(self, prefix: str, metric: PerClassAccuracy) -> dict[str, float]:
        state = metric.compute()
        metric.reset()
        m = long_tail_metrics(state["correct"].cpu(), state["total"].cpu(), self.train_class_counts,
                              self.hparams.many_threshold, self.hparams.few_threshold)
        few_classes = self.hparams.num_classes <= 20  # per-class scalars only for small label sets
        for k, v in m.items():
            if (few_classes or not k.startswith("acc_class_")) and not math.isnan(v):
                self.log(f"{prefix}/{k}", v, sync_dist=False)
        return m

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val", self.val_acc)

    def on_test_epoch_end(self) -> None:
        m = self._log_epoch("test", self.test_acc)
        if attached_trainer(self) is not None and self.trainer.is_global_zero and self.trainer.default_root_dir:
            path = Path(self.trainer.default_root_dir) / "per_class_accuracy.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["class", "train_images", "test_accuracy"])
                for c in range(self.hparams.num_classes):
                    n = self.train_class_counts[c] if self.train_class_counts else ""
                    w.writerow([c, n, m[f"acc_class_{c}"]])

    def predict_step(self, batch, batch_idx):
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self.net(x[:, 0] if x.dim() == 5 else x).softmax(-1)

    # ---- optimisation ---------------------------------------------------------------------------------

    def _stage1_length(self) -> int:
        """Epochs of the stage-1 schedule: stage1_epochs (two-stage) or trainer.max_epochs (joint)."""
        max_epochs = getattr(attached_trainer(self), "max_epochs", None)
        if max_epochs is None or max_epochs < 0:
            max_epochs = self.hparams.stage1_epochs
        return self.hparams.stage1_epochs if self.hparams.training == "two_stage" else max_epochs

    @staticmethod
    def _cosine(epoch: float, length: int) -> float:
        eta_min = 1e-3  # SupCon: eta_min = lr * lr_decay_rate ** 3
        return eta_min + (1 - eta_min) * 0.5 * (1 + math.cos(math.pi * min(epoch, length) / max(length, 1)))

    def _warmup_lr(self, progress: float) -> float:
        """util.warmup_learning_rate: linear in (fractional) epochs from warmup_from to the schedule's value at
        the end of the warm-up (cosine: its value at epoch warmup_epochs; step: lr)."""
        hp = self.hparams
        target = hp.lr * (self._cosine(hp.warmup_epochs, self._stage1_length()) if hp.lr_schedule == "cosine"
                          else 1.0)
        return hp.warmup_from + progress / hp.warmup_epochs * (target - hp.warmup_from)

    def _stage1_factor(self, epoch: int, length: int) -> float:
        hp = self.hparams
        if epoch < hp.warmup_epochs:  # the epoch's first batch; on_train_batch_start moves it every batch
            return self._warmup_lr(epoch) / hp.lr
        if hp.lr_schedule == "cosine":
            # util.adjust_learning_rate counts epochs from 1: the first epoch is already one step down the cosine
            # and the last reaches eta_min
            return self._cosine(epoch + 1, length)
        return hp.lr_decay ** sum(epoch >= m for m in (hp.milestones or []))  # official: epoch(1-based) > m

    def configure_optimizers(self):
        hp = self.hparams
        encoder_params = list(self.net.encoder.parameters()) + list(self.net.head.parameters())
        two_stage = hp.training == "two_stage"
        groups = [{"params": encoder_params, "lr": hp.lr, "weight_decay": hp.weight_decay},
                  {"params": self.net.classifier.parameters(), "lr": hp.probe_lr if two_stage else hp.lr,
                   "weight_decay": hp.probe_weight_decay if two_stage else hp.weight_decay}]
        opt = torch.optim.SGD(groups, momentum=hp.momentum)
        e1 = self._stage1_length()

        def encoder_factor(epoch):  # stage 1 schedule; frozen (lr 0) during the probe
            return 0.0 if two_stage and epoch >= e1 else self._stage1_factor(epoch, e1)

        def classifier_factor(epoch):
            if not two_stage:
                return self._stage1_factor(epoch, e1)
            if epoch < e1:
                return 0.0  # the classifier is not trained in stage 1
            return hp.probe_lr_decay ** sum(epoch - e1 >= m for m in (hp.probe_milestones or []))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, [encoder_factor, classifier_factor])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    def card_metadata(self) -> dict:
        return {"tags": ["score", "long-tail", "contrastive-learning", "submodular"],
                "pipeline_tag": "image-classification"}
