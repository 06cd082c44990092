"""`GFNPGModule`: GFN-PG's policy-gradient GFlowNet training (RL-U/B/G/T) and the TB/DB/SubTB baselines.

One training step is one iteration of the official ``train.py``: sample a batch of on-policy trajectories from pi_F,
update; RL-B/RL-G then sample backward trajectories from the batch's terminal states and update pi_B. Optimisation is
manual: actor, critic and log Z (one Adam, a parameter group each), then pi_B and V_B (a second Adam). Validation
and test compute the exact metrics from P_T (dynamic programming over the state DAG). Every network pass of an
iteration runs inside a ``record_function`` span named ``gfnpg/...`` (next to free unless a ``torch.profiler`` is
active), so a profile splits an iteration's time by network and phase (``benchmarks/gfnpg_iteration.py --profile``).
The environment comes from the datamodule (``datamodules.gfn_envs``); the networks are built for it in ``setup``.
"""

from __future__ import annotations

from typing import Literal, Optional

import lightning as L
import torch
from torch import nn
from torch.profiler import record_function

from zoo.attached import attached_datamodule, attached_trainer
from zoo.errors import ZooError
from zoo.gfnpg.envs import GFNEnv
from zoo.gfnpg.exact import DEFAULT_MAX_STATES, StateGraph, exact_metrics
from zoo.gfnpg.objectives import (
    LOG_REWARD_CLIP_MIN,
    actor_loss,
    advantages_and_targets,
    backward_tb_loss,
    critic_loss,
    db_loss,
    log_z_surrogate,
    rl_costs,
    subtb_loss,
    tb_loss,
)
from zoo.gfnpg.sampling import (
    backward_log_probs,
    forward_log_probs,
    known_backward_log_probs,
    mlp,
    net_output,
    policy_log_probs,
    sample_backward,
    sample_forward,
    state_values,
)
from zoo.gfnpg.trpo import trpo_step
from zoo.hub import HubMixin

# RL-B/RL-G evaluate pi_B once with gradients at the forward children and their ancestors (the forward costs' call)
# and reuse those rows, graph included, in the backward update, where only the states still missing are evaluated
# (sampling.known_backward_log_probs; pi_B does not move in between). False: that call runs without gradients and
# the update evaluates pi_B again at every distinct state of the backward trajectories (the tests compare both).
REUSE_PB_GRAPH = True

VARIANTS = ("RL-U", "RL-B", "RL-G", "RL-T", "TB-U", "TB-B", "DB-U", "DB-B", "SubTB-U", "SubTB-B")
Variant = Literal["RL-U", "RL-B", "RL-G", "RL-T", "TB-U", "TB-B", "DB-U", "DB-B", "SubTB-U", "SubTB-B"]


def _adam(groups: list[dict]) -> torch.optim.Adam:
    """Adam with torch's fused kernel where it has one (CPU and CUDA): the same update as the default per-tensor
    loop, in one vectorised kernel per step (the loop was ~5 ms of an iteration on one CPU thread)."""
    fused = all(p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
    return torch.optim.Adam(groups, fused=fused or None)


class GFNPGModule(HubMixin, L.LightningModule):
    """GFlowNet trained by policy gradients (Niu et al., ICML 2024) or by a balance loss.

    Args:
        variant: ``RL-U`` (uniform pi_B), ``RL-B`` (pi_B trained by actor-critic on backward trajectories against
            pi_G = stop-grad pi_F), ``RL-G`` (the same against a guided pi_G), ``RL-T`` (TRPO actor step, uniform pi_B, as
            the official ``--Loss TRPO``), or a baseline ``TB|DB|SubTB`` with ``-U`` (uniform pi_B) / ``-B``
            (pi_B trained by the same loss).
        batch_size: trajectories sampled per iteration (official 128).
        hidden_dim, n_hidden_layers: MLP of pi_F, pi_B and log F (official ``GFNModuleConfig``: 256, 4).
        value_hidden_layers: layers of the value nets V, V_B (official: ``NeuralNet`` defaults, 2 of width 256).
        lr, lr_Z, lr_V: Adam learning rates of the policies / log F, of log Z, of V and V_B (official 1e-3, 0.1, 5e-3;
            the DAG runs use lr_Z = 1.0).
        lamb: GAE lambda of the forward actor (official 0.99); the official code also passes it to SubTB's geometric
            weighting. The backward actor uses lambda = 1, the critics the Monte-Carlo cost-to-go.
        log_reward_clip_min: log R is clipped from below in the costs and TB/SubTB (official -12).
        logZ_init: initial log Z (RL, TB).
        backward_loss: pi_B update of RL-B/RL-G: ``rl`` (actor-critic, official ``B_update_model``) or ``tb``
            (trajectory balance on the backward trajectories, official ``B_update_model_Emp`` of the DAG runs).
        trpo_max_kl, cg_iters, backtracks: RL-T's trust region (official 0.01, 10, 20).
        exact_max_states: largest state space the exact metrics enumerate.
    """

    monitor = "val/tv"
    monitor_mode = "min"
    single_process = ("it samples its own trajectories, so DDP's processes, seeded alike, would draw the same batch, "
                      "and RL-T's line search moves the policy outside DDP's gradient averaging")

    def __init__(
        self,
        variant: Variant = "RL-U",
        batch_size: int = 128,
        hidden_dim: int = 256,
        n_hidden_layers: int = 4,
        value_hidden_layers: int = 2,
        lr: float = 1e-3,
        lr_Z: float = 0.1,
        lr_V: float = 5e-3,
        lamb: float = 0.99,
        log_reward_clip_min: float = LOG_REWARD_CLIP_MIN,
        logZ_init: float = 0.0,
        backward_loss: Literal["rl", "tb"] = "rl",
        trpo_max_kl: float = 0.01,
        cg_iters: int = 10,
        backtracks: int = 20,
        exact_max_states: int = DEFAULT_MAX_STATES,
    ):
        super().__init__()
        if variant not in VARIANTS:
            raise ZooError(f"unknown GFN-PG variant {variant!r}; choose one of {', '.join(VARIANTS)}")
        if backward_loss not in ("rl", "tb"):
            raise ZooError(f"backward_loss must be 'rl' or 'tb', got {backward_loss!r}")
        if batch_size < 1 or hidden_dim < 1 or n_hidden_layers < 1 or value_hidden_layers < 1:
            raise ZooError("batch_size, hidden_dim, n_hidden_layers and value_hidden_layers must be >= 1")
        if not 0.0 <= lamb <= 1.0:
            raise ZooError(f"lamb must lie in [0, 1], got {lamb}")
        if trpo_max_kl <= 0 or cg_iters < 1 or backtracks < 1:
            raise ZooError("RL-T needs trpo_max_kl > 0, cg_iters >= 1 and backtracks >= 1")
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.method, _, pb_kind = variant.partition("-")
        self.trains_pb = pb_kind in ("B", "G")
        self.log_z = nn.Parameter(torch.tensor(float(logZ_init))) if self.method in ("RL", "TB") else None
        self.register_buffer("iterations", torch.zeros((), dtype=torch.long))
        self.pf: Optional[nn.Module] = None
        self.pb: Optional[nn.Module] = None
        self.value: Optional[nn.Module] = None
        self.value_b: Optional[nn.Module] = None
        self.log_flow: Optional[nn.Module] = None
        self.env: Optional[GFNEnv] = None
        self._graph: Optional[StateGraph] = None
        self._extra: dict[str, torch.Tensor | float] = {}  # per-step metrics gathered for one log_dict call

    # ------------------------------------------------------------------------------------------ networks
    def build(self, feature_dim: int, n_actions: int) -> None:
        """Create the networks for an environment with these input and action sizes (idempotent)."""
        hp = self.hparams
        if self.pf is not None:
            have = (self.pf[0].in_features, self.pf[-1].out_features)
            if have != (feature_dim, n_actions):
                raise ZooError(f"the networks were built for {have[0]} input features and {have[1]} actions, the "
                               f"environment has {feature_dim} and {n_actions}")
            return
        self.pf = mlp(feature_dim, n_actions, hp.hidden_dim, hp.n_hidden_layers)
        if self.trains_pb:
            self.pb = mlp(feature_dim, n_actions - 1, hp.hidden_dim, hp.n_hidden_layers)
        if self.method in ("DB", "SubTB"):
            self.log_flow = mlp(feature_dim, 1, hp.hidden_dim, hp.n_hidden_layers)
        if self.method == "RL":
            self.value = mlp(feature_dim, 1, hp.hidden_dim, hp.value_hidden_layers)
            if self.trains_pb and hp.backward_loss == "rl":
                self.value_b = mlp(feature_dim, 1, hp.hidden_dim, hp.value_hidden_layers)

    def set_env(self, env: GFNEnv) -> None:
        if self.hparams.variant == "RL-G" and env.guide is None:
            raise ZooError(f"variant RL-G needs a guided pi_G, and {env.describe()} has none ({env.guide_hint})")
        self.build(env.feature_dim, env.n_actions)
        self.env = env
        self._graph = None

    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        env = getattr(dm, "env", None)
        if env is None:
            raise ZooError("GFNPGModule needs a datamodule with an `env` (datamodules.gfn_envs.GFNEnvDataModule)")
        self.set_env(env)  # before Lightning moves the module to its device and builds the optimisers

    def prepare_state_dict_load(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Checkpoints and Hub weights without an environment: size the networks from the stored weights."""
        if self.pf is None and "pf.0.weight" in state_dict:
            last = max(int(k.split(".")[1]) for k in state_dict if k.startswith("pf.") and k.endswith(".weight"))
            self.build(state_dict["pf.0.weight"].shape[1], state_dict[f"pf.{last}.weight"].shape[0])

    # ------------------------------------------------------------------------------------------ optimisers
    def configure_optimizers(self):
        """Adam everywhere, one learning rate per network (official ``OptimConfig``). Parameter groups of one Adam
        stepped on the sum of losses that touch disjoint parameters are the same update as separate optimisers
        stepped one after the other (the advantages are computed before the critic moves, as in the official
        code); two optimiser steps per iteration instead of five keep Lightning's per-step overhead down."""
        hp = self.hparams
        if self.method == "RL":
            groups = [{"params": [self.log_z], "lr": hp.lr_Z, "name": "log_z"},
                      {"params": list(self.value.parameters()), "lr": hp.lr_V, "name": "critic"}]
            if hp.variant != "RL-T":  # RL-T moves pi_F by its TRPO step
                groups.insert(0, {"params": list(self.pf.parameters()), "lr": hp.lr, "name": "actor"})
            opts = {"forward": _adam(groups)}
            if self.pb is not None:
                back = [{"params": list(self.pb.parameters()), "lr": hp.lr, "name": "pb"}]
                if self.value_b is not None:
                    back.append({"params": list(self.value_b.parameters()), "lr": hp.lr_V, "name": "critic_b"})
                opts["backward"] = _adam(back)
        else:  # the baselines: one Adam, log Z at lr_Z, pi_F, pi_B and log F at lr
            groups = [{"params": list(self.pf.parameters()), "lr": hp.lr, "name": "pf"}]
            if self.pb is not None:
                groups.append({"params": list(self.pb.parameters()), "lr": hp.lr, "name": "pb"})
            if self.log_z is not None:
                groups.append({"params": [self.log_z], "lr": hp.lr_Z, "name": "log_z"})
            if self.log_flow is not None:
                groups.append({"params": list(self.log_flow.parameters()), "lr": hp.lr, "name": "log_flow"})
            opts = {"balance": _adam(groups)}
        self._opt_names = list(opts)
        return list(opts.values())

    def named_optimizers(self) -> dict:
        """name -> optimiser, built afresh (for ``train_iteration`` outside a Trainer)."""
        opts = self.configure_optimizers()
        return dict(zip(self._opt_names, opts))

    def _opts(self) -> dict:
        opts = self.optimizers()
        return dict(zip(self._opt_names, opts if isinstance(opts, list) else [opts]))

    def _step(self, opt, loss: torch.Tensor, span: str) -> None:
        opt.zero_grad()
        with record_function(f"{span}: autograd backward"):
            if attached_trainer(self) is not None:
                self.manual_backward(loss)  # Lightning's hooks (the NaN guard) see the loss
            else:
                loss.backward()
        with record_function(f"{span}: Adam step"):
            opt.step()

    # ------------------------------------------------------------------------------------------ training
    def training_step(self, batch, batch_idx):
        self.log_dict(self.train_iteration(self._opts()), batch_size=self.hparams.batch_size)

    def train_iteration(self, opts: dict) -> dict[str, torch.Tensor | float]:
        """One iteration of the official training loop with the optimisers ``opts`` (name -> optimiser, as
        ``configure_optimizers`` builds them); usable without a Trainer. Returns the iteration's metrics."""
        env, hp = self.env, self.hparams
        self._extra = {}
        with record_function("gfnpg/pi_F: sample forward trajectories"):
            traj = sample_forward(env, self.pf, hp.batch_size, self.device)
        log_rewards = env.log_reward(traj.terminal_states)
        if self.method == "RL":
            loss = self._rl_step(opts, traj, log_rewards)
        else:
            loss = self._balance_step(opts, traj, log_rewards)
        self.iterations += 1
        metrics = {"train/loss": loss.detach(), "train/states_visited": float(self.iterations * hp.batch_size),
                   "train/mean_length": traj.lengths.float().mean(), **self._extra}
        if self.log_z is not None:
            metrics["train/logZ"] = self.log_z.detach()
        return metrics

    def _rl_step(self, opts: dict, traj, log_rewards: torch.Tensor) -> torch.Tensor:
        env, hp = self.env, self.hparams
        valid = traj.valid
        with record_function("gfnpg/pi_F: log-probs with grad"):
            log_pf = forward_log_probs(env, self.pf, traj, distinct=True)
        reuse = REUSE_PB_GRAPH and self.pb is not None
        with record_function("gfnpg/pi_B: forward costs, no grad"), torch.set_grad_enabled(reuse):
            # the costs are constants of the actor-critic step (log_pb comes back detached). `known`: pi_B's logits at
            # the forward children (x among them) and their ancestors, which the backward sampler reuses (pi_B does
            # not move in between); with REUSE_PB_GRAPH they keep their graph for the backward update's gradient
            log_pb, known = backward_log_probs(env, self.pb, traj, distinct=True, return_known=True)
        costs = rl_costs(log_pf.detach(), log_pb, traj, log_rewards, self.log_z.detach(), hp.log_reward_clip_min)
        with record_function("gfnpg/V: values with grad"):
            values = state_values(env, self.value, traj, distinct=True)
        adv, targets = advantages_and_targets(costs, values.detach(), valid, hp.lamb)
        loss = critic_loss(targets, values, valid) + log_z_surrogate(self.log_z, costs)
        if hp.variant == "RL-T":  # official order: V step, log Z step, then the TRPO actor step
            self._step(opts["forward"], loss, "gfnpg/forward update")
            parents, acts = traj.sources, traj.actions[valid]  # sources: the cached states[:-1][valid]
            info = trpo_step(self.pf, lambda: policy_log_probs(env, self.pf, parents), acts, adv[valid], len(traj),
                             hp.trpo_max_kl, hp.cg_iters, hp.backtracks)
            self._extra.update({"train/trpo_kl": info["kl"], "train/trpo_accepted": info["accepted"]})
        else:
            self._step(opts["forward"], loss + actor_loss(adv, log_pf), "gfnpg/forward update")
        if self.pb is not None:
            self._backward_policy_step(opts, traj.terminal_states, log_rewards, known, reuse)
        return costs.sum(0).mean()  # the estimate of KL + log Z - log Z*

    def _backward_policy_step(self, opts: dict, x: torch.Tensor, log_rewards: torch.Tensor, known=None,
                              reuse: bool = False) -> None:
        """pi_B's update on backward trajectories from the batch's terminal states ``x`` (official
        ``B_update_model``); ``known``: pi_B's masked logits where the forward costs already computed them
        (``sampling.known_rows`` of the forward children, x among them), for the backward sampler and, where
        ``reuse`` (they carry their graph), for the update's pass with gradients."""
        env, hp = self.env, self.hparams
        guide = env.guide if hp.variant == "RL-G" else None
        # one backward trajectory per forward one (train_BN.py always samples 128: the same at the official batch)
        with record_function("gfnpg/pi_B: sample backward trajectories"):
            btraj = sample_backward(env, self.pb, x, known=None if known is None else (known[0], known[1].detach()))
        valid = btraj.valid
        with record_function("gfnpg/pi_G: log-probs, no grad"), torch.no_grad():  # pi_G is a stop-gradient target
            log_pg = forward_log_probs(env, self.pf, btraj, guide=guide, distinct=True)
            log_pg_stop = policy_log_probs(env, self.pf, x, guide=guide)[:, -1] if hp.backward_loss == "tb" else None
        with record_function("gfnpg/pi_B: log-probs with grad"):
            # known=None: the plain distinct pass (the sampler's rows carry no graph unless reused)
            log_pb = known_backward_log_probs(env, self.pb, btraj, known if reuse else None)
        if hp.backward_loss == "tb":
            loss = backward_tb_loss(log_pg, log_pb, valid, log_pg_stop, log_rewards, self.log_z,
                                    hp.log_reward_clip_min)
            self._step(opts["backward"], loss, "gfnpg/backward update")
        else:
            costs = (log_pb.detach() - log_pg) * valid  # c^B_t = log pi_B - log pi_G
            with record_function("gfnpg/V_B: values with grad"):
                values = state_values(env, self.value_b, btraj, distinct=True)
            adv, targets = advantages_and_targets(costs, values.detach(), valid, 1.0)
            self._step(opts["backward"], critic_loss(targets, values, valid) + actor_loss(adv, log_pb),
                       "gfnpg/backward update")
            self._extra["train/backward_cost"] = costs.sum(0).mean().detach()

    def _balance_step(self, opts: dict, traj, log_rewards: torch.Tensor) -> torch.Tensor:
        env, hp = self.env, self.hparams
        with record_function("gfnpg/pi_F: log-probs with grad"):
            log_pf = forward_log_probs(env, self.pf, traj, distinct=True)
        with record_function("gfnpg/pi_B: log-probs" + (" with grad" if self.pb is not None else ", uniform")):
            log_pb = backward_log_probs(env, self.pb, traj, distinct=True)
        if self.method == "TB":
            loss = tb_loss(log_pf, log_pb, log_rewards, self.log_z, hp.log_reward_clip_min)
        else:
            with record_function("gfnpg/log F: flows with grad"):
                flows = state_values(env, self.log_flow, traj, distinct=True)
            loss = (db_loss(log_pf, log_pb, flows, traj, log_rewards) if self.method == "DB" else
                    subtb_loss(log_pf, log_pb, flows, traj, log_rewards, hp.lamb, hp.log_reward_clip_min))
        self._step(opts["balance"], loss, "gfnpg/balance update")
        return loss.detach()

    # ------------------------------------------------------------------------------------------ evaluation
    def log_z_estimate(self) -> float:
        """log Z for RL/TB; log F(s0) for DB/SubTB (official ``validate_dist``)."""
        if self.log_z is not None:
            return float(self.log_z)
        with torch.no_grad():
            s0 = self.env.s0(1, self.device)
            return float(net_output(self.env, self.log_flow, s0)[0, 0])

    def state_graph(self) -> StateGraph:
        if self._graph is None:
            self._graph = StateGraph(self.env, self.hparams.exact_max_states)
        return self._graph

    @torch.no_grad()
    def exact_evaluation(self) -> tuple[torch.Tensor, dict[str, float]]:
        """(P_T, metrics) of the current pi_F."""
        graph = self.state_graph()
        p_t = graph.terminal_distribution(graph.policy_log_probs(self.pf))
        mean_reward = getattr(self.env, "reports_mean_reward", False)  # the sequence tasks' official mean_diff
        return p_t, exact_metrics(p_t, graph.log_rewards, self.log_z_estimate(), mean_reward)

    def _evaluate(self, stage: str) -> None:
        _, metrics = self.exact_evaluation()
        for k, v in metrics.items():
            self.log(f"{stage}/{k}", v, prog_bar=k == "tv", batch_size=1)
        self.log(f"{stage}/states_visited", float(self.iterations * self.hparams.batch_size), batch_size=1)

    def validation_step(self, batch, batch_idx):
        self._evaluate("val")

    def test_step(self, batch, batch_idx):
        self._evaluate("test")

    def predict_step(self, batch, batch_idx):
        """A batch of terminal objects x ~ P_T with their log-rewards."""
        traj = sample_forward(self.env, self.pf, self.hparams.batch_size, self.device)
        x = traj.terminal_states
        return {"x": x, "log_reward": self.env.log_reward(x)}

    def card_metadata(self) -> dict:
        return {"tags": ["gfnpg", "gflownet", "policy-gradient", self.hparams.variant], "base_model": None}
