"""Sequence tasks (TFbind8/10, qm9str, sEH): the official reward table and lookup, the any-order filling dynamics,
exact P_T against enumeration, exact flows giving TV = 0, the oracle file in its released format, refusals."""

from __future__ import annotations

import gzip
import pickle

import numpy as np
import pytest
import torch
from gfnpg_reference import all_trajectories, exact_flow_policy
from scipy.special import expit

from datamodules.gfn_envs import GFNEnvDataModule
from zoo.errors import ZooError
from zoo.gfnpg import GFNPGModule, SequenceEnv, StateGraph, exact_metrics, read_oracle, sequence_env
from zoo.gfnpg.bioseq import oracle_rewards
from zoo.gfnpg.sampling import forward_log_probs, policy_log_probs


def every_sequence(nbase, length):
    return np.array(np.meshgrid(*[np.arange(nbase)] * length, indexing="ij")).reshape(length, -1).T


def official_nbase2dec(nbase, seqs, length):
    """The official lookup index, written as its sum over positions."""
    return sum(seqs[:, i] * nbase ** (length - 1 - i) for i in range(length))


@pytest.fixture
def seq_env() -> SequenceEnv:
    x = every_sequence(2, 3)
    return SequenceEnv.from_oracle(x, np.random.default_rng(4).uniform(size=len(x)), nbase=2, name="toy")


def test_reward_table_is_the_official_oracle_transform():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(64, 1))
    for tf10, alpha, r_min in ((False, 3.0, 1e-3), (True, 3.0, 0.0), (False, 6.0, 0.2)):
        ours = oracle_rewards(y, alpha=alpha, R_max=10.0, R_min=r_min, tfbind10=tf10).numpy()
        ref = expit(3 * y[:, 0]) if tf10 else y[:, 0]
        ref = np.maximum(ref, r_min) ** alpha
        np.testing.assert_allclose(ours, ref * 10.0 / ref.max(), rtol=1e-12)
    # the lookup: complete states index the table in nbase2dec order
    x = every_sequence(3, 4)
    env = SequenceEnv.from_oracle(x, rng.uniform(size=len(x)), nbase=3)
    perm = rng.permutation(len(x))
    got = env.log_reward(torch.as_tensor(x[perm]))
    torch.testing.assert_close(got, env.rewards[official_nbase2dec(3, x[perm], 4)].log(), rtol=0, atol=0)


def test_dynamics_fill_any_position_and_stop_only_when_complete(seq_env):
    env = seq_env
    s = torch.tensor([[-1, 1, -1], [0, 1, 1]])
    fm = env.forward_masks(s)
    # action b * L + i writes b at position i; the stop action only for the complete sequence
    assert fm[0].tolist() == [True, False, True, True, False, True, False]
    assert fm[1].tolist() == [False] * 6 + [True]
    child = env.step(s[:1], torch.tensor([5]))  # b = 1 at i = 2
    assert child.tolist() == [[-1, 1, 1]]
    bm = env.backward_masks(child)
    assert bm.tolist() == [[False, False, False, False, True, True]]
    assert torch.equal(env.backward_step(child, torch.tensor([5])), s[:1])
    assert env.level(s).tolist() == [1, 3]
    # K-hot input: one-hot per filled position, zeros where empty
    assert env.features(s)[0].tolist() == [0, 0, 0, 1, 0, 0]
    assert torch.isinf(env.log_reward(s[:1])).all() and torch.isfinite(env.log_reward(s[1:])).all()
    states = env.all_states()
    assert len(states) == 27 and torch.equal(env.state_index(states), torch.arange(27))


def test_dynamic_programming_equals_enumeration(seq_env, make_net):
    env = seq_env
    pf = make_net(env.feature_dim, env.n_actions, seed=2)
    traj = all_trajectories(env)
    assert len(traj) == 6 * 8  # 3! filling orders of each of the 2^3 sequences
    with torch.no_grad():
        log_p = forward_log_probs(env, pf, traj, dtype=torch.float64).sum(0)
    brute = torch.zeros(env.n_states, dtype=torch.float64).index_add_(0, env.state_index(traj.terminal_states),
                                                                     log_p.exp())
    graph = StateGraph(env)
    p_dp = graph.terminal_distribution(graph.policy_log_probs(pf))
    torch.testing.assert_close(p_dp, brute, rtol=1e-12, atol=1e-15)
    assert abs(float(p_dp.sum()) - 1) < 1e-12 and float(p_dp[(graph.states < 0).any(1)].abs().max()) == 0


def test_policy_from_exact_flows_has_zero_tv(seq_env, make_net):
    env = seq_env
    graph = StateGraph(env)
    pb = make_net(env.feature_dim, env.n_actions - 1, seed=6)
    with torch.no_grad():
        log_pb = torch.cat([torch.zeros(1, env.n_actions - 1, dtype=torch.float64),
                            policy_log_probs(env, pb, graph.states[1:], backward=True, dtype=torch.float64)])
    log_pf, log_f0 = exact_flow_policy(env, log_pb)
    m = exact_metrics(graph.terminal_distribution(log_pf), graph.log_rewards, float(log_f0))
    assert m["tv"] < 1e-12 and m["jsd"] < 1e-12 and m["logz_diff"] < 1e-12


def test_mean_diff_is_the_official_expected_reward_ratio(seq_env, make_net):
    # official validate_dist for BitSeqEnv/BioSeqEnv: est = sum_x P_T(x) R(x) over the terminating sequences, the
    # target's mean reward sum R^2 / sum R (BioSeqEnv.mean_reward), mean_diff = (est / mean).clamp(0, 1)
    env = seq_env
    m = GFNPGModule(variant="TB-U", hidden_dim=8, n_hidden_layers=1)
    m.set_env(env)
    p_t, metrics = m.exact_evaluation()
    graph = m.state_graph()
    complete = (graph.states >= 0).all(1)
    r = env.rewards[env.sequence_index(graph.states[complete])]
    est = float((p_t[complete] * r).sum())
    official = min(max(est / float((r**2).sum() / r.sum()), 0.0), 1.0)
    assert 0 < official < 1
    assert metrics["mean_diff"] == pytest.approx(official, rel=1e-12)
    # a policy that puts all its mass on the best sequence is clipped to 1; the grid and DAG tasks do not report it
    best = torch.zeros_like(p_t)
    best[torch.nonzero(complete)[r.argmax()]] = 1.0
    assert exact_metrics(best, graph.log_rewards, 0.0, mean_reward=True)["mean_diff"] == 1.0
    assert "mean_diff" not in exact_metrics(p_t, graph.log_rewards, 0.0)


def _write_oracle(path, x, y, gz=False):
    raw = pickle.dumps({"x": x, "y": y})
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return str(path)


@pytest.mark.parametrize("gz", [False, True])
def test_oracle_file_in_the_released_format(tmp_path, gz):
    """The official files: a pickled dict of numpy arrays, x (N, L) int, y (N, 1) float32 (TFbind10: gzip)."""
    x = every_sequence(4, 3)
    y = np.random.default_rng(1).uniform(size=(len(x), 1)).astype(np.float32)
    path = _write_oracle(tmp_path / ("o.pkl.gz" if gz else "o.pkl"), x, y, gz)
    rx, ry = read_oracle(path)
    assert np.array_equal(rx, x) and np.array_equal(ry, y[:, 0].astype(np.float64))
    dm = GFNEnvDataModule(env="bioseq", seq_task="TFbind8", source="local", oracle_path=path)
    with pytest.raises(ZooError, match="sequences of length 3, but TFbind8 has 8"):
        dm.setup()


def test_oracle_refusals(tmp_path):
    with pytest.raises(ZooError, match="not found: it comes from github.com/niupuhua1234/GFN-PG"):
        read_oracle(str(tmp_path / "missing.pkl"))
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({"x": np.zeros((1, 1)), "y": __import__("os").getcwd}))
    with pytest.raises(ZooError, match="references posix.getcwd: only numpy arrays are read"):
        read_oracle(str(evil))
    lfs = tmp_path / "lfs.pkl"
    lfs.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    with pytest.raises(ZooError, match="Git LFS pointer"):
        read_oracle(str(lfs))
    empty = _write_oracle(tmp_path / "empty.pkl", np.zeros((0, 8), np.int64), np.zeros((0, 1), np.float32))
    with pytest.raises(ZooError, match=r"empty.pkl holds no rows \('x' \(0, 8\), 'y' \(0, 1\)\)"):
        read_oracle(empty)
    x = every_sequence(2, 2)
    with pytest.raises(ZooError, match="not every sequence in base-2 order"):
        SequenceEnv.from_oracle(x[::-1].copy(), np.ones(4), nbase=2)
    with pytest.raises(ZooError, match="3 oracle rows, but 2\\^2 = 4"):
        SequenceEnv(torch.ones(3), nbase=2, length=2)
    with pytest.raises(ZooError, match="negative or undefined"):
        SequenceEnv(torch.tensor([1.0, -1.0, 1.0, 1.0]), nbase=2, length=2)
    with pytest.raises(ZooError, match="set oracle_path"):
        sequence_env("qm9str")
    with pytest.raises(ZooError, match="source: local needs oracle_path"):
        GFNEnvDataModule(env="bioseq", source="local")
    with pytest.raises(ZooError, match="unknown sequence task 'DNA'"):
        GFNEnvDataModule(env="bioseq", seq_task="DNA")


def test_module_trains_on_the_embedded_oracle():
    dm = GFNEnvDataModule(env="bioseq", seq_task="TFbind8", seq_length=2, guide=False)
    dm.setup()
    assert dm.env.n_states == 25 and dm.card_metadata()["data_source"].startswith("TFbind8: embedded")
    m = GFNPGModule(variant="RL-B", batch_size=8, hidden_dim=16, n_hidden_layers=1, value_hidden_layers=1)
    m.set_env(dm.env)
    opts = m.named_optimizers()
    for _ in range(3):
        m.train_iteration(opts)
    _, metrics = m.exact_evaluation()
    assert all(np.isfinite(v) for v in metrics.values()) and 0 <= metrics["tv"] <= 1
    with pytest.raises(ZooError, match="RL-G needs a guided pi_G.*Replay_G, is not implemented here; use RL-B"):
        g = GFNPGModule(variant="RL-G", batch_size=4, hidden_dim=8, n_hidden_layers=1, value_hidden_layers=1)
        g.set_env(dm.env)


def test_every_variant_but_rl_g_takes_a_sequence_task():
    from zoo.gfnpg import VARIANTS

    dm = GFNEnvDataModule(env="bioseq", seq_task="TFbind8", seq_length=2)
    dm.setup()
    for variant in VARIANTS:
        if variant == "RL-G":
            continue
        torch.manual_seed(0)
        m = GFNPGModule(variant=variant, batch_size=8, hidden_dim=16, n_hidden_layers=1, value_hidden_layers=1)
        m.set_env(dm.env)
        opts = m.named_optimizers()
        for _ in range(2):
            loss = m.train_iteration(opts)["train/loss"]
        _, metrics = m.exact_evaluation()
        assert np.isfinite(float(loss)) and 0 <= metrics["tv"] <= 1, variant
