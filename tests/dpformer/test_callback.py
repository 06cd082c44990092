"""DPClipping with plain LightningModules: the update equals DP-SGD by hand; bad setups are refused."""

import lightning.pytorch as pl
import pytest
import torch

from opacus.accountants import RDPAccountant
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

from callbacks.dp_clipping import DPClipping
from sasrec_oracles import PerSampleLoss
from zoo.errors import ZooError

N = 24


def _data():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(N, 5, 4, generator=g, dtype=torch.float64),
                         torch.randn(N, generator=g, dtype=torch.float64))


def _loader(sample_rate=1.0, poisson=True, steps=None):
    ds = _data()
    if not poisson:
        return DataLoader(ds, batch_size=8)
    return DataLoader(ds, batch_sampler=UniformWithReplacementSampler(
        num_samples=N, sample_rate=sample_rate, steps=steps, generator=torch.Generator().manual_seed(1)))


class TinyNet(pl.LightningModule):
    """Not a recommender: any model with Linear/LayerNorm layers and a batch-mean loss works."""

    def __init__(self, manual=False):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6), torch.nn.Tanh(),
                                       torch.nn.Linear(6, 1)).double()
        self.automatic_optimization = not manual

    def per_sample_loss(self, x, y):
        return (self.net(x).squeeze(-1).mean(-1) - y) ** 2

    def training_step(self, batch, _):
        x, y = batch
        loss = self.per_sample_loss(x, y).sum() / max(len(x), 1)
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return None
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1.0)


def _fit(model, cb, loader, **kw):
    trainer = pl.Trainer(accelerator="cpu", max_steps=kw.pop("max_steps", 1), logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         **kw, callbacks=[cb])
    trainer.fit(model, train_dataloaders=loader)
    return trainer


@pytest.mark.parametrize("manual", [False, True])
@pytest.mark.parametrize("mode", ["ghost", "per_sample"])
def test_update_equals_dp_sgd_by_hand(manual, mode):
    model = TinyNet(manual)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    x, y = _data().tensors
    # Oracle: clipped per-sample gradients by torch.func.
    wrap = PerSampleLoss(model)

    def loss_one(p, xi, yi):
        return functional_call(wrap, {"m." + k: v for k, v in p.items()}, (xi[None], yi[None]))[0]

    gs = vmap(grad(loss_one), in_dims=(None, 0, 0))(before, x, y)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in gs.values()))
    C = float(norms.median())
    coef = (C / (norms + 1e-6)).clamp(max=1.0)
    cb = DPClipping(mode=mode, max_grad_norm=C, noise_multiplier=0.0)
    _fit(model, cb, _loader(1.0))
    assert cb.steps_taken == 1
    for k, p in model.named_parameters():
        expected = before[k] - torch.tensordot(coef, gs[k], dims=1) / N  # lr 1, mean over q·N = N
        assert torch.allclose(p.detach(), expected, atol=1e-10), k


def test_non_poisson_loader_is_refused_before_training():
    model = TinyNet()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ZooError, match="Poisson"):
        _fit(model, DPClipping(noise_multiplier=1.0), _loader(poisson=False))
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_lightning_gradient_clipping_is_refused():
    with pytest.raises(ZooError, match="gradient_clip_val"):
        _fit(TinyNet(), DPClipping(noise_multiplier=1.0), _loader(), gradient_clip_val=1.0)


def test_unreachable_epsilon_is_refused():
    with pytest.raises(ZooError, match="unreachable"):
        _fit(TinyNet(), DPClipping(target_epsilon=1e-9, target_delta=1e-5), _loader(0.5), max_steps=100)
    with pytest.raises(ZooError, match="target_epsilon"):
        DPClipping(target_epsilon=-1.0)


def test_epsilon_after_k_steps_equals_opacus_and_budget_stops_training():
    q, k, sigma, delta = 0.25, 6, 1.1, 1e-4
    cb = DPClipping(noise_multiplier=sigma, target_delta=delta)
    _fit(TinyNet(), cb, _loader(q, steps=k), max_steps=k)
    ref = RDPAccountant()
    for _ in range(k):
        ref.step(noise_multiplier=sigma, sample_rate=q)
    assert cb.steps_taken == k
    assert cb.epsilon == pytest.approx(ref.get_epsilon(delta), rel=1e-12)
    # A budget below what 6 steps spend: training stops early, within the budget.
    budget = cb.epsilon * 0.7
    cb2 = DPClipping(noise_multiplier=sigma, target_delta=delta, target_epsilon=budget)
    trainer = _fit(TinyNet(), cb2, _loader(q, steps=k), max_steps=k)
    assert 0 < cb2.steps_taken < k and cb2.budget_exhausted and cb2.epsilon <= budget
    assert trainer.should_stop


def test_target_epsilon_is_spent_exactly_over_the_planned_steps():
    cb = DPClipping(target_epsilon=2.0, target_delta=1e-4)
    _fit(TinyNet(), cb, _loader(0.25, steps=8), max_steps=8)
    assert cb.steps_taken == 8 and 1.95 <= cb.epsilon <= 2.0
    state = cb.state_dict()
    cb3 = DPClipping(target_epsilon=2.0, target_delta=1e-4)
    cb3.load_state_dict(state)
    cb3.delta = 1e-4
    assert cb3.epsilon == pytest.approx(cb.epsilon)


def test_unsupported_layer_is_refused_before_training():
    model = TinyNet()
    model.net[1] = torch.nn.BatchNorm1d(5).double()  # mixes samples: no mode may clip it
    with pytest.raises(ZooError, match="BatchNorm1d"):
        _fit(model, DPClipping(mode="phantom", noise_multiplier=1.0), _loader())


class TwoOptimizerNet(TinyNet):
    def __init__(self):
        super().__init__(manual=True)  # Lightning itself refuses several optimizers under automatic optimisation

    def configure_optimizers(self):
        return [torch.optim.SGD(self.net[:2].parameters(), lr=1.0), torch.optim.SGD(self.net[3].parameters(), lr=1.0)]


class _SeesTrainer(DPClipping):
    def on_fit_start(self, trainer, pl_module):
        self.trainer = trainer
        super().on_fit_start(trainer, pl_module)


@pytest.mark.parametrize("case, match", [
    ("two_optimizers", "needs exactly one optimizer, got 2"),
    ("accumulate_grad_batches", "accumulate_grad_batches must be 1"),
    ("16-mixed", "precision 16-mixed scales gradients"),
    ("world_size", "runs in a single process .* this run has 2"),
])
def test_unsupported_trainer_setup_is_refused_before_training(case, match, monkeypatch):
    """cards/dpformer.md: one optimizer, accumulate_grad_batches 1, no 16-bit AMP scaler, one process."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    model = TwoOptimizerNet() if case == "two_optimizers" else TinyNet()
    kw = {}
    if case == "accumulate_grad_batches":
        kw["accumulate_grad_batches"] = 2
    elif case == "16-mixed":
        # Trainer(accelerator="cpu", precision="16-mixed") silently becomes bf16-mixed; an explicit plugin keeps
        # fp16 AMP with its GradScaler on CPU, so the callback sees what it would on a GPU.
        kw["plugins"] = [MixedPrecision("16-mixed", "cpu")]
    elif case == "world_size":
        # No processes launched: the (single-device) trainer reports two of them.
        monkeypatch.setattr(pl.Trainer, "world_size", property(lambda self: 2))
    before = [p.detach().clone() for p in model.parameters()]
    cb = _SeesTrainer(noise_multiplier=1.0)
    with pytest.raises(ZooError, match=match):
        _fit(model, cb, _loader(), **kw)
    if case == "16-mixed":  # the refusal came from a real fp16 AMP setup with a gradient scaler
        assert cb.trainer.precision == "16-mixed" and cb.trainer.strategy.precision_plugin.scaler is not None
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
