"""PMTR (Lee et al., ICML 2024): geometric shape assembly by proxy match transform point-cloud matching.

Read top-down: `geometry` (grid subsampling, radius neighbours, KPConv pyramid, weighted Kabsch), `pmt` (the proxy
match transform and its orthogonality loss), `kpconv` (KPConv-FPN with fine PMT), `matching` (node partition,
superpoint matching, log-Sinkhorn, LGR), `loss`, `metrics` (Breaking Bad CRD/CD/RMSE), `model` (PMTR forward for one
pair), `averaging` (multi-part Shonan pose graph), `module` (Lightning).
"""

from zoo.pmtr.averaging import shonan_poses
from zoo.pmtr.geometry import build_pyramid, grid_subsample, radius_neighbors, relative_pose, weighted_kabsch
from zoo.pmtr.metrics import chamfer_distance, multipart_metrics, pairwise_metrics, rotation_rmse
from zoo.pmtr.model import PMTR
from zoo.pmtr.module import PMTRModule
from zoo.pmtr.pmt import CoarsePMTBlock, FinePMTBlock, ProxyMatchTransform, neighbor_sum, orthogonality_loss

__all__ = [
    "CoarsePMTBlock",
    "FinePMTBlock",
    "PMTR",
    "PMTRModule",
    "ProxyMatchTransform",
    "build_pyramid",
    "chamfer_distance",
    "grid_subsample",
    "multipart_metrics",
    "neighbor_sum",
    "orthogonality_loss",
    "pairwise_metrics",
    "radius_neighbors",
    "relative_pose",
    "rotation_rmse",
    "shonan_poses",
    "weighted_kabsch",
]
