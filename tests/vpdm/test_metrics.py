"""Metrics against scikit-learn (AUROC) and anomalib (AUPRO) on fixed maps and masks; the anomaly map."""

import numpy as np
import pytest
import torch
from scipy import ndimage
from sklearn.metrics import roc_auc_score

from zoo.vpdm.metrics import anomaly_map, aupro, auroc, defect_error_ratio, per_class_metrics


def _maps_masks(seed=0, b=4, s=24):
    rng = np.random.default_rng(seed)
    masks = np.zeros((b, s, s), np.float32)
    masks[0, 3:8, 4:10] = 1
    masks[0, 15:18, 15:20] = 1  # two regions in one image
    masks[2, 10:20, 2:6] = 1
    maps = rng.random((b, s, s)).astype(np.float32) + 0.8 * masks
    maps = np.round(maps, 2)  # ties, as thresholds of real maps have
    return torch.from_numpy(maps), torch.from_numpy(masks)


def test_auroc_matches_sklearn():
    maps, masks = _maps_masks()
    # torchmetrics returns a float32 value
    assert auroc(maps, masks) == pytest.approx(roc_auc_score(masks.reshape(-1), maps.reshape(-1)), abs=1e-7)
    scores = maps.flatten(1).amax(1)
    labels = torch.tensor([1, 0, 1, 0])
    assert auroc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-7)


def _anomalib_aupro(maps, masks, fpr_limit):
    from anomalib.metrics.aupro import _AUPRO  # the torchmetrics metric without anomalib's batch plumbing

    ref = _AUPRO(fpr_limit=fpr_limit)
    ref.update(maps, masks.long())  # anomalib 2.2 wants integer masks
    return float(ref.compute())


ANOMALIB_REASON = ("anomalib is in the vpdm extra (anomalib==2.2.0, the last release without jsonargparse<4.47): "
                   "pip install -e '.[vpdm]'")


@pytest.mark.parametrize("near", [0.3, 0.05, 1.0])
def test_aupro_matches_anomalib_one_region(near):
    """One defect region in the batch and an FPR limit that the curve attains: there every anomalib release computes
    the exact PRO curve (anomalib < 2.3 resamples per-region curves by index and interpolates at the limit, exact
    only in this case), so this runs in CI with the vpdm extra's anomalib 2.2.0. The interpolation at an arbitrary
    limit and the averaging over regions are checked by test_aupro_brute_force."""
    pytest.importorskip("anomalib", reason=ANOMALIB_REASON)
    maps, masks = _maps_masks()
    masks[0, 15:18, 15:20] = 0
    masks[2] = 0
    background = maps[masks == 0]
    fprs = [(background >= th).sum().item() / background.numel() for th in maps.unique()]
    fpr_limit = min(fprs, key=lambda f: abs(f - near))  # an FPR of the curve, the one nearest `near`
    assert aupro(maps, masks, fpr_limit) == pytest.approx(_anomalib_aupro(maps, masks, fpr_limit), abs=1e-5)


@pytest.mark.parametrize("fpr_limit", [0.3, 0.05])
def test_aupro_matches_anomalib(fpr_limit):
    """Several regions over several images: anomalib >= 2.3 computes the exact MVTec PRO curve (2.2's index
    resampling is an approximation, off by ~1e-2 here; the brute-force test below covers this case everywhere)."""
    anomalib = pytest.importorskip("anomalib", reason=ANOMALIB_REASON)
    from packaging.version import Version

    if Version(anomalib.__version__) < Version("2.3"):
        pytest.skip(f"anomalib {anomalib.__version__} < 2.3 approximates multi-region PRO curves (index resampling)")
    maps, masks = _maps_masks()
    assert aupro(maps, masks, fpr_limit) == pytest.approx(_anomalib_aupro(maps, masks, fpr_limit), abs=1e-5)


def test_aupro_brute_force():
    """PRO at each threshold by its definition (mean over regions of the overlap, FPR on the background), the
    area by the trapezoid rule on a dense threshold grid; and a perfect map gives 1."""
    maps, masks = _maps_masks(s=16)
    m = masks.numpy() > 0.5
    regions = []
    for i in range(len(m)):
        lab, n = ndimage.label(m[i], structure=np.ones((3, 3)))
        regions += [(i, lab == r) for r in range(1, n + 1)]
    fprs, pros = [0.0], [0.0]
    for th in np.unique(maps.numpy())[::-1]:
        pred = maps.numpy() >= th
        fprs.append((pred & ~m).sum() / (~m).sum())
        pros.append(np.mean([(pred[i] & r).sum() / r.sum() for i, r in regions]))
    fprs, pros = np.array(fprs), np.array(pros)
    lim = 0.3
    j = np.searchsorted(fprs, lim, side="right") - 1
    p_lim = pros[j] + (pros[j + 1] - pros[j]) * (lim - fprs[j]) / (fprs[j + 1] - fprs[j])
    x, y = np.append(fprs[: j + 1], lim), np.append(pros[: j + 1], p_lim)
    assert aupro(maps, masks, lim) == pytest.approx(np.trapezoid(y, x) / lim, abs=1e-9)
    assert aupro(masks + 0.0, masks) == pytest.approx(1.0)


def test_anomaly_map_and_ratio():
    x = torch.zeros(1, 3, 4, 4)
    x_hat = torch.zeros(1, 3, 4, 4)
    x_hat[0, :, 1, 2] = 2.0  # error norm 2 sqrt(3) at one token
    amap = anomaly_map(x, x_hat, (16, 16), sigma=0)
    assert amap.shape == (1, 16, 16)
    norm = torch.zeros(1, 1, 4, 4)
    norm[0, 0, 1, 2] = 2 * 3 ** 0.5
    ref = torch.nn.functional.interpolate(norm, size=(16, 16), mode="bilinear", align_corners=False)[:, 0]
    torch.testing.assert_close(amap, ref)
    smooth = anomaly_map(x, x_hat, (16, 16), sigma=2)
    assert float(smooth.max()) < float(amap.max())
    mask = torch.zeros(1, 16, 16)
    mask[0, 4:8, 8:12] = 1
    assert defect_error_ratio(amap, mask) > 5
    assert defect_error_ratio(torch.ones(1, 16, 16), mask) == pytest.approx(1.0)


def test_per_class_means():
    maps, masks = _maps_masks()
    scores = maps.flatten(1).amax(1)
    labels = torch.tensor([1, 0, 1, 0])
    cls = torch.tensor([0, 0, 1, 1])
    out = per_class_metrics(scores, labels, maps, masks, cls, ["a", "b"])
    assert out["pixel_auroc"] == pytest.approx((out["pixel_auroc_a"] + out["pixel_auroc_b"]) / 2)
    assert out["pixel_auroc_a"] == pytest.approx(roc_auc_score(masks[:2].reshape(-1), maps[:2].reshape(-1)))
