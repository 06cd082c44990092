"""Writes tests/iml/data/official_reference.json: what the official data pipeline (krasheninnikov/internalization,
data_generation/define_experiment.py: get_questions_dataset) draws on a small fictional CVDB table, the oracle of
tests/iml/test_official_parity.py for the claim in cards/iml.md that our aliases, subsets (stage-2 re-split
included), d-subset and d2incons test questions and entity-association probes are draw for draw the official ones.

Needs a local checkout of the official repository (never vendored; nothing of it is copied into this project) and the
packages its data pipeline imports (datasets, scikit-learn, pandas, numpy; transformers only for its logger, stubbed
in sys.modules when not installed):
    python tests/iml/make_official_reference.py /path/to/internalization

How it runs the official code, unmodified:
- the table: our `fictional_cvdb` rows are written as ``datasets/cvdb/cross-verified-database.csv`` in a temporary
  directory, which becomes the working directory, so the official ``load_cvdb_data`` (mode "dev") reads and cleans
  them itself; the script checks that its people are those of our `cvdb_entities`;
- ``get_questions_dataset`` is called as the paper's 2-stage config calls it (default subset shares,
  ``entity_association_test_sets=True``) with ``train_subset`` "stage1" and "stage2";
- what it does not return (the alias of each entity, the subsets, the inconsistent definitions' aliases) is read by
  wrapping three of the module's functions with recorders that pass arguments and results through unchanged:
  ``split_list_into_subsets`` (both splits), ``replace_ents_with_vars`` (the entity -> alias dict and the loaded QA
  pairs) and ``randomly_swap_ents_to_vars`` (the qd2incons derangement). A third call with the three tags given
  (``tag1_name`` ...), so that none is drawn from the data RNG, records that derangement without the tag draws.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).parent / "data" / "official_reference.json"

TABLE_ROWS, TABLE_SEED, NUM_ENTS = 300, 0, 200  # 300 fictional rows, the 200 most read (100 of each gender)
CASES = [(600, 0), (601, 3)]  # (seed, seed_stage2): the paper configs' pair, and another stage-1 and stage-2 seed
ANSWER_ORDER = ("birth", "death", "region", "occupation", "nationality", "gender")  # load_cvdb_data's block order
PROBED = ("qd1consis", "qd2incons", "q", "d1consis", "d2consis", "d3consis")
TEST_SETS = ("d1consis", "d2consis", "d3consis", "no_qd_baseline", "d2incons",
             *(f"ent_assoc_{k}_{s}" for k in ("who", "name") for s in PROBED))
FIXED_TAGS = {"tag1_name": "<|tagone|>", "tag2_name": "<|tagtwo|>", "tag3_name": "<|tagthr|>"}


@contextlib.contextmanager
def recording(module, name: str, log: list, keep):
    """Wraps module.name so every call appends keep(args, result) to log; arguments and result pass unchanged."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        log.append(keep(args, kwargs, result))
        return result

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


def official_run(de, seed: int, seed_stage2: int, train_subset: str, **tags) -> dict:
    splits, aliases, qa, swaps = [], [], [], []
    # create_qa_pairs: the QA pairs as loaded, before their in-place replacement (the official entity table)
    with recording(de, "split_list_into_subsets", splits, lambda a, k, r: {s: sorted(v) for s, v in r.items()}), \
            recording(de, "randomly_swap_ents_to_vars", swaps, lambda a, k, r: dict(r)), \
            recording(de, "replace_ents_with_vars", aliases, lambda a, k, r: dict(a[1])), \
            recording(de, "create_qa_pairs", qa, lambda a, k, r: [(p.question.entity, p.answer) for p in r]):
        data = de.get_questions_dataset(seed=seed, seed_stage2=seed_stage2, train_subset=train_subset,
                                        num_ents=NUM_ENTS, entity_association_test_sets=True, **tags)
    assert len(splits) == 2 and len(aliases) == 1 and len(qa) == 1 and len(swaps) == 2, "unexpected call pattern"
    stage1, stage2 = splits
    incons = set(stage1["qd2incons"])
    return {"stage1": {k: v for k, v in stage1.items() if v}, "stage2": {k: v for k, v in stage2.items() if v},
            "aliases": aliases[0], "qa": qa[0],
            "qd2incons_defined_alias": {e: v for e, v in swaps[0].items() if e in incons},
            "tests": {k: sorted([r["question"], r["answer"]] for r in data[k]) for k in TEST_SETS if k in data}}


def main(repo: str) -> None:
    repo = Path(repo).resolve()
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    sys.path.insert(0, str(repo))
    try:
        import transformers  # noqa: F401  (utils/logger.py only sets its log level)
    except ImportError:
        sys.modules["transformers"] = types.SimpleNamespace(logging=types.SimpleNamespace(
            set_verbosity_warning=lambda: None))
    import data_generation.define_experiment as de

    sys.path.insert(0, str(ROOT))
    from zoo.iml.data import cvdb_entities, fictional_cvdb

    raw = fictional_cvdb(TABLE_ROWS, seed=TABLE_SEED)
    ours = {e.name: e for e in cvdb_entities(raw, NUM_ENTS)}
    cwd, mode = os.getcwd(), os.environ.pop("MODE", None)  # MODE=test would read the official sample csv
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "datasets" / "cvdb").mkdir(parents=True)
        raw.to_csv(Path(tmp) / "datasets" / "cvdb" / "cross-verified-database.csv", index=False,
                   encoding="ISO-8859-1")
        os.chdir(tmp)
        try:
            cases, entities = [], None
            for seed, seed_stage2 in CASES:
                s1, s2 = (official_run(de, seed, seed_stage2, t) for t in ("stage1", "stage2"))
                fixed = official_run(de, seed, seed_stage2, "stage2", **FIXED_TAGS)
                for k in ("stage1", "stage2", "aliases", "qd2incons_defined_alias", "qa"):
                    assert s1[k] == s2[k], f"the official {k} differ between train_subset stage1 and stage2"
                for k in ("stage1", "stage2", "aliases", "qa"):
                    assert fixed[k] == s1[k], f"the official {k} depend on the tags"
                shared = set(s1["tests"]) & set(s2["tests"])
                assert all(s1["tests"][k] == s2["tests"][k] for k in shared), "official test sets differ by stage"
                n = len(s1["aliases"])
                table = {e: [a for (x, a) in s1["qa"][i::n]] for i, (e, _) in enumerate(s1["qa"][:n])}
                assert entities in (None, table)
                entities = table
                assert set(table) == set(ours), "the official load_cvdb_data keeps other people than cvdb_entities"
                assert sum(map(len, s1["stage1"].values())) == NUM_ENTS, "the official split left people out"
                cases.append({
                    "seed": seed, "seed_stage2": seed_stage2,
                    "aliases": s1["aliases"],
                    "subsets": {"stage1": s1["stage1"], "stage2": s1["stage2"]},
                    "qd2incons_defined_alias": {"drawn_tags": s1["qd2incons_defined_alias"],
                                                "fixed_tags": fixed["qd2incons_defined_alias"]},
                    "test_sets": {"stage1": sorted(s1["tests"]), "stage2": sorted(s2["tests"])},
                    "tests": {**s2["tests"], **s1["tests"]},
                })
        finally:
            os.chdir(cwd)
            if mode is not None:
                os.environ["MODE"] = mode
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({
        "source": f"github.com/krasheninnikov/internalization @ {commit}", "commit": commit,
        "function": "data_generation.define_experiment.get_questions_dataset",
        "table": {"rows": TABLE_ROWS, "seed": TABLE_SEED, "num_ents": NUM_ENTS},
        "answer_order": list(ANSWER_ORDER),
        "entities": dict(sorted(entities.items())),
        "cases": cases,
    }, separators=(",", ":")))
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", help="local checkout of github.com/krasheninnikov/internalization")
    main(parser.parse_args().repo)
