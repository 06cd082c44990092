"""Lightning modules: GENTLE and its baselines, all evaluated by the same validation/test step.

* `GENTLEModule`: T_θ(u, x) and v_φ(y, x) trained by smoothed GDA (``lambda_ot: 0`` is the "T without OT"
  ablation: the fit term alone).
* `CWGANModule`: the CWGAN baseline (ds-wgan, as the official `train_wgan.py` runs it).
* `PooledMarginalModule`: ignores x; samples the pooled training marginal of y.

Each draws y | x for the evaluation covariates and logs the mean over covariates of the 1-D Wasserstein distance
(``wd``) and the Kolmogorov-Smirnov statistic (``ks``) to the observed conditional, in raw y units.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import lightning as L
import numpy as np
import torch

from zoo.attached import attached_datamodule
from zoo.errors import ZooError
from zoo.gentle.baselines import CWGANCritic, CWGANGenerator, gradient_penalty
from zoo.gentle.entropic import debiased_semi_dual, entropic_ot, semi_dual
from zoo.gentle.gda import gradient_norms, make_anchors, proximal_penalty, smoothed_gda_step
from zoo.gentle.kde import interpolate_cdf, kde_cdf_table
from zoo.gentle.metrics import conditional_scores
from zoo.gentle.neighbours import lipschitz_weights, mst_neighbours, released_relation
from zoo.gentle.nets import MLPM
from zoo.hub import HubMixin

STATS = ("x_mean", "x_std", "y_mean", "y_std", "y_lower")


class ConditionalGeneratorModule(HubMixin, L.LightningModule):
    """Shared part: the data's standardisation (buffers, so checkpoints and Hub weights carry it), sampling in raw
    units, and the WD/KS evaluation. Subclasses implement `sample_standardised`."""

    monitor = "val/wd"
    monitor_mode = "min"
    batch_by = "covariate"  # how the datamodule must batch training data
    # manual optimisation of two networks (map and potential, generator and critic): each backward reaches one
    ddp_find_unused_parameters = True

    def __init__(self, x_dim: int, n_eval_samples: int):
        super().__init__()
        if x_dim < 1:
            raise ZooError(f"x_dim must be >= 1, got {x_dim}")
        if n_eval_samples < 1:
            raise ZooError(f"n_eval_samples must be >= 1, got {n_eval_samples}")
        self.register_buffer("x_mean", torch.zeros(x_dim))
        self.register_buffer("x_std", torch.ones(x_dim))
        self.register_buffer("y_mean", torch.zeros(1))
        self.register_buffer("y_std", torch.ones(1))
        self.register_buffer("y_lower", torch.full((1,), -torch.inf))
        self.register_buffer("standardised", torch.zeros((), dtype=torch.bool))

    # --------------------------------------------------------------------------------------- data hooks
    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        if dm is None:
            return
        if getattr(dm, "x_dim", self.hparams.x_dim) != self.hparams.x_dim:
            raise ZooError(f"model x_dim={self.hparams.x_dim} but the {dm.hparams.dataset} data have {dm.x_dim} "
                           f"covariates {list(dm.schema.x)}")
        if stage == "fit" and getattr(dm.hparams, "batch_by", self.batch_by) != self.batch_by:
            raise ZooError(f"{type(self).__name__} trains on batches by {self.batch_by}; set "
                           f"data.init_args.batch_by: {self.batch_by}")
        # at fit always; at test/validate only if no checkpoint has set them (a checkpoint is loaded after setup
        # and overwrites these buffers)
        if stage == "fit" or not bool(self.standardised):
            self.set_standardisation(dm.standardisation())

    @torch.no_grad()
    def set_standardisation(self, stats: dict[str, torch.Tensor]) -> None:
        for name in STATS:
            getattr(self, name).copy_(stats[name])
        self.standardised.fill_(True)

    # --------------------------------------------------------------------------------------- sampling
    def sample_standardised(self, xs: torch.Tensor, n: int) -> torch.Tensor:
        """(n_cov, x_dim) standardised covariates -> (n_cov, n) standardised draws of y | x."""
        raise NotImplementedError

    @torch.no_grad()
    def sample(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """(n_cov, x_dim) raw covariates -> (n_cov, n) draws of y | x in raw units (clipped at y's lower bound)."""
        xs = (x.to(self.x_mean) - self.x_mean) / self.x_std
        y = self.sample_standardised(xs, n) * self.y_std + self.y_mean
        return torch.maximum(y, self.y_lower)

    def _evaluate(self, batch: Sequence[tuple[torch.Tensor, torch.Tensor]], stage: str) -> None:
        x = torch.stack([b[0] for b in batch])
        generated = self.sample(x, self.hparams.n_eval_samples).double().cpu().numpy()
        scores = conditional_scores(list(generated), [b[1].cpu().numpy() for b in batch])
        for name, values in scores.items():
            self.log(f"{stage}/{name}", float(values.mean()), batch_size=len(batch), prog_bar=stage == "val",
                     sync_dist=True)  # under DDP: the mean over every process's covariates, weighted by their number

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, "val")

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, "test")

    def predict_step(self, batch, batch_idx):
        x = torch.stack([b[0] for b in batch]) if isinstance(batch, list) else batch
        return self.sample(x, self.hparams.n_eval_samples)


class GENTLEModule(ConditionalGeneratorModule):
    """GENTLE: generator T_θ(u, x) (an inverse conditional CDF, u ~ U(0, 1)) and potential v_φ(y, x).

    The generator minimises L_fit + λ R + (r1/2)‖θ - θ̄‖², the potential maximises λ R - (r2/2)‖φ - φ̄‖², then the
    anchors follow: θ̄ ← (1-β)θ̄ + βθ, φ̄ ← (1-μ)φ̄ + μφ. L_fit = mean_i E_u (u - F̂_i(T(u, x_i)))² with F̂_i the KDE CDF
    of the y's at x_i; R = mean_i R_i, the entropic semi-dual between T(·, x_i) and T(·, x_j(i)), j(i) an MST
    neighbour of x_i. Defaults are the official `train_gentle.py`'s.

    Args:
        x_dim: number of covariates (cps 9, ecm 5, toy1 3, toy2 2).
        lambda_ot: λ, weight of the OT term (official ``ld`` 0.3; 0 = the ablation without OT).
        epsilon: ε, entropic regularisation (1.0), in standardised y units (the official code z-scores y; 1.0 is
            train_gentle.py's default and the one value on the ε axis of its grid_search.py, set up for ECM).
        debias: ours, not the paper's (default False = the paper's term): subtract ½ W_ε(α_i, α_i) + ½ W_ε(β_j, β_j)
            from R_i + ε, the Sinkhorn divergence, which is 0 for identical neighbours instead of rewarding narrow
            conditionals (`zoo.gentle.entropic.debiased_semi_dual`; the self terms are solved exactly on the samples).
        ot_term: how max_v R_i is evaluated. ``semidual`` (default, the paper's): the potential network v_φ, trained by
            the ascent step. ``sinkhorn`` (a diagnostic, ours, not the paper's method): R_i + ε = W_ε(T(·, x_i),
            T(·, x_j)) solved exactly on the step's samples by log-domain Sinkhorn, with its envelope gradient
            (`zoo.gentle.entropic.entropic_ot`); v_φ is then unused and the ascent step does nothing. It separates
            the objective from the potential network's training (cards/gentle/toy_runs.md, fourth round).
        lipschitz_power: p, ours, not the official code's (default 0 = the official term: nothing divides by the
            covariate distance). p > 0 weights R_i by ‖x_i - x_j(i)‖^(-p), normalised to mean 1 over the training
            covariates so that λ keeps its scale. With R_i + ε ≈ W₂²(μ_i, μ_j), p = 2 makes the term a mean squared
            Lipschitz ratio (W₂ / ‖x_i - x_j‖)², a literal reading of the abstract's "penalizing the Lipschitz
            constant" (the paper's formula could not be read here; cards/gentle/toy_runs.md, sixth round).
        pairing: which pairs enter the OT term. ``neighbour`` (default, the paper's): every covariate against its
            MST neighbour j(i) in both players' steps. ``released``: the official `train_gentle.py` as released,
            for comparison with its numbers. Its generator step takes R_i only where the official assignment
            (`zoo.gentle.neighbours.released_relation`) leaves x_i unset, about 20% of the covariates, each
            against the last distinct covariate; its potential step skips those and takes the other 80% against
            their assigned neighbours. Both index the covariates in order of first appearance in the training file,
            as the official code does (cards/gentle.md, "Choices and deviations").
        bandwidth: KDE ``bw_method`` factor for F̂_i (0.3).
        r1, r2: proximal weights of the generator and the potential (3.0, 2.0).
        beta, mu: anchor rates of the generator and the potential (0.5, 0.7).
        lr_mapping, lr_potential: Adam learning rates (1e-3 both).
        n_u: B, u-samples per covariate and step (official ``batch_size`` 500).
        cost: ground cost of the OT term in both players' steps: ``sqeuclidean`` (default) or ``euclidean``.
            ``released``: as the official code, the squared distance in the generator step and the absolute one in
            the potential step (two different games; cards/gentle.md).
        n_eval_samples: draws per evaluation covariate for WD/KS (no official evaluation script; ours).
        log_grad_norms: diagnostic, ours (default False): log the generator's gradient norms of L_fit
            (``train/grad_fit``), of λR (``train/grad_ot``) and of the proximal term (``train/grad_prox`` =
            r1‖θ - θ̄‖), and the cosine of the first two (``train/grad_cos``), every step. Two extra backward
            passes per step; the update is unchanged.
    """

    def __init__(
        self,
        x_dim: int = 3,
        lambda_ot: float = 0.3,
        epsilon: float = 1.0,
        debias: bool = False,
        ot_term: Literal["semidual", "sinkhorn"] = "semidual",
        lipschitz_power: float = 0.0,
        pairing: Literal["neighbour", "released"] = "neighbour",
        bandwidth: float = 0.3,
        r1: float = 3.0,
        r2: float = 2.0,
        beta: float = 0.5,
        mu: float = 0.7,
        lr_mapping: float = 1e-3,
        lr_potential: float = 1e-3,
        n_u: int = 500,
        cost: Literal["sqeuclidean", "euclidean", "released"] = "sqeuclidean",
        n_eval_samples: int = 1000,
        log_grad_norms: bool = False,
    ):
        super().__init__(x_dim, n_eval_samples)
        self.save_hyperparameters()
        checks = {"lambda_ot": lambda_ot >= 0, "epsilon": epsilon > 0, "lipschitz_power": lipschitz_power >= 0,
                  "bandwidth": bandwidth > 0, "r1": r1 >= 0, "r2": r2 >= 0, "beta": 0 < beta <= 1, "mu": 0 < mu <= 1,
                  "lr_mapping": lr_mapping > 0, "lr_potential": lr_potential > 0, "n_u": n_u >= 1}
        allowed = {"lambda_ot": ">= 0", "epsilon": "> 0", "lipschitz_power": ">= 0", "bandwidth": "> 0", "r1": ">= 0",
                   "r2": ">= 0", "beta": "in (0, 1]", "mu": "in (0, 1]", "lr_mapping": "> 0", "lr_potential": "> 0",
                   "n_u": ">= 1"}
        for name, ok in checks.items():
            if not ok:
                raise ZooError(f"GENTLE {name}={getattr(self.hparams, name)} is not allowed: it must be {allowed[name]}")
        for name, flag in (("debias", debias), ("log_grad_norms", log_grad_norms)):
            if not isinstance(flag, bool):
                raise ZooError(f"GENTLE {name}={flag!r}: use true or false")
        if cost not in ("sqeuclidean", "euclidean", "released"):
            raise ZooError(f"GENTLE cost={cost!r}: use 'sqeuclidean', 'euclidean' or 'released'")
        if pairing not in ("neighbour", "released"):
            raise ZooError(f"GENTLE pairing={pairing!r}: use 'neighbour' (the paper's) or 'released' "
                           "(the official code's)")
        if pairing == "released" and lipschitz_power != 0:
            raise ZooError("GENTLE pairing='released' reproduces the official code, which weights no pair: set "
                           "lipschitz_power: 0")
        if ot_term not in ("semidual", "sinkhorn"):
            raise ZooError(f"GENTLE ot_term={ot_term!r}: use 'semidual' (the paper's) or 'sinkhorn' (exact, a diagnostic)")
        if ot_term == "sinkhorn" and debias:
            raise ZooError("GENTLE debias=true needs ot_term='semidual' (the exact Sinkhorn term is not debiased here)")
        self.automatic_optimization = False
        self.mapping = MLPM(1 + x_dim)  # T_θ([u, x])
        self.potential = MLPM(1 + x_dim)  # v_φ([y, x])
        self.anchors: dict[str, list[torch.Tensor]] | None = None

    # --------------------------------------------------------------------------------------- training tables
    def setup(self, stage: str) -> None:
        super().setup(stage)
        dm = attached_datamodule(self)
        if stage == "fit" and dm is not None:
            self.build_tables(*dm.train_groups(), order=dm.train_appearance_order())

    def build_tables(self, x_distinct: np.ndarray, y_groups: list[np.ndarray], order: np.ndarray | None = None) -> None:
        """F̂_i tables and MST neighbours of the distinct training covariates (standardised). Not persistent: they
        are training data, rebuilt from the datamodule at every fit. ``order``: the covariates' order of first
        appearance in the training file (default: as given), which the released pairing indexes by."""
        grid, cdf = kde_cdf_table(y_groups, self.hparams.bandwidth)
        try:
            if self.hparams.pairing == "released":
                # train_gentle.py as released: the generator step takes R_i only where the official assignment left
                # x_i unset (-1), against distinct_x[-1]; the potential step skips exactly those and takes the
                # others against their assigned neighbour. Both sum over their covariates and divide by the batch
                # size (the zero weights below; the potential's partner of an unset node is a placeholder).
                official, last = released_relation(x_distinct, order)
                unset = official == -1
                generator = (np.full(len(official), last), unset.astype(np.float64))
                potential = (np.where(unset, last, official), (~unset).astype(np.float64))
            else:
                neighbours = mst_neighbours(x_distinct)
                weights = lipschitz_weights(x_distinct, neighbours, self.hparams.lipschitz_power)
                generator = potential = (neighbours, weights)
        except ValueError as e:
            raise ZooError(f"GENTLE neighbours: {e}") from e
        f32 = lambda a: torch.as_tensor(a, dtype=torch.float32, device=self.device)
        self.register_buffer("train_x", f32(x_distinct), persistent=False)
        self.register_buffer("cdf_grid", f32(grid), persistent=False)
        self.register_buffer("cdf_values", f32(cdf), persistent=False)
        # the generator's pairs (j(i), weight) and the potential's
        self.register_buffer("neighbour", torch.as_tensor(generator[0], device=self.device), persistent=False)
        self.register_buffer("pair_weight", f32(generator[1]), persistent=False)
        self.register_buffer("potential_neighbour", torch.as_tensor(potential[0], device=self.device),
                             persistent=False)
        self.register_buffer("potential_pair_weight", f32(potential[1]), persistent=False)

    # --------------------------------------------------------------------------------------- the players
    def T(self, u: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(n_cov, B) u's at (n_cov, x_dim) standardised covariates -> (n_cov, B) standardised y's."""
        n, b = u.shape
        inp = torch.cat([u.reshape(n * b, 1), x[:, None, :].expand(n, b, x.shape[-1]).reshape(n * b, -1)], dim=1)
        return self.mapping(inp).reshape(n, b)

    def v(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        n, b = y.shape
        inp = torch.cat([y.reshape(n * b, 1), x[:, None, :].expand(n, b, x.shape[-1]).reshape(n * b, -1)], dim=1)
        return self.potential(inp).reshape(n, b)

    def sample_standardised(self, xs: torch.Tensor, n: int) -> torch.Tensor:
        return self.T(torch.rand(xs.shape[0], n, device=xs.device), xs)

    def ot_term(self, a: torch.Tensor, x_j: torch.Tensor, through_generator: bool = True,
                weight: torch.Tensor | None = None) -> torch.Tensor:
        """R = mean_i w_i R_i (w_i = 1 unless ``lipschitz_power`` > 0 or ``pairing`` is ``released``) for generated
        a = T(u, x_i) (n_cov, B) against fresh draws b = T(u', x_j) at the partners. In the generator step the
        gradient reaches θ through a, b and v's input b; in the potential step (``through_generator=False``) the
        draws are constants and only v_φ is differentiated. With ``debias`` the self terms of the Sinkhorn divergence
        are subtracted; they depend on θ only, so the potential's gradient is the same either way. Pairs of weight
        0 (only the released pairing has them: it leaves out about 80% of the generator's) are not computed: the
        mean still divides by all n_cov, as the official loops divide by the batch size."""
        n = a.shape[0]
        if weight is not None and self.hparams.pairing == "released":  # the other pairings weight no pair 0: no sync
            keep = weight != 0
            if not bool(keep.any()):
                return a.sum() * 0.0  # no pair in this batch: a zero that keeps the graph
            a, x_j, weight = a[keep], x_j[keep], weight[keep]
        with torch.set_grad_enabled(through_generator and torch.is_grad_enabled()):
            b = self.T(torch.rand_like(a), x_j)
        hp = self.hparams
        # the released code's generator step uses the squared distance, its potential step |a - b|
        cost = hp.cost if hp.cost != "released" else ("sqeuclidean" if through_generator else "euclidean")
        if hp.ot_term == "sinkhorn":  # exact W_ε(α_i, β_j) - ε, the same convention as the semi-dual's R
            per_pair = entropic_ot(a, b, hp.epsilon, cost) - hp.epsilon
        else:
            per_pair = (debiased_semi_dual if hp.debias else semi_dual)(a, b, self.v(b, x_j), hp.epsilon, cost)
        return (per_pair if weight is None else per_pair * weight).sum() / n

    # --------------------------------------------------------------------------------------- smoothed GDA
    def configure_optimizers(self):
        return [torch.optim.Adam(self.mapping.parameters(), lr=self.hparams.lr_mapping),
                torch.optim.Adam(self.potential.parameters(), lr=self.hparams.lr_potential)]

    def on_fit_start(self) -> None:
        if self.anchors is None:  # fresh run: anchors start at the initial weights (official z_pre, v_pre)
            self.anchors = {"mapping": make_anchors(self.mapping.parameters()),
                            "potential": make_anchors(self.potential.parameters())}

    def training_step(self, batch, batch_idx):
        (idx,) = batch
        hp = self.hparams
        x_i, x_j = self.train_x[idx], self.train_x[self.neighbour[idx]]
        w = self.pair_weight[idx]  # all ones at lipschitz_power 0 (the official term), an exact no-op
        grid, cdf = self.cdf_grid[idx], self.cdf_values[idx]
        parts: dict[str, torch.Tensor] = {}

        def generator_loss() -> torch.Tensor:
            u = torch.rand(len(idx), hp.n_u, device=self.device)
            a = self.T(u, x_i)
            parts["l_fit"] = loss = (u - interpolate_cdf(grid, cdf, a)).square().mean()
            terms = {"fit": loss}
            if hp.lambda_ot != 0:
                parts["reg_generator"] = self.ot_term(a, x_j, weight=w)
                terms["ot"] = hp.lambda_ot * parts["reg_generator"]
                loss = loss + terms["ot"]
            if hp.log_grad_norms:  # is the OT term's pull on θ comparable to the fit term's? (cards/gentle.md)
                mapping = list(self.mapping.parameters())
                norms = gradient_norms(terms, mapping)
                # ∇ (r1/2)‖θ - θ̄‖² = r1 (θ - θ̄), evaluated before this step, as the generator's loss is
                norms["prox"] = hp.r1 * proximal_penalty(mapping, self.anchors["mapping"]).detach().sqrt()
                parts.update({f"grad_{k}": v for k, v in norms.items()})
            return loss

        def potential_objective() -> torch.Tensor:
            if hp.lambda_ot == 0 or hp.ot_term == "sinkhorn":  # nothing to ascend: only the proximal term, at 0
                return torch.zeros((), device=self.device)
            with torch.no_grad():
                a = self.T(torch.rand(len(idx), hp.n_u, device=self.device), x_i)
            partner = self.train_x[self.potential_neighbour[idx]]  # x_j unless pairing is "released"
            parts["reg"] = self.ot_term(a, partner, through_generator=False, weight=self.potential_pair_weight[idx])
            return hp.lambda_ot * parts["reg"]

        opt_t, opt_v = self.optimizers()
        out = smoothed_gda_step(
            list(self.mapping.parameters()), list(self.potential.parameters()),
            self.anchors["mapping"], self.anchors["potential"], generator_loss, potential_objective,
            opt_t, opt_v, hp.r1, hp.r2, hp.beta, hp.mu, backward=self.manual_backward)
        n = len(idx)
        self.log("train/loss", out["min_loss"], prog_bar=True, batch_size=n)
        self.log("train/l_fit", parts["l_fit"].detach(), batch_size=n)
        if "reg" in parts or "reg_generator" in parts:  # sinkhorn: the generator's exact R (no ascent step)
            self.log("train/reg", parts.get("reg", parts.get("reg_generator")).detach(), batch_size=n)
        for name in ("grad_fit", "grad_ot", "grad_prox", "grad_cos"):
            if name in parts:
                self.log(f"train/{name}", parts[name], batch_size=n)
        self.log("train/prox_mapping", out["prox_min"], batch_size=n)
        self.log("train/prox_potential", out["prox_max"], batch_size=n)

    # anchors travel in the Lightning checkpoint (exact resume) but not in the Hub weights
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.anchors is not None:
            checkpoint["gda_anchors"] = {k: [a.cpu() for a in v] for k, v in self.anchors.items()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        if "gda_anchors" in checkpoint:
            self.anchors = {k: [a.to(self.device) for a in v] for k, v in checkpoint["gda_anchors"].items()}

    def card_metadata(self) -> dict:
        tags = ["gentle", "conditional-generation", "entropic-optimal-transport"]
        return {"tags": tags + (["ablation-no-ot"] if self.hparams.lambda_ot == 0 else []), "base_model": None}


class CWGANModule(ConditionalGeneratorModule):
    """CWGAN baseline (Athey et al., ds-wgan, as the official `train_wgan.py` configures it).

    Args:
        x_dim: number of covariates.
        hidden: hidden widths of generator and critic (ds-wgan: 128-128-128).
        generator_dropout, critic_dropout: dropout (ds-wgan: 0.1, 0).
        critic_steps: every ``critic_steps``-th batch is a generator step, the others critic steps (15).
        gp_factor: weight of the one-sided gradient penalty (5).
        lr_generator, lr_critic: Adam learning rates (official `train_wgan.py`: 1e-3 both).
        n_eval_samples: draws per evaluation covariate.
    """

    batch_by = "row"

    def __init__(
        self,
        x_dim: int = 3,
        hidden: list[int] = [128, 128, 128],  # noqa: B006 (jsonargparse needs a literal default)
        generator_dropout: float = 0.1,
        critic_dropout: float = 0.0,
        critic_steps: int = 15,
        gp_factor: float = 5.0,
        lr_generator: float = 1e-3,
        lr_critic: float = 1e-3,
        n_eval_samples: int = 1000,
    ):
        super().__init__(x_dim, n_eval_samples)
        self.save_hyperparameters()
        if critic_steps < 2:
            raise ZooError(f"CWGAN critic_steps={critic_steps}: must be >= 2 (one generator step per critic_steps)")
        if not (0 <= generator_dropout < 1 and 0 <= critic_dropout < 1):
            raise ZooError(f"CWGAN dropout must be in [0, 1), got {generator_dropout}, {critic_dropout}")
        self.automatic_optimization = False
        self.generator = CWGANGenerator(x_dim, hidden, generator_dropout)
        self.critic = CWGANCritic(x_dim, hidden, critic_dropout)

    def _lower_standardised(self) -> torch.Tensor:
        return (self.y_lower - self.y_mean) / self.y_std

    def sample_standardised(self, xs: torch.Tensor, n: int) -> torch.Tensor:
        rows = xs.repeat_interleave(n, dim=0)
        return self.generator(rows, self._lower_standardised()).reshape(xs.shape[0], n)

    def configure_optimizers(self):
        return [torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr_generator),
                torch.optim.Adam(self.critic.parameters(), lr=self.hparams.lr_critic)]

    def training_step(self, batch, batch_idx):
        y, x = batch
        opt_g, opt_c = self.optimizers()
        # ds-wgan counts batches from 1 and makes batch k a generator step when k % critic_steps == 0; one
        # optimizer steps per batch, so global_step counts batches
        if (self.global_step + 1) % self.hparams.critic_steps == 0:
            with self.toggled_optimizer(opt_g):  # the critic's weights off the graph (DDP expects a grad for all)
                loss = -self.critic(self.generator(x, self._lower_standardised()), x).mean()
                opt_g.zero_grad()
                self.manual_backward(loss, inputs=list(self.generator.parameters()))
                opt_g.step()
            self.log("train/generator_loss", loss.detach(), batch_size=len(y))
            return
        y_hat = self.generator(x, self._lower_standardised()).detach()
        wd = self.critic(y, x).mean() - self.critic(y_hat, x).mean()
        loss = -wd + self.hparams.gp_factor * gradient_penalty(self.critic, y, y_hat, x)
        opt_c.zero_grad()
        self.manual_backward(loss, inputs=list(self.critic.parameters()))
        opt_c.step()
        self.log("train/loss", loss.detach(), prog_bar=True, batch_size=len(y))
        self.log("train/critic_wd", wd.detach(), batch_size=len(y))

    def card_metadata(self) -> dict:
        return {"tags": ["gentle", "baseline", "cwgan", "conditional-generation"], "base_model": None}


class _StoringBaseline(ConditionalGeneratorModule):
    """A baseline with nothing to train: "fitting" stores training data (standardised) in the buffers named in
    `stored`, whose sizes a checkpoint or Hub file then sets. One batch of one epoch is enough."""

    stored: tuple[str, ...] = ()
    single_process = "it stores the training data it sees, and under DDP each process would see a share"

    def __init__(self, x_dim: int, n_eval_samples: int):
        super().__init__(x_dim, n_eval_samples)
        self.automatic_optimization = False

    def prepare_state_dict_load(self, state_dict: dict[str, torch.Tensor]) -> None:
        for name in self.stored:
            if name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[name], device=self.device))

    def configure_optimizers(self):
        return None

    def training_step(self, batch, batch_idx):
        return None


class PooledMarginalModule(_StoringBaseline):
    """Baseline that ignores x: y | x is drawn from the pooled training marginal of y (resampling the training y's).

    Args:
        x_dim: number of covariates (checked against the data, otherwise unused).
        n_eval_samples: draws per evaluation covariate.
    """

    stored = ("pooled_y",)

    def __init__(self, x_dim: int = 3, n_eval_samples: int = 1000):
        super().__init__(x_dim, n_eval_samples)
        self.save_hyperparameters()
        self.register_buffer("pooled_y", torch.zeros(0))

    def setup(self, stage: str) -> None:
        super().setup(stage)
        dm = attached_datamodule(self)
        if stage == "fit" and dm is not None:
            self.pooled_y = torch.as_tensor(dm.train_y(), dtype=torch.float32, device=self.device)

    def sample_standardised(self, xs: torch.Tensor, n: int) -> torch.Tensor:
        if self.pooled_y.numel() == 0:
            raise ZooError("PooledMarginalModule has no training y's: fit it (or load a fitted checkpoint) first")
        pick = torch.randint(self.pooled_y.numel(), (xs.shape[0], n), device=xs.device)
        return self.pooled_y[pick]

    def card_metadata(self) -> dict:
        return {"tags": ["gentle", "baseline", "pooled-marginal"], "base_model": None,
                "model_source": "no network: the training y's, stored and resampled for every covariate"}


class NearestNeighboursModule(_StoringBaseline):
    """Baseline (ours, a diagnostic; not in the paper or the official code): y | x drawn from the training y's of the
    k distinct training covariates nearest to x (Euclidean distance on the standardised covariates), pooled and
    resampled uniformly. A smoother with no network and no OT term: how much pooling neighbours' draws is worth at a
    given number of samples per covariate, beside the smoothing GENTLE's OT term adds to the network's own.

    Args:
        x_dim: number of covariates.
        k: neighbours pooled (k = 1 at a training covariate resamples its own y's).
        n_eval_samples: draws per evaluation covariate.
    """

    stored = ("covariates", "ys", "owner")

    def __init__(self, x_dim: int = 3, k: int = 5, n_eval_samples: int = 1000):
        super().__init__(x_dim, n_eval_samples)
        if k < 1:
            raise ZooError(f"k must be >= 1, got {k}")
        self.save_hyperparameters()
        self.register_buffer("covariates", torch.zeros(0, x_dim))  # distinct training covariates, standardised
        self.register_buffer("ys", torch.zeros(0))  # their y's, standardised, grouped by covariate
        self.register_buffer("owner", torch.zeros(0, dtype=torch.long))  # which covariate each y belongs to

    def setup(self, stage: str) -> None:
        super().setup(stage)
        dm = attached_datamodule(self)
        if stage == "fit" and dm is not None:
            x_distinct, y_groups = dm.train_groups()
            self._check_k(len(x_distinct))
            self.covariates = torch.as_tensor(x_distinct, dtype=torch.float32, device=self.device)
            self.ys = torch.as_tensor(np.concatenate(y_groups), dtype=torch.float32, device=self.device)
            sizes = torch.as_tensor([len(g) for g in y_groups], device=self.device)
            self.owner = torch.repeat_interleave(torch.arange(len(y_groups), device=self.device), sizes)

    def _check_k(self, n_covariates: int) -> None:
        if n_covariates < self.hparams.k:
            raise ZooError(f"k={self.hparams.k} neighbours but only {n_covariates} distinct training covariates")

    def sample_standardised(self, xs: torch.Tensor, n: int) -> torch.Tensor:
        if self.ys.numel() == 0:
            raise ZooError("NearestNeighboursModule has no training data: fit it (or load a fitted checkpoint) first")
        self._check_k(len(self.covariates))  # a checkpoint may hold fewer
        nearest = torch.cdist(xs.to(self.covariates), self.covariates).topk(self.hparams.k, largest=False).indices
        out = torch.empty(xs.shape[0], n, device=xs.device)
        for q, cov in enumerate(nearest):
            pool = self.ys[torch.isin(self.owner, cov)]
            out[q] = pool[torch.randint(pool.numel(), (n,), device=xs.device)]
        return out

    def card_metadata(self) -> dict:
        return {"tags": ["gentle", "baseline", "nearest-neighbours"], "base_model": None,
                "model_source": f"no network: the stored training y's of the {self.hparams.k} nearest training "
                                "covariates, resampled"}
