"""VPDM: vague prototype-oriented diffusion for multi-class anomaly detection (Li et al., ICML 2024)."""

from zoo.vpdm.diffusion import ConditionalDenoiser, build_scheduler, diffusion_loss, partial_denoise
from zoo.vpdm.metrics import anomaly_map, aupro, auroc, per_class_metrics
from zoo.vpdm.module import VPDMModule
from zoo.vpdm.vpot import ot_loss, prototype_cost, sinkhorn_log, vague_condition

__all__ = ["VPDMModule", "ConditionalDenoiser", "build_scheduler", "diffusion_loss", "partial_denoise", "anomaly_map", "aupro",
           "auroc", "per_class_metrics", "ot_loss", "prototype_cost", "sinkhorn_log", "vague_condition"]
