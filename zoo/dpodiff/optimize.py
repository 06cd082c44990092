"""DPO-Diff for one prompt, without Lightning: the space's relaxation, the loss the search sees, the algorithms.

improve: the positive prompt stays the original; the optimised (Antonym/NPLib) prompt is the negative one, and
the loss is the spherical CLIP distance of the image to the original prompt (minimised).
attack: the optimised (Synonym) prompt is the positive one, the negative prompt is empty, the distance is
maximised (the search minimises its negative, as the official code does) subject to the sentence-T5 constraint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch

from zoo.dpodiff.loss import clip_loss, clip_text_features
from zoo.dpodiff.optim import GPOUpdate, check_gpo_update, t_schedule
from zoo.dpodiff.relax import encode_inputs_embeds, init_log_coeffs, relaxed_inputs_embeds, token_embedding_matrix
from zoo.dpodiff.sampler import check_t, estimation_loss, generate, text_embeds
from zoo.dpodiff.search import (Evaluator, check_epo, epo, first_argmax_then_gumbel, gpo, mixed_init,
                                random_search, sample_and_evaluate)
from zoo.dpodiff.spaces import NoCandidates, SearchSpace, Slot
from zoo.errors import ZooError

ALGORITHMS = ("hybrid", "gpo", "epo", "random")


@dataclass
class DPOSettings:
    """Defaults: official src/configs/algo/{gpo,epo,hybrid}.yaml and `PromptOptimizer` (lr, momentum, clamp)."""

    task: Literal["improve", "attack"] = "improve"
    algorithm: Literal["hybrid", "gpo", "epo", "random"] = "hybrid"
    num_inference_steps: int = 50
    guidance_scale: float = 7.5
    num_seeds: int = 1  # images per evaluation (official --num_seeds 1)
    gpo_iters: int = 20
    t_start: int = 15
    t_repeat: int = 2
    lr: float = 0.1
    momentum: float = 0.5
    grad_clip: float = 0.025
    coeff_min: float = 0.0
    coeff_max: float = 3.0
    tau: float = 1.0
    gpo_samples: int = 32
    epo_population: int = 20
    epo_select: int = 10
    epo_crossover: int = 10
    epo_mutation: int = 10
    epo_m_prob: float = 0.1
    epo_budget: Optional[int] = None  # None: 40 for EPO, 32 for Hybrid
    epo_explore: Optional[float] = None  # None: 1 (uniform) for EPO, 0 (GPO-learned) for Hybrid
    random_budget: int = 40
    max_evaluations: Optional[int] = None  # a hard cap on full generations, for equal-budget comparisons
    constraint_threshold: float = 0.9

    def check(self) -> None:
        if self.task not in ("improve", "attack"):
            raise ZooError(f"task must be 'improve' or 'attack', got {self.task!r}")
        if self.algorithm not in ALGORITHMS:
            raise ZooError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.num_inference_steps < 1 or self.num_seeds < 1:
            raise ZooError(f"need num_inference_steps >= 1 and num_seeds >= 1, got {self.num_inference_steps}, "
                           f"{self.num_seeds}")
        # 0 GPO iterations searched from the uniform initial coefficients, under the algorithm's name
        if self.algorithm in ("gpo", "hybrid") and self.gpo_iters < 1:
            raise ZooError(f"algorithm {self.algorithm!r} needs gpo_iters >= 1, got {self.gpo_iters}")
        if self.algorithm == "gpo" and self.gpo_samples < 1:
            raise ZooError(f"algorithm 'gpo' needs gpo_samples >= 1, got {self.gpo_samples}")
        for t in t_schedule(self.gpo_iters, self.t_start, self.t_repeat):
            check_t(t, self.num_inference_steps)
        # the GPO and EPO settings are checked where they are used too; here they fail before the first prompt
        if self.algorithm in ("gpo", "hybrid"):
            check_gpo_update(self.lr, self.grad_clip, self.coeff_min, self.coeff_max)
        if self.algorithm in ("epo", "hybrid"):
            check_epo(self.epo_population, self.epo_select, self.epo_crossover, self.epo_mutation, self.epo_m_prob,
                      self.epo_budget if self.epo_budget is not None else 1)


def constrained_space(space: SearchSpace, similarity, threshold: float) -> SearchSpace:
    """Official `validate_synonyms`: keep a synonym only if substituting it alone keeps the prompt's sentence-T5
    cosine ≥ threshold; a word left without synonyms is kept fixed.

    The official filter scores `ori_prompt.lower().replace(word, synonym)` (every occurrence of the substring,
    inside other words too, in the lowercased prompt) and runs before the single-token filter; we score the
    prompt with that one slot replaced, words joined by spaces as EPO's candidates are rendered (cards/dpodiff.md).
    A prompt left with no synonym is skipped by the module (NoCandidates); the official run crashes there
    (an empty parameter list for RMSprop)."""
    slots = []
    for i, s in enumerate(space.slots):
        if not s.substitute:
            slots.append(s)
            continue
        words = [x.word for x in space.slots]
        texts = [" ".join(words[:i] + [c] + words[i + 1:]) for c in s.candidates[1:]]
        cos = similarity.cosine(space.prompt, texts) if texts else []
        keep = [j + 1 for j, c in enumerate(cos) if c >= threshold]
        if keep:
            slots.append(Slot(s.word, [s.candidates[0]] + [s.candidates[j] for j in keep],
                              [s.token_ids[0]] + [s.token_ids[j] for j in keep], True))
        else:
            slots.append(Slot(s.word, [s.word], [s.token_ids[0]], False))
    out = SearchSpace(space.prompt, space.kind, space.target, slots, space.dropped)
    if not out.free:
        raise NoCandidates(f"prompt {space.prompt!r}: no synonym keeps the sentence-T5 cosine >= {threshold}")
    return out


class PromptProblem:
    """One prompt's objective on a stack: the relaxed loss for GPO and the full-generation loss for evaluation."""

    def __init__(self, stack, space: SearchSpace, settings: DPOSettings, seed: int = 0):
        self.stack, self.space, self.s = stack, space, settings
        self.sign = 1.0 if settings.task == "improve" else -1.0
        with torch.no_grad():
            self.text_features = clip_text_features(stack, space.prompt)
            self.original = text_embeds(stack, space.prompt)
            self.empty = text_embeds(stack, "")
        # noise drawn on the CPU so a seed gives the same trajectory on any device
        self.latents = [torch.randn((1, *stack.latent_shape), generator=torch.Generator().manual_seed(seed + k))
                        .to(stack.unet.device, stack.dtype) * stack.scheduler.init_noise_sigma
                        for k in range(settings.num_seeds)]
        tok = stack.tokenizer
        self.bos, self.eos = tok.bos_token_id, tok.eos_token_id

    def pair(self, relaxed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cond, uncond) of classifier-free guidance for an optimised prompt's encoder states."""
        return (self.original, relaxed) if self.space.target == "neg" else (relaxed, self.empty)

    def relaxed_states(self, coeffs: list[torch.Tensor]) -> torch.Tensor:
        # Through the text encoder, as the paper relaxes the prompt. The official GPO (HEAD 52a6188) passes the
        # mixed *token* embeddings as `prompt_embeds` to its `pipe_train`, whose `_encode_prompt` uses them
        # as the UNet's encoder states unencoded: its modified CLIPTextModel (inputs_embeds) is never called.
        # We do not reproduce that bug (cards/dpodiff.md, deviations).
        te = self.stack.text_encoder
        x = relaxed_inputs_embeds(self.space, coeffs, token_embedding_matrix(te), self.bos, self.eos,
                                  self.stack.tokenizer.model_max_length)
        return encode_inputs_embeds(te, x)

    def loss_at(self, coeffs: list[torch.Tensor], t: int, backprop: str = "shortcut") -> torch.Tensor:
        cond, uncond = self.pair(self.relaxed_states(coeffs))
        losses = [estimation_loss(self.stack, cond, uncond, self.text_features, t, self.s.num_inference_steps,
                                  self.s.guidance_scale, latents=z, backprop=backprop) for z in self.latents]
        return self.sign * torch.stack(losses).mean()

    def prompts(self, choice) -> tuple[str, Optional[str]]:
        text = self.space.render(choice)
        return (self.space.prompt, text) if self.space.target == "neg" else (text, None)

    @torch.no_grad()
    def images(self, positive: str, negative: Optional[str]) -> list[torch.Tensor]:
        cond = text_embeds(self.stack, positive)
        uncond = text_embeds(self.stack, negative) if negative else self.empty
        return [generate(self.stack, cond, uncond, self.s.num_inference_steps, self.s.guidance_scale, latents=z)
                for z in self.latents]

    @torch.no_grad()
    def distance(self, positive: str, negative: Optional[str]) -> tuple[float, list[torch.Tensor]]:
        ims = self.images(positive, negative)
        d = float(torch.stack([clip_loss(self.stack, im, self.text_features) for im in ims]).mean())
        return d, ims

    def score(self, choice) -> float:
        return self.sign * self.distance(*self.prompts(choice))[0]


def optimize_prompt(stack, space: SearchSpace, settings: DPOSettings, seed: int = 0, similarity=None) -> dict:
    """Run the configured search for one prompt; returns losses (spherical distances), best prompts, evaluations.

    `similarity` (attack only) is a `SentenceSimilarity`; candidates below the threshold are rejected."""
    s = settings
    s.check()
    if s.task == "attack" and similarity is not None:
        space = constrained_space(space, similarity, s.constraint_threshold)
    prob = PromptProblem(stack, space, s, seed)
    admissible = None
    if s.task == "attack" and similarity is not None:
        admissible = lambda c: similarity.cosine(space.prompt, [prob.prompts(c)[0]])[0] >= s.constraint_threshold
    ev = Evaluator(prob.score, space.render, admissible, s.max_evaluations)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.float64 if stack.dtype == torch.float64 else torch.float32
    log_coeffs = init_log_coeffs(space, dtype=dtype, device=stack.unet.device)
    gpo_losses: list[float] = []
    if s.algorithm in ("gpo", "hybrid"):
        update = GPOUpdate(log_coeffs, s.lr, s.momentum, s.grad_clip, s.coeff_min, s.coeff_max)
        gpo_losses = gpo(log_coeffs, prob.loss_at, update, t_schedule(s.gpo_iters, s.t_start, s.t_repeat), s.tau)
    if s.algorithm == "gpo":
        sample_and_evaluate(ev, log_coeffs, s.gpo_samples, gen)
    elif s.algorithm in ("epo", "hybrid"):
        hybrid = s.algorithm == "hybrid"
        budget = s.epo_budget if s.epo_budget is not None else (32 if hybrid else 40)
        explore = s.epo_explore if s.epo_explore is not None else (0.0 if hybrid else 1.0)
        init = mixed_init(first_argmax_then_gumbel(log_coeffs, gen), space.sizes, rng, explore)
        epo(ev, space.sizes, rng, s.epo_population, s.epo_select, s.epo_crossover, s.epo_mutation, s.epo_m_prob,
            budget, init)
    else:
        random_search(ev, space.sizes, rng, s.random_budget)
    d0, ims0 = prob.distance(space.prompt, None)
    ranked = ev.ranked()
    if not ranked:
        raise NoCandidates(f"prompt {space.prompt!r}: no admissible candidate was evaluated")
    best = ranked[0]
    pos, neg = prob.prompts(best["choice"])
    d_best, ims = prob.distance(pos, neg)
    return {"prompt": space.prompt, "space": space.kind, "task": s.task, "algorithm": s.algorithm,
            "loss_original": d0, "loss_best": d_best, "best_prompt": pos, "best_negative_prompt": neg,
            "evaluations": ev.evaluations, "gpo_losses": gpo_losses,
            "log_coeffs": [a.detach().cpu().tolist() for a in log_coeffs],
            "ranked": [{**r, "distance": s_ * r["loss"]} for r in ranked[:5] for s_ in [prob.sign]],
            "slots": [vars(x) for x in space.slots], "images_original": ims0, "images_best": ims}
