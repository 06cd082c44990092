"""ReGAL's three domains (LOGO, Date, TextCraft): training programs cut into refactoring tuples, test queries.

Sources: ``local`` reads the released jsonl files (official repo @fc154533: ``logo_data/python/``,
``python_data/date/gpt-3.5-turbo_NL+SL/``, ``python_data/textcraft/gpt-4/``; a copy in ../shared/data/regal/)
in their own schemas (`zoo.regal.examples`); ``embedded`` generates rows in the same schemas from a seed (LOGO
shapes from the same primitives, date questions whose programs print MM/DD/YYYY, small crafting tasks).

The training loader yields one tuple (a list of examples) per step, in curriculum order (`zoo.regal.cluster`);
the test loader yields lists of test examples.
"""

from __future__ import annotations

import random
import re
from datetime import date
from typing import Any, ClassVar, Literal, Optional

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from zoo.data import reading, refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.regal.cluster import make_tuples
from zoo.regal.domains import DateDomain, LogoDomain, TextCraftDomain, extract_gold_answer
from zoo.regal.examples import normalize, read_jsonl

FILES = {"logo": ("train_200.jsonl", "test.jsonl"), "date": ("train_combined.jsonl", "test.jsonl"),
         "textcraft": ("train.jsonl", "test_d2.jsonl")}
TUPLE_SIZE = {"logo": LogoDomain.max_tuple_size, "date": DateDomain.max_tuple_size,
              "textcraft": TextCraftDomain.max_tuple_size}


def keep_batch(batch):
    return batch


# -- embedded rows, in the released schemas ---------------------------------------------------------------
SIZES = {"small": 2, "medium": 4, "big": 8}
LINES = {"short": 2, "medium": 8, "big": 20}
GONS = {3: "triangle", 4: "square", 5: "5 gon", 6: "6 gon", 8: "8 gon"}


def _polygon(n: int, size: int, var: str = "i") -> str:
    return f"for {var} in range({n}):\n    forward({size})\n    left({360.0 / n})"


def logo_row(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["gon", "concentric", "row", "snowflake", "circle", "spiral", "star"])
    n, size_name = rng.choice(sorted(GONS)), rng.choice(sorted(SIZES))
    size = SIZES[size_name]
    if kind == "gon":
        return {"program": _polygon(n, size), "language": [f"a {size_name} {GONS[n]}"]}
    if kind == "concentric":
        k = rng.randint(2, 7)
        prog = f'for i in range({k + 1}):\n    embed("""for j in range(4):\n    forward(2*i)\n    left(90.0)""", locals())'
        return {"program": prog, "language": [f"{k} concentric square s"]}
    if kind == "row":
        k = rng.randint(2, 6)
        prog = (f'for j in range({k}):\n    embed("""{_polygon(n, size)}""", locals())\n    penup()\n'
                f"    forward({size + 2})\n    left(0.0)\n\n    pendown()")
        return {"program": prog, "language": [f"{k} {size_name} {GONS[n]} s in a row"]}
    if kind == "snowflake":
        k, line = rng.randint(3, 8), rng.choice(sorted(LINES))
        prog = (f'for j in range({k}):\n    embed("""forward({LINES[line]})\nleft(0.0)\n{_polygon(n, size)}""", '
                f"locals())\n    forward(0)\n    left({360.0 / k})\n")
        return {"program": prog, "language": [f"{k} sided snowflake with a {line} line and a {size_name} "
                                              f"{GONS[n]} as arms"]}
    if kind == "circle":
        prog = "\n".join(f"for i in range(HALF_INF):\n    forward(EPS_DIST*{size})\n    left(EPS_ANGLE)"
                         for _ in range(2))
        return {"program": prog, "language": [f"a {size_name} circle"]}
    if kind == "spiral":
        k = rng.randint(5, 12)
        return {"program": f"for i in range({k + 1}):\n    forward(1*i)\n    left(90.0)",
                "language": [f"a greek spiral with {k} turns"]}
    k = rng.choice([5, 7, 9])
    return {"program": f"for i in range({k}):\n    forward(16)\n    left(180.0 - {180.0 / k})",
            "language": [f"a {k} pointed star"]}


MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
UNITS = {"days": (1, 40), "weeks": (1, 4), "months": (1, 11), "years": (1, 10)}


def date_case(rng: random.Random) -> tuple[str, str, str]:
    """(question, program, answer MM/DD/YYYY): the answer from our own arithmetic, not from running code."""
    from dateutil.relativedelta import relativedelta

    y, m, d = rng.randint(1950, 2030), rng.randint(1, 12), rng.randint(1, 28)
    anchor = rng.choice(["Today", "Yesterday", "Tomorrow"])
    unit = rng.choice(sorted(UNITS))
    k = rng.randint(*UNITS[unit])
    back = rng.random() < 0.5
    shift = {"Today": 0, "Yesterday": 1, "Tomorrow": -1}[anchor]
    today = date(y, m, d) + relativedelta(days=shift)
    target = today + relativedelta(**{unit: -k if back else k})
    phrase = f"{k} {unit} {'ago' if back else 'from today'}"
    q = (f"{anchor} {'is' if anchor == 'Today' else 'was' if anchor == 'Yesterday' else 'will be'} "
         f"{MONTHS[m - 1]} {d}, {y}. What is the date {phrase} in MM/DD/YYYY?")
    var = f"date_{k}_{unit}_{'ago' if back else 'later'}"
    prog = ("# import relevant packages\nfrom datetime import date, time, datetime\n"
            "from dateutil.relativedelta import relativedelta\n"
            f"# 1. What is the date {anchor.lower()}?\ndate_{anchor.lower()} = date({y},{m},{d})\n")
    if anchor != "Today":
        prog += (f"# 2. What is the date today?\ndate_today = date_{anchor.lower()} "
                 f"{'+' if shift > 0 else '-'} relativedelta(days=1)\n")
    prog += (f"# 3. What is the date {phrase}?\n{var} = date_today {'-' if back else '+'} relativedelta({unit}={k})\n"
             f"# 4. Final Answer: What is the date {phrase} in MM/DD/YYYY?\n"
             f'answer = {var}.strftime("%m/%d/%Y")\n# print the answer\nprint(answer)\n#DONE')
    return q, prog, target.strftime("%m/%d/%Y")


WOODS = ["oak", "birch", "spruce", "acacia", "jungle", "dark oak"]
COLORS = {"yellow": "dandelion", "red": "poppy", "blue": "cornflower", "white": "lily of the valley"}


def textcraft_case(rng: random.Random) -> tuple[str, str, list[str]]:
    """(goal item, program, crafting commands incl. distractors) of a small crafting task."""
    if rng.random() < 0.5:
        w = rng.choice(WOODS)
        item, recipe = rng.choice([(f"{w} sign", (3, [(6, f"{w} planks"), (1, "stick")])),
                                   (f"{w} boat", (1, [(5, f"{w} planks")])),
                                   (f"{w} pressure plate", (1, [(2, f"{w} planks")]))])
        cmds = [f"craft 4 {w} planks using 1 {w} logs", f"craft 4 stick using 2 {w} planks"]
        need = sum(n for n, i in recipe[1] if i.endswith("planks")) + (2 if any(i == "stick" for _, i in recipe[1]) else 0)
        prog = "inventory = check_inventory()\n"
        for _ in range(-(-need // 4)):
            prog += f"get_object('1 {w} logs')\ncraft_object('4 {w} planks', ['1 {w} logs'])\n"
        if any(i == "stick" for _, i in recipe[1]):
            prog += f"craft_object('4 stick', ['2 {w} planks'])\n"
    else:
        c, flower = rng.choice(sorted(COLORS.items()))
        item, recipe = rng.choice([(f"{c} terracotta", (8, [(8, "terracotta"), (1, f"{c} dye")])),
                                   (f"{c} stained glass", (8, [(8, "glass"), (1, f"{c} dye")])),
                                   (f"{c} wool", (1, [(1, f"{c} dye"), (1, "white wool")]))])
        cmds = [f"craft 1 {c} dye using 1 {flower}"]
        base = [(n, i) for n, i in recipe[1] if not i.endswith("dye")]
        prog = "inventory = check_inventory()\n" + "".join(f"get_object('{n} {i}')\n" for n, i in base)
        prog += f"get_object('1 {flower}')\ncraft_object('1 {c} dye', ['1 {flower}'])\n"
    ins = ", ".join(f"{n} {i}" for n, i in recipe[1])
    cmds.append(f"craft {recipe[0]} {item} using {ins}")
    prog += f"craft_object('{recipe[0]} {item}', {[f'{n} {i}' for n, i in recipe[1]]!r})\ninventory = check_inventory()\n"
    w2 = rng.choice([w for w in WOODS if w not in item])
    cmds += [f"craft 4 {w2} planks using 1 {w2} logs", f"craft 1 {w2} button using 1 {w2} planks"]
    rng.shuffle(cmds)
    return item, prog, cmds


def embedded_rows(domain: str, split: str, n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(f"regal-{domain}-{split}-{seed}")
    rows: list[dict[str, Any]] = []
    for k in range(n):
        if domain == "logo":
            rows.append(logo_row(rng))
        elif domain == "date":
            q, prog, ans = date_case(rng)
            rows.append({"language": [q], "program": prog} if split == "train" else
                        {"id": k, "question": q, "answer": f"#### {ans}"})
        else:
            item, prog, cmds = textcraft_case(rng)
            row: dict[str, Any] = {"idx": f"env_{1000 * (split != 'train') + k}", "language": [f"craft {item}."]}
            row.update({"program": prog} if split == "train" else {"answer": True})
            row["metadata"] = "Crafting commands:\n" + "\n".join(cmds) + "\n\n"
            rows.append(row)
    return rows


class ReGALDataModule(L.LightningDataModule):
    """Training tuples and test queries of one ReGAL domain.

    Args:
        domain: ``logo`` | ``date`` | ``textcraft``.
        source: ``local`` (the released jsonl files under ``path``) or ``embedded`` (seeded generator).
        path: directory with the domain's files, e.g. ../shared/data/regal/logo.
        train_file / test_file: file names under ``path`` (defaults: LOGO ``train_200.jsonl`` /
            ``test.jsonl``; Date ``train_combined.jsonl`` / ``test.jsonl``; TextCraft ``train.jsonl`` /
            ``test_d2.jsonl``, the test file present in the official repository).
        n_train / n_test: sizes of the embedded splits.
        limit_train / limit_test: read only the first rows of each file (None: all).
        max_tuple_size: programs per tuple (None: the domain's official value, LOGO 5, Date 3, TextCraft 4).
        distance_threshold: AgglomerativeClustering's (official 0.1; with a threshold the full tree is built).
        curriculum: sort tuples by total query length (official default; ``--no_curriculum`` shuffles).
        test_batch_size: test queries per step.
        seed: embedded generator seed.
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("local",), "train_file": ("local",),
                                                          "test_file": ("local",)}

    def __init__(self, domain: Literal["logo", "date", "textcraft"] = "logo",
                 source: Literal["local", "embedded"] = "local", path: Optional[str] = None,
                 train_file: Optional[str] = None, test_file: Optional[str] = None, n_train: int = 12,
                 n_test: int = 6, limit_train: Optional[int] = None, limit_test: Optional[int] = None,
                 max_tuple_size: Optional[int] = None, distance_threshold: float = 0.1, curriculum: bool = True,
                 test_batch_size: int = 8, seed: int = 0):
        super().__init__()
        if domain not in FILES:
            raise ZooError(f"ReGAL domain must be one of {sorted(FILES)}, got {domain!r}")
        if source not in ("local", "embedded"):
            raise ZooError(f"ReGAL source must be 'local' or 'embedded', got {source!r}")
        refuse_unread_files(self, source, locals())
        if source == "local" and not path:
            raise ZooError("ReGAL source 'local' needs data.init_args.path (e.g. ../shared/data/regal/logo)")
        if max_tuple_size is not None and max_tuple_size < 1:
            raise ZooError(f"max_tuple_size must be >= 1, got {max_tuple_size}")
        if n_train < 1 or n_test < 1 or test_batch_size < 1:
            raise ZooError("n_train, n_test and test_batch_size must be >= 1")
        self.domain, self.source, self.path, self.seed = domain, source, path, seed
        self.train_file = train_file or FILES[domain][0]
        self.test_file = test_file or FILES[domain][1]
        self.n_train, self.n_test, self.limit_train, self.limit_test = n_train, n_test, limit_train, limit_test
        self.max_tuple_size = max_tuple_size or TUPLE_SIZE[domain]
        self.distance_threshold, self.curriculum, self.test_batch_size = distance_threshold, curriculum, test_batch_size
        self.train: list[dict[str, Any]] = []
        self.test: list[dict[str, Any]] = []
        self.tuples: list[list[dict[str, Any]]] = []

    def _load(self, split: str, file: str, n: int, limit: Optional[int]) -> list[dict[str, Any]]:
        if self.source == "embedded":
            rows = embedded_rows(self.domain, split, n, self.seed)
            return [normalize(self.domain, r, i, split, f"embedded {split} row {i}") for i, r in enumerate(rows)]
        from pathlib import Path

        path = Path(self.path) / file
        with reading(path, f"ReGAL {self.domain} jsonl (UTF-8 text)"):
            rows = read_jsonl(path, self.domain, split, limit)
        if not rows and limit != 0:
            raise ZooError(f"ReGAL {self.domain} file {path} holds no rows")
        if self.domain == "date":
            # a gold answer the programs' MM/DD/YYYY can never equal would score every query wrong, silently
            bad = next((r for r in rows if r["answer"] is not None
                        and not re.fullmatch(r"\d{2}/\d{2}/\d{4}", extract_gold_answer(r["answer"]))), None)
            if bad is not None:
                raise ZooError(f"ReGAL date file {path}: row {bad['id'][len('date_'):]} has answer "
                               f"{bad['answer']!r}, not '#### MM/DD/YYYY'")
        return rows

    def setup(self, stage: Optional[str] = None) -> None:
        if not self.train:
            self.train = self._load("train", self.train_file, self.n_train, self.limit_train)
            missing = [e["id"] for e in self.train if not e.get("program")]
            if missing:
                raise ZooError(f"ReGAL training rows need programs; {len(missing)} have none (e.g. {missing[0]}): "
                               f"for Date use train_combined.jsonl")
            self.tuples = make_tuples(self.train, self.max_tuple_size, self.distance_threshold, self.curriculum)
        if not self.test:
            self.test = self._load("test", self.test_file, self.n_test, self.limit_test)
        where = f"{self.path}/{{{self.train_file},{self.test_file}}}" if self.source == "local" else \
            f"seeded generator (seed {self.seed})"
        rank_zero_info(f"ReGAL {self.domain}: source={self.source} ({where}), {len(self.train)} training programs "
                       f"in {len(self.tuples)} tuples of <= {self.max_tuple_size}, {len(self.test)} test queries")

    def train_examples(self) -> list[dict[str, Any]]:
        """The primitive training programs (test-time in-context examples, official ``--train_json_path``)."""
        if not self.train:
            self.setup()
        return list(self.train)

    def train_dataloader(self):
        return train_loader(self.tuples, batch_size=None, shuffle=False, collate_fn=keep_batch)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test, batch_size=self.test_batch_size, shuffle=False, collate_fn=keep_batch)

    def card_metadata(self) -> dict[str, Any]:
        if self.source == "embedded":
            return {"data_source": f"embedded: seeded ReGAL-{self.domain} generator (seed {self.seed}), "
                                   f"{self.n_train} train / {self.n_test} test rows"}
        return {"data_source": f"{self.domain} files in the ReGAL release format ({self.path}: {self.train_file}, "
                               f"{self.test_file})"}
