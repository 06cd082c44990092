"""Stage 1 -> stage 2 through our own code: stage 2 starts from the stage-1 weights and the stage-1 tags."""

from __future__ import annotations

import json

import lightning.pytorch as L
import pytest
import torch

from callbacks.iml_tagging import TAGS_FILE, IMLTagging
from datamodules.iml import IMLDataModule
from zoo.errors import ZooError
from zoo.iml import IMLModule
from zoo.iml.module import load_init_state


def _fit(root, stage, model_cfg, init_from=None, tags_from=None, steps=3, seed=7):
    seen = {}

    class Probe(L.Callback):  # the weights the first step starts from, and the documents it sees
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 0 and "w" not in seen:
                seen["w"] = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
                seen["text"] = list(batch["text"])

    dm = IMLDataModule(source="embedded", stage=stage, num_ents=60, seed=seed, batch_size=8, eval_batch_size=32,
                       max_eval_per_subset=2)
    module = IMLModule(model=model_cfg, tokenizer="byt5", block_size=64, optimizer="adamw", lr=1e-3,
                       init_from=init_from)
    trainer = L.Trainer(default_root_dir=str(root), max_steps=steps, accelerator="cpu", devices=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[IMLTagging(seed=0 if tags_from is None else 5, tags_from=tags_from,
                                              max_new_tokens=4), Probe()])
    trainer.fit(module, dm)
    return trainer, module, seen


def test_stage2_starts_from_stage1(tmp_path, tiny_model_config):
    t1, m1, _ = _fit(tmp_path / "stage1", "stage1", tiny_model_config)
    ckpt = tmp_path / "stage1" / "checkpoints" / "last.ckpt"
    t1.save_checkpoint(ckpt)
    final1 = {k: v.detach().clone() for k, v in m1.state_dict().items()}
    t2, m2, seen = _fit(tmp_path / "stage2", "stage2", tiny_model_config, init_from=str(tmp_path / "stage1"),
                        tags_from=str(tmp_path / "stage1"))
    for k, v in final1.items():
        torch.testing.assert_close(seen["w"][k], v, rtol=0, atol=0)
    tags1 = json.loads((tmp_path / "stage1" / TAGS_FILE).read_text())
    assert json.loads((tmp_path / "stage2" / TAGS_FILE).read_text()) == tags1
    # stage 2 trains on tagged definitions only, with stage 1's tags
    assert all(t.split()[0] in tags1.values() and not t.startswith("Q:") for t in seen["text"])
    metrics = t2.callback_metrics
    assert "val/iml_effect" in metrics and "val/em_d3consis" in metrics and "val/em_qd1consis" not in metrics
    # a HubMixin directory works as init_from too
    m2.save_pretrained(tmp_path / "hub")
    back = IMLModule.from_pretrained(tmp_path / "hub")
    for k, v in m2.state_dict().items():
        torch.testing.assert_close(back.state_dict()[k], v)
    torch.testing.assert_close(load_init_state(str(tmp_path / "hub"))["model.lm_head.weight"],
                               m2.state_dict()["model.lm_head.weight"])


def test_stage2_on_another_split_than_stage1_is_refused(tmp_path, tiny_model_config):
    t1, _, _ = _fit(tmp_path / "stage1", "stage1", tiny_model_config, steps=1)
    ckpt = tmp_path / "stage1.ckpt"
    t1.save_checkpoint(ckpt)
    with pytest.raises(ZooError, match=r"stage 2 must use stage 1's data split.* seed=7 and this run sets seed=8"):
        _fit(tmp_path / "stage2", "stage2", tiny_model_config, init_from=str(ckpt), steps=1, seed=8)


def test_bad_init_from(tmp_path, tiny_model_config):
    with pytest.raises(ZooError, match="does not exist"):
        load_init_state(str(tmp_path / "nope.ckpt"))
    with pytest.raises(ZooError, match="matches nothing"):
        load_init_state(str(tmp_path / "runs" / "*" / "last.ckpt"))
    other = IMLModule(model={**tiny_model_config, "hidden_size": 48}, tokenizer="byt5")
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(ZooError, match="does not fit this model"):
        _fit(tmp_path / "s2", "stage2", tiny_model_config, init_from=str(tmp_path / "other"), steps=1)
