"""Oracles for the perturbation-discrepancy membership attack (zoo.unlearning.attack): log-likelihoods against an
independent cross-entropy, closed-form scores for fixed perturbers, DetectGPT's span-count formula, the T5 fill
pipeline on a tiny random T5 and on a scripted one, and the direction of the attack on a model that memorized."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
import transformers

from zoo.errors import ZooError
from zoo.unlearning.attack import (MaskFillPerturber, RandomSpanPerturber, apply_fills, encode, extract_fills,
                                   log_likelihoods, mask_spans, masked_text, perturbation_attack_auc,
                                   perturbation_discrepancy, span_count)

torch.set_num_threads(1)


def _neo(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPTNeoConfig(vocab_size=384, hidden_size=32, num_layers=2, num_heads=4,
                                    attention_types=[[["global", "local"], 1]], max_position_embeddings=256,
                                    window_size=64, intermediate_size=64, resid_dropout=0.0, embed_dropout=0.0,
                                    attention_dropout=0.0, bos_token_id=1, eos_token_id=1, pad_token_id=0)
    return transformers.GPTNeoForCausalLM(cfg)


def _t5(seed=0):
    torch.manual_seed(seed)
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=384, d_model=32, d_ff=64, num_layers=1, num_heads=2, decoder_start_token_id=0))


def _words(n, g, pool):
    return " ".join(pool[i] for i in torch.randint(len(pool), (n,), generator=g).tolist())


def _pool(n, g, letters="abcdefghijklmnopqrstuvwxyz"):
    return ["".join(letters[i] for i in torch.randint(26, (3,), generator=g).tolist()) for _ in range(n)]


@pytest.fixture(scope="module")
def tok():
    return transformers.ByT5Tokenizer()


# ----------------------------------------------------------------------------------------------- log-likelihood
def test_log_likelihoods_is_minus_mean_cross_entropy_with_padding():
    model = _neo()
    model.train()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 384, (L,), generator=g) for L in (9, 2, 17, 5, 12)]
    ids = torch.zeros(len(seqs), 17, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = s, 1
    ids[mask == 0] = 7  # the pad id must not matter
    got = log_likelihoods(model, ids, mask, batch_size=2)
    assert model.training and got.dtype == torch.float64 and got.shape == (5,)
    with torch.no_grad():  # reference: each sequence alone, unpadded
        want = [-F.cross_entropy(model(input_ids=s[None]).logits[0, :-1], s[1:]).item() for s in seqs]
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-5)


# --------------------------------------------------------------------------------------- fixed-perturber oracles
def test_identity_and_constant_perturbers_give_closed_form_scores(tok):
    model = _neo()
    texts = ["the cat sat on the mat", "a b c d e f g h", "memorized data unlearning in language models"]
    ident = perturbation_discrepancy(model, tok, texts, lambda ts, g: list(ts), n_perturbations=3)
    assert torch.allclose(ident["score"], torch.zeros(3, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(ident["pert_mean"], ident["ll"], atol=1e-6)

    y = "some fixed other text"
    const = perturbation_discrepancy(model, tok, texts, lambda ts, g: [y] * len(ts), n_perturbations=4)
    ll_x = log_likelihoods(model, *encode(tok, texts))
    ll_y = log_likelihoods(model, *encode(tok, [y]))
    assert torch.allclose(const["ll"], ll_x, atol=1e-6)
    assert torch.allclose(const["score"], (ll_x - ll_y).abs(), atol=1e-6)
    assert torch.allclose(const["pert_std"], torch.zeros(3, dtype=torch.float64), atol=1e-6)

    # Perturbation j of every text is ys[j]: mean / unbiased std of ll(ys), the same for every text.
    ys = ["first variant", "second one here", "3!", "the fourth and longest variant"]
    cyc = perturbation_discrepancy(model, tok, texts, lambda ts, g: [ys[i % 4] for i in range(len(ts))],
                                   n_perturbations=4)
    ll_ys = log_likelihoods(model, *encode(tok, ys))
    assert torch.allclose(cyc["pert_mean"], ll_ys.mean().expand(3), atol=1e-6)
    assert torch.allclose(cyc["pert_std"], ll_ys.std().expand(3), atol=1e-6)
    assert torch.allclose(cyc["score"], (ll_x - ll_ys.mean()).abs(), atol=1e-6)

    one = perturbation_discrepancy(model, tok, texts, lambda ts, g: [y] * len(ts), n_perturbations=1)
    assert torch.equal(one["pert_std"], torch.ones(3, dtype=torch.float64))  # official: std 1 for one sample


def test_seq_len_truncates_the_window_before_perturbing(tok):
    model = _neo()
    seen = []

    def spy(ts, g):
        seen.extend(ts)
        return list(ts)

    out = perturbation_discrepancy(model, tok, ["abcdefghij klm"], spy, n_perturbations=2, seq_len=5)
    assert seen == ["abcde", "abcde"]
    assert torch.allclose(out["ll"], log_likelihoods(model, *encode(tok, ["abcde"], seq_len=5)))


# ------------------------------------------------------------------------------------------------- span masking
@pytest.mark.parametrize("n, L, pct, ceil, want", [
    (100, 2, 0.3, False, (2, 7)),   # 30 / 4 = 7.5 -> 7
    (100, 2, 0.3, True, (2, 8)),
    (20, 2, 0.3, False, (2, 1)),    # 6 / 4
    (13, 2, 0.3, False, (2, 0)),    # 3.9 / 4
    (5, 2, 0.3, False, (1, 0)),     # span shrinks to int(1.5) = 1; 1.5 / 3
    (10, 3, 1.0, False, (3, 2)),    # 10 / 5
    (4, 5, 1.0, False, (4, 0)),     # span shrinks to 4; 4 / 6
])
def test_span_count_matches_detectgpt(n, L, pct, ceil, want):
    assert span_count(n, L, pct, ceil) == want


def test_mask_spans_layout_fraction_and_determinism():
    n, L, pct = 40, 2, 0.3
    _, k = span_count(n, L, pct)
    hits = torch.zeros(n)
    layouts = set()
    for seed in range(300):
        spans = mask_spans(n, torch.Generator().manual_seed(seed), L, pct)
        assert spans == mask_spans(n, torch.Generator().manual_seed(seed), L, pct)
        assert len(spans) == k and all(b - a == L for a, b in spans)
        assert all(b0 < a1 for (_, b0), (a1, _) in zip(spans, spans[1:]))  # >= 1 unmasked word between spans
        for a, b in spans:
            hits[a:b] += 1
        layouts.add(tuple(spans))
    # masked fraction: k * L / n exactly = pct * L / (L + 2) up to the floor (the buffer halves pct for L = 2)
    assert hits.sum() / (300 * n) == pytest.approx(k * L / n) and k * L / n == pytest.approx(pct * L / (L + 2))
    assert len(layouts) > 250
    # Official quirk kept: starts are drawn in [0, len - L), so the last word is never masked; all others are,
    # roughly uniformly (6 masked words of 39 reachable -> ~46 hits each).
    assert hits[-1] == 0 and (hits[:-1] > 15).all() and (hits[:-1] < 90).all()


def test_random_span_perturber_replaces_masked_words_from_the_vocabulary():
    words = [f"w{i}" for i in range(30)]
    text, vocab = " ".join(words), ["X", "Y", "Z"]
    p = RandomSpanPerturber(vocab, span_length=2, pct=0.3)
    a = p([text] * 50, torch.Generator().manual_seed(3))
    assert a == p([text] * 50, torch.Generator().manual_seed(3)) and len(set(a)) > 10
    spans = p.mask([text], torch.Generator().manual_seed(3))[0]
    for out in a:
        new = out.split(" ")
        assert len(new) == 30
        changed = [i for i in range(30) if new[i] != words[i]]
        assert len(changed) == 2 * span_count(30, 2, 0.3)[1] and all(new[i] in vocab for i in changed)
    assert a[0].split(" ") != words and all(
        a[0].split(" ")[i] in vocab for s in spans for i in range(*s))


# ------------------------------------------------------------------------------------------------ T5 mask filling
def test_extract_and_apply_fills():
    gen = "<pad><extra_id_0> big red<extra_id_1>  dog <extra_id_2> tail</s>"
    assert extract_fills(gen, 3) == ["big red", "dog", None]  # the last fill is unterminated: dropped
    # matched by sentinel number: a skipped <extra_id_1> only loses span 1
    assert extract_fills("<extra_id_0> a<extra_id_2> c<extra_id_3>", 3) == ["a", None, "c"]
    words = "the quick brown fox jumps over the lazy dog".split(" ")
    spans = [(1, 3), (4, 5), (6, 8)]
    assert masked_text(words, spans) == "the <extra_id_0> fox <extra_id_1> over <extra_id_2> dog"
    assert apply_fills(words, spans, extract_fills(gen, 3)) == "the big red fox dog over the lazy dog"


class _ScriptedT5(torch.nn.Module):
    """A 'mask model' whose generate returns a fixed decoded string per input: an exact oracle of the pipeline."""

    def __init__(self, tok, script):
        super().__init__()
        self.tok, self.script, self.calls = tok, script, []
        self.w = torch.nn.Parameter(torch.zeros(1))

    def generate(self, input_ids, attention_mask, **kw):
        self.calls.append(kw)
        out = [self.script(self.tok.decode(r[m.bool()], skip_special_tokens=False))
               for r, m in zip(input_ids, attention_mask)]
        ids, _ = encode(self.tok, out)
        return ids


def test_mask_fill_perturber_with_a_scripted_model(tok):
    text = " ".join(f"w{i}" for i in range(30))  # 30 words -> int(0.3 * 30 / 4) = 2 spans of 2 words

    def script(masked):
        n = len(re.findall(r"<extra_id_\d+>", masked))
        return "".join(f"<extra_id_{k}> F{k} G{k}" for k in range(n)) + f"<extra_id_{n}>"

    p = MaskFillPerturber(_ScriptedT5(tok, script), tok, pct=0.3, chunk_size=3)
    out = p([text] * 7, torch.Generator().manual_seed(0))
    spans = p.mask([text] * 7, torch.Generator().manual_seed(0))
    assert len(p.model.calls) == 3 and p.model.calls[0]["eos_token_id"] == tok.convert_tokens_to_ids("<extra_id_2>")
    assert p.model.calls[0]["do_sample"] and p.model.calls[0]["max_length"] == 200
    words = text.split(" ")
    assert out == [apply_fills(words, s, ["F0 G0", "F1 G1"]) for s in spans] and p.missing == 0 and p.spans == 14


@pytest.fixture(scope="module")
def tiny_t5(tok):
    """A tiny random T5, trained ~1.5 s on the span-filling format (`<extra_id_0> fill <extra_id_1> ...`) so that
    sampling returns some fills (a random T5 essentially never starts with <extra_id_0>) but still misses some."""
    g = torch.Generator().manual_seed(0)
    pool = _pool(40, g)
    model, src, tgt = _t5(), [], []
    for x in [_words(20, g, pool) for _ in range(8)]:
        w = x.split(" ")
        s = mask_spans(len(w), g)
        src.append(masked_text(w, s))
        fills = "".join(f"<extra_id_{k}> {' '.join(w[a:b])} " for k, (a, b) in enumerate(s))
        tgt.append(fills + f"<extra_id_{len(s)}>")
    enc = tok(src, return_tensors="pt", padding=True)
    labels = tok(tgt, return_tensors="pt", padding=True).input_ids
    labels[labels == tok.pad_token_id] = -100
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(30):
        opt.zero_grad()
        model(**enc, labels=labels).loss.backward()
        opt.step()
    return model, pool


def test_mask_fill_perturber_with_tiny_t5(tok, tiny_t5, tmp_path):
    model, pool = tiny_t5
    g = torch.Generator().manual_seed(1)
    texts = [_words(n, g, pool) for n in (20, 30, 45)]
    p = MaskFillPerturber(model, tok, max_length=40, chunk_size=2)
    p.model.train()
    out = p(texts, torch.Generator().manual_seed(5))
    assert len(out) == 3 and out == p(texts, torch.Generator().manual_seed(5))
    assert out != p(texts, torch.Generator().manual_seed(6))
    assert p.model.training  # sampled in eval mode (no dropout), flag restored
    spans = p.mask(texts, torch.Generator().manual_seed(5))  # __call__ draws the masks first
    for t, s, o in zip(texts, spans, out):
        words, pieces, prev = t.split(" "), [], 0
        for a, b in s:  # unmasked words in place and in order; each span becomes some fill (or its own words)
            pieces += [re.escape(w) for w in words[prev:a]] + ["(.*)"]
            prev = b
        pieces += [re.escape(w) for w in words[prev:]]
        assert re.fullmatch(" ".join(pieces), o, flags=re.S), (t, o)
    assert p.spans == sum(len(s) for s in spans) * 3 and 0 < p.missing < p.spans  # both paths taken
    assert sum(o != t for o, t in zip(out, texts)) >= 2

    # the Hub loading path, offline from a local directory
    p.model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    q = MaskFillPerturber.from_pretrained(str(tmp_path), max_length=40, chunk_size=2, local_files_only=True)
    assert q.max_length == 40 and q.tokenizer.model_max_length == 512
    assert q(texts, torch.Generator().manual_seed(5)) == out


# ---------------------------------------------------------------------------------------------- attack direction
def test_attack_auc_on_a_model_that_memorized_the_forget_set(tok):
    g = torch.Generator().manual_seed(0)
    pool = _pool(60, g)
    forget = [_words(12, g, pool) for _ in range(8)]
    unseen = [_words(12, g, pool) for _ in range(8)]
    model = _neo(seed=1)
    ids, mask = encode(tok, forget)
    labels = ids.masked_fill(mask == 0, -100)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(90):
        opt.zero_grad()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        opt.step()
    ll_f = log_likelihoods(model, *encode(tok, forget))
    ll_u = log_likelihoods(model, *encode(tok, unseen))
    assert ll_f.min() > ll_u.max()  # memorized

    perturber = RandomSpanPerturber([w for t in unseen for w in t.split(" ")], span_length=2, pct=1.0)
    kw = dict(n_perturbations=5, seed=0)
    auc = perturbation_attack_auc(model, tok, forget, unseen, perturber, **kw)
    assert auc > 0.9
    assert perturbation_attack_auc(model, tok, unseen, forget, perturber, **kw) == pytest.approx(1 - auc)
    # the memorized texts sit on a peak: perturbing them lowers ll
    d = perturbation_discrepancy(model, tok, forget, perturber, **kw)
    assert (d["pert_mean"] < d["ll"]).all()


# ----------------------------------------------------------------------------------------------------- bad input
def test_bad_input_raises_zoo_error(tok):
    model, ident = _neo(), (lambda ts, g: list(ts))
    with pytest.raises(ZooError, match="non-empty"):
        perturbation_attack_auc(model, tok, [], ["a b"], ident)
    with pytest.raises(ZooError, match="non-empty"):
        perturbation_attack_auc(model, tok, ["a b"], [], ident)
    with pytest.raises(ZooError, match="at least one text"):
        perturbation_discrepancy(model, tok, [], ident)
    with pytest.raises(ZooError, match="n_perturbations"):
        perturbation_discrepancy(model, tok, ["a b"], ident, n_perturbations=0)
    for pct in (0.0, -0.1, 1.5):
        with pytest.raises(ZooError, match="pct"):
            RandomSpanPerturber(["x"], pct=pct)
        with pytest.raises(ZooError, match="pct"):
            MaskFillPerturber(None, tok, pct=pct)
    with pytest.raises(ZooError, match="span_length"):
        RandomSpanPerturber(["x"], span_length=0)
    with pytest.raises(ZooError, match="too short"):
        RandomSpanPerturber(["x"])(["one two three"], torch.Generator())
    with pytest.raises(ZooError, match="vocabulary"):
        RandomSpanPerturber([])
    with pytest.raises(ZooError, match="returned 1 texts"):
        perturbation_discrepancy(model, tok, ["a b", "c d"], lambda ts, g: ["x"], n_perturbations=1)
    with pytest.raises(ZooError, match="fewer than 2 tokens"):
        log_likelihoods(model, torch.tensor([[5, 0]]), torch.tensor([[1, 0]]))
