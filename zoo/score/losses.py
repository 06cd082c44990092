"""SCoRe objectives: Total Information S_f and Total Correlation C_f over the class sets of a batch.

Notation (Majee et al., ICML 2024, Sec. 3): the batch V holds every view of every image (2B rows for B
images and two views), A_1..A_K are its class sets, S_ij the cosine similarity of the L2-normalised
projections z_i, z_j. For a set function f:

    Total Information  L_Sf = sum_k f(A_k)
    Total Correlation  L_Cf = sum_k f(A_k) - f(V)

Submodular instances (f is submodular; the "SCoRe" objectives proper):
    Facility Location  f(A) = sum_{i in V} max_{j in A} S_ij
    Graph Cut          f(A) = sum_{i in V} sum_{j in A} S_ij - lamda * sum_{i,j in A} S_ij
    Log-Determinant    f(A) = log det(S_A + delta I)
Instances with a non-submodular f: SupCon, N-pairs, OPL. Variants that contrast only against
V \\ A_k: Submod-SupCon, Submod-Triplet.

All losses here are vectorised over the class sets (no Python loop over classes) and are divided by
|V| so their scale does not grow with the batch (the paper writes plain sums; a constant factor is a
learning-rate choice). Where the official code differs from these formulas, see cards/score.md.

Two layers: batched set functions on an explicit kernel S and any family of sets (masks), used by the
tests for brute-force submodularity checks; and the training losses on features + labels, which use
the cheapest exact form for a partition of V (segment max for FL, class sums for GC, Gram matrices in
the smaller of n_k and d for LogDet).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from zoo.errors import ZooError

SUBMODULAR = ("fl_sf", "fl_cf", "gc_sf", "gc_cf", "logdet_sf", "logdet_cf")
INSTANCES = ("supcon", "npairs", "opl")
VARIANTS = ("submod_supcon", "submod_triplet")
OBJECTIVES = SUBMODULAR + INSTANCES + VARIANTS
# objectives whose every anchor needs a member of another class in the batch
_NEED_NEGATIVES = ("npairs", "opl", "submod_supcon", "submod_triplet")


# --------------------------------------------------------------------------------------------------
# Set functions on a kernel S [n, n] and a batch of sets given as 0/1 masks [m, n] over the ground set.
# --------------------------------------------------------------------------------------------------


def facility_location(S: torch.Tensor, sets: torch.Tensor) -> torch.Tensor:
    """f(A) = sum_{i in V} max_{j in A} S_ij for each row of ``sets`` (f(empty) = 0). Returns [m]."""
    sets = sets.bool()
    masked = S.unsqueeze(0).masked_fill(~sets[:, None, :], float("-inf"))  # [m, i, j]
    best = masked.amax(-1)
    best = torch.where(sets.any(-1, keepdim=True), best, torch.zeros_like(best))
    return best.sum(-1)


def graph_cut(S: torch.Tensor, sets: torch.Tensor, lamda: float) -> torch.Tensor:
    """f(A) = sum_{i in V, j in A} S_ij - lamda * sum_{i, j in A} S_ij for each row of ``sets``."""
    m = sets.to(S.dtype)
    return m @ S.sum(0) - lamda * ((m @ S) * m).sum(-1)


def log_determinant(S: torch.Tensor, sets: torch.Tensor, delta: float) -> torch.Tensor:
    """f(A) = log det(S_A + delta I_|A|) for each row of ``sets`` (S PSD, delta > 0).

    S_A + delta I is embedded in an n x n matrix with delta on the diagonal outside A, whose log
    determinant is f(A) + (n - |A|) log delta; this keeps every set in one batched Cholesky.
    """
    _check_delta(delta)
    m = sets.to(S.dtype)
    n = S.shape[-1]
    eye = torch.eye(n, dtype=S.dtype, device=S.device)
    sub = S * m[:, :, None] * m[:, None, :] + delta * eye
    return _logdet_pd(sub) - (n - m.sum(-1)) * math.log(delta)


def _logdet_pd(G: torch.Tensor) -> torch.Tensor:
    # Cholesky is ~2x cheaper than LU and its backward is stable for PD input (delta > 0 guarantees it).
    L, info = torch.linalg.cholesky_ex(G)
    if bool((info > 0).any()):  # rounding made a matrix indefinite: fall back to LU
        return torch.linalg.slogdet(G)[1]
    return 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)


def _check_delta(delta: float) -> None:
    if not delta > 0:
        raise ZooError(f"logdet needs delta > 0 to keep S_A + delta*I positive definite, got {delta}")


# --------------------------------------------------------------------------------------------------
# Batch helpers
# --------------------------------------------------------------------------------------------------


def flatten_views(features: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, n_views, ...] -> [n_views * B, ...] view-major (view 0 of all images first), labels repeated: features
    [B, n_views, d] or images [B, n_views, C, H, W].

    This is the ordering of SupCon's and SCoRe's official code (torch.cat(torch.unbind(x, 1))).
    """
    if features.dim() < 3:
        raise ZooError(f"expected features [batch, views, dim], got shape {tuple(features.shape)}")
    if labels.shape[0] != features.shape[0]:
        raise ZooError(f"{labels.shape[0]} labels for a batch of {features.shape[0]} images")
    n_views = features.shape[1]
    return torch.cat(torch.unbind(features, dim=1), dim=0), labels.repeat(n_views)


def class_sets(labels: torch.Tensor, min_size: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse index of each row's class set in 0..K-1, size of each class set) for the batch."""
    classes, inverse, counts = torch.unique(labels, return_inverse=True, return_counts=True)
    small = classes[counts < min_size]
    if small.numel():
        raise ZooError(
            f"class {small[0].item()} has a single view in the batch; SCoRe objectives need at least "
            f"{min_size} members per class set (pass both augmented views of each image)"
        )
    return inverse, counts


# --------------------------------------------------------------------------------------------------
# Losses on L2-normalised features z [n, d] with class labels [n]
# --------------------------------------------------------------------------------------------------


def facility_location_loss(z: torch.Tensor, inverse: torch.Tensor, K: int, total_correlation: bool):
    """Eq. L_Sf / L_Cf with FL: sum_k sum_{i in V} max_{j in A_k} S_ij (- f(V)), divided by |V|.

    max_{j in A_k} S_ij for all (i, k) is one segment-max (scatter_reduce) over the columns of S.
    For i in A_k the max is S_ii = 1, a constant, so L_Sf is the paper's sum over i in V \\ A_k plus |V|,
    and L_Cf = L_Sf - 1 exactly (claim 3 in the notes).
    """
    n = z.shape[0]
    S = z @ z.T
    best = S.new_full((n, K), float("-inf"))
    best = best.scatter_reduce(1, inverse.expand(n, n), S, reduce="amax", include_self=True)
    loss = best.sum()
    if total_correlation:
        loss = loss - S.amax(1).sum()  # f(V) = sum_i max_j S_ij
    return loss / n


def graph_cut_loss(z: torch.Tensor, inverse: torch.Tensor, K: int, lamda: float, total_correlation: bool):
    """GC with the cosine kernel S = z z^T, in O(n d) through class sums c_k = sum_{i in A_k} z_i.

    sum_{i in V, j in A_k} S_ij = (sum_i z_i) . c_k and sum_{i,j in A_k} S_ij = |c_k|^2, so
    f(A_k) = t . c_k - lamda |c_k|^2 and f(V) = (1 - lamda)|t|^2; L_Cf = lamda * cut(A_1..A_K).
    The official GraphCut(is_cf=True) divides each anchor's cut row by its |A_k| - 1 positives before the mean,
    which up-weights tail-class rows; we keep the set function's plain sum (cards/score.md).
    """
    n = z.shape[0]
    c = z.new_zeros(K, z.shape[1]).index_add(0, inverse, z)
    t = z.sum(0)
    f_sets = c @ t - lamda * (c * c).sum(1)
    loss = f_sets.sum()
    if total_correlation:
        loss = loss - (1.0 - lamda) * (t @ t)
    return loss / n


def _padded_sets(z: torch.Tensor, inverse: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Rows of each class set gathered into [K, max n_k, d] with zero rows as padding."""
    K, m = counts.numel(), int(counts.max())
    order = torch.argsort(inverse, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    sorted_sets = inverse[order]
    rank = torch.arange(z.shape[0], device=z.device) - starts[sorted_sets]
    Z = z.new_zeros(K, m, z.shape[1])
    return Z.index_put((sorted_sets, rank), z[order])


def _logdet_gram(Z: torch.Tensor, sizes: torch.Tensor, delta: float) -> torch.Tensor:
    """log det(Z_k Z_k^T + delta I_{n_k}) for Z [K, m, d] padded with zero rows to m.

    Computed in the smaller space: m x m (padding rows add (m - n_k) log delta) or d x d
    (Sylvester: log det(Z Z^T + dI_n) = log det(Z^T Z + dI_d) + (n - d) log d).
    """
    _, m, d = Z.shape
    log_delta = math.log(delta)
    if m <= d:
        G = Z @ Z.mT + delta * torch.eye(m, dtype=Z.dtype, device=Z.device)
        return _logdet_pd(G) - (m - sizes.to(Z.dtype)) * log_delta
    G = Z.mT @ Z + delta * torch.eye(d, dtype=Z.dtype, device=Z.device)
    return _logdet_pd(G) + (sizes.to(Z.dtype) - d) * log_delta


def log_determinant_loss(z, inverse, counts, delta: float, total_correlation: bool):
    """LogDet with S = z z^T: sum_k log det(S_{A_k} + delta I) (- log det(S + delta I)), / |V|.

    The official LogDet(is_cf=False) returns -(tau/tau_b) * mean_k log det(S_{A_k} + 0.5 I): the opposite sign and a
    mean over class sets. We keep the paper's L_Sf = sum_k f(A_k) (train_stage1.py only builds is_cf=True).
    """
    _check_delta(delta)
    n = z.shape[0]
    loss = _logdet_gram(_padded_sets(z, inverse, counts), counts, delta).sum()
    if total_correlation:
        loss = loss - _logdet_gram(z.unsqueeze(0), counts.new_tensor([n]), delta).sum()
    return loss / n


def _masks(inverse: torch.Tensor):
    same = inverse[:, None] == inverse[None, :]
    eye = torch.eye(inverse.numel(), dtype=torch.bool, device=inverse.device)
    return same & ~eye, ~same, eye  # positives (same class, not self), negatives, self


def supcon_loss(z, inverse, temperature: float):
    """SupCon as L_Sf with f(A_k) = sum_{i in A_k} [log sum_{a in V \\ i} e^{S_ia/t} - mean_{p in A_k \\ i} S_ip/t].

    Identical to Khosla et al.'s SupCon ("all" anchors, L_out) and to pytorch-metric-learning's
    SupConLoss on the concatenated views; divided by |V| (mean over anchors).
    """
    pos, _, eye = _masks(inverse)
    logits = (z @ z.T) / temperature
    lse = torch.logsumexp(logits.masked_fill(eye, float("-inf")), dim=1)
    pos_mean = (logits * pos).sum(1) / pos.sum(1)
    return (lse - pos_mean).mean()


def submod_supcon_loss(z, inverse, temperature: float):
    """Submod-SupCon: SupCon whose log-sum-exp runs over V \\ A_k (the negatives) only.

    The official code divides the positive term by 2B instead of |A_k| - 1 (a broadcasting
    artefact, see cards/score.md); we follow the paper's mean over positives.
    """
    pos, neg, _ = _masks(inverse)
    logits = (z @ z.T) / temperature
    lse_neg = torch.logsumexp(logits.masked_fill(~neg, float("-inf")), dim=1)
    pos_mean = (logits * pos).sum(1) / pos.sum(1)
    return (lse_neg - pos_mean).mean()


def npairs_loss(z, inverse, temperature: float):
    """Multi-positive N-pairs (NT-Xent form used by the official code through PML's NTXentLoss).

    Each positive pair (i, p): log(1 + sum_{n in V \\ A_k} exp((S_in - S_ip)/t)); mean over pairs.
    """
    pos, neg, _ = _masks(inverse)
    logits = (z @ z.T) / temperature
    lse_neg = torch.logsumexp(logits.masked_fill(~neg, float("-inf")), dim=1, keepdim=True)
    pair_loss = F.softplus(lse_neg - logits)
    return pair_loss[pos].mean()


def opl_loss(z, inverse, gamma: float):
    """Orthogonal Projection Loss (Ranasinghe et al., 2021): (1 - mean_pos S) + gamma |mean_neg S|.

    The pair means run over ordered pairs i != j; the official SCoRe copy divides S by a
    temperature of 0.7, which only rescales the loss, so we keep the original OPL.
    """
    pos, neg, _ = _masks(inverse)
    S = z @ z.T
    pos_mean = (S * pos).sum() / pos.sum()  # masked sums: no gather copies of S
    neg_mean = (S * neg).sum() / neg.sum()
    return (1.0 - pos_mean) + gamma * neg_mean.abs()


def submod_triplet_loss(z, inverse):
    """Submod-Triplet: per anchor, mean_{p in A_k \\ i} |z_i - z_p|^2 - mean_{n in V \\ A_k} |z_i - z_n|^2.

    With unit vectors |z_i - z_j|^2 = 2 - 2 S_ij. The official code uses squared similarities and a
    sign that rewards spreading positives apart; we use the triplet's intended direction.
    """
    pos, neg, _ = _masks(inverse)
    D = 2.0 - 2.0 * (z @ z.T)
    return ((D * pos).sum(1) / pos.sum(1) - (D * neg).sum(1) / neg.sum(1)).mean()


def score_loss(
    features: torch.Tensor,
    labels: torch.Tensor,
    objective: str = "fl_cf",
    temperature: float = 0.07,
    lamda: float = 1.0,
    delta: float = 0.5,
    gamma: float = 0.5,
) -> torch.Tensor:
    """A SCoRe objective on projections ``[n, d]`` (already concatenated views) or ``[B, views, d]``.

    Features are L2-normalised here, so S_ij is the cosine similarity and S_ii = 1 is the row maximum.
    ``temperature`` is used by supcon/submod_supcon/npairs, ``lamda`` by graph cut, ``delta`` by logdet,
    ``gamma`` by OPL.
    """
    if objective not in OBJECTIVES:
        raise ZooError(f"unknown SCoRe objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if features.dim() == 3:
        features, labels = flatten_views(features, labels)
    if features.dim() != 2 or labels.shape != features.shape[:1]:
        raise ZooError(f"features {tuple(features.shape)} and labels {tuple(labels.shape)} do not match")
    inverse, counts = class_sets(labels)
    if objective in _NEED_NEGATIVES and counts.numel() < 2:
        raise ZooError(f"objective {objective!r} needs at least two classes in the batch, got one")
    if features.dtype in (torch.float16, torch.bfloat16):
        features = features.float()  # log-sum-exp over 1/t-scaled logits and Cholesky need fp32
    # under mixed precision autocast would re-cast z @ z.T and the Gram matrices to half precision
    with torch.autocast(device_type=features.device.type, enabled=False):
        return _objective(F.normalize(features, dim=-1), inverse, counts, objective, temperature, lamda, delta,
                          gamma)


def _objective(z, inverse, counts, objective, temperature, lamda, delta, gamma):
    K = counts.numel()
    kind, _, mode = objective.partition("_")
    cf = mode == "cf"
    if kind == "fl":
        return facility_location_loss(z, inverse, K, cf)
    if kind == "gc":
        return graph_cut_loss(z, inverse, K, lamda, cf)
    if kind == "logdet":
        return log_determinant_loss(z, inverse, counts, delta, cf)
    if objective == "supcon":
        return supcon_loss(z, inverse, temperature)
    if objective == "submod_supcon":
        return submod_supcon_loss(z, inverse, temperature)
    if objective == "npairs":
        return npairs_loss(z, inverse, temperature)
    if objective == "opl":
        return opl_loss(z, inverse, gamma)
    return submod_triplet_loss(z, inverse)


class SCoReLoss(torch.nn.Module):
    """``score_loss`` with its hyper-parameters bound, checked at construction."""

    def __init__(self, objective: str = "fl_cf", temperature: float = 0.07, lamda: float = 1.0,
                 delta: float = 0.5, gamma: float = 0.5):
        super().__init__()
        if objective not in OBJECTIVES:
            raise ZooError(f"unknown SCoRe objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if objective.startswith("logdet"):
            _check_delta(delta)
        if temperature <= 0:
            raise ZooError(f"temperature must be > 0, got {temperature}")
        self.objective, self.temperature, self.lamda, self.delta, self.gamma = (
            objective, temperature, lamda, delta, gamma)

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return score_loss(features, labels, self.objective, self.temperature, self.lamda, self.delta,
                          self.gamma)
