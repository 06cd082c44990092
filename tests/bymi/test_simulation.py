"""The paper's simulation, vectorised: m = 200 workers, 20% Byzantine, p = 20, Gaussian gradients with halves of 200,
500 repeats, a mean shift of growing norm. FDR claims are checked against alpha + 2 standard errors.

Exact symmetry of the null scores needs a centre that does not depend on the workers and has no error: the oracle
(true mean). The master's own gradient is independent of the workers but carries its sampling error b, which adds
b'Ωb > 0 to every null score: with a master of n samples (the paper's setting) the FDR is far above alpha, with a
master 100x larger it is controlled. The robust centres (filter, Filter+) control it approximately."""

import functools
import math

import lightning as L
import pytest
import torch

from datamodules.byzantine import ByzantineDataModule
from zoo.bymi import ByMIExperiment, bymi, removal_count
from zoo.bymi.threshold import knockoff_select

R, M, P, N_HALF, EPS = 500, 201, 20, 200, 0.2
MODULE_R = 100


@functools.lru_cache(maxsize=None)
def scores(shift, estimator="oracle", eps=EPS, n_master=400, seed=0):
    """ByMI's W over R repeats (the master is row 0) and the Byzantine mask of the workers; cached, so that the
    three alphas of a test share one simulation (the threshold is the only step that depends on alpha)."""
    gen = torch.Generator().manual_seed(seed)
    g1, g2 = (torch.randn(R, M, P, generator=gen, dtype=torch.float64) / math.sqrt(N_HALF) for _ in range(2))
    # the master's halves come from its own n_master samples
    g1[:, 0], g2[:, 0] = (torch.randn(R, P, generator=gen, dtype=torch.float64) / math.sqrt(n_master / 2)
                          for _ in range(2))
    k = math.floor((M - 1) * eps)
    byz = torch.zeros(R, M, dtype=torch.bool)
    byz[:, 1: k + 1] = True
    u = torch.randn(R, 1, P, generator=gen, dtype=torch.float64)
    u = shift * u / u.norm(dim=-1, keepdim=True)
    g1, g2 = torch.where(byz[..., None], g1 + u, g1), torch.where(byz[..., None], g2 + u, g2)
    res = bymi(g1, g2, alpha=0.1, estimator=estimator, eps=eps, n_half=N_HALF,
               oracle_mean=torch.zeros(P, dtype=torch.float64))
    return res.W, byz[:, 1:]


def simulate(shift, alpha, estimator="oracle", eps=EPS, n_master=400, seed=0):
    """FDR, its standard error and the power of ByMI at level alpha over the R repeats."""
    W, truth = scores(shift, estimator, eps, n_master, seed)
    flagged, _ = knockoff_select(W, alpha)
    fdp = (flagged & ~truth).sum(1) / flagged.sum(1).clamp_min(1)
    power = (flagged & truth).sum(1) / max(int(truth[0].sum()), 1)
    return fdp.mean().item(), fdp.std().item() / math.sqrt(R), power.mean().item()


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2])
def test_fdr_control_with_symmetric_nulls(alpha):
    fdr, se, power = simulate(0.5, alpha)
    assert fdr <= alpha + 2 * se and power > 0.95


def test_master_centre_needs_a_large_master():
    fdr_small, _, _ = simulate(0.5, 0.1, "master", n_master=400)
    assert fdr_small > 0.5  # the master's own error enters every null score
    fdr_big, se, power = simulate(0.5, 0.1, "master", n_master=40_000)
    assert fdr_big <= 0.1 + 2 * se and power > 0.95


def test_power_grows_with_the_shift():
    powers = [simulate(s, 0.1)[2] for s in (0.15, 0.25, 0.5)]
    assert powers[0] < powers[1] < powers[2] and powers[0] < 0.5 and powers[2] > 0.99


def test_no_byzantine_workers_no_rejections():
    fdr, se, _ = simulate(0.0, 0.1, eps=0.0)  # with no Byzantine worker FDP = 1{any rejection}
    assert fdr <= 0.1 + 2 * se


def test_experiment_module_on_the_gaussian_source(tmp_path):
    """The product path: datamodule source=gaussian + ByMIExperiment(model=location) through a Trainer (100
    repeats: the 500-repeat claims are checked above on the same procedure, and in the sweep)."""
    L.seed_everything(0, verbose=False)
    dm = ByzantineDataModule(source="gaussian", machines=M, n_per_machine=2 * N_HALF, dim=P, n_repeats=MODULE_R)
    methods = ("bymi_oracle", "bymi_master", "bymi_filter", "bymi_filter_plus", "krum", "faba")
    model = ByMIExperiment(model="location", n_features=P, lr=1.0, alpha=0.1, eps=EPS, attacks=("shift",),
                           shift=0.6, methods=methods)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm)
    torch.testing.assert_close(model.theta0, dm._master.mean(0))  # GD with step 1 lands on the master's mean
    out = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert out["test/repeats"] == MODULE_R
    for method in ("bymi_oracle", "bymi_filter", "bymi_filter_plus"):
        fdr, se = out[f"test/shift/{method}/fdr"], out[f"test/shift/{method}/fdr_se"]
        assert fdr <= 0.1 + 2 * se and out[f"test/shift/{method}/power"] > 0.99, method
    assert out["test/shift/bymi_master/fdr"] > 0.5
    # Krum and FABA remove ceil(1.2 * 0.2 * 201) = 49 workers, more than the 40 Byzantine: FDP >= 9/49
    assert removal_count(EPS, M) == 49
    for method in ("krum", "faba"):
        assert out[f"test/shift/{method}/fdr"] >= 9 / 49 - 1e-12 > 0.1
        assert out[f"test/shift/{method}/size"] == 49
