"""RoSA: Robust Adaptation — low-rank + sparse adapters with a Fisher-selected support (Nikdan et al., ICML 2024).

Plain-torch algorithm: `layer` (RoSALinear, SDDMM gradient), `mask` (targets, Fisher mask), `quant` (NF4 base).
Lightning wiring: `module` (RoSAModule, LoRABaselineModule); the mask warm-up phase is
`callbacks.rosa_mask.RoSAMaskWarmup`.
"""

from zoo.rosa.layer import DenseMaskedLinear, RoSALinear, sddmm_gather
from zoo.rosa.mask import FisherCollector, apply_rosa, find_targets, fisher_mask, load_mask, rosa_layers, save_mask
from zoo.rosa.module import LoRABaselineModule, RoSAModule

__all__ = ["RoSAModule", "LoRABaselineModule", "RoSALinear", "DenseMaskedLinear", "sddmm_gather", "apply_rosa",
           "find_targets", "fisher_mask", "FisherCollector", "load_mask", "save_mask", "rosa_layers"]
