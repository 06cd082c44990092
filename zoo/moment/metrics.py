"""The objective and the evaluation measures of the MOMENT experiments."""

from __future__ import annotations

import numpy as np
import torch


def _observed_mse(reconstruction: torch.Tensor, x: torch.Tensor, steps: torch.Tensor, eps: float) -> torch.Tensor:
    """MSE of the reconstruction over the 0/1 ``steps`` [B, L] (every channel), divided by their count + eps."""
    w = steps.unsqueeze(1).expand_as(x).to(x.dtype)
    err = torch.where(w.bool(), (reconstruction - x) ** 2, torch.zeros((), dtype=x.dtype, device=x.device))
    return err.sum() / (w.sum() + eps)


def pretraining_loss(reconstruction: torch.Tensor, x: torch.Tensor, input_mask: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """Masked time-series modelling (paper, Sec. 3.3): the MSE of the reconstruction over the time steps that are
    observed (``input_mask`` 1) *and* hidden by the pre-training mask (``mask`` 0) only; [B, C, L] and [B, L].
    The official ``tasks/pretrain.py`` divides by the weight sum + 1e-7; kept."""
    return _observed_mse(reconstruction, x, input_mask * (1 - mask), 1e-7)


def reconstruction_loss(reconstruction: torch.Tensor, x: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
    """The official anomaly-detection fine-tuning objective (moment-research ``tasks/anomaly_detection_finetune.py``:
    ``nn.MSELoss()`` between the unmasked reconstruction and the series): the MSE over every observed step, nothing
    hidden. The official loss also counts padded steps; its anomaly windows have none, and here padding is left out."""
    return _observed_mse(reconstruction, x, input_mask, 0.0)


def _f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    # the official `f1_score` adds 1e-5 to every denominator; kept so that scores agree to the last digit
    precision = tp / (tp + fp + 1e-5)
    recall = tp / (tp + fn + 1e-5)
    return 2 * precision * recall / (precision + recall + 1e-5)


def anomaly_segments(labels: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of anomalous points (label > 0)."""
    a = np.concatenate([[0], (np.asarray(labels) > 0).astype(np.int8), [0]])
    d = np.diff(a)
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def adjusted_f1_curve(labels: np.ndarray, scores: np.ndarray, n_splits: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """F1 after point adjustment (Xu et al., 2018) at ``n_splits`` thresholds evenly spaced between the smallest and
    the largest score (official ``adjbestf1``): a point is flagged when its score >= threshold, and an anomalous
    segment with at least one flagged point counts as flagged entirely.

    Vectorised: a segment is flagged at threshold t iff its largest score >= t, and false positives are the normal
    points with score >= t. The official loop never back-fills index 0 (``range(i, 0, -1)``); a segment starting
    at the first point is adjusted whole here."""
    labels = np.asarray(labels).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if labels.shape != scores.shape:
        raise ValueError(f"labels {labels.shape} and scores {scores.shape} differ in length")
    thresholds = np.linspace(scores.min(), scores.max(), n_splits)
    anomalous = labels > 0
    segs = anomaly_segments(labels)
    seg_len = np.array([e - s for s, e in segs], dtype=np.float64)
    seg_max = np.array([scores[s:e].max() for s, e in segs])
    tp = ((seg_max[None, :] >= thresholds[:, None]) * seg_len[None, :]).sum(1) if segs else np.zeros(n_splits)
    normal = np.sort(scores[~anomalous])
    fp = (normal.size - np.searchsorted(normal, thresholds, side="left")).astype(np.float64)
    fn = anomalous.sum() - tp
    return thresholds, _f1(tp, fp, fn)


def adjusted_best_f1(labels: np.ndarray, scores: np.ndarray, n_splits: int = 100) -> float:
    """The best point-adjusted F1 over the thresholds of `adjusted_f1_curve` (the paper's anomaly metric)."""
    return float(adjusted_f1_curve(labels, scores, n_splits)[1].max())
