"""The WordNet path without Debian's packages: a miniature database written here in WordNet 3.0's own file format
(wndb(5WN): byte-offset data files, index files, index.sense, exception lists) goes through `prepare_wordnet`
(copy to `$NLTK_DATA/corpora/wordnet`, write lexnames) and `open_wordnet` into NLTK's reader, and the Synonym and
Antonym look-ups follow its lemma, antonym (!) and similar-to (&) pointers. This runs everywhere; the checks
against the real database (test_spaces.py) need `wordnet-base` and `wordnet-sense-index`.
"""

from __future__ import annotations

from pathlib import Path

from zoo.dpodiff.wordnet import open_wordnet, prepare_wordnet, wordnet_antonyms, wordnet_synonyms

HEADER = "  1 A miniature database in the WordNet 3.0 format of wndb(5WN), written by tests/dpodiff.  \n"

# key: (pos file, lex_filenum, ss_type, words, pointers (symbol, target key, target pos, source/target), gloss).
# lex_filenum 00 is adj.all and 06 noun.artifact in lexnames(5WN); "0101" links lemma 1 to lemma 1 (a lexical
# pointer, as antonymy is), "0000" links the synsets.
SYNSETS = {
    "hot": ("adj", 0, "a", ["hot"], [("!", "cold", "a", "0101"), ("&", "torrid", "s", "0000")],
            "used of physical heat"),
    "cold": ("adj", 0, "a", ["cold"], [("!", "hot", "a", "0101")], "having a low temperature"),
    "torrid": ("adj", 0, "s", ["torrid"], [("&", "hot", "a", "0000")], "extremely hot"),
    "airplane": ("noun", 6, "n", ["airplane", "aeroplane", "plane"], [], "an aircraft that has a fixed wing"),
}


def _data_line(key: str, offsets: dict[str, int]) -> str:
    _, lex, ss_type, words, ptrs, gloss = SYNSETS[key]
    cols = [f"{offsets[key]:08d}", f"{lex:02d}", ss_type, f"{len(words):02x}", *(f"{w} 0" for w in words),
            f"{len(ptrs):03d}", *(f"{s} {offsets[k]:08d} {p} {st}" for s, k, p, st in ptrs)]
    return " ".join(cols) + f" | {gloss}  \n"


def write_mini_wordnet(root: Path) -> Path:
    """WordNet 3.0-format files for SYNSETS under root (the shape of Debian's /usr/share/wordnet)."""
    root.mkdir(parents=True, exist_ok=True)
    offsets: dict[str, int] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        keys = [k for k, s in SYNSETS.items() if s[0] == pos]
        at = len(HEADER)  # every field has a fixed width, so a placeholder offset gives each line's length
        for k in keys:
            offsets[k] = at
            at += len(_data_line(k, {**{x: 0 for x in SYNSETS}, **offsets}))
        (root / f"data.{pos}").write_text(HEADER + "".join(_data_line(k, offsets) for k in keys))
        lemmas = sorted({w.lower(): k for k in keys for w in SYNSETS[k][3]}.items())
        lines = []
        for lemma, k in lemmas:
            syms = sorted({s for s, *_ in SYNSETS[k][4]})
            p = "a" if pos == "adj" else pos[0]
            lines.append(f"{lemma} {p} 1 {len(syms)} {' '.join(syms) + ' ' if syms else ''}1 0 {offsets[k]:08d}  \n")
        (root / f"index.{pos}").write_text(HEADER + "".join(lines))
        (root / f"{pos}.exc").write_text("")
    sense = []
    for k, (pos, lex, ss_type, words, ptrs, _) in SYNSETS.items():
        num = {"n": 1, "v": 2, "a": 3, "r": 4, "s": 5}[ss_type]
        head = next((t for s, t, *_ in ptrs if s == "&"), "") if ss_type == "s" else ""
        for w in words:
            sense.append(f"{w.lower()}%{num}:{lex:02d}:00:{head}:{'00' if head else ''} {offsets[k]:08d} 1 0\n")
    (root / "index.sense").write_text("".join(sorted(sense)))
    return root


def test_a_wordnet_format_database_is_laid_out_and_read_as_nltk_requires(tmp_path):
    src = write_mini_wordnet(tmp_path / "share" / "wordnet")
    root = prepare_wordnet(tmp_path / "nltk_data", source=src)
    wn_dir = root / "corpora" / "wordnet"
    assert (wn_dir / "index.sense").is_file() and len((wn_dir / "lexnames").read_text().splitlines()) == 45
    with open_wordnet(root, prepare=False) as wn:
        assert [s.lexname() for s in wn.synsets("hot")] == ["adj.all"]
        assert [s.lexname() for s in wn.synsets("plane")] == ["noun.artifact"]
        assert wordnet_antonyms(wn, "hot") == ["cold"] and wordnet_antonyms(wn, "cold") == ["hot"]
        assert wordnet_antonyms(wn, "torrid") == ["cold"]  # a satellite borrows its head's antonyms
        assert wordnet_synonyms(wn, "plane") == ["airplane", "aeroplane"]
        assert wordnet_synonyms(wn, "cold") == [] and wn.synsets("unknownword") == []
