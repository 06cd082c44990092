"""LightningModules: `ByMIExperiment` (the paper's experiments: θ₀ on the master, then attacked machines and every
identification method) and `FeatureClassifier` (a small classifier to train under DDP with the callbacks)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from zoo.attached import attached_datamodule
from zoo.bymi.attacks import (ATTACKS, choose_byzantine, ipm, ood_features, ood_half_means,
                              random_gradient, unit_direction)
from zoo.bymi.baselines import faba, krum, removal_count, rmdp_bh, zeno
from zoo.bymi.identify import bymi
from zoo.bymi.models import (Model, covariance, flatten_theta, gather_rows, location_loss, logistic_gradient,
                             logistic_loss, logistic_per_sample, stratified_halves, unflatten_theta)
from zoo.errors import ZooError
from zoo.hub import HubMixin

BYMI_METHODS = {"bymi_filter": "filter", "bymi_filter_plus": "filter_plus", "bymi_geom": "geom",
                "bymi_master": "master", "bymi_oracle": "oracle"}
METHODS = (*BYMI_METHODS, "rmdp_bh", "krum", "faba", "zeno")
OFFICIAL_METHODS = ["bymi_filter", "bymi_filter_plus", "bymi_geom", "rmdp_bh", "krum", "faba", "zeno"]


class ByMIExperiment(HubMixin, L.LightningModule):
    """The real-data experiment of the paper (official ``detect_realdata.R``) and its Gaussian simulation.

    ``fit`` trains θ₀ on the master's data alone by full-batch gradient descent with the official early stopping
    (keep the best θ by validation metric; stop after more than ``patience`` epochs worse than the best).
    Deviation (card, "Choices and deviations"): θ₀ and the master's data are fitted once and shared by every test
    repeat; the official ``byz_detect`` redraws the whole partition, the master's share included, and refits θ₀
    in every repeat, so its repeat-to-repeat spread also carries θ₀'s sampling variation.
    ``test``: every test batch is one repeat (logistic) or a block of repeats (location); for each attack, ⌊ε·m⌋
    workers turn Byzantine, every machine reports split-half gradients at θ₀, and each method flags workers.
    Logged per attack and method: ``test/<attack>/<method>/{fdr,fdr_se,power,p_all,size,rmse}`` (means over
    repeats; ``p_all`` = share of repeats with every Byzantine worker flagged; ``rmse`` = √ mean ‖mean of the
    unflagged workers' gradients − mean of the normal workers' gradients‖², as the official ``error``).

    Args:
        model: ``logistic`` (multinomial logistic regression, the paper's) or ``location`` (the Gaussian
            simulation's ½‖x − θ‖²); must match the datamodule.
        n_features, n_classes: input dimension p and classes K (logistic; K is ignored for location).
        lr: gradient-descent step (official: 0.1 MNIST, 0.05 F-MNIST and CIFAR-10); also Zeno's γ.
        patience: official early stopping, ``counter > 10``.
        alpha: target FDR (official 0.1). eps: Byzantine share ε (official 0.1). const_f: ε' = const_f·ε (1.2).
        attacks: any of ood, grad, ipm, shift, none. methods: any of ``METHODS``.
        ood_s, ood_b, ood_s2 / grad_sig, grad_b1 / ipm_c / shift: attack strengths (official 0.7, 1, 0.2 /
            0.7, 0.8 / 0.2; ``shift`` is the norm of the simulation's mean shift).
        zeno_rho: Zeno's ρ (official 0.01). rmdp_starts: random starts of RMDP (official 100).
        offset: knockoff offset (1 = knockoff+).
    """

    def __init__(
        self,
        model: Model = "logistic",
        n_features: int = 20,
        n_classes: int = 10,
        lr: float = 0.1,
        patience: int = 10,
        alpha: float = 0.1,
        eps: float = 0.1,
        const_f: float = 1.2,
        attacks: tuple[str, ...] = ("ood", "grad", "ipm"),
        methods: tuple[str, ...] = tuple(OFFICIAL_METHODS),
        ood_s: float = 0.7,
        ood_b: float = 1.0,
        ood_s2: float = 0.2,
        grad_sig: float = 0.7,
        grad_b1: float = 0.8,
        ipm_c: float = 0.2,
        shift: float = 1.0,
        zeno_rho: float = 0.01,
        rmdp_starts: int = 100,
        offset: int = 1,
    ):
        super().__init__()
        self.save_hyperparameters()
        if model not in ("logistic", "location"):
            raise ZooError(f"unknown model {model!r}: choose 'logistic' or 'location'")
        if not attacks or not methods:  # the run went through and reported nothing
            raise ZooError(f"attacks and methods must each name at least one, got {list(attacks)} and {list(methods)}")
        scales = {"const_f": const_f, "ood_s": ood_s, "ood_b": ood_b, "ood_s2": ood_s2, "grad_sig": grad_sig,
                  "grad_b1": grad_b1, "ipm_c": ipm_c, "shift": shift, "zeno_rho": zeno_rho}
        if not all(math.isfinite(v) for v in scales.values()):  # a nan shift attacked with nan gradients
            raise ZooError(f"attack and method constants must be finite, got "
                           f"{', '.join(f'{k}={v}' for k, v in scales.items() if not math.isfinite(v))}")
        for a in attacks:
            if a not in ATTACKS:
                raise ZooError(f"unknown attack {a!r}; choose from {', '.join(ATTACKS)}")
        for m in methods:
            if m not in METHODS:
                raise ZooError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
        if model == "logistic" and "bymi_oracle" in methods:
            raise ZooError("bymi_oracle needs the true mean gradient, known only in the location simulation")
        if not 0 < alpha < 1:
            raise ZooError(f"alpha is the target FDR, a level in (0, 1); got {alpha}")
        if not 0 <= eps < 0.5:
            raise ZooError(f"the Byzantine share eps must lie in [0, 0.5), got {eps}")
        if lr <= 0 or patience < 0:
            raise ZooError(f"lr must be > 0 and patience >= 0, got {lr} and {patience}")
        if n_features < 1 or (model == "logistic" and n_classes < 2):
            raise ZooError(f"need n_features >= 1 and n_classes >= 2, got {n_features} and {n_classes}")
        # official: theta initialised to all ones, (p + 1) x K with the intercept last
        shape = (n_features + 1, n_classes) if model == "logistic" else (n_features,)
        init = torch.ones(shape) if model == "logistic" else torch.zeros(shape)
        self.theta = nn.Parameter(init.double())
        self.register_buffer("theta0", init.double().clone())  # best θ by validation (official theta_best)
        self._best: Optional[float] = None
        self._worse = 0
        self._results: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    # ------------------------------------------------------------------------------------------ fit θ₀
    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        if dm is None:
            return
        hp = self.hparams
        if getattr(dm, "model_kind", hp.model) != hp.model:
            raise ZooError(f"model={hp.model!r} but the datamodule provides {dm.model_kind!r} data")
        if getattr(dm, "n_features", hp.n_features) != hp.n_features:
            raise ZooError(f"model n_features={hp.n_features} but the data have {dm.n_features} features")
        if hp.model == "logistic" and getattr(dm, "n_classes", hp.n_classes) != hp.n_classes:
            raise ZooError(f"model n_classes={hp.n_classes} but the data have {dm.n_classes} classes")

    def loss(self, theta: torch.Tensor, batch: dict) -> torch.Tensor:
        if self.hparams.model == "logistic":
            return logistic_loss(theta, batch["x"], batch["y"])
        return location_loss(theta, batch["x"])

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.loss(self.theta, batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["x"]))
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        with torch.no_grad():
            if self.hparams.model == "logistic":
                acc = ((F.pad(batch["x"], (0, 1), value=1.0) @ self.theta).argmax(-1) == batch["y"]).double().mean()
                self.log("val/acc", acc, prog_bar=True, batch_size=len(batch["x"]), sync_dist=True)
            else:
                self.log("val/loss", self.loss(self.theta, batch), prog_bar=True, batch_size=len(batch["x"]),
                         sync_dist=True)  # every DDP process decides on early stopping from the same value

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        key, sign = ("val/acc", 1.0) if self.hparams.model == "logistic" else ("val/loss", -1.0)
        value = self.trainer.callback_metrics.get(key)
        if value is None:
            return
        score = sign * float(value)
        # official: improve -> keep theta, reset the counter; strictly worse -> count; counter > 10 -> stop
        if self._best is None or score > self._best:
            self._best, self._worse = score, 0
            with torch.no_grad():
                self.theta0.copy_(self.theta)
        elif score < self._best:
            self._worse += 1
            if self._worse > self.hparams.patience:
                self.trainer.should_stop = True
        self.log("val/best", sign * self._best)

    def on_fit_end(self) -> None:
        if self._best is None:  # no validation ran: θ₀ is the last iterate
            with torch.no_grad():
                self.theta0.copy_(self.theta)

    def configure_optimizers(self):
        return torch.optim.SGD([self.theta], lr=self.hparams.lr)  # plain gradient descent, as the official loop

    # ------------------------------------------------------------------------------------------ gradients at θ₀
    def _logistic_gradients(self, batch: dict, byz: torch.Tensor, attack: str, gen: torch.Generator):
        """One repeat: x (M, n, p), y (M, n), machine 0 the master → g1, g2, g (1, M, d), Σ₀, master data."""
        x, y = batch["x"].double(), batch["y"]
        K = self.hparams.n_classes
        first, second = stratified_halves(y, gen, K)  # before any attack draw: the same halves for every attack
        if attack == "ood":
            v = torch.randn(x.shape[-1], generator=gen, dtype=x.dtype)
            x = torch.where(byz[0, :, None, None], ood_features(x, v, gen, self.hparams.ood_s, self.hparams.ood_b,
                                                                self.hparams.ood_s2), x)
        elif attack == "shift":
            u = unit_direction(x.shape[-1], gen) * self.hparams.shift
            x = torch.where(byz[0, :, None, None], x + u, x)
        theta = self.theta0
        g1 = logistic_gradient(theta, gather_rows(x, first), gather_rows(y, first), K)
        g2 = logistic_gradient(theta, gather_rows(x, second), gather_rows(y, second), K)
        n1, n2 = first.shape[1], second.shape[1]
        g = (n1 * g1 + n2 * g2) / (n1 + n2)
        # Σ₀ from the master's per-sample gradients on its own (clean) data, as the official Sig_hat
        x0, y0 = batch["x"][0].double(), batch["y"][0]
        sigma0 = covariance(logistic_per_sample(theta, x0, y0, K))
        master = {"x": x0, "y": y0}
        return g1[None], g2[None], g[None], sigma0, master, min(n1, n2), x.shape[1]

    def _location_gradients(self, batch: dict, byz: torch.Tensor, attack: str, gen: torch.Generator):
        """A block of R repeats: xbar1, xbar2 (R, m, p) workers' half means, x0 (n0, p) the master's samples."""
        xbar1, xbar2, x0 = batch["xbar1"].double(), batch["xbar2"].double(), batch["x0"].double()
        n_half = int(batch["n_half"])
        perm = torch.randperm(len(x0), generator=gen)
        h = len(x0) // 2
        m1, m2 = x0[perm[h:]].mean(0), x0[perm[:h]].mean(0)
        R = xbar1.shape[0]
        xbar1 = torch.cat([m1.expand(R, 1, -1), xbar1], dim=1)
        xbar2 = torch.cat([m2.expand(R, 1, -1), xbar2], dim=1)
        mask = byz.unsqueeze(-1)
        if attack == "ood":
            v = torch.randn((R, 1, xbar1.shape[-1]), generator=gen, dtype=xbar1.dtype)
            hp = self.hparams
            xbar1 = torch.where(mask, ood_half_means(xbar1, v, n_half, gen, hp.ood_s, hp.ood_b, hp.ood_s2), xbar1)
            xbar2 = torch.where(mask, ood_half_means(xbar2, v, n_half, gen, hp.ood_s, hp.ood_b, hp.ood_s2), xbar2)
        elif attack == "shift":
            u = unit_direction(xbar1.shape[-1], gen, (R, 1)) * self.hparams.shift
            xbar1, xbar2 = torch.where(mask, xbar1 + u, xbar1), torch.where(mask, xbar2 + u, xbar2)
        theta = self.theta0
        g1, g2 = theta - xbar1, theta - xbar2
        g = (g1 + g2) / 2
        sigma0 = covariance(theta - x0)
        return g1, g2, g, sigma0, {"x": x0}, n_half, 2 * n_half

    # ------------------------------------------------------------------------------------------ test
    def test_step(self, batch: dict, batch_idx: int) -> None:
        hp = self.hparams
        for attack in hp.attacks:
            # the same seed for every attack: the same Byzantine machines and splits, a paired comparison
            gen = torch.Generator().manual_seed(torch.initial_seed() * 1_000_003 + batch_idx)
            if hp.model == "logistic":
                M, R = batch["x"].shape[0], 1
            else:
                M, R = batch["xbar1"].shape[1] + 1, batch["xbar1"].shape[0]
            byz = choose_byzantine((R,), M, hp.eps, gen)
            make = self._logistic_gradients if hp.model == "logistic" else self._location_gradients
            g1, g2, g, sigma0, master_data, n_half, n_local = make(batch, byz, attack, gen)
            if attack == "grad":
                g1, g2, g = random_gradient(g1, g2, g, byz, n_local, gen, hp.grad_sig, hp.grad_b1)
            elif attack == "ipm":
                g1, g2, g = ipm(g1, g2, g, byz, c_gamma=hp.ipm_c)
            oracle = (self.theta0 - batch["mu"].double()) if "mu" in batch else None
            self._evaluate(attack, g1, g2, g, byz, sigma0, master_data, n_half, n_local, oracle, gen)

    def _flag(self, method: str, g1, g2, g, sigma0, master_data, n_half, n_local, oracle, gen) -> torch.Tensor:
        """Flagged workers (R, m) by one method."""
        hp = self.hparams
        M = g1.shape[-2]
        if method in BYMI_METHODS:
            return bymi(g1, g2, alpha=hp.alpha, estimator=BYMI_METHODS[method], eps=hp.eps, const_f=hp.const_f,
                        n_half=n_half, sigma0=sigma0, g=g, offset=hp.offset, oracle_mean=oracle).flagged
        workers = g[:, 1:]
        f = removal_count(hp.eps, M, hp.const_f)
        if method == "krum":
            return krum(workers, f)[0]
        if method == "faba":
            return faba(workers, f)[0]
        if method == "rmdp_bh":
            return rmdp_bh(workers, sigma0, n_local, hp.alpha, generator=gen, itertime=hp.rmdp_starts)
        # zeno: the master's loss after one step along each worker's gradient
        if hp.model == "logistic":
            rows = hp.n_features + 1
            return zeno(workers, lambda t: self.loss(unflatten_theta(t, rows), master_data),
                        flatten_theta(self.theta0), hp.lr, hp.zeno_rho, f)
        return zeno(workers, lambda t: self.loss(t, master_data), self.theta0, hp.lr, hp.zeno_rho, f)

    def _evaluate(self, attack, g1, g2, g, byz, sigma0, master_data, n_half, n_local, oracle, gen) -> None:
        truth = byz[:, 1:]
        normal = (~truth).to(g.dtype).unsqueeze(-1)
        workers = g[:, 1:]
        clean_mean = (workers * normal).sum(1) / normal.sum(1).clamp_min(1)
        n_byz = truth.sum(-1)
        for method in self.hparams.methods:
            flagged = self._flag(method, g1, g2, g, sigma0, master_data, n_half, n_local, oracle, gen)
            size = flagged.sum(-1)
            fdp = (flagged & ~truth).sum(-1) / size.clamp_min(1)
            power = (flagged & truth).sum(-1) / n_byz.clamp_min(1)
            kept = (~flagged).to(g.dtype).unsqueeze(-1)
            # official `error`: the aggregate of the unflagged workers. When every worker is flagged it is zero here
            # for every method; the official code sets zero only for RMDP-BH (the others' mean of no rows is NaN)
            agg = torch.where(kept.sum(1) > 0, (workers * kept).sum(1) / kept.sum(1).clamp_min(1), 0.0)
            err = ((agg - clean_mean) ** 2).sum(-1)
            rec = self._results[(attack, method)]
            rec["fdp"] += fdp.double().tolist()
            rec["power"] += power.double().tolist()
            rec["all"] += (power == 1).double().tolist()
            rec["size"] += size.double().tolist()
            rec["err"] += err.tolist()

    def on_test_epoch_start(self) -> None:
        self._results.clear()

    def on_test_epoch_end(self) -> None:
        for (attack, method), rec in self._results.items():
            fdp = torch.tensor(rec["fdp"], dtype=torch.float64)
            n = len(fdp)
            pre = f"test/{attack}/{method}"
            self.log(f"{pre}/fdr", fdp.mean())
            self.log(f"{pre}/fdr_se", fdp.std() / math.sqrt(n) if n > 1 else torch.tensor(0.0))
            self.log(f"{pre}/power", torch.tensor(rec["power"]).mean())
            self.log(f"{pre}/p_all", torch.tensor(rec["all"]).mean())
            self.log(f"{pre}/size", torch.tensor(rec["size"]).mean())
            self.log(f"{pre}/rmse", torch.tensor(rec["err"]).mean().sqrt())
        self.log("test/repeats", float(len(next(iter(self._results.values()))["fdp"])) if self._results else 0.0)

    def card_metadata(self) -> dict:
        return {"tags": ["bymi", "byzantine-robustness", "fdr-control", self.hparams.model], "base_model": None}


class FeatureClassifier(HubMixin, L.LightningModule):
    """A small MLP (or, with ``hidden=0``, multinomial logistic regression) on feature vectors, for training under
    DDP with `callbacks.byzantine_identification` (every rank is one machine holding its own shard).

    Args:
        n_features, n_classes: input and output sizes. hidden: width of the hidden layer (0 = linear).
        lr, momentum: SGD.
    """

    monitor = "val/acc"
    monitor_mode = "max"

    def __init__(self, n_features: int = 20, n_classes: int = 10, hidden: int = 32, lr: float = 0.1,
                 momentum: float = 0.0):
        super().__init__()
        self.save_hyperparameters()
        if n_features < 1 or n_classes < 2 or hidden < 0 or lr <= 0:
            raise ZooError(f"FeatureClassifier needs n_features >= 1, n_classes >= 2, hidden >= 0, lr > 0; got "
                           f"{n_features}, {n_classes}, {hidden}, {lr}")
        layers = [nn.Linear(n_features, n_classes)] if hidden == 0 else [
            nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, n_classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_loss(self, batch) -> torch.Tensor:
        """Mean cross-entropy of a batch (x, y): what `ByzantineIdentification` differentiates on each half."""
        x, y = batch
        return F.cross_entropy(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.training_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch[0]))
        return loss

    def _eval(self, batch, stage: str) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}/loss", F.cross_entropy(logits, y), batch_size=len(x), sync_dist=True)
        self.log(f"{stage}/acc", (logits.argmax(-1) == y).float().mean(), batch_size=len(x), sync_dist=True)

    def validation_step(self, batch, batch_idx):
        self._eval(batch, "val")

    def test_step(self, batch, batch_idx):
        self._eval(batch, "test")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)

    def card_metadata(self) -> dict:
        return {"tags": ["bymi", "byzantine-robustness", "ddp"], "base_model": None}
