"""Anomaly maps and the metrics of multi-class anomaly detection: image AUROC, pixel AUROC and AUPRO.

AUROC is torchmetrics' exact (threshold-free) ``binary_auroc``. AUPRO follows the MVTec AD protocol as anomalib
computes it (regions = 8-connected components of each ground-truth mask, the per-region overlap averaged over all
regions against the global FPR, integrated up to ``fpr_limit`` and divided by it). anomalib is the tests' oracle, not
a runtime dependency: its releases with this exact curve (2.3+) pin jsonargparse below the version this project
needs, and 2.2.0 (the vpdm extra's) resamples per-region curves, which is exact only for one region.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import ndimage
from torchmetrics.functional.classification import binary_auroc
from torchvision.transforms.functional import gaussian_blur


def anomaly_map(x: torch.Tensor, x_hat: torch.Tensor, image_size: tuple[int, int], sigma: float = 4.0) -> torch.Tensor:
    """||x - x_hat||_2 over channels per token (B, D, h, w), bilinearly upsampled to the image, Gaussian-smoothed
    (B, H, W). ``sigma`` 0 skips the smoothing."""
    err = (x - x_hat).pow(2).sum(1, keepdim=True).sqrt()
    err = torch.nn.functional.interpolate(err, size=image_size, mode="bilinear", align_corners=False)
    if sigma > 0:
        k = 2 * int(4 * sigma + 0.5) + 1  # truncate at 4 sigma, as scipy.ndimage.gaussian_filter does
        err = gaussian_blur(err, kernel_size=[k, k], sigma=[sigma, sigma])
    return err[:, 0]


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    labels = labels.reshape(-1).long()
    if labels.min() == labels.max():
        return float("nan")  # undefined with one class present
    return float(binary_auroc(scores.reshape(-1).double(), labels))


def aupro(maps: torch.Tensor, masks: torch.Tensor, fpr_limit: float = 0.3) -> float:
    """Normalised area under the PRO curve up to ``fpr_limit``; maps, masks (B, H, W)."""
    masks_np = masks.cpu().numpy() > 0.5
    labels = np.zeros(masks_np.shape, dtype=np.int64)
    offset = 0
    for i, m in enumerate(masks_np):  # regions are per image; number them globally
        lab, n = ndimage.label(m, structure=np.ones((3, 3)))
        labels[i] = np.where(lab > 0, lab + offset, 0)
        offset += n
    if offset == 0 or masks_np.all():
        return 0.0
    labels = torch.from_numpy(labels.reshape(-1))
    preds = maps.reshape(-1).double().cpu()
    region_size = torch.bincount(labels, minlength=offset + 1).double()
    background = (labels == 0).double()
    overlap_step = torch.where(labels > 0, 1.0 / region_size[labels], torch.zeros((), dtype=torch.float64))
    order = torch.argsort(preds, descending=True, stable=True)
    fpr = background[order].cumsum(0) / background.sum()
    pro = overlap_step[order].cumsum(0) / offset
    sorted_preds = preds[order]
    last_of_tie = torch.ones_like(sorted_preds, dtype=torch.bool)  # one point per distinct threshold
    last_of_tie[:-1] = sorted_preds[:-1] != sorted_preds[1:]
    fpr = torch.cat([torch.zeros(1, dtype=torch.float64), fpr[last_of_tie].clamp(max=1)])
    pro = torch.cat([torch.zeros(1, dtype=torch.float64), pro[last_of_tie].clamp(max=1)])
    i = int((fpr <= fpr_limit).nonzero().max())
    if fpr[i] < fpr_limit and i + 1 < len(fpr):  # close the curve at fpr_limit by linear interpolation
        p = pro[i] + (pro[i + 1] - pro[i]) * (fpr_limit - fpr[i]) / (fpr[i + 1] - fpr[i])
        fpr = torch.cat([fpr[: i + 1], torch.tensor([fpr_limit], dtype=torch.float64)])
        pro = torch.cat([pro[: i + 1], p.reshape(1)])
    else:
        fpr, pro = fpr[: i + 1], pro[: i + 1]
    return float(torch.trapezoid(pro, fpr) / fpr[-1])


def per_class_metrics(scores: torch.Tensor, labels: torch.Tensor, maps: torch.Tensor, masks: torch.Tensor,
                      class_ids: torch.Tensor, class_names: list[str], fpr_limit: float = 0.3) -> dict[str, float]:
    """image_auroc / pixel_auroc / aupro per class (``<metric>_<class>``) and their means over classes (the
    multi-class protocol reports the mean of the per-class values)."""
    out: dict[str, float] = {}
    for metric in ("image_auroc", "pixel_auroc", "aupro"):
        vals = []
        for cid in class_ids.unique().tolist():
            sel = class_ids == cid
            if metric == "image_auroc":
                v = auroc(scores[sel], labels[sel])
            elif metric == "pixel_auroc":
                v = auroc(maps[sel], masks[sel] > 0.5)
            else:
                v = aupro(maps[sel], masks[sel], fpr_limit)
            name = class_names[cid] if cid < len(class_names) else str(cid)
            out[f"{metric}_{name}"] = v
            vals.append(v)
        finite = [v for v in vals if v == v]
        out[metric] = float(np.mean(finite)) if finite else float("nan")
    return out


def defect_error_ratio(maps: torch.Tensor, masks: torch.Tensor) -> float:
    """Mean map inside defects / mean map on the normal pixels of the same (anomalous) images: about 1 when the
    model reconstructs the defects too (the identical shortcut), well above 1 when it does not."""
    m = masks > 0.5
    has = m.flatten(1).any(1)
    if not has.any():
        return float("nan")
    maps, m = maps[has], m[has]
    return float(maps[m].mean() / maps[~m].mean().clamp_min(1e-12))
