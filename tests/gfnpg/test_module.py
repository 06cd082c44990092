"""GFNPGModule: every variant trains through Lightning, RL-U learns a small grid, Hub round trip, bad input."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from datamodules.gfn_envs import GFNEnvDataModule
from zoo.errors import ZooError
from zoo.gfnpg import VARIANTS, GFNPGModule

from .conftest import TINY, assert_same_iterations


def _trainer(**kw):
    return L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kw)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_trains_and_reports_exact_metrics(variant):
    L.seed_everything(0, verbose=False)
    dm = GFNEnvDataModule(env="hypergrid", height=5, ndim=2, R0=0.1, n_iterations=6)
    model = GFNPGModule(variant=variant, **TINY)
    trainer = _trainer(val_check_interval=3)
    trainer.fit(model, datamodule=dm)
    assert "val/tv" in trainer.callback_metrics and "train/loss" in trainer.callback_metrics
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert 0 <= out["test/tv"] <= 1 and out["test/jsd"] >= 0 and out["test/states_visited"] == 6 * 16
    assert int(model.iterations) == 6
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # test does not train
    assert (model.pb is not None) == (variant.endswith(("-B", "-G")))


def test_rl_u_learns_a_small_grid():
    """Learning, not just running: TV and the log Z gap fall well below their start (the full known-optimum run,
    8x8 / 2k iterations, is the sweep configs/sweeps/gfnpg_known_optimum.yaml)."""
    L.seed_everything(0, verbose=False)
    dm = GFNEnvDataModule(env="hypergrid", height=4, ndim=2, R0=0.1, n_iterations=60)
    model = GFNPGModule(variant="RL-U", batch_size=32, hidden_dim=32, n_hidden_layers=2, lr=3e-3)
    dm.setup()
    model.set_env(dm.env)
    _, start = model.exact_evaluation()
    _trainer(limit_val_batches=0).fit(model, datamodule=dm)
    _, end = model.exact_evaluation()
    assert end["tv"] < 0.5 * start["tv"] and end["logz_diff"] < 0.5 * start["logz_diff"]


def test_bn_task_with_the_backward_tb_update():
    L.seed_everything(0, verbose=False)
    dm = GFNEnvDataModule(env="bn", n_nodes=4, n_samples=50, n_edges=3, n_iterations=4)
    model = GFNPGModule(variant="RL-B", backward_loss="tb", lr_Z=1.0, **TINY)
    trainer = _trainer(limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    out = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert 0 <= out["test/tv"] <= 1 and model.value_b is None


def test_hub_round_trip(tmp_path):
    dm = GFNEnvDataModule(env="hypergrid", height=6, ndim=2)
    dm.setup()
    model = GFNPGModule(variant="RL-B", **TINY)
    model.set_env(dm.env)
    with torch.no_grad():
        model.log_z.fill_(1.25)
    model.save_pretrained(tmp_path)
    loaded = GFNPGModule.from_pretrained(tmp_path)
    x = dm.env.features(dm.env.all_states())
    torch.testing.assert_close(loaded.pf(x), model.pf(x))
    torch.testing.assert_close(loaded.pb(x), model.pb(x))
    assert float(loaded.log_z.detach()) == 1.25 and loaded.hparams.variant == "RL-B"


def test_bad_input_is_a_one_line_error():
    with pytest.raises(ZooError, match="unknown GFN-PG variant 'PPO'"):
        GFNPGModule(variant="PPO")
    dm = GFNEnvDataModule(env="hypergrid", height=4, ndim=2, guide=False)
    dm.setup()
    with pytest.raises(ZooError, match="RL-G needs a guided pi_G.*set the datamodule's guide: true"):
        GFNPGModule(variant="RL-G").set_env(dm.env)
    big = GFNEnvDataModule(env="hypergrid", height=64, ndim=4)
    big.setup()
    model = GFNPGModule(variant="RL-U", **TINY)
    model.set_env(big.env)
    with pytest.raises(ZooError, match="16,777,216 states"):
        model.exact_evaluation()
    with pytest.raises(ZooError, match="built for 8 input features"):
        small = GFNEnvDataModule(env="hypergrid", height=4, ndim=2)
        small.setup()
        other = GFNEnvDataModule(env="hypergrid", height=5, ndim=2)
        other.setup()
        m = GFNPGModule(**TINY)
        m.set_env(small.env)
        m.set_env(other.env)


def test_train_iteration_without_a_trainer_and_predict():
    dm = GFNEnvDataModule(env="hypergrid", height=5, ndim=2, n_iterations=2)
    dm.setup()
    model = GFNPGModule(variant="RL-B", **TINY)
    model.set_env(dm.env)
    opts = model.named_optimizers()
    assert set(opts) == {"forward", "backward"}
    before = [p.detach().clone() for p in model.parameters()]
    metrics = model.train_iteration(opts)
    assert int(model.iterations) == 1 and metrics["train/states_visited"] == 16.0
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # every network moved
    (out,) = _trainer().predict(model, datamodule=dm)
    assert out["x"].shape == (16, 2) and torch.equal(out["log_reward"], dm.env.log_reward(out["x"]))


def test_fused_adam_takes_the_per_tensor_adam_step(monkeypatch):
    """The optimisers use torch's fused Adam kernel (a speed choice); one RL-B iteration moves every parameter as
    the default per-tensor Adam with the same parameter groups and learning rates does."""
    import zoo.gfnpg.module as module_mod

    dm = GFNEnvDataModule(env="hypergrid", height=5, ndim=2)
    dm.setup()
    fused = GFNPGModule(variant="RL-B", **TINY)
    fused.set_env(dm.env)
    plain = GFNPGModule(variant="RL-B", **TINY)
    plain.set_env(dm.env)
    plain.load_state_dict(fused.state_dict())
    opts_fused = fused.named_optimizers()
    assert all(o.defaults["fused"] for o in opts_fused.values())
    monkeypatch.setattr(module_mod, "_adam", lambda groups: torch.optim.Adam(groups))
    opts_plain = plain.named_optimizers()
    assert not any(o.defaults["fused"] for o in opts_plain.values())
    for model, opts in ((fused, opts_fused), (plain, opts_plain)):
        torch.manual_seed(0)
        model.train_iteration(opts)
    for (name, a), b in zip(fused.named_parameters(), plain.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("variant", ["RL-B", "RL-G"])
def test_backward_update_reusing_known_pi_b_is_the_plain_update(monkeypatch, variant):
    """The backward sampler reuses pi_B's logits from the forward costs (``known``: every forward child, x among
    them): two iterations then sample the same backward trajectories, log the same losses and move every parameter
    exactly as the old path, in which the sampler evaluates pi_B at every state itself (float64 networks; equal bit
    for bit)."""
    import zoo.gfnpg.module as module_mod
    from zoo.gfnpg import sampling

    dm = GFNEnvDataModule(env="hypergrid", height=6, ndim=2, R0=0.1)
    dm.setup()
    new = GFNPGModule(variant=variant, **TINY)
    new.set_env(dm.env)
    old = GFNPGModule(variant=variant, **TINY)
    old.set_env(dm.env)
    new.double()
    old.double()
    old.load_state_dict(new.state_dict())
    runs = {}
    for name, model in (("new", new), ("old", old)):
        if name == "old":
            monkeypatch.setattr(module_mod, "sample_backward",
                                lambda env, pb, x, known=None: sampling.sample_backward(env, pb, x))
        opts = model.named_optimizers()
        torch.manual_seed(0)
        runs[name] = [model.train_iteration(opts) for _ in range(2)]
    for a, b in zip(runs["new"], runs["old"]):
        assert a.keys() == b.keys() and all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)
    for (name, a), b in zip(new.named_parameters(), old.parameters()):
        assert torch.equal(a, b), name


def test_iteration_spans_split_a_profile_by_network():
    """Every network pass and update of an RL-B iteration is a named span in a torch.profiler trace (what
    benchmarks/gfnpg_iteration.py --profile tabulates)."""
    from torch.profiler import ProfilerActivity, profile

    dm = GFNEnvDataModule(env="hypergrid", height=5, ndim=2)
    dm.setup()
    model = GFNPGModule(variant="RL-B", **TINY)
    model.set_env(dm.env)
    opts = model.named_optimizers()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model.train_iteration(opts)
    spans = {e.key for e in prof.key_averages() if e.key.startswith("gfnpg/")}
    networks = {"pi_F: sample forward trajectories", "pi_F: log-probs with grad", "pi_B: forward costs, no grad",
                "V: values with grad", "pi_B: sample backward trajectories", "pi_G: log-probs, no grad",
                "pi_B: log-probs with grad", "V_B: values with grad"}
    updates = {f"{u} update: {part}" for u in ("forward", "backward") for part in ("autograd backward", "Adam step")}
    assert spans == {f"gfnpg/{k}" for k in networks | updates}


@pytest.mark.parametrize("variant", ["RL-B", "TB-B"])
def test_skipping_forced_backward_moves_is_the_plain_update(monkeypatch, variant):
    """pi_B's network skipped at forced backward moves (sampling.SKIP_FORCED_BACKWARD) against the network at every
    state: three iterations from the same state and seed give the same metrics and parameters (float64 networks;
    the log-probabilities are gathered in float32, hence the tolerance)."""
    import zoo.gfnpg.sampling as sampling

    assert_same_iterations(variant, lambda skip: monkeypatch.setattr(sampling, "SKIP_FORCED_BACKWARD", skip))
