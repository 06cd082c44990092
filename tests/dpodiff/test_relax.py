"""Oracle (c): a hard Gumbel sample picks exactly one candidate row, and one-hot α fed through `inputs_embeds`
reproduces the text encoder's output for the tokenised discrete prompt."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.dpodiff.relax import (encode_inputs_embeds, gumbel_coefficients, init_log_coeffs, relaxed_inputs_embeds,
                               sample_choice, token_embedding_matrix)
from zoo.dpodiff.sampler import text_embeds
from zoo.dpodiff.spaces import build_space

PROMPT = "a hot bowl of soup on a cold night"
SYN = {"hot": ["warm", "spicy"], "soup": ["broth", "stew"], "cold": ["cool", "frigid"]}
ANT = {"hot": ["cold", "cool"], "cold": ["hot", "warm"]}


def _onehots(space, choice, dtype=torch.float64):
    return [F.one_hot(torch.tensor(i), n).to(dtype) for i, n in zip(choice, space.sizes)]


def test_hard_gumbel_selects_exactly_the_chosen_row(stack64):
    space = build_space(PROMPT, "synonym", stack64.tokenizer, SYN, "attack")
    E = token_embedding_matrix(stack64.text_encoder)
    alphas = [torch.randn(n, dtype=torch.float64, requires_grad=True) for n in space.sizes]
    for _ in range(5):
        coeffs = gumbel_coefficients(alphas, tau=1.0, hard=True)
        for c, slot in zip(coeffs, space.free):
            k = int(c.argmax())
            assert torch.equal(c.detach() != 0, F.one_hot(torch.tensor(k), len(c)).bool())
            row = c @ E[torch.tensor(slot.token_ids)]
            torch.testing.assert_close(row, E[slot.token_ids[k]], rtol=0, atol=1e-15)
        # straight-through: the hard sample still has a gradient to α
        (sum(c.sum() for c in coeffs) * 0 + coeffs[0][0]).backward()
        assert alphas[0].grad is not None


def test_one_hot_through_inputs_embeds_reproduces_the_tokenised_prompt(stack64):
    te = stack64.text_encoder
    E = token_embedding_matrix(te)
    tok = stack64.tokenizer
    for space, first in [(build_space(PROMPT, "synonym", tok, SYN, "attack"), 0),
                         (build_space(PROMPT, "antonym", tok, ANT, "improve"), 1)]:  # no empty slot: see render()
        assert len(space.free) >= 2 and min(space.sizes) >= 2, space.slots
        for choice in [tuple(first for _ in space.sizes), tuple(n - 1 for n in space.sizes),
                       tuple(first + (i % (n - first)) for i, n in enumerate(space.sizes))]:
            x = relaxed_inputs_embeds(space, _onehots(space, choice), E, tok.bos_token_id, tok.eos_token_id)
            ours = encode_inputs_embeds(te, x)
            ref = text_embeds(stack64, space.render(choice))
            assert x.shape == (1, 77, E.shape[1])
            torch.testing.assert_close(ours, ref, rtol=0, atol=1e-10)


def test_empty_option_is_the_eos_row_and_init_favours_option_zero(stack64):
    tok = stack64.tokenizer
    space = build_space(PROMPT, "antonym", tok, ANT, "improve")
    assert all(s.candidates[0] == "" and s.token_ids[0] == tok.eos_token_id for s in space.free)
    alphas = init_log_coeffs(space, dtype=torch.float64)
    assert [a.tolist() for a in alphas] == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert sample_choice(alphas, argmax=True) == (0, 0)
    # an all-empty negative prompt relaxes to [BOS] EOS... : the encoder states of "" tokenised
    E = token_embedding_matrix(stack64.text_encoder)
    x = relaxed_inputs_embeds(space, _onehots(space, (0, 0)), E, tok.bos_token_id, tok.eos_token_id)
    torch.testing.assert_close(encode_inputs_embeds(stack64.text_encoder, x), text_embeds(stack64, ""),
                               rtol=0, atol=1e-10)


def test_gumbel_max_sampling_follows_softmax_of_alpha():
    a = [torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)]
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(3)
    for _ in range(4000):
        counts[sample_choice(a, generator=g)[0]] += 1
    p = torch.softmax(a[0], 0).float()
    assert torch.allclose(counts / 4000, p, atol=0.03)
