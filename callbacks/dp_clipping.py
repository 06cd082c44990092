"""`DPClipping`: DP-SGD for any LightningModule (per-sample clipping, Gaussian noise, accounting).

What the callback does each optimizer step (in `on_before_optimizer_step`, i.e. after the backward,
before Lightning's own gradient clipping and the update):
1. per-sample gradient norms ‖g_i‖ from activations/backprops captured by hooks
   (`phantom`: Phantom Clipping for a tied input/output embedding + ghost norms for linear layers;
   `ghost`: ghost norms, no tied embedding/output weights; `per_sample`: materialised per-sample
   gradients with Opacus' grad samplers, any layer Opacus supports);
2. Σ_i c_i g_i with c_i = min(1, C/(‖g_i‖+1e-6)) by book-keeping from the same captures (measured
   faster than a second weighted backward: benchmarks/RESULTS.md (section dpformer));
3. p.grad = (Σ_i c_i g_i + N(0, σ²C²I)) / (q·N) (Opacus convention for a batch-mean loss);
4. one step of the privacy accountant (Opacus RDP or PRV) at (σ, q); ε is logged as `dp/epsilon`.
It stops training (skipping the update) when the next step would exceed `target_epsilon`.

Requirements on the LightningModule (checked before training where possible, ZooError otherwise):
- trainable parameters live in layers the mode supports; inputs are batch-first; each sample's loss
  depends on that sample only (no batch norm, no in-batch negatives);
- the training loss is the mean over the batch's samples (`loss_reduction="mean"`, divided by the
  actual batch size, which may be 0 under Poisson sampling) or their sum (`"sum"`);
- a single optimizer; automatic or manual optimisation (manual: call `self.manual_backward(loss)`
  then `opt.step()`); no `gradient_clip_val`, `accumulate_grad_batches` 1, no 16-bit AMP scaler,
  one process;
- the train loader draws batches by Poisson sampling (Opacus `UniformWithReplacementSampler` as its
  `batch_sampler`), which the accounting assumes;
- optional: a method `on_dp_noise(noise_multiplier, max_grad_norm, expected_batch_size)`, called
  once σ is known (DPSASRecModule uses it for Re-Attention).
"""

from __future__ import annotations

import copy
from typing import Literal, Optional

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from zoo.dp import PerSampleClipper
from zoo.errors import ZooError


MAX_SIGMA = 100.0


def make_accountant(name: str):
    from opacus.accountants import PRVAccountant, RDPAccountant

    return {"rdp": RDPAccountant, "prv": PRVAccountant}[name]()


def noise_for_budget(target_epsilon: float, target_delta: float, sample_rate: float, steps: int,
                     accountant: str = "rdp") -> float:
    """σ reaching (ε, δ) after `steps` Poisson-sampled steps (Opacus `get_noise_multiplier`)."""
    from opacus.accountants.utils import get_noise_multiplier

    # Opacus doubles σ up to 1e6 before giving up, which takes minutes with tiny targets; any σ
    # above MAX_SIGMA leaves no signal anyway, so refuse early.
    acc = make_accountant(accountant)
    acc.history = [(MAX_SIGMA, sample_rate, steps)]
    if acc.get_epsilon(delta=target_delta) > target_epsilon:
        raise ZooError(
            f"DPClipping: target_epsilon={target_epsilon} is unreachable at delta={target_delta}, "
            f"sample_rate={sample_rate:.4g}, steps={steps} (it would need noise_multiplier > {MAX_SIGMA})"
        )
    try:
        return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=target_delta,
                                          sample_rate=sample_rate, steps=steps, accountant=accountant))
    except (ValueError, RuntimeError, OverflowError) as e:
        raise ZooError(
            f"DPClipping: target_epsilon={target_epsilon} is unreachable at delta={target_delta}, "
            f"sample_rate={sample_rate:.4g}, steps={steps} ({e})"
        ) from e


class DPClipping(pl.Callback):
    def __init__(
        self,
        mode: Literal["phantom", "ghost", "per_sample"] = "phantom",
        max_grad_norm: float = 1.0,
        target_epsilon: Optional[float] = None,
        target_delta: Optional[float] = None,
        noise_multiplier: Optional[float] = None,
        accountant: Literal["rdp", "prv"] = "rdp",
        loss_reduction: Literal["mean", "sum"] = "mean",
        check_hooks: bool = True,
    ):
        """
        Args:
            mode: how per-sample norms are computed (see module docstring).
            max_grad_norm: clipping bound C.
            target_epsilon: privacy budget ε; with `noise_multiplier` unset, σ is chosen so that the
                planned number of steps spends exactly this budget. Training stops at the budget.
            target_delta: δ; default 1/N (N = training set size).
            noise_multiplier: σ (noise std / C). Set it instead of, or in addition to, target_epsilon.
            accountant: Opacus accountant, "rdp" or "prv".
            loss_reduction: "mean" if the training loss is the mean of per-sample losses, else "sum".
            check_hooks: on the first step, verify that the hooks explain every parameter's gradient.
        """
        if mode not in ("phantom", "ghost", "per_sample"):
            raise ZooError(f"DPClipping: mode must be phantom, ghost or per_sample, got {mode!r}")
        if max_grad_norm <= 0:
            raise ZooError(f"DPClipping: max_grad_norm must be > 0, got {max_grad_norm}")
        if target_epsilon is None and noise_multiplier is None:
            raise ZooError("DPClipping: set target_epsilon or noise_multiplier")
        if target_epsilon is not None and target_epsilon <= 0:
            raise ZooError(f"DPClipping: target_epsilon must be > 0, got {target_epsilon}")
        if noise_multiplier is not None and noise_multiplier < 0:
            raise ZooError(f"DPClipping: noise_multiplier must be >= 0, got {noise_multiplier}")
        if target_delta is not None and not 0 < target_delta < 1:
            raise ZooError(f"DPClipping: target_delta must be in (0, 1), got {target_delta}")
        if accountant not in ("rdp", "prv"):
            raise ZooError(f"DPClipping: accountant must be rdp or prv, got {accountant!r}")
        if loss_reduction not in ("mean", "sum"):
            raise ZooError(f"DPClipping: loss_reduction must be mean or sum, got {loss_reduction!r}")
        self.mode, self.max_grad_norm = mode, max_grad_norm
        self.target_epsilon, self.target_delta = target_epsilon, target_delta
        self.noise_multiplier = noise_multiplier
        self.accountant_name, self.loss_reduction, self.check_hooks = accountant, loss_reduction, check_hooks
        self.accountant = make_accountant(accountant)
        self.clipper: PerSampleClipper | None = None
        self.sample_rate = self.expected_batch_size = None
        self.delta = target_delta
        self.steps_taken = 0
        self.budget_exhausted = False
        self._loaded_sigma = None
        self._safe_steps = 0  # steps known to stay within target_epsilon (no per-step check needed)
        self._eps_cache: tuple[int, float] | None = None

    # ----------------------------------------------------------------- checks before training
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.accumulate_grad_batches != 1:
            raise ZooError("DPClipping: accumulate_grad_batches must be 1 (clipping is per optimizer step)")
        if trainer.gradient_clip_val:
            raise ZooError("DPClipping: unset trainer.gradient_clip_val (DPClipping clips per sample)")
        if trainer.world_size > 1:
            raise ZooError(f"DPClipping: runs in a single process (DDP would average the processes' noise, and the "
                           f"privacy accounting would not hold), but this run has {trainer.world_size}; set "
                           f"--trainer.devices 1")
        if "16-mixed" in str(trainer.precision) and not str(trainer.precision).startswith("bf"):
            raise ZooError("DPClipping: precision 16-mixed scales gradients; use 32, 64 or bf16")
        self.clipper = PerSampleClipper(pl_module, self.mode, self.max_grad_norm)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from opacus.utils.uniform_sampler import UniformWithReplacementSampler

        if len(trainer.optimizers) != 1:
            raise ZooError(f"DPClipping: needs exactly one optimizer, got {len(trainer.optimizers)}")
        loader = trainer.train_dataloader
        sampler = getattr(loader, "batch_sampler", None)
        if not isinstance(sampler, UniformWithReplacementSampler):
            raise ZooError(
                f"DPClipping: the train loader must use Poisson sampling (opacus UniformWithReplacementSampler "
                f"as batch_sampler), got {type(sampler).__name__}; e.g. set poisson_sampling: true in the data module"
            )
        self.sample_rate = float(sampler.sample_rate)
        n = sampler.num_samples
        self.expected_batch_size = self.sample_rate * n
        self.delta = self.target_delta if self.target_delta is not None else 1.0 / n
        planned = self._planned_steps(trainer)
        if self._loaded_sigma is not None:
            self.noise_multiplier = self._loaded_sigma
        elif self.noise_multiplier is None:
            self.noise_multiplier = noise_for_budget(self.target_epsilon, self.delta, self.sample_rate,
                                                     planned, self.accountant_name)
            self._safe_steps = planned  # get_noise_multiplier guarantees eps <= target at `planned`
        if self.target_epsilon is not None and planned:
            eps = self._epsilon_after(planned - self.steps_taken)
            if eps > self.target_epsilon * 1.0001:
                rank_zero_warn(f"DPClipping: planned {planned} steps reach eps={eps:.3f} > target "
                               f"{self.target_epsilon}; training will stop at the budget")
            else:  # the whole plan fits the budget (also after a resume): no per-step check needed
                self._safe_steps = max(self._safe_steps, planned)
        rank_zero_info(
            f"DPClipping: mode={self.mode} C={self.max_grad_norm} sigma={self.noise_multiplier:.4f} "
            f"q={self.sample_rate:.5f} N={n} delta={self.delta:.3g} planned_steps={planned} "
            f"accountant={self.accountant_name}"
        )
        hook = getattr(pl_module, "on_dp_noise", None)
        if callable(hook):
            hook(self.noise_multiplier, self.max_grad_norm, self.expected_batch_size)

    def _planned_steps(self, trainer) -> int | None:
        steps = []
        if trainer.max_steps and trainer.max_steps > 0:
            steps.append(trainer.max_steps)
        if trainer.max_epochs and trainer.max_epochs > 0:
            steps.append(trainer.max_epochs * int(trainer.num_training_batches))
        if not steps:
            if self.noise_multiplier is None:
                raise ZooError("DPClipping: target_epsilon needs a finite trainer.max_steps or max_epochs")
            return None
        return min(steps)

    # ----------------------------------------------------------------- accounting
    def _epsilon_after(self, extra_steps: int = 0) -> float:
        acc = self.accountant
        if extra_steps:
            acc = copy.deepcopy(acc)
            acc.history.append((self.noise_multiplier, self.sample_rate, extra_steps))
        if not acc.history:
            return 0.0
        return float(acc.get_epsilon(delta=self.delta))

    @property
    def epsilon(self) -> float:
        """ε spent so far (cached per step: an RDP/PRV evaluation costs ~0.1 s)."""
        if self._eps_cache is None or self._eps_cache[0] != self.steps_taken:
            self._eps_cache = (self.steps_taken, self._epsilon_after(0))
        return self._eps_cache[1]

    def _next_step_exceeds_budget(self) -> bool:
        if self.target_epsilon is None or self.steps_taken < self._safe_steps:
            return False
        eps = self._epsilon_after(1)
        if eps <= self.target_epsilon * 1.0001:
            self._eps_cache = (self.steps_taken + 1, eps)
            return False
        return True

    # ----------------------------------------------------------------- the DP step
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.clipper is not None:
            self.clipper.capture.clear()  # drop captures of forwards that had no optimizer step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self._next_step_exceeds_budget():
            for p in self.clipper.params:  # torch optimizers skip parameters without a gradient
                p.grad = None
            self.clipper.capture.clear()
            if not self.budget_exhausted:
                rank_zero_info(f"DPClipping: budget eps={self.target_epsilon} reached after "
                               f"{self.steps_taken} steps; stopping")
            self.budget_exhausted = True
            trainer.should_stop = True
            return
        self.clipper.step(
            self.noise_multiplier, self.loss_reduction, self.expected_batch_size,
            check=self.check_hooks and self.steps_taken == 0,
        )
        self.accountant.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)
        self.steps_taken += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        norms = self.clipper.last_norms if self.clipper is not None else None
        last = trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0 or last or trainer.should_stop:
            pl_module.log("dp/epsilon", self.epsilon, on_step=True, prog_bar=True, batch_size=1)
        if norms is not None and norms.numel():
            frac = (norms > self.max_grad_norm).float().mean()
            pl_module.log("dp/clipped_fraction", frac, on_step=True, batch_size=1)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self.steps_taken and not trainer.sanity_checking:  # ε next to the validation metrics
            pl_module.log("val/epsilon", self.epsilon, batch_size=1)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.clipper is not None:
            rank_zero_info(f"DPClipping: {self.steps_taken} private steps, eps={self.epsilon:.4f} "
                           f"at delta={self.delta:.3g}")
            self.clipper.remove()
            self.clipper = None

    # ----------------------------------------------------------------- resume
    def state_dict(self) -> dict:
        return {"history": list(self.accountant.history), "noise_multiplier": self.noise_multiplier,
                "steps_taken": self.steps_taken}

    def load_state_dict(self, state_dict: dict) -> None:
        self.accountant.history = [tuple(h) for h in state_dict["history"]]
        self._loaded_sigma = state_dict["noise_multiplier"]
        self.steps_taken = state_dict["steps_taken"]
        self._eps_cache = None
