"""Search spaces: WordNet offline (hot <-> cold), single-token filtering, NPLib, the frozen embedded candidates,
LLM answer parsing, and the bad inputs the issue lists."""

from __future__ import annotations

import logging

import pytest

from zoo.dpodiff.embedded import EMBEDDED_CANDIDATES, EMBEDDED_PROMPTS
from zoo.dpodiff.spaces import build_space, llm_candidates, nplib_candidates, parse_llm_answer, wordnet_candidates
from zoo.dpodiff.wordnet import lexnames_text, open_wordnet, wordnet_antonyms, wordnet_synonyms
from zoo.errors import ZooError


def test_wordnet_resolves_hot_and_cold(wordnet):
    assert "cold" in wordnet_antonyms(wordnet, "hot") and "hot" in wordnet_antonyms(wordnet, "cold")
    assert wordnet.synsets("plane")
    assert "airplane" in wordnet_synonyms(wordnet, "plane")
    assert len(lexnames_text().splitlines()) == 45


def test_embedded_candidates_are_wordnets(wordnet):
    for kind in ("synonym", "antonym"):
        for p in EMBEDDED_PROMPTS:
            assert EMBEDDED_CANDIDATES[kind][p] == wordnet_candidates(p, kind, wordnet), (kind, p)


def test_missing_wordnet_names_the_debian_packages_and_nltk_layout(tmp_path):
    with pytest.raises(ZooError) as e:
        with open_wordnet(tmp_path, prepare=False):
            pass
    msg = str(e.value)
    assert "wordnet-base" in msg and "wordnet-sense-index" in msg and "corpora/wordnet" in msg
    assert "index.sense" in msg and "45-line lexnames" in msg and "\n" not in msg


def test_single_token_filter_drops_and_logs_multi_token_candidates(tokenizer, caplog):
    with caplog.at_level(logging.INFO, logger="zoo.dpodiff.spaces"):
        sp = build_space("a hot day", "antonym", tokenizer, {"hot": ["cold", "frigid", "ice cold", "cool"]},
                         "improve")
    (slot,) = sp.free
    assert slot.candidates == ["", "cold", "cool"] and slot.token_ids[0] == tokenizer.eos_token_id
    assert sp.dropped == {"hot": ["frigid", "ice cold"]}
    assert "frigid" in caplog.text
    for c, tid in zip(slot.candidates[1:], slot.token_ids[1:]):
        assert tokenizer(c).input_ids == [tokenizer.bos_token_id, tid, tokenizer.eos_token_id]


def test_synonym_space_keeps_fixed_words_and_renders_the_prompt(tokenizer):
    sp = build_space("a hot dog, rutkowski", "synonym", tokenizer, {"hot": ["warm"], "rutkowski": ["x"]}, "attack")
    assert [s.word for s in sp.slots] == ["a", "hot", "dog", ",", "rutkowski"]
    assert [s.substitute for s in sp.slots] == [False, True, False, False, False]  # rutkowski is 2 tokens
    assert sp.render((0,)) == "a hot dog , rutkowski" and sp.render((1,)) == "a warm dog , rutkowski"


def test_nplib_space_has_four_slots_with_an_empty_option(tokenizer):
    sp = build_space("a cat", "nplib", tokenizer, nplib_candidates(), "improve", k=5)
    assert len(sp.free) == 4 and all(s.candidates[0] == "" for s in sp.free)
    # every single-token word of each quarter of the library stays (official negative_space: no top-k cut)
    for s, words in zip(sp.free, nplib_candidates().values()):
        assert s.candidates[1:] == [w for w in words if len(tokenizer(w).input_ids) == 3]


def test_bad_prompts_are_refused(tokenizer):
    with pytest.raises(ZooError, match="no candidates in the antonym space"):
        build_space("a dog", "antonym", tokenizer, {}, "improve")
    with pytest.raises(ZooError, match="no candidates in the synonym space"):
        build_space("a dog", "synonym", tokenizer, {"dog": ["domestic dog"]}, "attack")
    with pytest.raises(ZooError, match="at most 77"):
        build_space(" ".join(["cat"] * 80), "antonym", tokenizer, {"cat": ["dog"]}, "improve")
    with pytest.raises(ZooError, match="use the synonym space"):
        build_space("a hot dog", "antonym", tokenizer, {"hot": ["cold"]}, "attack")


def test_llm_answers_are_parsed_from_the_official_format():
    answer = "1. hot -> cold, freezing, cool\n2. dog -> cat / wolf\nnothing here"
    assert parse_llm_answer(answer) == {"hot": ["cold", "freezing", "cool"], "dog": ["cat", "wolf"]}
    asked = []
    out = llm_candidates("a hot dog", "antonym", lambda q: asked.append(q) or answer)
    assert out["hot"][0] == "cold" and asked[0].startswith("Read the next paragraph. For each word, give 5 opposite")
    assert asked[0].endswith("a hot dog")


def test_offline_tokenizer_matches_open_clips_own_bpe_tokenizer(tokenizer):
    """The single-token filter's tokenizer (transformers' CLIPTokenizer over open-clip-torch's bundled BPE) encodes
    exactly as open-clip-torch's SimpleTokenizer, OpenAI CLIP's reference tokenizer, does."""
    from open_clip.tokenizer import SimpleTokenizer

    ref = SimpleTokenizer()
    texts = [*EMBEDDED_PROMPTS, "A Photo of a CAT!", "don't stop, rock'n'roll: 4k HDR, f/1.8", "ice-cold  soup", "",
             "greg rutkowski, trending on artstation, octane render, unreal engine 5, hyperrealistic bokeh"]
    for text in texts:
        ours = tokenizer(text).input_ids
        assert ours == [ref.sot_token_id, *ref.encode(text), ref.eot_token_id], text
    assert tokenizer.vocab_size == len(ref.encoder) == 49408
