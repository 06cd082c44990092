"""The four phases of BGGN as LightningModules; each later phase starts from the previous phase's run
(``predictor_from`` / ``vae_from``: a .ckpt, a run directory or a HubMixin directory; a glob picks the newest).

0. `BiasClassifierModule`: the classifier f (ResNet18 on CelebA, the official MLP on DistilBERT embeddings for Toxic,
   an MLP on the synthetic features), selected on its training accuracy; ``zoo test`` of that best checkpoint
   measures L_f(a) over all samples and writes ``bias_table.csv``.
1. `BiasPredictorModule`: L̂(a) on one-hot a (regression + bias-bin classification heads).
2. `VAEModule`: VAE pretraining on the training combinations; ``zoo test`` evaluates the plain VAE as a generator
   (the paper's VAE baseline).
3. `BGGNModule`: REINFORCE fine-tuning of the VAE's decoder towards p(a) ∝ exp(b·L̂(a)); the same evaluation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from zoo.attached import attached_datamodule, attached_trainer
from zoo.backbones import torchvision_model
from zoo.bggn.bias import codes, decode, group_bias, one_hot, write_bias_table
from zoo.bggn.metrics import evaluate_generation
from zoo.bggn.networks import BiasPredictor, Decoder, Encoder
from zoo.bggn.objective import (
    BGGNConfig,
    encoder_refit_loss,
    reparameterize,
    sampled_term,
    training_combination_term,
    vae_loss,
)
from zoo.bggn.search_tree import relaxed_search_tree
from zoo.errors import ZooError
from zoo.hub import WEIGHTS, HubMixin, load_checkpoint, load_state_dict_file
from zoo.rundir import newest_match

BIAS_TABLE = "bias_table.csv"
TOP_COMBINATIONS = "top_combinations.txt"


def load_phase_state(path: str, what: str) -> dict[str, torch.Tensor]:
    """Weights of an earlier phase: a .ckpt (weights-only), a .safetensors, a HubMixin directory or a run dir."""
    p = Path(newest_match(path, what, "run the earlier phase first"))
    if p.is_dir():
        cands = [p / WEIGHTS, p / "checkpoints" / "last.ckpt"]
        p = next((c for c in cands if c.is_file()), None)
        if p is None:
            raise ZooError(f"{what} {path!r} holds neither {WEIGHTS} nor checkpoints/last.ckpt")
    if not p.is_file():
        raise ZooError(f"{what} {path!r} does not exist; run the earlier phase first or fix the path")
    return load_state_dict_file(p) if p.suffix == ".safetensors" else load_checkpoint(p)["state_dict"]


def _sub_state(state: dict[str, torch.Tensor], prefix: str, what: str) -> dict[str, torch.Tensor]:
    sub = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not sub:
        raise ZooError(f"{what} holds no {prefix.rstrip('.')!r} weights (is it the right phase's run?)")
    return sub


_EVAL_SIZES = ("n_eval_batches", "eval_batch_size", "precision_k", "recall_k", "dcg_k", "rr_k", "true_top_k")


def _check_sizes(module: L.LightningModule, *names: str) -> None:
    """Layer widths, bins and metric cut-offs must be >= 1 (0 built an empty layer, or scored precision@0 without a
    word); ``n_export`` >= 0 (0: none)."""
    h = module.hparams
    bad = [f"{n}={h[n]}" for n in names if h[n] is not None and h[n] < 1]
    if bad:
        raise ZooError(f"{type(module).__name__}: {', '.join(bad)} must be >= 1")
    if h.get("n_export", 0) < 0:
        raise ZooError(f"{type(module).__name__}: n_export={h.n_export} must be >= 0 (0: none)")


def _run_dir(module: L.LightningModule) -> Path:
    return Path(getattr(attached_trainer(module), "default_root_dir", "."))


# -- phase 0 ---------------------------------------------------------------------------------------------------------

class BiasClassifierModule(HubMixin, L.LightningModule):
    """The classifier f whose per-group BCE is the bias value L_f(a) (official ``engine/engine_f_model.py``).

    Args:
        backbone: ``resnet18`` (CelebA: torchvision ResNet18 features + 512→256→1 head, official ``LinearModel``),
            ``mlp`` (Toxic: the official ``F_Model_TOXIC`` 768→400→200→100→1 with ELU; ``hidden`` sets the widths).
        in_dim: input features of the MLP (768 for DistilBERT; the synthetic benchmark's ``feature_dim``).
        hidden: MLP hidden widths.
        pretrained_backbone: ImageNet weights for ResNet18 (official ``ResNet18_Encoder(pretrained=True)``; torchvision
            reads them from its local cache, or downloads them once).
        lr, lr_gamma: Adam with ExponentialLR per epoch (official 1e-4, 0.9).
        bias_threshold: τ of the logged share of high-bias combinations (official 0.3).

    Model selection as the official ``f_model_train``: after every epoch the model, in eval mode, is scored on the
    training split (``val/train_accuracy``, ``val/train_loss``; official ``all_new_record["tr"]``) and on the
    validation split (``val/accuracy``, ``val/loss``, reported only); the zoo keeps the epoch with the highest
    ``val/train_accuracy`` as ``checkpoints/best-*.ckpt`` (official ``f_model.pt``), the checkpoint whose ``zoo test``
    writes the bias table (the official reloads ``f_model.pt`` to compute the bias values). On an exact tie
    Lightning's ``ModelCheckpoint`` keeps the earlier epoch, the official ``>=`` the later one.
    """

    monitor = "val/train_accuracy"
    monitor_mode = "max"

    def __init__(self, backbone: Literal["resnet18", "mlp"] = "mlp", in_dim: int = 768,
                 hidden: tuple[int, ...] = (400, 200, 100), pretrained_backbone: bool = False, lr: float = 1e-4,
                 lr_gamma: float = 0.9, bias_threshold: float = 0.3):
        super().__init__()
        self.save_hyperparameters()
        if backbone == "resnet18":
            import torchvision

            weights = torchvision.models.ResNet18_Weights.IMAGENET1K_V1 if pretrained_backbone else None
            net = torchvision_model("resnet18", weights, fallback="set model.init_args.pretrained_backbone: false")
            net.fc = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1))
            self.net = net
        elif backbone == "mlp":
            layers, prev = [], in_dim
            for w in hidden:
                layers += [nn.Linear(prev, w), nn.ELU()]
                prev = w
            self.net = nn.Sequential(*layers, nn.Linear(prev, 1))
        else:
            raise ZooError(f"backbone must be resnet18 or mlp, got {backbone!r}")
        self._losses: list[torch.Tensor] = []
        self._attrs: list[torch.Tensor] = []
        self._correct = 0

    def setup(self, stage: str) -> None:
        # the MLP's input width is a setting; the data's (DistilBERT's 768, or the benchmark's feature_dim) would
        # otherwise only meet it as a shape error in the first step
        width = getattr(attached_datamodule(self), "feature_width", None)
        if self.hparams.backbone == "mlp" and width is not None and width != self.hparams.in_dim:
            raise ZooError(f"model in_dim={self.hparams.in_dim} but the data's features are {width} wide: pass "
                           f"--model.init_args.in_dim {width}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)  # logits; the official model ends in a sigmoid + BCELoss

    def _loss(self, batch):
        x, y, _ = batch
        logits = self(x)
        return F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype), reduction="none"), logits

    def training_step(self, batch, batch_idx):
        loss, _ = self._loss(batch)
        self.log("train/loss", loss.mean(), prog_bar=True, batch_size=len(loss))
        return loss.mean()

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        # IntersectionalSamplesDataModule's loader 0: the training split (selection), loader 1: the validation split
        loss, logits = self._loss(batch)
        split = ("val/train_", "val/")[dataloader_idx]
        accuracy = ((logits > 0).long() == batch[1]).float().mean()  # official sigmoid > 0.5
        for name, value in (("loss", loss.mean()), ("accuracy", accuracy)):
            self.log(split + name, value, batch_size=len(loss), sync_dist=True, add_dataloader_idx=False)

    def on_test_epoch_start(self):
        self._losses, self._attrs, self._correct = [], [], 0

    def test_step(self, batch, batch_idx):
        loss, logits = self._loss(batch)
        self._losses.append(loss.detach().cpu())
        self._attrs.append(batch[2].cpu())
        self._correct += int(((logits > 0).long() == batch[1]).sum())

    def on_test_epoch_end(self):
        loss, a = torch.cat(self._losses), torch.cat(self._attrs)
        combos, bias, count = group_bias(loss, a)
        dm = attached_datamodule(self)
        names = list(getattr(dm, "names", None) or [f"s{j}" for j in range(a.shape[1])])
        if self.trainer.is_global_zero:
            path = _run_dir(self) / BIAS_TABLE
            write_bias_table(path, names, combos.numpy(), bias.numpy(), count.numpy())
            rank_zero_info(f"bggn: bias values of {len(bias)} combinations written to {path}")
        metrics = {"test/loss": loss.double().mean(), "test/accuracy": torch.tensor(self._correct / len(loss)),
                   "test/combinations": torch.tensor(float(len(bias))),
                   "test/high_bias_share": (bias > self.hparams.bias_threshold).double().mean()}
        bench = getattr(dm, "benchmark", None)
        if bench is not None:  # the synthetic benchmark knows the truth: how close is this f's L_f to it?
            truth = torch.as_tensor(bench.bias)[codes(combos)]
            metrics["test/bias_mae_vs_truth"] = (bias - truth).abs().mean()
        self.log_dict({k: v.float() for k, v in metrics.items()})

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(opt, self.hparams.lr_gamma)}

    def card_metadata(self) -> dict:
        # torchvision's ImageNet weights are not a Hub model: no base_model either way, a tag says which
        tags = ["bggn", "fairness", "bias-classifier", self.hparams.backbone]
        return {"tags": tags + (["imagenet-init"] if self.hparams.pretrained_backbone else []), "base_model": None}


# -- phase 1 ---------------------------------------------------------------------------------------------------------

class BiasPredictorModule(HubMixin, L.LightningModule):
    """L̂(a) (official ``engine/engine_bias_predictor.py``, ``Predictor_MLP_REG_CLS``).

    Args:
        d: number of sensitive attributes.
        hidden_dim, feature_dim: the MLP (official 512, 256).
        n_bins: bias bins of the classification head (official ``pred_cls_num: 10``).
        reg_coef, ce_coef: loss = reg_coef·weighted MSE + ce_coef·weighted label-smoothed CE (official Toxic
            0.1 / 1; CelebA 0.01 / 1).
        label_smoothing: official ``cross_entropy(smooth=0.1)``.
        lr, step_size, gamma: Adam 1e-3 with StepLR(10, 0.8) per epoch (official).

    Model selection as the official ``bias_predictor_train``: after every epoch the MAE on the seen (training)
    combinations (``val/mae_seen``; official ``re_tr_grp`` on ``tr_reduced``) and on the held-out ones
    (``val/mae_unseen``, reported only: selecting on it would select on the combinations the generators are scored
    on) are logged; the zoo keeps the epoch with the lowest ``val/mae_seen`` as ``checkpoints/best-*.ckpt``, the
    file the later phases load (official ``{pred_type}_bias_pred.pt``). On an exact tie Lightning's
    ``ModelCheckpoint`` keeps the earlier epoch, the official ``<=`` the later one.
    """

    monitor = "val/mae_seen"
    monitor_mode = "min"

    def __init__(self, d: int = 10, hidden_dim: int = 512, feature_dim: int = 256, n_bins: int = 10,
                 reg_coef: float = 0.1, ce_coef: float = 1.0, label_smoothing: float = 0.1, lr: float = 1e-3,
                 step_size: int = 10, gamma: float = 0.8):
        super().__init__()
        self.save_hyperparameters()
        _check_sizes(self, "d", "hidden_dim", "feature_dim", "n_bins")
        self.predictor = BiasPredictor(d, hidden_dim, feature_dim, n_bins)

    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        if dm is not None and getattr(dm, "names", None) and len(dm.names) != self.hparams.d:
            raise ZooError(f"model d={self.hparams.d} but the data have {len(dm.names)} sensitive attributes")

    def forward(self, a_one_hot: torch.Tensor) -> torch.Tensor:
        return self.predictor(a_one_hot)[0]

    def training_step(self, batch, batch_idx):
        x, bias, bins, w = batch
        pred, logits, _ = self.predictor(x)
        mse = (w * (pred - bias) ** 2).mean()
        ce = (w * F.cross_entropy(logits, bins, label_smoothing=self.hparams.label_smoothing, reduction="none")).mean()
        loss = self.hparams.reg_coef * mse + self.hparams.ce_coef * ce
        self.log_dict({"train/loss": loss, "train/mse": mse, "train/ce": ce}, prog_bar=True, batch_size=len(x))
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        # BiasTableDataModule's loader 0: the seen (training) combinations, loader 1: the held-out ones
        x, bias = batch[0], batch[1]
        name = ("val/mae_seen", "val/mae_unseen")[dataloader_idx]
        self.log(name, (self(x) - bias).abs().mean(), prog_bar=True, batch_size=len(x), sync_dist=True,
                 add_dataloader_idx=False)

    def test_step(self, batch, batch_idx):
        a, bias, seen = batch
        pred = self(one_hot(a).to(self.dtype))
        err = (pred.double() - bias.double()).abs()
        self.log_dict({"test/mae_seen": err[seen].mean().float(), "test/mae_unseen": err[~seen].mean().float()})
        if len(bias) > 2:  # rank agreement: does L̂ order the combinations as L_f does?
            from scipy.stats import spearmanr

            self.log("test/spearman", float(spearmanr(pred.cpu().numpy(), bias.cpu().numpy()).statistic))

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, self.hparams.step_size,
                                                                                  self.hparams.gamma)}

    def card_metadata(self) -> dict:
        return {"tags": ["bggn", "fairness", "bias-predictor"]}


# -- the generation evaluation shared by phases 2 and 3 -------------------------------------------------------------

class _GeneratorEvaluation:
    """``zoo test`` of a generator: n_eval_batches × eval_batch_size samples z ~ N(0, I), a ~ p_θ(·|z),
    deduplicated and scored against the true table (`zoo.bggn.metrics.evaluate_generation`); the top
    ``n_export`` generated combinations by L̂ are written as text (for prompting generative models)."""

    def _load_predictor(self, path: Optional[str]) -> None:
        if path:
            self.predictor.load_state_dict(_sub_state(load_phase_state(path, "predictor_from"), "predictor.",
                                                      "predictor_from"))
            rank_zero_info(f"bggn: bias predictor from {path}")
        else:
            rank_zero_warn("bggn: predictor_from is not set: L̂ is a randomly initialised predictor (smoke runs only)")
        self.predictor.requires_grad_(False)

    @torch.no_grad()
    def predicted_bias(self, a: torch.Tensor) -> torch.Tensor:
        was = self.predictor.training
        self.predictor.eval()
        out = self.predictor(one_hot(a).to(next(self.predictor.parameters()).dtype))[0]
        self.predictor.train(was)
        return out

    @torch.no_grad()
    def generate(self, n_batches: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        out = []
        for _ in range(n_batches):
            z = torch.randn(batch_size, self.hparams.latent_dim, generator=generator).to(self.device)
            probs = self.decoder(z)
            u = torch.rand(probs.shape[:-1], generator=generator).to(self.device)
            out.append((u < probs[..., 1]).long())
        return torch.cat(out)

    def test_step(self, batch, batch_idx):
        a_table, bias, seen = batch
        h = self.hparams
        g = torch.Generator().manual_seed(h.eval_seed)
        gen = self.generate(h.n_eval_batches, h.eval_batch_size, g)
        gen_codes = codes(gen).cpu()
        uniq = torch.unique(gen_codes)
        pred = self.predicted_bias(decode(uniq, gen.shape[1]).to(self.device)).double().cpu()
        pred_of = {int(c): float(p) for c, p in zip(uniq, pred)}
        m = evaluate_generation(gen_codes.numpy(), pred_of, codes(a_table).cpu().numpy(), bias.double().cpu().numpy(),
                                seen.cpu().numpy(), h.bias_threshold, h.precision_k, h.recall_k, h.dcg_k, h.rr_k,
                                h.true_top_k)
        self.log_dict({f"test/{k}": float(v) for k, v in m.items()})
        if self.trainer.is_global_zero and h.n_export:
            self._export(uniq, pred, a_table, bias, seen)

    def _export(self, uniq, pred, a_table, bias, seen) -> None:
        dm = attached_datamodule(self)
        d = a_table.shape[1]
        names = list(getattr(dm, "names", None) or [f"s{j}" for j in range(d)])
        index = {int(c): i for i, c in enumerate(codes(a_table).cpu())}
        lines = ["# rank\tpredicted_bias\ttrue_bias\tsplit\tattributes (value 1; the rest 0)"]
        for r, i in enumerate(torch.argsort(pred, descending=True)[: self.hparams.n_export].tolist()):
            c = int(uniq[i])
            row = index.get(c)
            true = f"{float(bias[row]):.4f}" if row is not None else "nan"
            split = "new" if row is None else ("seen" if bool(seen[row]) else "unseen")
            on = [n for n, v in zip(names, decode(torch.tensor([c]), d)[0].tolist()) if v == 1]
            lines.append(f"{r + 1}\t{float(pred[i]):.4f}\t{true}\t{split}\t{', '.join(on) or '(none)'}")
        (_run_dir(self) / TOP_COMBINATIONS).write_text("\n".join(lines) + "\n")


_EVAL_DOC = """
        n_eval_batches, eval_batch_size, eval_seed: generated samples for evaluation (official
            ``evaluation_batch_num: 100`` batches of ``batch_size``).
        bias_threshold: τ of a high-bias combination (official ``vae_eval_bias_thresh: 0.3``).
        precision_k, recall_k, dcg_k, rr_k: fixed metric cut-offs (the official configs' precision_k 1000, recall_k
            200, dcg_k 20, rr_k 5, of which the official evaluation keeps only dcg_k: it derives the others from the
            data, logged as ``test/*_official``; see `zoo.bggn.metrics` and the card).
        true_top_k: size of the enumerated true top set whose generated share is logged.
        n_export: generated combinations written to ``top_combinations.txt`` (0: none)."""


# -- phase 2 ---------------------------------------------------------------------------------------------------------

class VAEModule(_GeneratorEvaluation, HubMixin, L.LightningModule):
    __doc__ = """VAE pretraining on the training combinations (official ``engine/engine_vae.py``).

    Args:
        d: number of sensitive attributes.
        latent_dim, hidden_dim: official 200, 500.
        kl_weight: official ``vae_train_kl_weight: 0.1``.
        lr: Adam for encoder and decoder (official 1e-3 each).
        predictor_from: phase 1's selected checkpoint, ``<run>/checkpoints/best-*.ckpt`` (its L̂ ranks the
            generated combinations in evaluation; a run directory alone means its last.ckpt).
        predictor_hidden_dim, predictor_feature_dim, n_bins: that predictor's shape.""" + _EVAL_DOC

    def __init__(self, d: int = 10, latent_dim: int = 200, hidden_dim: int = 500, kl_weight: float = 0.1,
                 lr: float = 1e-3, predictor_from: Optional[str] = None, predictor_hidden_dim: int = 512,
                 predictor_feature_dim: int = 256, n_bins: int = 10, n_eval_batches: int = 100,
                 eval_batch_size: int = 64, eval_seed: int = 0, bias_threshold: float = 0.3, precision_k: int = 100,
                 recall_k: int = 200, dcg_k: int = 20, rr_k: int = 5, true_top_k: int = 20, n_export: int = 50):
        super().__init__()
        self.save_hyperparameters()
        _check_sizes(self, "d", "latent_dim", "hidden_dim", "predictor_hidden_dim", "predictor_feature_dim", "n_bins",
                     *_EVAL_SIZES)
        self.encoder = Encoder(d, latent_dim, hidden_dim)
        self.decoder = Decoder(d, latent_dim, hidden_dim)
        self.predictor = BiasPredictor(d, predictor_hidden_dim, predictor_feature_dim, n_bins)

    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        if dm is not None and getattr(dm, "names", None) and len(dm.names) != self.hparams.d:
            raise ZooError(f"model d={self.hparams.d} but the data have {len(dm.names)} sensitive attributes")
        if stage == "fit":
            self._load_predictor(self.hparams.predictor_from)

    def training_step(self, batch, batch_idx):
        x = batch[0]
        mu, log_var = self.encoder(x)
        probs = self.decoder(reparameterize(mu, log_var))
        loss, recon, kl = vae_loss(probs, x, mu, log_var, self.hparams.kl_weight)
        self.log_dict({"train/loss": loss, "train/recon": recon, "train/kl": kl}, prog_bar=True, batch_size=len(x))
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam([*self.encoder.parameters(), *self.decoder.parameters()], lr=self.hparams.lr)

    def card_metadata(self) -> dict:
        return {"tags": ["bggn", "fairness", "vae", "generator"]}


# -- phase 3 ---------------------------------------------------------------------------------------------------------

class BGGNModule(_GeneratorEvaluation, HubMixin, L.LightningModule):
    __doc__ = """BGGN fine-tuning of the pretrained VAE (official ``engine/engine_vae_bias.py``). One training batch
    (training combinations with their bias) is one iteration; the datamodule's ``iterations`` sets their number
    (official ``vae_bias_epoch``: 700 Toxic / 500 CelebA, of which the loop runs all but the first).

    Args:
        d, latent_dim, hidden_dim: as the VAE of phase 2.
        vae_from: phase 2's run (encoder and decoder weights; also its predictor unless ``predictor_from`` is set).
        predictor_from: phase 1's selected checkpoint, ``<run>/checkpoints/best-*.ckpt`` (L̂, the reward).
        form: ``paper`` (the paper's objective, one term) or ``official`` (the three official terms, as written);
            see `zoo.bggn.objective` and the card.
        gen_batch_size, z_resample, mask_coef, bias_coef, neglog_coef, entropy_coef, baseline_local,
            baseline_global: `zoo.bggn.objective.BGGNConfig` (gen_batch_size is its ``batch_size``, the official
            ``batch_size``) (official Toxic: 64, 3, 1.0, 5000, 0.05, 0.05, 0.01, 0.01; CelebA: 128,
            10, 0.2, 1e4, 0.05, 1.0).
        decoder_lr, encoder_lr: Adam (official ``de_vae_bias_lr: 1e-5``, ``en_vae_bias_lr: 2e-5``).
        encoder_every: the encoder is refit every this many iterations (official 3).
        predictor_hidden_dim, predictor_feature_dim, n_bins: the predictor's shape.""" + _EVAL_DOC

    single_process = ("it trains on combinations its own generator samples, so DDP's processes, seeded alike, "
                      "would draw the same ones")

    def __init__(self, d: int = 10, latent_dim: int = 200, hidden_dim: int = 500, vae_from: Optional[str] = None,
                 predictor_from: Optional[str] = None, form: Literal["paper", "official"] = "paper",
                 gen_batch_size: int = 64, z_resample: int = 3, mask_coef: float = 1.0, bias_coef: float = 5000.0,
                 neglog_coef: float = 0.05, entropy_coef: float = 0.05, baseline_local: float = 0.01,
                 baseline_global: float = 0.01, decoder_lr: float = 1e-5, encoder_lr: float = 2e-5,
                 encoder_every: int = 3, predictor_hidden_dim: int = 512, predictor_feature_dim: int = 256,
                 n_bins: int = 10, n_eval_batches: int = 100, eval_batch_size: int = 64, eval_seed: int = 0,
                 bias_threshold: float = 0.3, precision_k: int = 100, recall_k: int = 200, dcg_k: int = 20,
                 rr_k: int = 5, true_top_k: int = 20, n_export: int = 50):
        super().__init__()
        self.save_hyperparameters()
        if form not in ("paper", "official"):
            raise ZooError(f"form must be paper or official, got {form!r}")
        if encoder_every < 1:
            raise ZooError(f"encoder_every must be >= 1, got {encoder_every}")
        _check_sizes(self, "d", "latent_dim", "hidden_dim", "z_resample", "predictor_hidden_dim",
                     "predictor_feature_dim", "n_bins", *_EVAL_SIZES)
        self.cfg = BGGNConfig(gen_batch_size, z_resample, mask_coef, bias_coef, neglog_coef, entropy_coef, baseline_local,
                              baseline_global, form)
        if self.cfg.k < 1:
            raise ZooError(f"mask_coef·gen_batch_size = {mask_coef}·{gen_batch_size} keeps no sample")
        self.encoder = Encoder(d, latent_dim, hidden_dim)
        self.decoder = Decoder(d, latent_dim, hidden_dim)
        self.predictor = BiasPredictor(d, predictor_hidden_dim, predictor_feature_dim, n_bins)
        self.register_buffer("r_global", torch.zeros(()))  # the moving baseline, saved with the checkpoint
        self.register_buffer("iteration", torch.zeros((), dtype=torch.long))
        self.register_buffer("bank_codes", torch.zeros(0, dtype=torch.long), persistent=False)
        self.automatic_optimization = False

    def setup(self, stage: str) -> None:
        h = self.hparams
        dm = attached_datamodule(self)
        if dm is not None and getattr(dm, "names", None) and len(dm.names) != h.d:
            raise ZooError(f"model d={h.d} but the data have {len(dm.names)} sensitive attributes")
        if stage != "fit":
            return
        if dm is None or getattr(dm, "bank_codes", None) is None:
            raise ZooError("BGGNModule needs a BiasTableDataModule (the training combinations form the mask's bank)")
        self.bank_codes = dm.bank_codes.to(self.device)
        if len(self.bank_codes) < self.cfg.k:
            raise ZooError(f"{len(self.bank_codes)} training combinations, fewer than the top-{self.cfg.k} mask needs")
        if h.vae_from:
            state = load_phase_state(h.vae_from, "vae_from")
            self.encoder.load_state_dict(_sub_state(state, "encoder.", "vae_from"))
            self.decoder.load_state_dict(_sub_state(state, "decoder.", "vae_from"))
            if not h.predictor_from:
                self.predictor.load_state_dict(_sub_state(state, "predictor.", "vae_from"))
            rank_zero_info(f"bggn: VAE from {h.vae_from}")
        else:
            rank_zero_warn("bggn: vae_from is not set: fine-tuning a randomly initialised VAE (smoke runs only)")
        if h.predictor_from or not h.vae_from:
            self._load_predictor(h.predictor_from)
        self.predictor.requires_grad_(False)

    def on_fit_start(self) -> None:
        self.bank_codes = self.bank_codes.to(self.device)

    def training_step(self, batch, batch_idx):
        x, bias = batch[0], batch[1]
        opt_dec, opt_enc = self.optimizers()
        h, cfg = self.hparams, self.cfg
        it = int(self.iteration) + 1  # official loop: for epoch in range(1, vae_bias_epoch)
        log = {}
        if it % h.encoder_every == 0:  # encoder refit with the decoder frozen, before the decoder's step
            loss_en = encoder_refit_loss(self.decoder, self.encoder, cfg, h.latent_dim)
            opt_enc.zero_grad()
            self.manual_backward(loss_en)
            opt_enc.step()
            log["train/encoder_loss"] = loss_en.detach()
        self.encoder.requires_grad_(False)
        bias_fn = self.predicted_bias
        loss, info = sampled_term(self.decoder, self.encoder, bias_fn, self.bank_codes, cfg, self.r_global,
                                  h.latent_dim)
        self.r_global = info["r_global"].detach().to(self.r_global.dtype)
        if cfg.form == "official":  # the two further terms the official code sums in
            a_tr = (x.view(len(x), -1, 2)[..., 1] > 0.5).long()
            loss_tr, _ = training_combination_term(self.decoder, self.encoder, a_tr, bias.to(x.dtype), cfg)
            loss_nb, _ = sampled_term(self.decoder, self.encoder, bias_fn, self.bank_codes, cfg, 0.0, h.latent_dim,
                                      with_baseline=False, mask_type="topk")
            loss = loss + loss_tr + loss_nb
            log.update({"train/loss_train_combinations": loss_tr.detach(), "train/loss_no_baseline": loss_nb.detach()})
        opt_dec.zero_grad()
        self.manual_backward(loss)
        opt_dec.step()
        self.encoder.requires_grad_(True)
        self.iteration += 1
        log.update({"train/loss": loss.detach(), "train/main": info["main"], "train/predicted_bias": info["bias_mean"],
                    "train/neglog_q": info["neglog_q_mean"], "train/mask_share": info["mask_share"],
                    "train/seen_share": info["seen_share"], "train/entropy": info["entropy"],
                    "train/baseline": self.r_global})
        self.log_dict({k: v.float() for k, v in log.items()}, prog_bar=False, batch_size=len(x))
        if not torch.isfinite(loss):
            raise ZooError(f"BGGN loss is not finite at iteration {it}")

    def configure_optimizers(self):
        return [torch.optim.Adam(self.decoder.parameters(), lr=self.hparams.decoder_lr),
                torch.optim.Adam(self.encoder.parameters(), lr=self.hparams.encoder_lr)]

    def card_metadata(self) -> dict:
        return {"tags": ["bggn", "fairness", "reinforce", "generator", f"form-{self.hparams.form}"]}


# -- the search-tree baseline ----------------------------------------------------------------------------------------

class SearchTreeModule(_GeneratorEvaluation, HubMixin, L.LightningModule):
    __doc__ = """The paper's (relaxed) search-tree baseline (`zoo.bggn.search_tree`), evaluated like the generators:
    the tree is fit on the datamodule's seen combinations when testing (it holds no weights; ``fit`` does nothing
    but lets the baseline run in the same fit -> test chain); its proposals are every sample; L̂ ranks them.

    Args:
        d: number of sensitive attributes.
        max_depth, min_samples_leaf: the regression tree (scikit-learn).
        leaf_threshold: leaves whose predicted bias exceeds it are expanded (None: ``bias_threshold``).
        max_per_leaf: at most this many combinations per leaf (drawn without repetition when a leaf allows more).
        predictor_from, predictor_hidden_dim, predictor_feature_dim, n_bins: phase 1's L̂ (ranks the proposals;
            its selected checkpoint, ``<run>/checkpoints/best-*.ckpt``).""" + \
        _EVAL_DOC

    def __init__(self, d: int = 10, max_depth: Optional[int] = None, min_samples_leaf: int = 1,
                 leaf_threshold: Optional[float] = None, max_per_leaf: int = 256, predictor_from: Optional[str] = None,
                 predictor_hidden_dim: int = 512, predictor_feature_dim: int = 256, n_bins: int = 10,
                 n_eval_batches: int = 100, eval_batch_size: int = 64, eval_seed: int = 0,
                 bias_threshold: float = 0.3, precision_k: int = 100, recall_k: int = 200, dcg_k: int = 20,
                 rr_k: int = 5, true_top_k: int = 20, n_export: int = 50):
        super().__init__()
        self.save_hyperparameters()
        _check_sizes(self, "d", "max_depth", "min_samples_leaf", "max_per_leaf", "predictor_hidden_dim",
                     "predictor_feature_dim", "n_bins", *_EVAL_SIZES)
        self.predictor = BiasPredictor(d, predictor_hidden_dim, predictor_feature_dim, n_bins)
        self.automatic_optimization = False

    def setup(self, stage: str) -> None:
        if self.hparams.predictor_from:
            self._load_predictor(self.hparams.predictor_from)

    def training_step(self, batch, batch_idx):
        return None  # nothing to train: the tree is fit on the seen combinations at test time

    def configure_optimizers(self):
        return None

    def generate(self, n_batches: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        t = self._table
        h = self.hparams
        thr = h.bias_threshold if h.leaf_threshold is None else h.leaf_threshold
        a = relaxed_search_tree(t.a[t.seen].numpy(), t.bias[t.seen].numpy(), thr, h.max_depth, h.min_samples_leaf,
                                h.max_per_leaf, h.eval_seed)
        return torch.as_tensor(a, dtype=torch.long).to(self.device)

    def test_step(self, batch, batch_idx):
        dm = attached_datamodule(self)
        if dm is None or getattr(dm, "table", None) is None:
            raise ZooError("SearchTreeModule needs a BiasTableDataModule (it fits the tree on the seen combinations)")
        self._table = dm.table
        return super().test_step(batch, batch_idx)

    def card_metadata(self) -> dict:
        return {"tags": ["bggn", "fairness", "search-tree", "baseline"]}
