"""Parity with the official code (github.com/krasheninnikov/internalization). Oracles: transformers' own
TrainingArguments / Trainer; the official probe-set construction restated on a small case; and what the official
get_questions_dataset draws on a fictional table (tests/iml/data/official_reference.json, written by
make_official_reference.py from a local checkout of the official repository): the entity table, aliases, subsets
(stage-2 re-split included), d-subset and d2incons test questions and entity-association probes."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from zoo.iml.data import (
    ENTITY_ASSOCIATION_QUESTIONS,
    QUESTIONS,
    STAGE2_SUBSETS,
    build_iml_dataset,
    cvdb_entities,
    fictional_cvdb,
)

ROOT = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = ("configs/iml_cvdb_stage1.yaml", "configs/iml_cvdb_stage2.yaml")
OFFICIAL = json.loads((Path(__file__).parent / "data" / "official_reference.json").read_text())
OFFICIAL_CASES = {f"seed{c['seed']}-stage2seed{c['seed_stage2']}": c for c in OFFICIAL["cases"]}


@pytest.fixture(scope="module")
def hf_args(tmp_path_factory):
    from transformers import TrainingArguments

    # what the official configs build: optim adafactor, nothing else of the optimisation overridden
    return TrainingArguments(output_dir=str(tmp_path_factory.mktemp("hf")), optim="adafactor", report_to=[])


@pytest.mark.parametrize("path", PAPER_CONFIGS)
def test_paper_configs_keep_the_hf_trainer_defaults(path, hf_args):
    cfg = yaml.safe_load((ROOT / path).read_text())
    trainer, model = cfg["trainer"], cfg["model"]["init_args"]
    # the HF Trainer clips the global gradient norm at max_grad_norm (1.0) before every optimiser step
    assert trainer.get("gradient_clip_val") == hf_args.max_grad_norm
    assert trainer.get("gradient_clip_algorithm", "norm") == "norm"
    assert model["lr"] == hf_args.learning_rate
    assert model.get("weight_decay", 0.0) == hf_args.weight_decay
    assert model.get("warmup_steps", 0) == hf_args.warmup_steps
    assert model["lr_schedule"] == str(hf_args.lr_scheduler_type.value)
    assert model["optimizer"] == "adafactor"


def test_adafactor_is_built_as_the_hf_trainer_builds_it(hf_args, tiny_model_config):
    from transformers import Trainer

    from zoo.iml import IMLModule

    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(hf_args)
    module = IMLModule(model=tiny_model_config, optimizer="adafactor", lr=hf_args.learning_rate)
    module.trainer = SimpleNamespace(estimated_stepping_batches=10)
    opt = module.configure_optimizers()["optimizer"]
    assert type(opt) is cls
    assert {k: opt.defaults[k] for k in kwargs} == kwargs


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_entity_association_sets_match_the_official_construction(stage):
    ds = build_iml_dataset(cvdb_entities(fictional_cvdb(200, seed=3), 200), seed=600, entity_association=True)
    probes = {k: v for k, v in ds.test[stage].items() if k.startswith("ent_assoc_")}
    # make_ood_test_sets: every subset whose aliases are seen (not the two baselines) plus qd2incons_swapped,
    # built after the stage-2 deletions, so stage 2 keeps the q-subsets' probes too
    subsets = ("qd1consis", "qd2incons", "q", "d1consis", "d2consis", "d3consis", "qd2incons_swapped")
    assert set(probes) == {f"ent_assoc_{k}_{s}" for k in ENTITY_ASSOCIATION_QUESTIONS for s in subsets}
    for k, template in ENTITY_ASSOCIATION_QUESTIONS.items():
        for s in subsets:
            aliases = ds.defined_vars if s == "qd2incons_swapped" else ds.ents_to_vars
            ents = ds.subsets[s.removesuffix("_swapped")]
            assert sorted((r["question"], r["answer"]) for r in probes[f"ent_assoc_{k}_{s}"]) == sorted(
                (f"Q: {template.format(aliases[e])}\nA:", e) for e in ents)
    # the swapped probes ask about the alias the (tag2) definition gives the entity, never its QA alias
    swapped = probes["ent_assoc_who_qd2incons_swapped"]
    defs = {r["text"] for r in ds.train["stage1"] if r["kind"] == "definition"}
    assert all(f"{ds.defined_vars[r['entity']]} {r['entity']}\n" in defs for r in swapped)
    assert all(ds.defined_vars[r["entity"]] != ds.ents_to_vars[r["entity"]] for r in swapped)


# ------------------------------------------------------------------------ draws against get_questions_dataset
# What is compared is what cards/iml.md claims equal. Not compared, because it differs by design (cards/iml.md,
# deviations): the tags (the official code draws three from the data RNG, so its qd2incons derangement and the
# qd2incons_swapped probes differ from ours, checked below to agree once the official tags are given), the held-out
# question per person (sklearn's train_test_split there, our RNG here) and the training order.


def _table():
    t = OFFICIAL["table"]
    return cvdb_entities(fictional_cvdb(t["rows"], seed=t["seed"]), t["num_ents"])


@functools.cache
def _ours(seed: int, seed_stage2: int):
    return build_iml_dataset(_table(), seed=seed, seed_stage2=seed_stage2, entity_association=True)


def _first_differences(ours: dict, official: dict, n: int = 3) -> str:
    keys = sorted(k for k in set(ours) | set(official) if ours.get(k) != official.get(k))
    return f"{len(keys)} differ, e.g. " + "; ".join(
        f"{k!r}: ours {ours.get(k, '<absent>')!r}, official {official.get(k, '<absent>')!r}" for k in keys[:n])


def test_the_entity_table_is_the_official_load_cvdb_data_one():
    ours = {e.name: [e.answers[q].split(";")[0].strip() for q in OFFICIAL["answer_order"]] for e in _table()}
    assert list(QUESTIONS) == OFFICIAL["answer_order"]
    assert ours == OFFICIAL["entities"], ("cvdb_entities and the official load_cvdb_data (first answers, in the "
                                          "order " + ", ".join(OFFICIAL["answer_order"]) + ") differ: "
                                          + _first_differences(ours, OFFICIAL["entities"]))


@pytest.mark.parametrize("case", OFFICIAL_CASES)
def test_aliases_are_the_official_draws(case):
    c = OFFICIAL_CASES[case]
    ours = _ours(c["seed"], c["seed_stage2"]).ents_to_vars
    assert ours == c["aliases"], f"entity -> alias, {case}: " + _first_differences(ours, c["aliases"])


@pytest.mark.parametrize("case", OFFICIAL_CASES)
def test_subsets_are_the_official_split_and_stage2_resplit(case):
    c = OFFICIAL_CASES[case]
    subsets = _ours(c["seed"], c["seed_stage2"]).subsets
    # stage 1: the official split_list_into_subsets on the shuffled entities (its stage-2 pool: stage2_combined)
    ours1 = {k: sorted(v) for k, v in subsets.items() if v and k not in STAGE2_SUBSETS}
    ours1["stage2_combined"] = sorted(e for k in STAGE2_SUBSETS for e in subsets[k])
    assert ours1 == c["subsets"]["stage1"], f"stage-1 subsets, {case}: " + _first_differences(
        ours1, c["subsets"]["stage1"], 1)
    # stage 2: the pool sorted, shuffled with Random(seed_stage2) and split again
    ours2 = {k: sorted(subsets[k]) for k in STAGE2_SUBSETS if subsets[k]}
    assert ours2 == c["subsets"]["stage2"], f"stage-2 re-split, {case}: " + _first_differences(
        ours2, c["subsets"]["stage2"], 1)


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
@pytest.mark.parametrize("case", OFFICIAL_CASES)
def test_d_subset_d2incons_and_entity_association_questions_are_the_official_ones(case, stage):
    c = OFFICIAL_CASES[case]
    tests = _ours(c["seed"], c["seed_stage2"]).test[stage]
    # the official records hold the prompt's answer, " <answer>\n"; qd2incons_swapped is not in the reference
    ours = {k: sorted([r["question"], f" {r['answer']}\n"] for r in v) for k, v in tests.items() if k in c["tests"]}
    assert sorted(ours) == c["test_sets"][stage], f"{stage} test sets, {case}: ours {sorted(ours)}, official " \
                                                  f"{c['test_sets'][stage]}"
    for k in c["test_sets"][stage]:
        official = c["tests"][k]
        missing = [r for r in official if r not in ours[k]]
        extra = [r for r in ours[k] if r not in official]
        assert ours[k] == official, (f"{stage} test set {k!r}, {case}: {len(ours[k])} records here, {len(official)} "
                                     f"official; official only: {missing[:2]}; ours only: {extra[:2]}")


@pytest.mark.parametrize("case", OFFICIAL_CASES)
def test_qd2incons_derangement_is_the_official_one_once_its_tags_are_given(case):
    c = OFFICIAL_CASES[case]
    ds = _ours(c["seed"], c["seed_stage2"])
    ours = {e: ds.defined_vars[e] for e in ds.subsets["qd2incons"]}
    ref = c["qd2incons_defined_alias"]
    # with tag1_name/tag2_name/tag3_name set, the official code draws no tags, and its derangement is ours
    assert ours == ref["fixed_tags"], f"qd2incons definition aliases, {case}: " + _first_differences(
        ours, ref["fixed_tags"])
    # with the tags drawn (the paper's runs) three draws come first, and the derangement differs (cards/iml.md)
    assert ours != ref["drawn_tags"], ("the qd2incons derangement now equals the official one with drawn tags: "
                                       "cards/iml.md says it differs (and the qd2incons_swapped probes with it)")
