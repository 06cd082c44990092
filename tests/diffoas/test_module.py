"""Neural operators, the Lightning module and the PDE DataModule."""

import lightning as L
import numpy as np
import pytest
import torch

from datamodules.pde import PDEDataModule
from zoo.diffoas import NeuralOperatorModule, generate_diffoas, generate_solver, relative_l2, save_dataset
from zoo.diffoas.models import DeepONet, build_fno
from zoo.errors import ZooError


def test_relative_l2_matches_numpy():
    rng = np.random.default_rng(0)
    p, y = rng.standard_normal((3, 1, 5, 5)), rng.standard_normal((3, 1, 5, 5))
    ref = [np.linalg.norm(p[i] - y[i]) / np.linalg.norm(y[i]) for i in range(3)]
    np.testing.assert_allclose(relative_l2(torch.tensor(p), torch.tensor(y)).numpy(), ref, rtol=1e-12)


def test_training_loss_is_the_relative_l2_summed_over_the_batch_as_neuralop_lp_loss():
    # Li et al.'s LpLoss(size_average=False) / neuralop's LpLoss default reduction: the sum, not the mean
    from neuralop.losses import LpLoss

    torch.manual_seed(0)
    module = NeuralOperatorModule(model="fno", in_channels=2, grid_size=8, modes=3, width=4, n_layers=1)
    x, y = torch.randn(5, 2, 8, 8), torch.randn(5, 1, 8, 8)
    loss = module.training_step((x, y), 0)
    torch.testing.assert_close(loss, LpLoss(d=2, p=2)(module(x), y), rtol=1e-5, atol=1e-6)


def test_fno_has_the_layout_of_li_et_al():
    """Li et al.'s FNO2d (modes 12, width 32, one input field + 2 grid channels) has 1,188,353 parameters:
    fc0 3*32+32, four spectral convs 2*32*32*12*12 complex weights each, four 1x1 convs 32*32+32, fc1 32*128+128,
    fc2 128+1 (neuralop puts the per-layer bias on the spectral conv instead of the skip: same count)."""
    fno = build_fno(in_channels=1, modes=12, width=32, n_layers=4)
    assert sum(p.numel() for p in fno.parameters()) == 3 * 32 + 32 + 4 * 2 * 32 * 32 * 144 + 4 * (32 * 32 + 32) + 32 * 128 + 128 + 129
    assert fno(torch.randn(2, 1, 30, 30)).shape == (2, 1, 30, 30)


def test_deeponet_shapes_and_paper_depth():
    net = DeepONet(in_channels=2, grid_size=10)
    assert net(torch.randn(3, 2, 10, 10)).shape == (3, 1, 10, 10)
    assert sum(isinstance(m, torch.nn.Linear) for m in net.branch) == 12  # B.1: 12 layers of 50


@pytest.mark.parametrize("model", ["fno", "deeponet"])
def test_hub_round_trip(tmp_path, model):
    m = NeuralOperatorModule(model=model, in_channels=3, grid_size=10, modes=3, width=8, deeponet_depth=2)
    m.in_mean.fill_(0.5)
    m.save_pretrained(tmp_path)
    m2 = NeuralOperatorModule.from_pretrained(tmp_path)
    x = torch.randn(2, 3, 10, 10)
    torch.testing.assert_close(m.eval()(x), m2(x))
    assert m2.in_mean[0] == 0.5


def test_datamodule_generates_solver_test_set_and_trains(tmp_path):
    dm = PDEDataModule(problem="darcy", method="diffoas", grid_size=12, n_train=40, n_val=4, n_test=6,
                       n_basis=4, batch_size=10, cache_dir=str(tmp_path))
    dm.setup("fit")
    assert dm.test_data.meta["method"] == "gmres" and dm.train_data.meta["method"] == "diffoas"
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (10, 2, 12, 12) and y.shape == (10, 1, 12, 12)
    assert len(list(tmp_path.glob("*.npz"))) == 2  # both sets cached
    L.seed_everything(0, verbose=False)  # deterministic on CPU: the drop below is ~2x for this seed
    model = NeuralOperatorModule(in_channels=2, grid_size=12, modes=3, width=8, lr=1e-2)
    xt, yt = dm._sets["train"].tensors

    def train_error():
        with torch.no_grad():
            return relative_l2(model(xt), yt).mean().item()

    trainer = L.Trainer(max_epochs=10, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    for k, v in dm.normalization_stats().items():  # what `setup('fit')` does, to measure the start
        getattr(model, k).copy_(v)
    before = train_error()
    trainer.fit(model, datamodule=dm)
    assert train_error() < 0.7 * before
    assert torch.allclose(model.in_std, dm.normalization_stats()["in_std"])
    out = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert np.isfinite(out["test/rel_l2"])


def test_local_source_round_trip_and_rejects_a_diffoas_test_set(tmp_path):
    save_dataset(generate_diffoas("helmholtz", 12, 10, n_basis=3), tmp_path / "train.h5")
    save_dataset(generate_solver("helmholtz", 4, 10, solver="direct"), tmp_path / "test.safetensors")
    dm = PDEDataModule(problem="helmholtz", source="local", train_path=str(tmp_path / "train.h5"),
                       test_path=str(tmp_path / "test.safetensors"), n_train=10, n_val=2, n_test=4)
    dm.setup("fit")
    assert len(dm._sets["train"]) == 10 and len(dm._sets["test"]) == 4
    bad = PDEDataModule(problem="helmholtz", source="local", train_path=str(tmp_path / "train.h5"),
                        test_path=str(tmp_path / "train.h5"), n_train=10, n_val=2)
    with pytest.raises(ZooError, match="must be solver-generated"):
        bad.setup("fit")
    wrong = PDEDataModule(problem="darcy", source="local", train_path=str(tmp_path / "train.h5"),
                          test_path=str(tmp_path / "test.safetensors"))
    with pytest.raises(ZooError, match="holds 'helmholtz' data"):
        wrong.setup("test")
    with pytest.raises(ZooError, match="needs train_path and test_path"):
        PDEDataModule(source="local")
    missing = PDEDataModule(source="local", train_path=str(tmp_path / "nope.npz"), test_path=str(tmp_path / "no.npz"))
    with pytest.raises(ZooError, match="not found"):
        missing.setup("fit")


def test_channel_mismatch_is_a_clear_error():
    dm = PDEDataModule(problem="diffusion", grid_size=8, n_train=4, n_val=0, n_test=2, n_basis=2, test_solver="direct")
    model = NeuralOperatorModule(in_channels=2, grid_size=8, modes=2, width=4)
    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ZooError, match="in_channels=2 but the diffusion data have 3"):
        trainer.fit(model, datamodule=dm)


def test_sizes_and_a_grid_other_than_the_data_are_refused():
    # modes=0 or n_layers=0 trained without a word; a grid other than the data's was Lightning's hparams traceback
    with pytest.raises(ZooError, match="sizes must be >= 1, got modes=0"):
        NeuralOperatorModule(modes=0)
    with pytest.raises(ZooError, match="sizes must be >= 1, got n_layers=0"):
        NeuralOperatorModule(n_layers=0)
    dm = PDEDataModule(problem="darcy", grid_size=8, n_train=4, n_val=0, n_test=2, n_basis=2, test_solver="direct")
    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ZooError, match="model grid_size=10 but the data's grid_size is 8"):
        trainer.fit(NeuralOperatorModule(in_channels=2, grid_size=10, modes=2, width=4), datamodule=dm)


def test_datamodule_operator_action_choice_gives_the_same_pairs():
    sets = {}
    for action in ("stencil", "sparse"):
        dm = PDEDataModule(problem="diffusion", grid_size=10, n_train=12, n_val=0, n_test=2, n_basis=3, action=action)
        dm.setup("fit")
        sets[action] = dm.train_data
    s, c = sets["stencil"], sets["sparse"]
    assert s.meta["action"] == "stencil" and c.meta["action"] == "sparse"
    np.testing.assert_array_equal(s.u, c.u)  # same draws
    np.testing.assert_allclose(s.f, c.f, rtol=0, atol=1e-12 * np.abs(c.f).max())
    assert max(s.residuals().max(), c.residuals().max()) < 1e-12
