"""The evaluation-only module, the linear-design DataModule (generator and the user .npz format) and the plot."""

import csv
import json

import lightning as L
import numpy as np
import pytest
import torch

from datamodules.linear_designs import LinearDesignsDataModule, ground_truth, load_npz, sample_design
from zoo.errors import ZooError
from zoo.minnorm import MinNormExperiment
from zoo.minnorm.plot import main as plot_main
from zoo.minnorm.plot import read_tables


@pytest.mark.parametrize("law", ["gaussian", "rademacher", "uniform"])
def test_design_laws_are_isotropic_with_unit_variance(law):
    X = sample_design(law, 400, 300, np.random.default_rng(0))
    assert abs(X.mean()) < 0.01 and abs(X.var() - 1) < 0.02
    if law == "rademacher":
        assert set(np.unique(X)) == {-1.0, 1.0}
    cov = X.T @ X / 400
    assert np.abs(cov - np.eye(300)).max() < 0.35  # no correlation beyond sampling noise (~4.5/sqrt(400) max)


@pytest.mark.parametrize("kind", ["e1", "sparse", "dense"])
def test_ground_truths_have_unit_norm(kind):
    w = ground_truth(kind, 50, sparsity=4)
    assert np.isclose(np.linalg.norm(w), 1.0) and np.count_nonzero(w) == {"e1": 1, "sparse": 4, "dense": 50}[kind]


def test_generated_instances_do_not_depend_on_batching():
    a = LinearDesignsDataModule(n=5, d=20, n_instances=4, n_noise=3, batch_size=1)
    b = LinearDesignsDataModule(n=5, d=20, n_instances=6, n_noise=3, batch_size=4)
    a.setup("test"), b.setup("test")
    first_a = [x for batch in a.test_dataloader() for x in batch]
    first_b = next(iter(b.test_dataloader()))
    for x, y in zip(first_a, first_b):
        torch.testing.assert_close(x["X"], y["X"]) and torch.testing.assert_close(x["y"], y["y"])
    inst = first_a[2]
    assert inst["X"].dtype == torch.float64 and inst["y"].shape == (3, 5) and inst["w_star"].shape == (20,)
    noise = inst["y"] - inst["X"] @ inst["w_star"]
    assert noise.std() > 0.2  # sigma = 0.5 by default
    assert "embedded: seeded gaussian designs, n=5, d=20" in a.card_metadata()["data_source"]


def test_local_npz_in_the_documented_format_gives_the_generated_results(tmp_path):
    """A file written with numpy.savez in the documented schema (X (B, n, d), y (B, K, n), w_star (d,))."""
    gen = LinearDesignsDataModule(n=6, d=30, n_instances=2, n_noise=2, seed=3)
    gen.setup("test")
    insts = [gen.dataset[i] for i in range(2)]
    path = tmp_path / "problems.npz"
    np.savez(path, X=np.stack([i["X"].numpy() for i in insts]), y=np.stack([i["y"].numpy() for i in insts]),
             w_star=insts[0]["w_star"].numpy())
    local = LinearDesignsDataModule(source="local", path=str(path), batch_size=2)
    local.setup("test")
    assert local.card_metadata() == {"data_source": f"local: {path}"}
    module = MinNormExperiment(ps=[1.0, 1.5, 2.0])
    ours = module.evaluate(next(iter(local.test_dataloader())))
    ref = module.evaluate(insts)
    assert len(ours) == len(ref) == 6
    for a, b in zip(ours, ref):
        assert a["p"] == b["p"] and np.isclose(a["risk"], b["risk"], rtol=1e-12)


def test_local_npz_single_design_without_ground_truth(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 40))
    np.savez(tmp_path / "one.npz", X=X, y=X @ np.ones(40))  # one design, one response, no w_star
    (inst,) = load_npz(tmp_path / "one.npz")
    assert inst["y"].shape == (1, 8) and inst["w_star"] is None
    rows = MinNormExperiment(ps=[1.0, 2.0]).evaluate([inst])
    assert [r["p"] for r in rows] == [1.0, 2.0] and "risk" not in rows[0]
    assert rows[0]["support"] <= 8 and rows[0]["norm_p"] <= rows[1]["norm_p"] * np.sqrt(40)


def test_bad_npz_files_give_one_line_errors(tmp_path):
    with pytest.raises(ZooError, match="not found: write your problems with numpy.savez"):
        load_npz(tmp_path / "missing.npz")
    np.savez(tmp_path / "nox.npz", y=np.ones(3))
    with pytest.raises(ZooError, match="has no 'X' array"):
        load_npz(tmp_path / "nox.npz")
    np.savez(tmp_path / "shape.npz", X=np.ones((3, 10)), y=np.ones(4))
    with pytest.raises(ZooError, match="does not fit X"):
        load_npz(tmp_path / "shape.npz")
    np.savez(tmp_path / "w.npz", X=np.ones((3, 10)), y=np.ones(3), w_star=np.ones(9))
    with pytest.raises(ZooError, match="w_star has shape"):
        load_npz(tmp_path / "w.npz")
    np.savez(tmp_path / "empty.npz", X=np.ones((0, 3, 10)), y=np.ones((0, 3)))
    with pytest.raises(ZooError, match=r"X has shape \(0, 3, 10\), expected at least one design"):
        load_npz(tmp_path / "empty.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(ZooError, match="not a readable .npz"):
        load_npz(tmp_path / "text.npz")


@pytest.mark.parametrize("kwargs, match", [
    (dict(law="cauchy"), "unknown design law 'cauchy'"),
    (dict(n=50, d=50), "need 1 <= n < d"),
    (dict(sigma=-1.0), "sigma must be finite and >= 0"),
    (dict(w_star="sparse", sparsity=0, d=10, n=5), "sparsity must be in"),
    (dict(source="local"), "needs data.path"),
    (dict(source="hub"), "unknown linear-design source"),
])
def test_bad_datamodule_settings(kwargs, match):
    with pytest.raises(ZooError, match=match):
        LinearDesignsDataModule(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(ps=[1.0, 2.5]), r"every p must lie in \[1, 2\]"),
    (dict(ps=[]), "at least one p"),
    (dict(rtol=1e-3), "rtol must be in"),
    (dict(max_iter=0), "max_iter must be >= 1"),
])
def test_bad_module_settings(kwargs, match):
    with pytest.raises(ZooError, match=match):
        MinNormExperiment(**kwargs)


def test_trainer_test_logs_per_p_metrics_and_writes_the_table_then_plots(tmp_path):
    dm = LinearDesignsDataModule(law="rademacher", n=8, d=40, n_instances=3, n_noise=2, batch_size=2)
    model = MinNormExperiment(ps=[1.0, 1.25, 2.0])
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    (metrics,) = trainer.test(model, datamodule=dm, verbose=False)
    for p in ("p1", "p1.25", "p2"):
        for m in ("bias", "variance", "risk", "noise_part"):
            assert f"test/{m}_{p}" in metrics and f"test/{m}_se_{p}" in metrics
    assert metrics["test/instances"] == 3
    with (tmp_path / "instances_test.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 9 and {r["law"] for r in rows} == {"rademacher"}
    risk_p2 = [float(r["risk"]) for r in rows if r["p"] == "2.0"]
    assert np.isclose(np.mean(risk_p2), metrics["test/risk_p2"], rtol=1e-6)  # the log is float32
    curves = read_tables([str(tmp_path)])
    assert set(curves) == {"rademacher"} and set(curves["rademacher"]["risk"]) == {1.0, 1.25, 2.0}
    assert plot_main([str(tmp_path), "--out", str(tmp_path / "risk_vs_p.png")]) == 0
    assert (tmp_path / "risk_vs_p.png").stat().st_size > 1000


def test_plot_falls_back_to_summary_and_rejects_empty_dirs(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"config_name": "minnorm_gaussian", "test": {
        "test/risk_p1": 0.2, "test/risk_se_p1": 0.01, "test/risk_p2": 0.9, "test/bias_p2": 0.88}}))
    curves = read_tables([str(run)])
    assert curves["minnorm_gaussian"]["risk"] == {1.0: (0.2, 0.01), 2.0: (0.9, pytest.approx(float("nan"), nan_ok=True))}
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as e:
        plot_main([str(empty)])
    assert e.value.code == 2 and "run `zoo test` first" in capsys.readouterr().err


def test_hub_round_trip_keeps_the_grid(tmp_path):
    MinNormExperiment(ps=[1.0, 1.1], rtol=1e-11).save_pretrained(tmp_path)
    m = MinNormExperiment.from_pretrained(tmp_path)
    assert m.ps == [1.0, 1.1] and m.hparams.rtol == 1e-11
