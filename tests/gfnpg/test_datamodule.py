"""GFNEnvDataModule: the seeded BN generator, the real file formats (observations CSV, DAG-5-list.npy), errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.gfn_envs import GFNEnvDataModule, sample_erdos_renyi_linear_gaussian
from zoo.errors import ZooError
from zoo.gfnpg import enumerate_dags


def test_seeded_generator_follows_the_linear_gaussian_network():
    adj, data = sample_erdos_renyi_linear_gaussian(5, 5, 2000, np.random.default_rng(0))
    assert list(data.columns) == list("ABCDE") and data.shape == (2000, 5)
    assert not np.linalg.matrix_power(adj, 5).any()  # a DAG (a permuted lower-triangular matrix)
    # each node is its parents' linear combination plus N(0, 0.1^2) noise: regressing on the true parents leaves
    # residuals of standard deviation ~0.1
    x = data.to_numpy()
    for j in range(5):
        parents = np.nonzero(adj[:, j])[0]
        resid = x[:, j] if len(parents) == 0 else x[:, j] - x[:, parents] @ np.linalg.lstsq(x[:, parents], x[:, j],
                                                                                                rcond=None)[0]
        assert 0.09 < resid.std() < 0.11
    same = sample_erdos_renyi_linear_gaussian(5, 5, 2000, np.random.default_rng(0))
    assert np.array_equal(same[0], adj) and same[1].equals(data)


def test_embedded_bn_environment():
    dm = GFNEnvDataModule(env="bn")
    dm.setup()
    env = dm.env
    assert env.n_states == 29281 and env.n_actions == 26 and dm.data.shape == (100, 5)
    assert dm.true_graph.shape == (5, 5)
    assert "seed 0" in dm.card_metadata()["data_source"]
    assert env.guide is not None and env.guide.log_reward_max == 75.0


def test_local_files_in_the_real_formats_give_the_same_environment(tmp_path):
    embedded = GFNEnvDataModule(env="bn", n_nodes=4, n_edges=3, n_samples=40, seed=2)
    embedded.setup()
    csv, npy = tmp_path / "data.csv", tmp_path / "DAG-4-list.npy"
    embedded.data.to_csv(csv, index=False)  # the official DataFrame, header = variable names
    np.save(npy, enumerate_dags(4).numpy()[::-1].copy())  # np.save of the int rows; any order is accepted
    local = GFNEnvDataModule(env="bn", n_nodes=4, source="local", data_path=str(csv), dag_list_path=str(npy))
    local.setup()
    assert pd.read_csv(csv).shape == (40, 4)
    states = embedded.env.all_states()
    torch.testing.assert_close(local.env.log_reward(states), embedded.env.log_reward(states), rtol=1e-12, atol=1e-9)
    assert torch.equal(local.env.all_states()[local.env.state_index(states)], states)
    assert "local CSV" in local.card_metadata()["data_source"]


def test_bad_input_names_the_problem(tmp_path):
    with pytest.raises(ZooError, match="DAG list .* not found: it is gfn-pg/DAG-5-list.npy"):
        GFNEnvDataModule(env="bn", dag_list_path=str(tmp_path / "DAG-5-list.npy")).setup()
    with pytest.raises(ZooError, match="BN data file .* not found"):
        GFNEnvDataModule(env="bn", source="local", data_path=str(tmp_path / "nope.csv")).setup()
    with pytest.raises(ZooError, match="needs data_path"):
        GFNEnvDataModule(env="bn", source="local")
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"A": [1.0, 2.0], "B": ["x", "y"], "C": [0.0, 1.0], "D": [1.0, 1.0], "E": [2.0, 0.0]}).to_csv(
        bad, index=False)
    with pytest.raises(ZooError, match="numbers only"):
        GFNEnvDataModule(env="bn", source="local", data_path=str(bad)).setup()
    with pytest.raises(ZooError, match="data_path=.* is read only with env='bn', but env='bioseq'"):
        GFNEnvDataModule(env="bioseq", source="local", data_path=str(bad), oracle_path=str(bad))
    # without its header the first observation would silently become the variable names
    nohead = pd.DataFrame(np.random.default_rng(0).normal(size=(4, 5)))
    nohead.to_csv(tmp_path / "nohead.csv", index=False, header=False)
    with pytest.raises(ZooError, match="an observation, not a header of variable names"):
        GFNEnvDataModule(env="bn", source="local", data_path=str(tmp_path / "nohead.csv")).setup()
    pd.DataFrame([[1, 0, 1, 1, 0]] * 3).to_csv(tmp_path / "nohead_int.csv", index=False, header=False)
    with pytest.raises(ZooError, match="an observation, not a header"):  # repeated values: pandas renames them 1.1
        GFNEnvDataModule(env="bn", source="local", data_path=str(tmp_path / "nohead_int.csv")).setup()
    pd.DataFrame(np.ones((3, 5))).to_csv(tmp_path / "int_names.csv", index=False)  # header 0,1,2,3,4: fine
    GFNEnvDataModule(env="bn", source="local", data_path=str(tmp_path / "int_names.csv")).setup()
    cyclic = tmp_path / "cyc.npy"
    dags = enumerate_dags(3).numpy()
    dags[-1] = [0, 1, 0, 0, 0, 1, 1, 0, 0]
    np.save(cyclic, dags)
    with pytest.raises(ZooError, match="cyclic"):
        GFNEnvDataModule(env="bn", n_nodes=3, n_edges=2, dag_list_path=str(cyclic)).setup()
    with pytest.raises(ZooError, match="reward negative"):
        GFNEnvDataModule(env="hypergrid", R0=-0.5).setup()
    with pytest.raises(ZooError, match="source: embedded"):
        GFNEnvDataModule(env="hypergrid", source="local")
    with pytest.raises(ZooError, match="n_nodes <= 5"):
        GFNEnvDataModule(env="bn", n_nodes=6)


def test_hypergrid_defaults_are_the_official_train_py_ones():
    # train.py: --height 256, --ndim 2, --R0 0.01 (Config.py: R1 0.5, R2 2.0), 2,000 iterations
    h = GFNEnvDataModule().hparams
    assert (h.height, h.ndim, h.R0, h.R1, h.R2, h.n_iterations) == (256, 2, 0.01, 0.5, 2.0, 2000)
