"""Offline WordNet for the Synonym and Antonym spaces (nltk reading the Debian WordNet 3.0 files).

Debian's `wordnet-base` and `wordnet-sense-index` install the database under /usr/share/wordnet, but NLTK 3.10
reads only `$NLTK_DATA/corpora/wordnet` (its path sandbox refuses other roots), needs `index.sense`, and wants a
`lexnames` file that Debian does not ship. `prepare_wordnet` lays the files out that way; `open_wordnet` reads
them with `nltk.data.path` extended only for the duration of the `with` block.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator

from zoo.errors import ZooError

DEBIAN_DIR = Path("/usr/share/wordnet")
DEBIAN_PACKAGES = ("wordnet-base", "wordnet-sense-index")
REQUIRED = ("index.noun", "index.verb", "index.adj", "index.adv", "data.noun", "data.verb", "data.adj", "data.adv",
            "index.sense", "lexnames")

# lexnames(5WN): the 45 lexicographer files of WordNet 3.0, in file-number order, with their syntactic category
# (1 noun, 2 verb, 3 adjective, 4 adverb). NLTK maps each synset's lexicographer number through this table.
_LEXNAMES = (
    ("adj.all", 3), ("adj.pert", 3), ("adv.all", 4), ("noun.Tops", 1), ("noun.act", 1), ("noun.animal", 1),
    ("noun.artifact", 1), ("noun.attribute", 1), ("noun.body", 1), ("noun.cognition", 1),
    ("noun.communication", 1), ("noun.event", 1), ("noun.feeling", 1), ("noun.food", 1), ("noun.group", 1),
    ("noun.location", 1), ("noun.motive", 1), ("noun.object", 1), ("noun.person", 1), ("noun.phenomenon", 1),
    ("noun.plant", 1), ("noun.possession", 1), ("noun.process", 1), ("noun.quantity", 1), ("noun.relation", 1),
    ("noun.shape", 1), ("noun.state", 1), ("noun.substance", 1), ("noun.time", 1), ("verb.body", 2),
    ("verb.change", 2), ("verb.cognition", 2), ("verb.communication", 2), ("verb.competition", 2),
    ("verb.consumption", 2), ("verb.contact", 2), ("verb.creation", 2), ("verb.emotion", 2), ("verb.motion", 2),
    ("verb.perception", 2), ("verb.possession", 2), ("verb.social", 2), ("verb.stative", 2), ("verb.weather", 2),
    ("adj.ppl", 3),
)


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{cat}\n" for i, (name, cat) in enumerate(_LEXNAMES))


def default_nltk_data() -> Path:
    return Path(os.environ.get("NLTK_DATA", "").split(os.pathsep)[0] or Path.home() / ".cache" / "zoo" / "nltk_data")


def _missing_message(root: Path, missing: list[str]) -> str:
    return (f"WordNet is incomplete under {root / 'corpora' / 'wordnet'} (missing {', '.join(missing)}): install "
            f"the Debian packages {' and '.join(DEBIAN_PACKAGES)} (apt-get install {' '.join(DEBIAN_PACKAGES)}), "
            f"then zoo.dpodiff.prepare_wordnet({str(root)!r}) lays them out as NLTK 3.10 requires "
            f"($NLTK_DATA/corpora/wordnet with index.sense and a 45-line lexnames)")


def prepare_wordnet(nltk_data: str | Path | None = None, source: str | Path = DEBIAN_DIR) -> Path:
    """Copy the Debian WordNet files to `<nltk_data>/corpora/wordnet` and write `lexnames`; returns nltk_data.

    Copies, not symlinks: NLTK resolves links and would refuse a target outside its data roots."""
    root = Path(nltk_data) if nltk_data is not None else default_nltk_data()
    src, dst = Path(source), root / "corpora" / "wordnet"
    missing = [f for f in REQUIRED if f != "lexnames" and not (src / f).is_file()]
    if missing:
        raise ZooError(_missing_message(root, missing) + f"; {src} lacks them too")
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not (dst / f.name).exists():
            shutil.copyfile(f, dst / f.name)
    if not (dst / "lexnames").exists():
        (dst / "lexnames").write_text(lexnames_text())
    return root


@contextlib.contextmanager
def open_wordnet(nltk_data: str | Path | None = None, prepare: bool = True) -> Iterator["object"]:
    """A WordNetCorpusReader over `<nltk_data>/corpora/wordnet`, valid inside the `with` block.

    With `prepare`, a missing layout is built from the Debian files first (the same WordNet 3.0 data, not a
    fallback to another source)."""
    try:
        import nltk.data
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
    except ImportError as e:  # pragma: no cover - nltk is a dependency of the dpodiff extra
        raise ZooError(f"the WordNet spaces need nltk (pip install 'zoo[dpodiff]'): {e}") from e
    root = Path(nltk_data) if nltk_data is not None else default_nltk_data()
    wn_dir = root / "corpora" / "wordnet"
    missing = [f for f in REQUIRED if not (wn_dir / f).is_file()]
    if missing and prepare and all((DEBIAN_DIR / f).is_file() for f in REQUIRED if f != "lexnames"):
        prepare_wordnet(root)
        missing = [f for f in REQUIRED if not (wn_dir / f).is_file()]
    if missing:
        raise ZooError(_missing_message(root, missing))
    lex = (wn_dir / "lexnames").read_text().splitlines()
    if len(lex) != len(_LEXNAMES):
        raise ZooError(f"{wn_dir / 'lexnames'} has {len(lex)} lines; lexnames(5WN) lists 45 lexicographer files")
    entry = str(root.resolve())
    added = entry not in nltk.data.path
    if added:
        nltk.data.path.append(entry)
    try:
        yield WordNetCorpusReader(str(wn_dir.resolve()), None)
    finally:
        if added:
            nltk.data.path.remove(entry)


def _clean(name: str) -> str:
    return name.replace("_", " ")


def wordnet_synonyms(wn, word: str) -> list[str]:
    """Lemmas of the word's synsets, most frequent sense first, the word itself left out."""
    out: list[str] = []
    for synset in wn.synsets(word):
        for lemma in synset.lemmas():
            w = _clean(lemma.name())
            if w.lower() != word.lower() and w not in out:
                out.append(w)
    return out


def wordnet_antonyms(wn, word: str) -> list[str]:
    """Lemma antonyms of the word's senses; a satellite adjective borrows those of its head synsets."""
    out: list[str] = []

    def add(lemmas):
        for lemma in lemmas:
            for ant in lemma.antonyms():
                w = _clean(ant.name())
                if w.lower() != word.lower() and w not in out:
                    out.append(w)

    synsets = wn.synsets(word)
    for synset in synsets:
        add(l for l in synset.lemmas() if l.name().lower() == word.lower())
    if not out:
        for synset in synsets:
            for head in synset.similar_tos():
                add(head.lemmas())
    return out
