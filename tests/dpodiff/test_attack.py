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
