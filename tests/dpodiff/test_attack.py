"""An attack end to end on the tiny stack: the sentence-T5 constraint is applied by rejection, so no returned or
scored prompt falls below the threshold, and the search maximises the distance."""

from __future__ import annotations

import torch

from zoo.dpodiff.constraint import SentenceSimilarity
from zoo.dpodiff.optimize import DPOSettings, optimize_prompt
from zoo.dpodiff.spaces import build_space

T5 = dict(vocab_size=384, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)


def test_attack_respects_the_constraint_and_maximises_the_distance(stack64):
    prompt = "a hot bowl of soup on a cold night"
    space = build_space(prompt, "synonym", stack64.tokenizer,
                        {"hot": ["warm", "spicy", "live"], "soup": ["broth", "stew"], "cold": ["cool", "raw"]}, "attack")
    sim = SentenceSimilarity(T5)
    all_cos = sim.cosine(prompt, [space.render(c) for c in [(1, 1, 1), (3, 2, 2), (2, 0, 1), (0, 2, 0)]])
    thr = sorted(all_cos)[1]  # a threshold that rejects some rewrites
    s = DPOSettings(task="attack", algorithm="hybrid", num_inference_steps=3, gpo_iters=2, t_start=1, t_repeat=1,
                    epo_population=4, epo_select=2, epo_crossover=2, epo_mutation=2, epo_budget=4,
                    constraint_threshold=thr)
    torch.manual_seed(0)
    res = optimize_prompt(stack64, space, s, seed=0, similarity=sim)
    assert res["evaluations"] >= 1
    for r in res["ranked"]:
        assert sim.cosine(prompt, [r["prompt"]])[0] >= thr
        assert r["distance"] == -r["loss"]  # the search minimises the negative distance
    assert res["loss_best"] == max(r["distance"] for r in res["ranked"])


def test_an_attack_prompt_whose_synonyms_all_break_the_constraint_is_skipped_not_the_end_of_the_run():
    """No synonym keeps the cosine >= threshold (1.5: no cosine reaches it): the official run crashes (RMSprop over
    an empty parameter list) and ours used to raise a plain ZooError that ended the whole evaluation; the card
    promises such a prompt is skipped and counted."""
    import pytest

    from zoo.dpodiff.embedded import EMBEDDED_PROMPTS
    from zoo.dpodiff.module import DPODiffModule
    from zoo.dpodiff.optimize import constrained_space
    from zoo.dpodiff.spaces import NoCandidates

    tiny = {"seed": 0, "unet_channels": [8, 16], "vae_channels": [8, 8], "latent_size": 8, "hidden": 16, "layers": 1,
            "heads": 2, "clip_image_size": 16, "clip_patch": 8}
    m = DPODiffModule(task="attack", space="synonym", candidates="embedded", stack=tiny, constraint_model=T5,
                      constraint_threshold=1.5, num_inference_steps=3, gpo_iters=2, t_start=1, t_repeat=1,
                      save_images=False)
    prompt = EMBEDDED_PROMPTS[0]
    space = build_space(prompt, "synonym", m.sd.tokenizer, m.word_candidates([prompt])[prompt], "attack")
    with pytest.raises(NoCandidates, match="no synonym keeps"):
        constrained_space(space, m.similarity, 1.5)
    out = m.score_records([{"id": 0, "prompt": prompt}])
    assert len(out) == 1 and "no synonym keeps" in out[0]["skipped"]
