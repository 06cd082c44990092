"""DiffOAS (Dong et al., ICML 2024): PDE data by differential-operator action in solution space.

Read top-down: `operators` (5-point flux operators), `grf` (Gaussian random fields), `generate` (basis solutions,
DiffOAS samples, GMRES baseline, dataset files), `models` (FNO, DeepONet, relative L2), `module` (Lightning).
"""

from zoo.diffoas.generate import PROBLEMS, PDEData, generate, generate_diffoas, generate_solver, load_dataset, save_dataset
from zoo.diffoas.models import relative_l2
from zoo.diffoas.module import NeuralOperatorModule

__all__ = [
    "PROBLEMS",
    "PDEData",
    "NeuralOperatorModule",
    "generate",
    "generate_diffoas",
    "generate_solver",
    "load_dataset",
    "save_dataset",
    "relative_l2",
]
