"""DPO-Diff (Wang, Liu, Hsieh, Gong; ICML 2024): discrete prompt optimisation for text-to-image diffusion.

Read top-down: `wordnet` (offline WordNet), `spaces` (Synonym / Antonym / NPLib spaces of single CLIP tokens),
`stack` (SD components: Hub or tiny random), `relax` (Gumbel-Softmax over token embeddings through
`inputs_embeds`), `loss` (spherical CLIP distance), `sampler` (guided sampling, Shortcut Text Gradient), `optim`
(clip → RMSprop → clamp, t schedule), `search` (GPO, EPO, Hybrid, random), `constraint` (sentence-T5 cosine),
`optimize` (one prompt end to end), `module` (Lightning).
"""

from zoo.dpodiff.loss import clip_loss, spherical_dist
from zoo.dpodiff.optim import GPOUpdate, t_schedule
from zoo.dpodiff.optimize import DPOSettings, PromptProblem, optimize_prompt
from zoo.dpodiff.relax import encode_inputs_embeds, gumbel_coefficients, init_log_coeffs, relaxed_inputs_embeds
from zoo.dpodiff.sampler import estimation_loss, generate
from zoo.dpodiff.search import Evaluator, epo, gpo, random_search, rejection_sample
from zoo.dpodiff.spaces import SearchSpace, Slot, build_space
from zoo.dpodiff.stack import SDStack, build_stack, load_stack, tiny_stack
from zoo.dpodiff.wordnet import open_wordnet, prepare_wordnet
from zoo.dpodiff.module import DPODiffModule  # noqa: E402

__all__ = [
    "DPODiffModule", "DPOSettings", "Evaluator", "GPOUpdate", "PromptProblem", "SDStack", "SearchSpace", "Slot",
    "build_space", "build_stack", "clip_loss", "encode_inputs_embeds", "epo", "estimation_loss", "generate", "gpo",
    "gumbel_coefficients", "init_log_coeffs", "load_stack", "open_wordnet", "optimize_prompt", "prepare_wordnet",
    "random_search", "rejection_sample", "relaxed_inputs_embeds", "spherical_dist", "t_schedule", "tiny_stack",
]
