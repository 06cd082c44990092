"""Parity with the official training path (HF Trainer defaults, make_ood_test_sets), found by a line-by-line
comparison with github.com/krasheninnikov/internalization. Oracles: transformers' own TrainingArguments / Trainer,
and the official probe-set construction restated on a small case."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from zoo.iml.data import ENTITY_ASSOCIATION_QUESTIONS, build_iml_dataset, cvdb_entities, fictional_cvdb

ROOT = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = ("configs/iml_cvdb_stage1.yaml", "configs/iml_cvdb_stage2.yaml")


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
