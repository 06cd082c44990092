"""Search spaces (paper Sec. 4): Synonym (positive prompt), Antonym and NPLib (negative prompt).

A space is a list of slots; each slot holds candidates that are single CLIP tokens, so one slot is one position of
the text encoder's input and a distribution over it is a softmax over rows of the token-embedding matrix. When
improving, option 0 of each slot is the empty string (official `load_word_substitutes`): its token is EOS, as in
the official code, where `tokenizer("").input_ids[1]` is the end-of-text token.

Candidates per prompt word come from WordNet (offline), from an LLM asked the official per-word questions, or
from a JSON cache `{kind: {prompt: {word: [candidates]}}}` (what a run saves, so a second run asks nothing),
or, for the embedded prompts, the WordNet candidates frozen in `zoo.dpodiff.embedded`.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence

import numpy as np

from zoo.errors import ZooError

log = logging.getLogger(__name__)

Kind = Literal["synonym", "antonym", "nplib"]
KINDS = ("synonym", "antonym", "nplib")

# The official questions (src/prompts/library.py: SYNONYMS_DEFAULT, ANTONYMS_DEFAULT), asked once per prompt.
QUESTIONS = {
    "synonym": 'Read the next paragraph. For each word, give 5 substitution words that do not change the meaning. '
               'Use the format of "A -> B".\n\n',
    "antonym": 'Read the next paragraph. For each word, give 5 opposite words if it has any. '
               'Use the format of "A -> B".\n\n',
}

# Function words get no WordNet candidates (WordNet would offer "angstrom" for "a"); the LLM path asks about
# every word, as the official prompt does, and the model decides.
STOPWORDS = frozenset(
    "a an the of in on at to for from by with and or but is are was were be been being it its this that these those "
    "as into onto over under than then there their his her he she they them we you i me my our your".split())

# NPLib: curated generic negative-prompt words split into 4 slots (official: data/prompts-negative-filtered-v2.txt,
# 210 lines, np.array_split into 4, ~52 words a slot). That file has no licence, so this list (243 words) is
# the project's own, of a similar size; the single-token filter keeps 39–49 a slot (4.6M prompts with the
# empty options, millions as officially). Pass `nplib_path` (one word per line) to use another.
NPLIB_WORDS = (
    "blurry", "lowres", "pixelated", "grainy", "noisy", "jpeg", "artifacts", "watermark", "signature", "text",
    "cropped", "distorted", "deformed", "disfigured", "mutated", "malformed", "ugly", "duplicate", "morbid",
    "mutilated", "extra", "missing", "fused", "bad", "poorly", "amateur", "overexposed", "underexposed", "washed",
    "dull", "flat", "boring", "cartoon", "sketch", "messy", "cluttered", "unfocused", "tiling", "cut", "asymmetric",
    "blur", "blurred", "low", "noise", "logo", "caption", "label", "letters", "words", "crop", "distortion",
    "mutation", "poor", "bland", "drawing", "doodle", "clutter", "tiled", "asymmetrical", "crooked", "tilted",
    "skewed", "warped", "stretched", "squashed", "bent", "broken", "cracked", "damaged", "dirty", "dusty",
    "smudged", "smeared", "faded", "muddy", "murky", "dark", "dim", "gloomy", "shadowy", "harsh", "glare",
    "overcast", "foggy", "hazy", "haze", "smoky", "cloudy", "fuzzy", "soft", "shaky", "motion", "double", "ghost",
    "halo", "banding", "jagged", "compressed", "compression", "glitch", "corrupted", "error", "static", "scratched",
    "scratches", "stain", "stains", "spots", "blotchy", "patchy", "uneven", "unbalanced", "awkward", "clumsy",
    "crude", "rough", "sloppy", "careless", "unfinished", "incomplete", "partial", "cramped", "crowded", "busy",
    "chaotic", "random", "weird", "strange", "odd", "creepy", "scary", "grotesque", "gross", "disgusting",
    "horrible", "terrible", "awful", "worst", "worse", "mediocre", "average", "generic", "cheap", "plastic", "fake",
    "artificial", "unrealistic", "unnatural", "lifeless", "stiff", "mannequin", "doll", "toy", "miniature", "tiny",
    "small", "thumbnail", "icon", "clipart", "vector", "monochrome", "grayscale", "sepia", "desaturated",
    "oversaturated", "saturated", "neon", "garish", "gaudy", "tacky", "render", "cgi", "waxy", "shiny", "greasy",
    "oily", "wet", "blown", "burnt", "burned", "grain", "film", "vignette", "border", "frame", "framed", "collage",
    "split", "panel", "multiple", "repeated", "repetitive", "pattern", "mirrored", "flipped", "upside", "inverted",
    "limbs", "fingers", "hands", "arms", "legs", "heads", "faces", "eyes", "teeth", "mouth", "anatomy",
    "proportions", "elongated", "long", "neck", "short", "fat", "bloated", "swollen", "skinny", "thin", "gaunt",
    "mosaic", "bars", "black", "white", "quality", "jpg", "png", "pixel", "pixels", "dots", "lines", "scribble",
    "overexposure", "exposure", "contrast", "lowquality", "dithering", "posterized", "cartoonish", "childish",
    "sticker", "emoji", "meme", "screenshot",
)

WORD_RE = re.compile(r"\w+|[^\w\s]")  # official positive_space: words, punctuation as words of its own


def split_words(prompt: str) -> list[str]:
    return WORD_RE.findall(prompt)


class NoCandidates(ZooError):
    """A prompt whose space offers nothing to choose: an evaluation skips it (and counts it), not stops."""


@dataclass
class Slot:
    """One position of the prompt: the original word, its candidates and their (single) CLIP token ids.

    A fixed slot (`substitute=False`) keeps the original word, whose tokens may be several."""

    word: str
    candidates: list[str]
    token_ids: list[int]
    substitute: bool = True


@dataclass
class SearchSpace:
    prompt: str
    kind: str
    target: Literal["pos", "neg"]  # which prompt of classifier-free guidance the slots make up
    slots: list[Slot]
    dropped: dict[str, list[str]] = field(default_factory=dict)  # word -> multi-token candidates left out

    @property
    def free(self) -> list[Slot]:
        return [s for s in self.slots if s.substitute]

    @property
    def sizes(self) -> list[int]:
        return [len(s.candidates) for s in self.free]

    def size(self) -> int:
        return int(np.prod(self.sizes)) if self.free else 0

    def words(self, choice: Sequence[int]) -> list[str]:
        if len(choice) != len(self.free):
            raise ZooError(f"a choice has one index per free slot ({len(self.free)}), got {len(choice)}")
        it = iter(choice)
        out = []
        for s in self.slots:
            if s.substitute:
                i = int(next(it))
                if not 0 <= i < len(s.candidates):
                    raise ZooError(f"choice {i} outside slot {s.word!r} (0..{len(s.candidates) - 1})")
                out.append(s.candidates[i])
            else:
                out.append(s.word)
        return out

    def render(self, choice: Sequence[int]) -> str:
        """The discrete prompt of a choice.

        Official code joins negative words with ',' and keeps empty options as stray commas; we join the
        non-empty words with spaces, which the CLIP tokenizer turns into exactly the relaxed token sequence
        when no slot is empty (CLIP splits punctuation and words itself, so spaces change nothing)."""
        return " ".join(w for w in self.words(choice) if w)

    def to_json(self) -> dict:
        return {"prompt": self.prompt, "kind": self.kind, "target": self.target,
                "slots": [vars(s) for s in self.slots], "dropped": self.dropped}


# -- candidate sources -------------------------------------------------------------------------------------------
def wordnet_candidates(prompt: str, kind: Literal["synonym", "antonym"], wn, k: int = 5) -> dict[str, list[str]]:
    """word -> WordNet synonyms (synset lemmas) or antonyms (lemma antonyms), for the prompt's content words."""
    from zoo.dpodiff.wordnet import wordnet_antonyms, wordnet_synonyms

    fn = wordnet_synonyms if kind == "synonym" else wordnet_antonyms
    out: dict[str, list[str]] = {}
    for w in split_words(prompt):
        if w.isalpha() and w.lower() not in STOPWORDS and w not in out:
            cands = fn(wn, w.lower())
            if cands:
                out[w] = cands[: 4 * k]  # kept generous: the single-token filter drops many; `k` applies after it
    return out


def llm_question(prompt: str, kind: Literal["synonym", "antonym"]) -> str:
    return QUESTIONS[kind] + prompt


def parse_llm_answer(answer: str) -> dict[str, list[str]]:
    """Lines 'A -> B, C, D' (numbering and bullets ignored) to {A: [B, C, D]}."""
    out: dict[str, list[str]] = {}
    for line in answer.splitlines():
        if "->" not in line:
            continue
        left, right = line.split("->", 1)
        word = re.sub(r"^[\s\d\.\)\-\*]+", "", left).strip().strip('"\'')
        cands = [c.strip().strip('".\'') for c in re.split(r"[,/;]", right)]
        if word:
            out.setdefault(word, []).extend(c for c in cands if c)
    return out


def llm_candidates(prompt: str, kind: Literal["synonym", "antonym"], ask: Callable[[str], str]) -> dict[str, list[str]]:
    """Ask the official question once for the whole prompt (as the official code does) and parse the answer."""
    return parse_llm_answer(ask(llm_question(prompt, kind)))


def load_candidate_cache(path: str | Path, kind: str) -> dict[str, dict[str, list[str]]]:
    """prompt -> {word: candidates} of one space kind from a run's candidates.json ({kind: {prompt: ...}})."""
    p = Path(path)
    if not p.is_file():
        raise ZooError(f"candidate cache {p} does not exist (a run writes candidates.json into its run dir)")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ZooError(f"candidate cache {p} is not JSON: {e}") from e
    if not isinstance(data, dict) or kind not in data or not isinstance(data[kind], dict):
        raise ZooError(f"candidate cache {p} must map {{kind: {{prompt: {{word: [candidates]}}}}}} with kind {kind!r}")
    return data[kind]


def nplib_candidates(words: Sequence[str] = NPLIB_WORDS, slots: int = 4) -> dict[str, list[str]]:
    return {f"NPLib-{i}": [str(w) for w in part] for i, part in enumerate(np.array_split(np.array(list(words)), slots))}


# -- building a space --------------------------------------------------------------------------------------------
def single_token_id(tokenizer, word: str) -> Optional[int]:
    """The CLIP token of a one-token word (the empty string is EOS), else None."""
    ids = tokenizer(word).input_ids
    if word == "":
        return tokenizer.eos_token_id
    return ids[1] if len(ids) == 3 else None


def check_length(tokenizer, prompt: str) -> None:
    n = len(tokenizer(prompt).input_ids)
    if n > tokenizer.model_max_length:
        raise ZooError(f"prompt {prompt[:60]!r}... has {n} tokens with BOS/EOS; the CLIP text encoder takes at most "
                       f"{tokenizer.model_max_length}")


def build_space(prompt: str, kind: Kind, tokenizer, candidates: dict[str, list[str]], task: Literal["improve", "attack"],
                k: int = 5) -> SearchSpace:
    """Slots from per-word candidates; multi-token candidates are dropped (and logged), at most `k` kept per word
    (the official question asks for 5 per word; the official `positive_space`/`negative_space` cap nothing and keep
    duplicates, which an LLM answering "give 5" rarely produces), duplicates and the word itself dropped. NPLib slots keep their whole share of the library: the official
    `negative_space` truncates nothing, and a cut at k would shrink its 4 slots to a few hundred prompts in all.

    synonym: every word of the prompt is a slot, substitutable if it is one token and has candidates (option 0
    is the word itself; official `positive_space`). antonym/nplib: one negative-prompt slot per word with
    candidates, option 0 the empty string when improving (official `negative_space`)."""
    if kind not in KINDS:
        raise ZooError(f"space must be one of {KINDS}, got {kind!r}")
    if task == "attack" and kind != "synonym":
        raise ZooError(f"attacks rewrite the positive prompt: use the synonym space, not {kind!r}")
    check_length(tokenizer, prompt)
    slots: list[Slot] = []
    dropped: dict[str, list[str]] = {}

    limit = None if kind == "nplib" else k

    def keep(word: str, cands: Sequence[str]) -> tuple[list[str], list[int]]:
        words, ids = [], []
        for c in cands:
            c = str(c).strip()
            if c.lower() == word.lower() or c in words:
                continue
            tid = single_token_id(tokenizer, c)
            if tid is None:
                dropped.setdefault(word, []).append(c)
                continue
            words.append(c)
            ids.append(tid)
            if len(words) == limit:
                break
        return words, ids

    if kind == "synonym":
        for w in split_words(prompt):
            ids = tokenizer(w).input_ids[1:-1]
            cands, cids = keep(w, candidates.get(w, candidates.get(w.lower(), []))) if len(ids) == 1 else ([], [])
            if cands:
                slots.append(Slot(w, [w, *cands], [ids[0], *cids], True))
            else:
                slots.append(Slot(w, [w], list(ids), False))
    else:
        for w, cands in candidates.items():
            words, ids = keep(w, cands)
            if not words:
                continue
            if task == "improve":
                words, ids = ["", *words], [tokenizer.eos_token_id, *ids]
            slots.append(Slot(w, words, ids, True))
    for word, bad in dropped.items():
        log.info("dpodiff: dropped multi-token candidates for %r: %s", word, bad)
    space = SearchSpace(prompt, kind, "pos" if kind == "synonym" else "neg", slots, dropped)
    if not space.free or all(n < 2 for n in space.sizes):
        raise NoCandidates(f"prompt {prompt!r} has no candidates in the {kind} space (no word with a single-token "
                       f"{'synonym' if kind == 'synonym' else 'candidate'}); nothing to optimise")
    return space
