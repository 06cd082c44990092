"""GFN-PG (Niu et al., ICML 2024): GFlowNet training by policy gradients, with TB/DB/SubTB baselines.

Read top-down: `envs` (hypergrid, DAGs), `bn` (every DAG on <= 5 nodes, BGe score), `sampling` (policies,
trajectories), `objectives` (costs, GAE, actor/critic losses, TB/DB/SubTB), `trpo` (RL-T's actor step), `exact`
(P_T by dynamic programming, TV/JSD/Z metrics), `module` (Lightning).
"""

from zoo.gfnpg.bioseq import SequenceEnv, read_oracle, sequence_env
from zoo.gfnpg.bn import bge_local_scores, enumerate_dags
from zoo.gfnpg.envs import DAGEnv, GFNEnv, Guide, Hypergrid
from zoo.gfnpg.exact import StateGraph, exact_metrics
from zoo.gfnpg.module import VARIANTS, GFNPGModule
from zoo.gfnpg.sampling import Trajectories, sample_backward, sample_forward

__all__ = [
    "VARIANTS",
    "DAGEnv",
    "GFNEnv",
    "GFNPGModule",
    "Guide",
    "Hypergrid",
    "SequenceEnv",
    "StateGraph",
    "Trajectories",
    "bge_local_scores",
    "enumerate_dags",
    "exact_metrics",
    "read_oracle",
    "sample_backward",
    "sample_forward",
    "sequence_env",
]
