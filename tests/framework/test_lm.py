"""zoo.lm: models from config dicts, tokenizers, batched generation with stop strings."""

from __future__ import annotations

import pytest
import torch

from zoo.errors import ZooError
from zoo.lm import build_causal_lm, generate, load_tokenizer, truncate_at_stop

TINY = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 384, "max_position_embeddings": 128}


def test_generate_matches_manual_greedy_and_left_padding():
    torch.manual_seed(0)
    tok = load_tokenizer("byt5")
    lm = build_causal_lm(TINY).eval()
    prompts = ["Question: 2+2?\nAnswer:", "Hi"]
    batched = generate(lm, tok, prompts, max_new_tokens=6)
    for prompt, (got,) in zip(prompts, batched):
        ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids  # no trailing EOS
        for _ in range(6):
            nxt = lm(ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
        n = len(tok(prompt, add_special_tokens=False).input_ids)
        want = tok.decode(ids[0, n:], skip_special_tokens=True)
        assert got == want


def test_sampling_returns_n_completions_and_stop_strings_cut():
    tok = load_tokenizer("byt5")
    lm = build_causal_lm(TINY)
    out = generate(lm, tok, ["a", "b"], max_new_tokens=4, do_sample=True, num_return_sequences=3)
    assert [len(o) for o in out] == [3, 3]
    assert truncate_at_stop("x = 1\n\nQuestion: y", ["\n\n", "Question:"]) == "x = 1"
    assert truncate_at_stop("abc", []) == "abc"


def test_bad_model_and_tokenizer_names_are_clear():
    with pytest.raises(ZooError, match="model_type"):
        build_causal_lm({"hidden_size": 8})
    tiny = {"model_type": "gpt_neox", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 32, "vocab_size": 64}
    for bad in ({"hidden_act": "nope"}, {"rotary_pct": -1.0}):  # transformers' KeyError; torch's RuntimeError
        with pytest.raises(ZooError, match="bad model config for 'gpt_neox'"):
            build_causal_lm({**tiny, **bad})
    with pytest.raises(ZooError, match="no-such-org/no-such-model"):
        build_causal_lm("no-such-org/no-such-model")
    with pytest.raises(ZooError, match="no-such-org/tok"):
        load_tokenizer("no-such-org/tok")


@pytest.mark.parametrize("warmup,total", [(20, 100), (1, 5), (0, 7), (7, 7)])
def test_linear_warmup_decay_is_the_hf_and_composer_schedule(warmup, total):
    # the HF Trainer's `linear` / `constant_with_warmup` schedules (composer's LinearWithWarmupScheduler is the
    # same t/t_warmup ramp): the first step at lr 0, the peak at step `warmup`, 0 at `total`
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    from zoo.lm import linear_warmup_decay

    for decay, hf in ((True, lambda o: get_linear_schedule_with_warmup(o, warmup, total)),
                      (False, lambda o: get_constant_schedule_with_warmup(o, warmup))):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        ref = hf(opt)
        ours = linear_warmup_decay(warmup, total, decay=decay)
        for step in range(total + 3):
            assert ours(step) == pytest.approx(opt.param_groups[0]["lr"], abs=1e-12), (decay, step)
            opt.step()
            ref.step()
