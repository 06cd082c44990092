"""RoSA: Robust Adaptation — low-rank + sparse adapters with a Fisher-selected support (Nikdan et al., ICML 2024).

Plain-torch algorithm: `layer` (RoSALinear, SDDMM gradient kernels), `mask` (targets, Fisher mask), `quant` (NF4
base). Lightning wiring: `module` (RoSAModule, whose fit also generates the mask through Lightning's loop;
LoRABaselineModule; FullFinetuneModule, the FFT baseline).
"""

from zoo.rosa.layer import RoSALinear, SparseFrozenLinear, sddmm, sddmm_gather
from zoo.rosa.mask import FisherCollector, apply_rosa, find_targets, fisher_mask, load_mask, rosa_layers, save_mask
from zoo.rosa.module import MASK_FILE, FullFinetuneModule, LoRABaselineModule, RoSAModule

__all__ = ["RoSAModule", "LoRABaselineModule", "FullFinetuneModule", "MASK_FILE", "RoSALinear", "SparseFrozenLinear", "sddmm",
           "sddmm_gather", "apply_rosa", "find_targets", "fisher_mask", "FisherCollector", "load_mask", "save_mask",
           "rosa_layers"]
