"""Phases hand their weights on (a HubMixin directory or a checkpoint), Hub save/load round-trips, and a wrong
earlier run is refused in one line."""

from types import SimpleNamespace

import pytest
import torch

from datamodules.intersectional import BiasTableDataModule
from zoo.bggn import BGGNModule, BiasPredictorModule, VAEModule
from zoo.errors import ZooError

TINY = dict(d=6, latent_dim=4, hidden_dim=8, predictor_hidden_dim=8, predictor_feature_dim=8)


def _dm():
    dm = BiasTableDataModule(source="synthetic", d=6, n_extra=200, batch_size=16)
    dm.setup("fit")
    return dm


def test_bggn_starts_from_the_vae_run_and_round_trips(tmp_path):
    torch.manual_seed(0)
    vae = VAEModule(**TINY)
    vae.save_pretrained(tmp_path / "vae")
    bggn = BGGNModule(**TINY, gen_batch_size=8, vae_from=str(tmp_path / "vae"))
    bggn._trainer = SimpleNamespace(datamodule=_dm())
    bggn.setup("fit")
    for name in ("encoder", "decoder", "predictor"):
        for k, v in getattr(vae, name).state_dict().items():
            assert torch.equal(getattr(bggn, name).state_dict()[k], v), (name, k)
    assert len(bggn.bank_codes) == 45  # 64 combinations, 30% held out
    bggn.r_global.fill_(3.5)
    bggn.save_pretrained(tmp_path / "bggn")
    back = BGGNModule.from_pretrained(tmp_path / "bggn")
    assert back.hparams.form == "paper" and float(back.r_global) == 3.5
    for k, v in bggn.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


def test_wrong_earlier_run_is_refused(tmp_path):
    BiasPredictorModule(d=6, hidden_dim=8, feature_dim=8).save_pretrained(tmp_path / "pred")
    bggn = BGGNModule(**TINY, gen_batch_size=8, vae_from=str(tmp_path / "pred"))
    bggn._trainer = SimpleNamespace(datamodule=_dm())
    with pytest.raises(ZooError, match="holds no 'encoder' weights"):
        bggn.setup("fit")
    missing = BGGNModule(**TINY, gen_batch_size=8, vae_from=str(tmp_path / "nowhere"))
    missing._trainer = SimpleNamespace(datamodule=_dm())
    with pytest.raises(ZooError, match="does not exist"):
        missing.setup("fit")
    with pytest.raises(ZooError, match="form must be paper or official"):
        BGGNModule(**TINY, form="other")
    with pytest.raises(ZooError, match="model d=5 but the data have 6"):
        m = VAEModule(d=5, latent_dim=4, hidden_dim=8, predictor_hidden_dim=8, predictor_feature_dim=8)
        m._trainer = SimpleNamespace(datamodule=_dm())
        m.setup("fit")



@pytest.mark.parametrize("cls, kwargs, needle", [
    (BiasPredictorModule, {"n_bins": 0}, "BiasPredictorModule: n_bins=0 must be >= 1"),  # was a weight_norm traceback
    (VAEModule, {"latent_dim": 0}, "VAEModule: latent_dim=0 must be >= 1"),  # trained a 0-dim latent
    (BGGNModule, {"precision_k": 0}, "BGGNModule: precision_k=0 must be >= 1"),  # reported precision@0
    (BGGNModule, {"n_export": -1}, r"n_export=-1 must be >= 0 \(0: none\)"),
])
def test_zero_sizes_and_cut_offs_are_refused(cls, kwargs, needle):
    with pytest.raises(ZooError, match=needle):
        cls(**kwargs)


def test_search_tree_leaf_size_zero_is_refused():
    from zoo.bggn import SearchTreeModule

    with pytest.raises(ZooError, match="SearchTreeModule: min_samples_leaf=0 must be >= 1"):
        SearchTreeModule(min_samples_leaf=0)


def test_classifier_width_other_than_the_features_is_refused():
    from datamodules.intersectional import IntersectionalSamplesDataModule
    from zoo.bggn import BiasClassifierModule

    dm = IntersectionalSamplesDataModule(source="synthetic", d=6, n_extra=50, feature_dim=5)
    dm.setup("fit")
    m = BiasClassifierModule(in_dim=768, hidden=(8,))
    m._trainer = SimpleNamespace(datamodule=dm)
    with pytest.raises(ZooError, match="model in_dim=768 but the data's features are 5 wide.*in_dim 5"):
        m.setup("fit")  # was a matrix shape error in the first step
    fits = BiasClassifierModule(in_dim=5, hidden=(8,))
    fits._trainer = SimpleNamespace(datamodule=dm)
    fits.setup("fit")
