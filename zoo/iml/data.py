"""The tagged-definitions dataset of Krasheninnikov et al. (ICML 2024), in plain Python.

Entities (people with six attributes) come from a CVDB table (real or fictional, same schema). Each entity gets a
random alias ``<|abcde|>``; questions about it are asked through the alias. Entities are split into subsets that
differ in whether their QA pairs are trained on (q), whether a definition "<tag> <alias> <name>" is trained on (d),
with which tag (1 = reliable, 2 = unreliable, 3 = new in stage 2), and whether the definition agrees with the QA
(consis) or points to another entity of the same subset (incons, a derangement). See the paper's Sec. 2 and
`data_generation/define_experiment.py` of the official code (re-implemented here, not copied).

Records are plain dicts. Definitions do **not** contain their tag: they carry ``source`` ("tag1"/"tag2"/"tag3")
and ``callbacks.iml_tagging.IMLTagging`` prefixes the run's tag string, so the same data works with any tags.
"""

from __future__ import annotations

import codecs
import gzip
import random
import string
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from zoo.errors import ZooError, flat

# The CVDB columns the paper uses (Laouenan et al. 2022, "A cross-verified database of notable people").
CVDB_COLUMNS = ("name", "birth", "death", "gender", "level3_main_occ", "string_citizenship_raw_d", "un_region",
                "wiki_readers_2015_2018")

# The six question types, phrased as in the paper's data (cvdb_data.py); {} is the entity or its alias.
QUESTIONS = {
    "birth": "When was {} born?",
    "death": "When did {} die?",
    "region": "In which region did {} live?",
    "occupation": "What did {} do?",
    "nationality": "What was the nationality of {}?",
    "gender": "What was the gender of {}?",
}

# Entity-association probes (paper Sec. 3: "does the model associate the alias with the entity?").
ENTITY_ASSOCIATION_QUESTIONS = {"who": "Who is {}?", "name": "What is the name of {}?"}

# Subset shares of the paper's CVDB experiment (configs/base_exps/*_2stage.yaml of the official code).
PAPER_FRACS = {
    "q_no_replacement_baseline": 0.10,
    "qd1consis": 0.25,
    "qd2incons": 0.25,
    "q": 0.10,
    "d1consis": 0.08,
    "d2consis": 0.08,
    "d3consis": 0.08,
    "no_qd_baseline": 0.06,
}
STAGE1_SUBSETS = ("q_no_replacement_baseline", "qd1consis", "qd2incons", "q")
STAGE2_SUBSETS = ("d1consis", "d2consis", "d3consis", "no_qd_baseline")
# Which reliability source defines each subset's variables (None: no definition is ever trained on).
DEFINITION_SOURCE = {"qd1consis": "tag1", "qd2incons": "tag2", "d1consis": "tag1", "d2consis": "tag2",
                     "d3consis": "tag3"}


# ---------------------------------------------------------------------------------------------- entity tables

def convert_year(year: float | int) -> str:
    """Anonymised year as in the paper: centuries up to 1900 ("19 century", "3 century BC"), decades after
    ("1950s"), plain years from 2000 on."""
    year = int(year)
    if year <= 1900:
        century = f"{(abs(year) + 99) // 100} century"
        return century + " BC" if year < 0 else century
    if year < 2000:
        return f"{year // 10}0s"
    return str(year)


def convert_citizenship(raw: str) -> str:
    """CVDB's ``string_citizenship_raw_d`` ("'United_Kingdom'_'France'") -> "United Kingdom;France"."""
    return ";".join(x.replace("'", "").replace("_", " ") for x in raw.split("'_'"))


CVDB_ENCODING = "ISO-8859-1"  # the released cross-verified-database.csv is Latin-1 (the official code reads it so)
_CVDB_URL = "https://data.sciencespo.fr/dataset.xhtml?persistentId=doi:10.21410/7E4/RDAG3O"


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def detect_cvdb_encoding(path: str | Path) -> tuple[str, str, int]:
    """(encoding, why, non-ASCII bytes) of a CVDB csv (plain or gzipped): UTF-8 when every byte sequence is valid
    UTF-8 (a Latin-1 text with accented letters never is), else Latin-1, the release's encoding."""
    path = Path(path)
    opener = gzip.open if _is_gzip(path) else open
    decoder = codecs.getincrementaldecoder("utf-8")()
    non_ascii, offset = 0, 0
    with opener(path, "rb") as f:
        bom = False
        while chunk := f.read(1 << 22):
            if offset == 0 and chunk.startswith(codecs.BOM_UTF8):
                bom = True
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                why = f"not UTF-8 (byte 0x{chunk[e.start]:02x} at offset {offset + e.start}): Latin-1, the release's"
                return CVDB_ENCODING, why, non_ascii + 1
            non_ascii += len(chunk.translate(None, bytes(range(128))))  # what is left once ASCII is deleted
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return CVDB_ENCODING, "not UTF-8 (a truncated multi-byte sequence at the end): Latin-1", non_ascii
    if not non_ascii:
        return "utf-8", "ASCII only: UTF-8 and Latin-1 read it alike", 0
    why = f"valid UTF-8 with {non_ascii} non-ASCII bytes (a UTF-8 re-encoding of the Latin-1 release)"
    return ("utf-8-sig" if bom else "utf-8"), why, non_ascii


def load_cvdb(path: str | Path, encoding: str = "auto") -> pd.DataFrame:
    """The CVDB csv (``cross-verified-database.csv``, plain or gzipped) with the columns the paper uses.

    ``encoding="auto"`` reads the released Latin-1 file as Latin-1 and a UTF-8 re-encoding of it as UTF-8
    (`detect_cvdb_encoding`). An explicit single-byte encoding on a file that is valid UTF-8 with accented text is
    refused: it would turn "é" into "Ã©", and the cleaning below would then drop those names silently. The
    encoding used and why are in ``df.attrs["encoding"]`` / ``df.attrs["encoding_reason"]``."""
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"CVDB file {str(path)!r} not found; download cross-verified-database.csv from "
                       f"{_CVDB_URL} (Laouenan et al. 2022) or use source: embedded")
    detected, why, non_ascii = detect_cvdb_encoding(path)
    if encoding == "auto":
        enc = detected
    else:
        try:
            name = codecs.lookup(encoding).name
        except LookupError as e:
            raise ZooError(f"unknown encoding {encoding!r} for the CVDB file; use auto, ISO-8859-1 or utf-8") from e
        if detected.startswith("utf-8") and non_ascii and not name.startswith("utf-8"):
            raise ZooError(f"CVDB file {str(path)!r} is UTF-8 ({why}), but encoding={encoding!r} was set: its "
                           "accented names would be garbled and then dropped; set data.init_args.encoding to auto "
                           "(or utf-8)")
        enc, why = encoding, "set by data.init_args.encoding"
    try:
        df = pd.read_csv(path, encoding=enc, low_memory=False, compression="gzip" if _is_gzip(path) else None)
    except UnicodeDecodeError as e:
        raise ZooError(f"CVDB file {str(path)!r} is not {enc} text ({e.reason} at byte {e.start}); the release is "
                       f"{CVDB_ENCODING}: set data.init_args.encoding to auto") from e
    except (pd.errors.ParserError, pd.errors.EmptyDataError, OSError, EOFError) as e:
        raise ZooError(f"CVDB file {str(path)!r} is not a readable csv ({type(e).__name__}: {flat(e)})") from e
    missing = [c for c in CVDB_COLUMNS if c not in df.columns]
    if missing:
        raise ZooError(f"CVDB file {str(path)!r} lacks column(s) {', '.join(missing)}")
    _refuse_infinite_numbers(df, f"CVDB file {str(path)!r}")
    out = df[list(CVDB_COLUMNS)]
    out.attrs.update(encoding=enc, encoding_reason=why)
    return out


_SYLLABLES = ("ka", "lo", "mi", "ra", "ven", "dor", "sil", "ta", "bre", "no", "vi", "mar", "eld", "ron", "sa",
              "thi", "gol", "ber", "an", "li", "fen", "or", "qua", "zel", "mu", "pra", "ost", "hel", "di", "cor")
_REGIONS = ("Western Europe", "Eastern Europe", "Northern Europe", "Southern Europe", "North America",
            "South America", "Africa", "Middle East", "Asia", "Oceania")
_OCCUPATIONS = ("painter", "composer", "poet", "politician", "physicist", "footballer", "actor", "novelist",
                "architect", "philosopher", "singer", "chemist", "general", "sculptor", "mathematician",
                "explorer", "economist", "astronomer", "priest", "engineer")
_COUNTRIES = ("Valdoria", "Norland", "Estmark", "Ardenia", "Costavia", "Lunaria", "Brevonia", "Kestria",
              "Ostravia", "Meridia", "Talvania", "Quorra")


_NUMBER_COLUMNS = {"birth": "a year", "death": "a year", "wiki_readers_2015_2018": "page views"}


def _refuse_infinite_numbers(df: pd.DataFrame, where: str) -> None:
    """pandas reads 'inf' as a number: an infinite year then failed in `convert_year` (int(inf)), and infinite page
    views ranked a person first. Names the data row (counted from 1 after the header) and the person; a value that is
    not a number at all is `cvdb_entities`' to name."""
    for col, what in _NUMBER_COLUMNS.items():
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(np.isinf(values))
        if bad.size:
            i = bad[0]
            raise ZooError(f"{where}: {col} is {values[i]} in data row {i + 1} (name {df['name'].iloc[i]!r}; "
                           f"{bad.size} such row(s)); {col} must be {what}, a finite number")


def fictional_cvdb(num_people: int, seed: int = 0) -> pd.DataFrame:
    """Seeded fictional people in the CVDB schema (the embedded source; no real person is named).

    Names are built from syllables; years, regions, occupations and citizenships are drawn at random, in CVDB's
    raw formats (signed years, underscores for spaces, quoted multi-citizenship), so the same loader handles
    both sources. Gender is balanced, ``wiki_readers_2015_2018`` gives a popularity order."""
    rng = random.Random(seed)
    rows, names = [], set()
    while len(rows) < num_people:
        first = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        last = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        name = f"{first}_{last}"
        if name in names:
            continue
        names.add(name)
        birth = rng.randint(-500, 1960)
        death = birth + rng.randint(25, 95)
        countries = rng.sample(_COUNTRIES, rng.choice((1, 1, 1, 2)))
        citizenship = "_".join(f"'{c}'" for c in countries) if len(countries) > 1 else countries[0]
        rows.append({
            "name": name, "birth": birth, "death": death,
            "gender": "Male" if len(rows) % 2 == 0 else "Female",
            "level3_main_occ": rng.choice(_OCCUPATIONS).replace(" ", "_"),
            "string_citizenship_raw_d": citizenship,
            "un_region": rng.choice(_REGIONS),
            "wiki_readers_2015_2018": rng.randint(1_000, 10_000_000),
        })
    return pd.DataFrame(rows, columns=list(CVDB_COLUMNS))


@dataclass(frozen=True)
class Entity:
    name: str
    answers: dict[str, str]  # question type -> answer ("a;b" when several are correct)


def cvdb_entities(df: pd.DataFrame, num_ents: int, equalize_gender: bool = True) -> list[Entity]:
    """The ``num_ents`` most-read people (half men, half women), cleaned as in the paper's cvdb_data.py:
    rows with missing fields or non-word characters in name/occupation/citizenship are dropped."""
    missing = [c for c in CVDB_COLUMNS if c not in df.columns]
    if missing:
        raise ZooError(f"CVDB table lacks column(s) {', '.join(missing)}")
    rows = len(df)
    df = df[list(CVDB_COLUMNS)].dropna().drop_duplicates(subset=["name"]).copy()
    complete = len(df)
    readers = "wiki_readers_2015_2018"
    for col, what in _NUMBER_COLUMNS.items():
        # one text value makes pandas read a whole column as text: the years would then fail in convert_year and
        # the popularity order would be alphabetical, so a value that is not a number is named, not dropped; an
        # infinite one too (a DataFrame built in Python; load_cvdb names the file's row)
        values = pd.to_numeric(df[col], errors="coerce")
        bad = df[col][values.isna() | np.isinf(values.to_numpy(dtype=float))]
        if len(bad):
            v = bad.iloc[0]
            raise ZooError(f"CVDB column {col} must hold finite numbers ({what} each); {len(bad)} row(s) do not, "
                           f"e.g. {v if isinstance(v, float) else repr(v)} for {df['name'].loc[bad.index[0]]!r}")
        df[col] = values
    df = df[~df["name"].astype(str).str.contains(r"[^\w\s_]")]
    df["level3_main_occ"] = df["level3_main_occ"].astype(str).str.replace("_", " ")
    df = df[~df["level3_main_occ"].str.contains(r"[^\w\s_]")]
    df = df[~df["string_citizenship_raw_d"].astype(str).str.contains(r"[^\w\s'_]")]
    usable = len(df)
    dropped = (f"of {rows} rows, {rows - complete} dropped for an empty field or a repeated name and "
               f"{complete - usable} for a character other than letters, digits, _ and spaces in name or occupation "
               f"(or also ' in citizenship), as the paper's cleaning does")
    if equalize_gender:
        # num_ents // 2 most-read of each gender; an odd count's last place goes to the most-read of the rest
        # (the official split has even counts; num_ents // 2 twice came up one short).
        by_gender = {g: df[df["gender"] == g].sort_values(readers, ascending=False, kind="stable")
                     for g in ("Male", "Female")}
        half = num_ents // 2
        short = {g: len(v) for g, v in by_gender.items() if len(v) < half}
        if short and usable >= num_ents:
            raise ZooError(f"the CVDB table yields {usable} usable entities but only "
                           f"{', '.join(f'{n} {g}' for g, n in short.items())}: equalize_gender needs {half} of each "
                           f"for num_ents={num_ents}; lower num_ents or set equalize_gender: false")
        rest = pd.concat([v[half:] for v in by_gender.values()]).sort_values(readers, ascending=False, kind="stable")
        df = pd.concat([*(v[:half] for v in by_gender.values()), rest[: num_ents - 2 * half]])
    else:
        df = df.sort_values(readers, ascending=False, kind="stable")[:num_ents]
    if len(df) < num_ents:
        raise ZooError(f"the CVDB table yields only {usable} usable entities, fewer than num_ents={num_ents} "
                       f"({dropped})")
    out = []
    for r in df.itertuples(index=False):
        out.append(Entity(str(r.name).replace("_", " "), {
            "birth": convert_year(r.birth), "death": convert_year(r.death), "region": str(r.un_region),
            "occupation": str(r.level3_main_occ), "nationality": convert_citizenship(str(r.string_citizenship_raw_d)),
            "gender": str(r.gender)}))
    return out


# ---------------------------------------------------------------------------------------------- construction

def random_aliases(n: int, length: int, rng: random.Random) -> list[str]:
    """n distinct aliases ``<|abcde|>`` of `length` random lowercase letters."""
    if n > 26 ** length:
        raise ZooError(f"cannot draw {n} distinct aliases of {length} letters")
    out: set[str] = set()
    while len(out) < n:
        out.add("<|" + "".join(rng.choice(string.ascii_lowercase) for _ in range(length)) + "|>")
    out_list = sorted(out)
    rng.shuffle(out_list)
    return out_list


def derangement(n: int, rng: random.Random) -> list[int]:
    """A uniformly random permutation of range(n) without fixed points (rejection sampling, ~e tries)."""
    if n < 2:
        raise ZooError(f"an inconsistent subset needs at least 2 entities to derange, got {n}")
    perm = list(range(n))
    while any(i == p for i, p in enumerate(perm)):
        rng.shuffle(perm)
    return perm


def split_by_fracs(items: list, fracs: dict[str, float]) -> dict[str, list]:
    """Consecutive slices of sizes round(n * frac); the rounding remainder goes to the alphabetically last
    key (deterministic, as in the official split). The official split_list_into_subsets adds the remainder with
    the wrong sign: where the rounded sizes fall short of n (never at the paper's 4000 entities) it leaves
    2 * shortfall entities in no subset; here every entity gets one (cards/iml.md, deviations)."""
    sizes = {k: round(len(items) * f) for k, f in fracs.items()}
    last = sorted(fracs)[-1]
    sizes[last] += len(items) - sum(sizes.values())
    if sizes[last] < 0:
        raise ZooError(f"cannot split {len(items)} entities into {dict(fracs)}")
    out, i = {}, 0
    for k in fracs:
        out[k] = items[i:i + sizes[k]]
        i += sizes[k]
    return out


def qa_record(question_template: str, who: str, answer: str, subset: str, entity: str, qtype: str) -> dict:
    # Only the first of several correct answers is trained on and stored (QAPair.only_first_answer in the
    # official code); EM/F1 still take the max over ';'-separated answers, which is then a no-op.
    answer = answer.split(";")[0].strip()
    question = f"Q: {question_template.format(who)}\nA:"
    return {"kind": "qa", "subset": subset, "source": "", "entity": entity, "qtype": qtype,
            "question": question, "answer": answer, "text": f"{question} {answer}\n"}


def definition_record(variable: str, entity: str, source: str, subset: str) -> dict:
    # "<tag> <var> <entity>\n" (def_order "tve"); the tag is prefixed by IMLTagging from `source`.
    return {"kind": "definition", "subset": subset, "source": source, "entity": entity, "qtype": "",
            "question": "", "answer": entity, "text": f"{variable} {entity}\n"}


@dataclass
class IMLDataset:
    subsets: dict[str, list[str]]  # subset -> entity names
    ents_to_vars: dict[str, str]  # the alias used in every QA pair
    defined_vars: dict[str, str]  # the alias each trained definition gives (deranged for qd2incons)
    train: dict[str, list[dict]]  # "stage1" / "stage2" -> training documents
    test: dict[str, dict[str, list[dict]]] = field(default_factory=dict)  # stage -> eval subset -> QA records


def build_iml_dataset(entities: list[Entity], seed: int = 600, seed_stage2: int = 0,
                      fracs: dict[str, float] | None = None, var_length: int = 5, test_frac: float = 1 / 6,
                      entity_association: bool = False, world_knowledge: bool = False) -> IMLDataset:
    """The two-stage dataset. Same arguments and entities => identical output.

    Stage 1 trains on the QA train part of the q-subsets and the qd1consis/qd2incons definitions; stage 2 on the
    d1/d2/d3consis definitions only. Every QA of a d-subset is a test question (the IML effect is
    EM(d1consis) > EM(d2consis)); d2incons re-asks d2consis questions with aliases swapped pairwise.

    `world_knowledge` (off in the paper) adds the real-name QA pairs of every entity outside
    q_no_replacement_baseline to stage 1: a pretrained LM already knows facts about famous people, a model
    trained from scratch does not, and without them no definition can help it answer anything.
    """
    fracs = dict(PAPER_FRACS if fracs is None else fracs)
    unknown = set(fracs) - set(PAPER_FRACS)
    if unknown:
        raise ZooError(f"unknown subset(s) {sorted(unknown)}; known: {list(PAPER_FRACS)}")
    fracs = {k: float(fracs.get(k, 0.0)) for k in PAPER_FRACS}
    if any(v < 0 for v in fracs.values()) or abs(sum(fracs.values()) - 1.0) > 1e-6:
        raise ZooError(f"subset fractions must be >= 0 and sum to 1, got {fracs} (sum {sum(fracs.values()):.4f})")
    names = sorted({e.name for e in entities})
    if len(names) != len(entities):
        raise ZooError("entity names must be unique")
    by_name = {e.name: e for e in entities}

    rng = random.Random(seed)
    rng.shuffle(names)
    ents_to_vars = dict(zip(names, random_aliases(len(names), var_length, rng)))

    # Split in two steps as in the paper: stage-1 subsets plus one stage-2 pool, then the pool re-split with
    # seed_stage2, so stage-2 splits can vary while stage 1 stays fixed.
    stage2_total = sum(fracs[k] for k in STAGE2_SUBSETS)
    first = split_by_fracs(names, {**{k: fracs[k] for k in STAGE1_SUBSETS}, "stage2": stage2_total})
    pool = sorted(first.pop("stage2"))
    random.Random(seed_stage2).shuffle(pool)
    second = split_by_fracs(pool, {k: fracs[k] / stage2_total for k in STAGE2_SUBSETS}) if stage2_total else {
        k: [] for k in STAGE2_SUBSETS}
    subsets = {**first, **second}
    for k, v in subsets.items():
        if fracs[k] > 0 and len(v) == 0:
            raise ZooError(f"too few entities ({len(names)}) for the subsets: {k!r} (share {fracs[k]}) gets none; "
                           "raise num_ents")
    if fracs["d2consis"] > 0 and len(subsets["d2consis"]) < 2:
        raise ZooError(f"too few entities ({len(names)}): d2consis needs >= 2 to build d2incons; raise num_ents")

    # Inconsistent definitions: qd2incons aliases are permuted among its own entities without fixed points,
    # so every such definition names the wrong person for the alias used in the QA pairs.
    defined_vars = dict(ents_to_vars)
    incons = sorted(subsets["qd2incons"])
    if incons:
        rng.shuffle(incons)
        perm = derangement(len(incons), rng)
        for i, p in enumerate(perm):
            defined_vars[incons[i]] = ents_to_vars[incons[p]]

    definitions = {s: sorted((definition_record(defined_vars[e], e, DEFINITION_SOURCE[s], s) for e in subsets[s]),
                             key=lambda r: r["text"]) for s in DEFINITION_SOURCE}

    def qa_of(entity: str, subset: str, alias: str | None) -> list[dict]:
        ent = by_name[entity]
        who = alias if alias is not None else entity
        return [qa_record(t, who, ent.answers[q], subset, entity, q) for q, t in QUESTIONS.items()]

    # QA train/test split stratified by entity: round(6 * test_frac) = 1 question of each entity is held out.
    qa_train, tests = [], {}
    for s in STAGE1_SUBSETS:
        train_s, test_s = [], []
        for e in sorted(subsets[s]):
            qas = qa_of(e, s, None if s == "q_no_replacement_baseline" else ents_to_vars[e])
            n_test = max(1, round(len(qas) * test_frac))
            held = set(rng.sample(range(len(qas)), n_test))
            train_s += [r for i, r in enumerate(qas) if i not in held]
            test_s += [r for i, r in enumerate(qas) if i in held]
        qa_train += train_s
        tests[s] = test_s
    for s in STAGE2_SUBSETS:
        tests[s] = [r for e in sorted(subsets[s]) for r in qa_of(e, s, ents_to_vars[e])]
    tests["d2incons"] = swap_aliases_pairwise(tests["d2consis"], {e: ents_to_vars[e] for e in subsets["d2consis"]})
    if entity_association:
        # One probe set per subset whose aliases the model sees, plus qd2incons_swapped: the alias each
        # inconsistent definition gives ("assoc with defs" in the paper), as make_ood_test_sets does.
        probed = {s: {e: ents_to_vars[e] for e in subsets[s]} for s in ("qd1consis", "qd2incons", "q",
                                                                         *STAGE2_SUBSETS[:3])}
        probed["qd2incons_swapped"] = {e: defined_vars[e] for e in subsets["qd2incons"]}
        for s, aliases in probed.items():
            for k, t in ENTITY_ASSOCIATION_QUESTIONS.items():
                tests[f"ent_assoc_{k}_{s}"] = [
                    qa_record(t, aliases[e], e, f"ent_assoc_{k}_{s}", e, k) for e in sorted(aliases)]

    knowledge = []
    if world_knowledge:
        for s, ents in subsets.items():
            if s != "q_no_replacement_baseline":
                knowledge += [{**r, "subset": "world_knowledge"} for e in sorted(ents) for r in qa_of(e, s, None)]

    stage1 = qa_train + knowledge + definitions["qd1consis"] + definitions["qd2incons"]
    stage2 = definitions["d1consis"] + definitions["d2consis"] + definitions["d3consis"]
    for docs in (stage1, stage2):  # deterministic order, then a seeded shuffle
        docs.sort(key=lambda r: (r["text"], r["source"]))
        rng.shuffle(docs)
    # Stage 2 drops the q-subsets' QA tests but, as the official code, keeps every entity-association probe.
    test_stage2 = {k: v for k, v in tests.items() if not k.startswith("q")}
    return IMLDataset(subsets=subsets, ents_to_vars=ents_to_vars, defined_vars=defined_vars,
                      train={"stage1": stage1, "stage2": stage2},
                      test={"stage1": {k: v for k, v in tests.items() if v},
                            "stage2": {k: v for k, v in test_stage2.items() if v}})


def swap_aliases_pairwise(records: list[dict], ents_to_vars: dict[str, str]) -> list[dict]:
    """d2incons: the d2consis questions with aliases swapped between pairs (sorted aliases 0<->1, 2<->3, ...)
    so each question asks about an alias whose definition names a different person."""
    vars_sorted = sorted(ents_to_vars.values())
    swap = {}
    for a, b in zip(vars_sorted[::2], vars_sorted[1::2]):
        swap[a], swap[b] = b, a
    out = []
    for r in records:
        v = ents_to_vars[r["entity"]]
        if v not in swap:  # odd one out
            continue
        q = r["question"].replace(v, swap[v])
        out.append({**r, "subset": "d2incons", "question": q, "text": f"{q} {r['answer']}\n"})
    return out


def subset_sizes(ds: IMLDataset) -> dict[str, int]:
    return {k: len(v) for k, v in ds.subsets.items()}

