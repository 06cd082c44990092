"""GFlowNet environments of GFN-PG (Niu et al., ICML 2024): the hypergrid and Bayesian-network structure learning.

A GFlowNet has no dataset: the datamodule builds the environment (``self.env``, used by ``zoo.gfnpg.GFNPGModule``)
and serves one batch per training iteration (``n_iterations`` of them) and one batch per evaluation.

Sources (explicit and logged, never a silent fallback):
* ``hypergrid``: computed from (height, ndim, R0, R1, R2); ``source`` must be ``embedded``.
* ``bn``, ``source: embedded``: ``n_samples`` observations of a linear-Gaussian Erdos-Renyi network drawn with
  ``numpy.random.default_rng(seed)`` in the official generator's order of draws (``data_dag/graph.py``: edge
  coin flips, node permutation, edge weights N(0, 1) without bias, ancestral sampling with noise scale 0.1);
  the official runs use seed 0 (``get_scorer(args, rng=default_rng(0))``).
* ``bn``, ``source: local``: ``data_path``, a CSV with a header of variable names and one observation per row (the
  official data frame written with ``DataFrame.to_csv(index=False)``); columns in node order.
* the DAG list: every DAG on ``n_nodes`` nodes, enumerated (``zoo.gfnpg.bn.enumerate_dags``, the official order),
  or ``dag_list_path``, the official ``DAG-5-list.npy`` (``np.save`` of an (29281, 25) int array of row-major flat
  adjacency matrices; repository github.com/niupuhua1234/GFN-PG, file ``gfn-pg/DAG-5-list.npy``).
* ``bioseq`` (the sequence tasks TFbind8/10, qm9str, sEH; ``zoo.gfnpg.bioseq``), ``source: local``:
  ``oracle_path``, the official pickled ``{'x', 'y'}`` oracle table; ``source: embedded``: a seeded U(0, 1) stand-in
  oracle over the task's alphabet at length ``seq_length`` (for smoke runs and tests only).
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import ClassVar, Literal

import lightning.pytorch as L
import networkx as nx
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from zoo.data import first_non_finite, refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.gfnpg.bioseq import SEQUENCE_TASKS, sequence_env
from zoo.gfnpg.bn import MAX_ENUMERATED_NODES, bge_local_scores, check_dag_list, enumerate_dags
from zoo.gfnpg.envs import DAGEnv, GFNEnv, Guide, Hypergrid

# Official DAG guide (trajectory_RL.py, DAG_BN()): stop logit <= log 1e-10 where log R <= 75.
BN_GUIDE_LOG_REWARD_MAX = 75.0
BN_GUIDE_EPS = 1e-10
GRID_GUIDE_EPS = 1e-5


def node_names(n: int) -> list[str]:
    return list(string.ascii_uppercase[:n]) if n <= 26 else [f"X{i}" for i in range(n)]


def sample_erdos_renyi_linear_gaussian(n_nodes: int, n_edges: int, n_samples: int, rng: np.random.Generator,
                                       obs_noise: float = 0.1) -> tuple[np.ndarray, pd.DataFrame]:
    """(adjacency, observations) in the official generator's order of random draws.

    Edge probability ``n_edges / (n(n-1)/2)``, lower-triangular coin flips, a random node permutation; per node
    (in node order) weights ``N(0, 1)`` for [bias, parents] with the bias set to 0; ancestral sampling in networkx's
    topological order with ``rng.normal(mean, obs_noise)`` (the official sampler passes the CPD's variance 0.1 as the
    normal's scale, so 0.1 is the noise standard deviation)."""
    if n_nodes < 2:
        raise ZooError(f"a Bayesian network needs n_nodes >= 2, got {n_nodes}")
    max_edges = n_nodes * (n_nodes - 1) / 2
    if not 0 <= n_edges <= max_edges:
        raise ZooError(f"n_edges={n_edges} must lie in [0, {max_edges:g}] for {n_nodes} nodes")
    p = n_edges / max_edges
    adj = np.tril(rng.binomial(1, p=p, size=(n_nodes, n_nodes)), k=-1)
    perm = rng.permutation(n_nodes)
    adj = adj[perm, :][:, perm]
    names = node_names(n_nodes)
    graph = nx.from_numpy_array(adj, create_using=nx.DiGraph)
    nx.relabel_nodes(graph, dict(enumerate(names)), copy=False)  # as the official code: edge order follows it
    thetas = {}
    for node in graph.nodes:
        parents = list(graph.predecessors(node))
        theta = rng.normal(0.0, 1.0, size=(len(parents) + 1,))
        theta[0] = 0.0
        thetas[node] = (parents, theta)
    samples: dict[str, np.ndarray] = {}
    for node in nx.topological_sort(graph):
        parents, theta = thetas[node]
        if parents:
            mean = theta[0] + theta[1:] @ np.vstack([samples[q] for q in parents])
            samples[node] = rng.normal(mean, obs_noise)
        else:
            samples[node] = rng.normal(theta[0], obs_noise, size=(n_samples,))
    return adj, pd.DataFrame({name: samples[name] for name in names})


def _is_decimal(name: str) -> bool:
    try:
        float(name)
    except ValueError:
        return False
    return re.fullmatch(r"[+-]?[0-9]+", name.strip()) is None


def read_observations(path: str, n_nodes: int) -> pd.DataFrame:
    file = Path(path)
    if not file.is_file():
        raise ZooError(f"BN data file {path} not found: write the observations as CSV with a header of variable names "
                       "and one row per sample (or use source: embedded, the seeded Erdos-Renyi linear-Gaussian "
                       "generator of the official data_dag/graph.py)")
    try:
        frame = pd.read_csv(file)
    except (ValueError, pd.errors.ParserError) as e:
        raise ZooError(f"BN data file {path} is not a readable CSV ({e})") from e
    # a file without its header row would silently lose its first observation to the column names: names that read
    # as decimals (or pandas' renamed duplicates, "0.1") are that row; integer names (DataFrame.to_csv of unnamed
    # columns writes 0, 1, ...) are a header
    if any(_is_decimal(str(c)) for c in frame.columns):
        raise ZooError(f"BN data file {path} starts with {list(frame.columns)[:8]}, an observation, not a header of "
                       "variable names: add a header line (e.g. A,B,C,D,E)")
    if frame.shape[1] != n_nodes:
        raise ZooError(f"BN data file {path} has {frame.shape[1]} columns {list(frame.columns)[:8]}; n_nodes={n_nodes}")
    if len(frame) == 0:  # before the dtype check: a header-only frame's columns read as text
        raise ZooError(f"BN data file {path} holds its header only: no observations to score")
    bad = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise ZooError(f"BN data file {path} must hold numbers only; non-numeric values in column(s) {bad}")
    # an empty cell or nan is missing, an inf overflows BGe's scatter matrix: name the first such observation
    # (a row of the file counts from 1 below its header line)
    values = frame.to_numpy(np.float64)
    if found := first_non_finite(values):
        row, col = found[0]
        raise ZooError(f"BN data file {path}: observation {row + 1} (line {row + 2}), column {frame.columns[col]!r} "
                       f"is {frame.iat[row, col]}; every observation needs a finite number in every column "
                       f"({int((~np.isfinite(values).all(axis=1)).sum())} row(s) do not)")
    return frame


def read_dag_list(path: str, n_nodes: int) -> torch.Tensor:
    file = Path(path)
    if not file.is_file():
        raise ZooError(f"DAG list {path} not found: it is gfn-pg/DAG-{n_nodes}-list.npy of "
                       "github.com/niupuhua1234/GFN-PG (a Git LFS file); or leave dag_list_path unset to enumerate "
                       "every DAG here")
    try:
        dags = np.load(file, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:  # EOFError: an empty file
        raise ZooError(f"DAG list {path} is not a .npy array ({e})") from e
    return check_dag_list(dags, n_nodes, path)


class GFNEnvDataModule(L.LightningDataModule):
    """Args:
    env: ``hypergrid``, ``bn`` (5-node Bayesian-network structure learning with the BGe score) or ``bioseq``.
    n_iterations: training iterations (batches of the one training epoch; official 2000).
    height, ndim, R0, R1, R2: the hypergrid (official train.py: 256, 2, 0.01, 0.5, 2.0; the defaults. The smoke
        config and the known-optimum sweep use an 8x8 grid with R0 0.1).
    source: ``embedded`` (computed / seeded generator) or ``local`` (BN: ``data_path``; sequence tasks: ``oracle_path``).
    data_path: CSV of BN observations (source local).
    dag_list_path: the official ``DAG-5-list.npy``; unset: every DAG enumerated here (same order).
    n_nodes, n_edges, n_samples, obs_noise, seed: the seeded BN generator (official 5, 5, 100, 0.1, 0).
    alpha_mu, alpha_w: BGe hyper-parameters (official 1 and n_nodes + 2; ``None`` = n_nodes + 2).
    guide: give the environment RL-G's guided pi_G (hypergrid: stop logit <= log 1e-5 where R <= R0; DAGs: stop
        logit <= log 1e-10 where log R <= 75, as in the official code).
    guide_log_reward_max, guide_eps: override the guide's threshold / cap (``None`` = the official values above).
    seq_task: the sequence task (``TFbind8``, ``TFbind10``, ``qm9str``, ``sehstr``; alphabet, length and reward
        exponent from the official ``Config.py``); ``oracle_path``: its oracle file (source local);
        ``seq_length``: the length of the embedded stand-in (source embedded).
    """

    # the file options and the sources that read them (`refuse_unread_files`; dag_list_path is read by both)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"data_path": ("local",), "oracle_path": ("local",)}

    def __init__(
        self,
        env: Literal["hypergrid", "bn", "bioseq"] = "hypergrid",
        n_iterations: int = 2000,
        height: int = 256,
        ndim: int = 2,
        R0: float = 0.01,
        R1: float = 0.5,
        R2: float = 2.0,
        source: Literal["embedded", "local"] = "embedded",
        data_path: str | None = None,
        dag_list_path: str | None = None,
        n_nodes: int = 5,
        n_edges: int = 5,
        n_samples: int = 100,
        obs_noise: float = 0.1,
        seed: int = 0,
        alpha_mu: float = 1.0,
        alpha_w: float | None = None,
        guide: bool = True,
        guide_log_reward_max: float | None = None,
        guide_eps: float | None = None,
        seq_task: Literal["TFbind8", "TFbind10", "qm9str", "sehstr"] = "TFbind8",
        oracle_path: str | None = None,
        seq_length: int = 4,
    ):
        super().__init__()
        self.save_hyperparameters()
        if env not in ("hypergrid", "bn", "bioseq"):
            raise ZooError(f"unknown GFlowNet environment {env!r}: choose 'hypergrid', 'bn' or 'bioseq'")
        if env == "bioseq" and seq_task not in SEQUENCE_TASKS:
            raise ZooError(f"unknown sequence task {seq_task!r}: choose one of {', '.join(SEQUENCE_TASKS)}")
        if env == "bioseq" and source == "local" and not oracle_path:
            raise ZooError(f"source: local needs oracle_path (the {seq_task} oracle file of github.com/niupuhua1234/"
                           "GFN-PG, gfn-pg/data_bio/)")
        if source not in ("embedded", "local"):
            raise ZooError(f"unknown source {source!r}: choose 'embedded' or 'local'")
        refuse_unread_files(self, source, locals())
        # each file also belongs to one environment: a BN data file under env bioseq would be ignored as silently
        for name, value, reader in (("data_path", data_path, "bn"), ("oracle_path", oracle_path, "bioseq")):
            if value and env != reader:
                raise ZooError(f"{name}={value!r} is read only with env={reader!r}, but env={env!r}: pass "
                               f"--data.init_args.env {reader}")
        if env == "hypergrid" and source != "embedded":
            raise ZooError("the hypergrid is computed, not read: use source: embedded")
        if env == "bn" and source == "local" and not data_path:
            raise ZooError("source: local needs data_path (a CSV of observations with a header of variable names)")
        if n_iterations < 1:
            raise ZooError(f"n_iterations must be >= 1, got {n_iterations}")
        if env == "bn" and n_nodes > MAX_ENUMERATED_NODES:
            raise ZooError(f"the DAG task enumerates every DAG for exact metrics: n_nodes <= {MAX_ENUMERATED_NODES}, "
                           f"got {n_nodes}")
        self.env: GFNEnv | None = None
        self.true_graph: np.ndarray | None = None
        self.data: pd.DataFrame | None = None

    def _guide(self, default_max: float, default_eps: float) -> Guide | None:
        hp = self.hparams
        if not hp.guide:
            return None
        eps = default_eps if hp.guide_eps is None else hp.guide_eps
        if not 0 < eps <= 1:
            raise ZooError(f"guide_eps must lie in (0, 1], got {eps}")
        return Guide(default_max if hp.guide_log_reward_max is None else hp.guide_log_reward_max, float(np.log(eps)))

    def build_env(self) -> GFNEnv:
        hp = self.hparams
        if hp.env == "hypergrid":
            env = Hypergrid(hp.height, hp.ndim, hp.R0, hp.R1, hp.R2)
            env.guide = self._guide(env.guide.log_reward_max, GRID_GUIDE_EPS)
            rank_zero_info(f"[gfn_envs] source=embedded: {env.describe()}, {env.n_states:,} states")
            return env
        if hp.env == "bioseq":
            env, self.origin = sequence_env(hp.seq_task, hp.oracle_path,
                                            hp.seq_length if hp.source == "embedded" else None, hp.seed)
            rank_zero_info(f"[gfn_envs] source={hp.source}: {self.origin}; {env.describe()}, {env.n_states:,} states")
            return env
        if hp.source == "local":
            self.data = read_observations(hp.data_path, hp.n_nodes)
            origin = f"local CSV {hp.data_path}"
        else:
            self.true_graph, self.data = sample_erdos_renyi_linear_gaussian(
                hp.n_nodes, hp.n_edges, hp.n_samples, np.random.default_rng(hp.seed), hp.obs_noise)
            origin = (f"embedded: {hp.n_samples} samples of a seeded (seed {hp.seed}) Erdos-Renyi linear-Gaussian "
                      f"network with {int(self.true_graph.sum())} edges")
        if hp.dag_list_path:
            dags, dag_origin = read_dag_list(hp.dag_list_path, hp.n_nodes), f"DAG list {hp.dag_list_path}"
        else:
            dags, dag_origin = enumerate_dags(hp.n_nodes), "DAGs enumerated"
        scores = bge_local_scores(self.data.to_numpy(), alpha_mu=hp.alpha_mu, alpha_w=hp.alpha_w)
        env = DAGEnv(scores, dags, guide=self._guide(BN_GUIDE_LOG_REWARD_MAX, BN_GUIDE_EPS), name="bn-bge")
        self.origin = f"{origin}; {dag_origin} ({len(dags):,})"
        rank_zero_info(f"[gfn_envs] source={hp.source}: {self.origin}; BGe reward, {env.describe()}")
        return env

    def setup(self, stage: str | None = None) -> None:
        if self.env is None:
            self.env = self.build_env()

    # -------------------------------------------------------------------------------------------- loaders
    def train_dataloader(self):
        # one batch per iteration; stateful, so a run resumed mid-epoch continues at its iteration
        return train_loader(torch.arange(self.hparams.n_iterations), batch_size=1, shuffle=False)

    def _one(self):
        return DataLoader(torch.zeros(1), batch_size=1)

    def val_dataloader(self):
        return self._one()

    def test_dataloader(self):
        return self._one()

    def predict_dataloader(self):
        return self._one()

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.env == "hypergrid":
            line = f"embedded: hypergrid H={hp.height}, d={hp.ndim}, R0={hp.R0}, R1={hp.R1}, R2={hp.R2}"
        elif hp.env == "bioseq":
            self.setup()
            line = f"{hp.seq_task}: {self.origin}"
        else:
            self.setup()
            line = f"{self.origin}; BGe score"
        return {"data_source": line}
