"""ByMIExperiment: θ₀ is the official gradient-descent loop with its early stopping, the test logs every method and
attack, the Hub round trip keeps θ₀, and bad settings are one-line errors."""

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from datamodules.byzantine import ByzantineDataModule
from zoo.bymi import ByMIExperiment, FeatureClassifier
from zoo.errors import ZooError


def _trainer(tmp_path, **kw):
    return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path, **kw)


def test_theta0_is_the_official_gd_loop_with_early_stopping(tmp_path):
    dm = ByzantineDataModule(source="digits", machines=40, n_per_machine=34, n_repeats=1)
    model = ByMIExperiment(lr=0.5, patience=2)
    _trainer(tmp_path, max_epochs=60).fit(model, datamodule=dm)
    # detect_realdata.R: theta = 1; theta -= lr * X'(P - Y)/n each epoch; keep the best test accuracy; stop once
    # more than `patience` epochs were worse than the best
    x = torch.from_numpy(dm._arrays[0][dm._master])
    y = torch.from_numpy(dm._arrays[1][dm._master])
    xt, yt = torch.from_numpy(dm._arrays[2]), torch.from_numpy(dm._arrays[3])
    X, Xt = F.pad(x, (0, 1), value=1.0), F.pad(xt, (0, 1), value=1.0)
    theta = torch.ones(21, 10, dtype=torch.float64)
    best, best_theta, counter, epochs = 0.0, None, 0, 0
    for _ in range(60):
        P = torch.softmax(X @ theta, dim=1)
        theta = theta - 0.5 * X.T @ (P - F.one_hot(y, 10).double()) / len(y)
        epochs += 1
        acc = ((Xt @ theta).argmax(1) == yt).double().mean().item()
        if acc > best:
            best, best_theta, counter = acc, theta.clone(), 0
        if acc < best:
            counter += 1
        if counter > 2:
            break
    assert epochs < 60  # the early stop happened
    torch.testing.assert_close(model.theta, theta, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(model.theta0, best_theta, rtol=1e-10, atol=1e-12)


def test_experiment_logs_every_attack_and_method(tmp_path):
    L.seed_everything(0, verbose=False)
    dm = ByzantineDataModule(source="digits", machines=40, n_per_machine=34, n_repeats=2)
    model = ByMIExperiment(alpha=0.2, eps=0.2, rmdp_starts=10,
                           methods=("bymi_filter", "bymi_filter_plus", "bymi_geom", "bymi_master", "rmdp_bh", "krum",
                                    "faba", "zeno"))
    trainer = _trainer(tmp_path, max_epochs=15)
    trainer.fit(model, datamodule=dm)
    out = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert out["test/repeats"] == 2
    for attack in ("ood", "grad", "ipm"):
        for method in model.hparams.methods:
            for metric in ("fdr", "fdr_se", "power", "p_all", "size", "rmse"):
                assert f"test/{attack}/{method}/{metric}" in out
    # 7 Byzantine of 39 workers; Krum/FABA/Zeno always remove ceiling(40 * 1.2 * 0.2) = 10
    assert out["test/ood/krum/size"] == out["test/ipm/zeno/size"] == 10
    # ByMI finds most of the OOD and IPM machines even on 34 digits per machine
    for attack in ("ood", "ipm"):
        assert out[f"test/{attack}/bymi_filter/power"] > 0.5 and out[f"test/{attack}/bymi_filter/fdr"] < 0.3


def test_hub_round_trip_keeps_theta0(tmp_path):
    m = ByMIExperiment(n_features=4, n_classes=3, attacks=("ood",), methods=("krum",))
    with torch.no_grad():
        m.theta0.normal_()
    m.save_pretrained(tmp_path / "hub")
    back = ByMIExperiment.from_pretrained(tmp_path / "hub")
    assert torch.equal(back.theta0, m.theta0) and back.hparams.attacks == ["ood"]
    c = FeatureClassifier(hidden=4)
    c.save_pretrained(tmp_path / "clf")
    x = torch.randn(3, 20)
    torch.testing.assert_close(FeatureClassifier.from_pretrained(tmp_path / "clf")(x), c.eval()(x))


@pytest.mark.parametrize("kwargs, message", [
    (dict(attacks=("flood",)), "unknown attack 'flood'"),
    (dict(methods=("median",)), "unknown method 'median'"),
    (dict(methods=("bymi_oracle",)), "known only in the location simulation"),
    (dict(eps=0.6), "eps must lie in"),
    ({"alpha": -1.0}, r"alpha is the target FDR, a level in \(0, 1\); got -1.0"),
    ({"alpha": 1.0}, "alpha is the target FDR"),
    (dict(model="mlp"), "unknown model 'mlp'"),
    ({"methods": ()}, "attacks and methods must each name at least one"),  # ran and reported nothing
    ({"attacks": ()}, "attacks and methods must each name at least one"),
    ({"shift": float("nan")}, "attack and method constants must be finite, got shift=nan"),  # a nan attack
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ZooError, match=message):
        ByMIExperiment(**kwargs)


def test_model_and_data_must_agree(tmp_path):
    dm = ByzantineDataModule(source="gaussian", machines=5, n_per_machine=10, dim=3)
    with pytest.raises(ZooError, match="model='logistic' but the datamodule provides 'location'"):
        _trainer(tmp_path, max_epochs=1).fit(ByMIExperiment(n_features=3), datamodule=dm)
    with pytest.raises(ZooError, match="n_features=20 but the data have 3"):
        _trainer(tmp_path, max_epochs=1).fit(ByMIExperiment(model="location"), datamodule=dm)
