"""RoSAModule / LoRABaselineModule wiring: the mask made by Lightning's loop (mask stage + training run, and the
one-run schedule), checkpoints, Hub round trip, export, errors."""

from __future__ import annotations

import copy

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from datamodules.gsm8k import GSM8KDataModule
from zoo.errors import ZooError
from zoo.rosa import MASK_FILE, LoRABaselineModule, RoSAModule
from zoo.rosa.mask import FisherCollector, fisher_mask, load_mask


def _module(tiny_llama, **kw):
    torch.manual_seed(0)
    args = dict(model=tiny_llama, tokenizer="byt5", r=2, lora_alpha=4, density=0.05, lr_warmup_steps=0,
                max_new_tokens=4)
    return RoSAModule(**{**args, **kw})


def _data():
    # 96 bytes is shorter than most questions: the plain format cuts them, llm-foundry's would skip those examples
    return GSM8KDataModule(source="embedded", tokenizer="byt5", max_length=96, batch_size=2, eval_batch_size=4,
                           num_test=4, embedded_size=16, tokenization="plain")


def _trainer(tmp_path, callbacks=(), **kw):
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=list(callbacks), **kw)


class _Watch(Callback):
    """Records, as Lightning runs them, the model state and micro-batches of optimizer step `collect_step`, and
    which parameter groups had gradients at each optimizer step."""

    def __init__(self, collect_step: int):
        self.collect_step, self.state, self.batches, self.with_grad = collect_step, None, [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.collect_step:
            if self.state is None:
                self.state = copy.deepcopy(pl_module.model.state_dict())
            self.batches.append({k: v.clone() for k, v in batch.items()})

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.with_grad.append({g["name"] for g in optimizer.param_groups if any(p.grad is not None
                                                                                  for p in g["params"])})


def _logits(module, ids):
    module.eval()
    with torch.no_grad():
        return module.model(input_ids=ids).logits


def test_mask_stage_then_training_run(tiny_llama, tmp_path):
    """The paper's two runs: a mask stage (LoRA-only warm-up, Fisher over the next step, mask, stop) whose mask is
    exactly the top-k of the Fisher of the micro-batches Lightning ran in that step, then a run that trains LoRA +
    sparse values from the pretrained weights and the initial adapters with that mask."""
    warmup, accum = 2, 2
    stage = _module(tiny_llama, lora_dropout=0.0, mask_warmup_steps=warmup, mask_grad_steps=1, stop_after_mask=True)
    initial = stage.adapter_state()
    watch = _Watch(collect_step=warmup)
    trainer = _trainer(tmp_path / "mask", [watch], max_steps=10, accumulate_grad_batches=accum)
    trainer.fit(stage, _data())
    assert trainer.global_step == warmup + 1  # stopped right after the collection step
    assert watch.with_grad == [{"lora"}] * (warmup + 1)  # LoRA alone was trained (the values are not even in it)
    assert all(not layer.sparse_values.requires_grad and not layer.sparse_values.any()
               for layer in stage.layers.values())
    masks = load_mask(tmp_path / "mask" / MASK_FILE, stage.layers)
    assert stage.has_mask and all(torch.equal(masks[n], layer.sparse_index.long()) for n, layer in stage.layers.items())
    # oracle: replay the collection step's micro-batches (Lightning scales each loss by 1/accum) on its adapters
    replay = _module(tiny_llama, lora_dropout=0.0)
    replay.model.load_state_dict(watch.state)
    assert len(watch.batches) == accum
    with FisherCollector(replay.model, replay.layers) as fisher:
        for batch in watch.batches:
            (replay.training_loss(batch) / accum).backward()
            fisher.end_microbatch()
    expected = fisher_mask(fisher.scores(), 0.05)
    for name, layer in stage.layers.items():
        assert layer.nnz == int(0.05 * layer.in_features * layer.out_features)
        assert torch.equal(masks[name], expected[name]), name

    # the second run reads the newest mask through a glob when its fit starts; it starts from the initial adapters
    module = _module(tiny_llama, mask_path=str(tmp_path / "m*" / MASK_FILE))
    assert not module.has_mask and not module.generates_mask
    for k, v in initial.items():
        if not k.endswith(("sparse_index", "sparse_ready")):
            assert torch.equal(module.adapter_state()[k], v), k
    watch = _Watch(collect_step=-1)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _trainer(tmp_path / "train", [watch, ckpt], max_steps=2, accumulate_grad_batches=accum).fit(module, _data())
    assert watch.with_grad == [{"lora", "sparse"}] * 2  # both from step 0
    assert all(torch.equal(masks[n], layer.sparse_index.long()) for n, layer in module.layers.items())
    assert not (tmp_path / "train" / MASK_FILE).exists()
    assert any(layer.sparse_values.abs().sum() > 0 for layer in module.layers.values())  # values were trained
    # `zoo test --ckpt_path last.ckpt`: a fresh module from the config restores the masked layers
    fresh = _module(tiny_llama)
    assert not fresh.has_mask
    _trainer(tmp_path, limit_test_batches=1).test(fresh, _data(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert fresh.has_mask
    for name, layer in module.layers.items():
        assert torch.equal(fresh.layers[name].sparse_index, layer.sparse_index)
        assert torch.equal(fresh.layers[name].sparse_values, layer.sparse_values)
    assert (tmp_path / "gsm8k_test_generations.jsonl").exists()
    # the weights hold the mask: a copy rebuilt elsewhere (the mask file gone) needs no mask_path file
    module.save_pretrained(tmp_path / "hub")
    (tmp_path / "mask" / MASK_FILE).unlink()
    loaded = RoSAModule.from_pretrained(tmp_path / "hub")
    assert loaded.has_mask and all(torch.equal(loaded.layers[n].sparse_index, layer.sparse_index)
                                   for n, layer in module.layers.items())


def test_one_run_schedule_makes_the_mask_then_trains_the_values(tiny_llama, tmp_path):
    """Without mask_path (official one-run wl schedule): LoRA alone for the warm-up and collection steps, then the
    mask is set and saved, and LoRA + sparse values train on in the same fit."""
    module = _module(tiny_llama, mask_warmup_steps=1, mask_grad_steps=1)
    watch = _Watch(collect_step=-1)
    trainer = _trainer(tmp_path, [watch], max_steps=4, accumulate_grad_batches=2)
    trainer.fit(module, _data())
    assert trainer.global_step == 4
    assert watch.with_grad == [{"lora"}, {"lora"}, {"lora", "sparse"}, {"lora", "sparse"}]
    masks = load_mask(tmp_path / MASK_FILE, module.layers)
    assert all(torch.equal(masks[n], layer.sparse_index.long()) for n, layer in module.layers.items())
    assert all(layer.sparse_values.abs().sum() > 0 for layer in module.layers.values())


def _with_random_mask(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    module.set_masks({n: torch.randperm(l.in_features * l.out_features, generator=g)[: l.nnz]
                      for n, l in module.layers.items()})
    with torch.no_grad():
        for layer in module.layers.values():
            layer.sparse_values.normal_(generator=g)
            layer.lora_B.weight.normal_(generator=g)
    return module


def test_hub_round_trip_full_weights_for_config_bases(tiny_llama, tmp_path):
    module = _with_random_mask(_module(tiny_llama))
    module.save_pretrained(tmp_path / "hub")
    loaded = RoSAModule.from_pretrained(tmp_path / "hub")
    ids = torch.randint(0, 384, (2, 9))
    assert torch.equal(_logits(loaded, ids), _logits(module, ids))


def test_named_base_publishes_adapters_only(tiny_llama, tmp_path):
    from zoo.lm import build_causal_lm

    torch.manual_seed(0)
    build_causal_lm(tiny_llama).save_pretrained(tmp_path / "base")
    module = _with_random_mask(_module(tiny_llama, model=str(tmp_path / "base")))
    keys = set(module.hub_state_dict())
    assert keys and all(any(a in k for a in ("lora_A", "lora_B", "sparse_")) for k in keys)
    module.save_pretrained(tmp_path / "hub")
    loaded = RoSAModule.from_pretrained(tmp_path / "hub")
    ids = torch.randint(0, 384, (2, 9))
    assert torch.equal(_logits(loaded, ids), _logits(module, ids))
    checkpoint = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    assert set(checkpoint["state_dict"]) == keys


def test_export_merged_and_adapters(tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM

    module = _with_random_mask(_module(tiny_llama))
    module.export(tmp_path / "merged")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    ids = torch.randint(0, 384, (2, 9))
    torch.testing.assert_close(hf(input_ids=ids).logits, _logits(module, ids), rtol=1e-5, atol=1e-5)
    module.export(tmp_path / "adapters", merged=False)
    assert (tmp_path / "adapters" / "rosa_adapters.safetensors").exists()


def test_lora_baseline_is_peft_and_trains(tiny_llama, tmp_path):
    from peft import PeftModel

    torch.manual_seed(0)
    module = LoRABaselineModule(model=tiny_llama, tokenizer="byt5", r=2, lora_alpha=4, lr_warmup_steps=0,
                                max_new_tokens=4)
    assert isinstance(module.model, PeftModel)
    before = {k: v.clone() for k, v in module.model.named_parameters() if v.requires_grad}
    _trainer(tmp_path, max_steps=1).fit(module, _data())
    after = dict(module.model.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before)
    ids = torch.randint(0, 384, (1, 7))
    torch.testing.assert_close(module.merged_model()(input_ids=ids).logits, _logits(module, ids),
                               rtol=1e-5, atol=1e-5)


def test_bad_inputs_are_one_line_errors(tiny_llama, tmp_path):
    with pytest.raises(ZooError, match="base model 'no-such/model' not found"):
        RoSAModule(model="no-such/model")
    with pytest.raises(ZooError, match="base model 'no-such/model' not found"):
        LoRABaselineModule(model="no-such/model")
    with pytest.raises(ZooError, match="qkv_proj"):
        _module(tiny_llama, target_modules=["qkv_proj"])
    with pytest.raises(ZooError, match="density"):
        _module(tiny_llama, density=1.2)
    with pytest.raises(ZooError, match="not found"):  # mask_path is read when a fit starts
        _module(tiny_llama, mask_path=str(tmp_path / "missing.safetensors")).setup("fit")
    other = _with_random_mask(_module(tiny_llama, density=0.1))
    other.save_mask(tmp_path / "d10.safetensors")
    with pytest.raises(ZooError, match="does not fit"):
        _module(tiny_llama, density=0.05, mask_path=str(tmp_path / "d10.safetensors")).setup("fit")
    with pytest.raises(ZooError, match="matches nothing"):
        _module(tiny_llama, mask_path=str(tmp_path / "runs" / "*" / MASK_FILE)).setup("fit")
    with pytest.raises(ZooError, match="mask_warmup_steps >= 0 and mask_grad_steps >= 1"):
        _module(tiny_llama, mask_grad_steps=0)
    with pytest.raises(ZooError, match="fisher_mode"):
        _module(tiny_llama, fisher_mode="max")
    # a learning rate of 0 trained nothing without a word; max_new_tokens 0 failed in transformers' generate
    with pytest.raises(ZooError, match="lora_lr must be positive, got 0"):
        _module(tiny_llama, lora_lr=0)
    with pytest.raises(ZooError, match="max_new_tokens must be positive, got 0"):
        LoRABaselineModule(model="no-such/model", max_new_tokens=0)
    with pytest.raises(ZooError, match="stop_after_mask"):
        _module(tiny_llama, density=0.0, stop_after_mask=True)
    with pytest.raises(ZooError, match="needs 3"):  # the fit is shorter than the mask schedule
        _trainer(tmp_path, max_steps=2).fit(_module(tiny_llama, mask_warmup_steps=2), _data())


def test_resumed_fit_keeps_its_mask_and_skips_the_warmup(tiny_llama, tmp_path):
    module = _module(tiny_llama, mask_warmup_steps=1)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _trainer(tmp_path, [ckpt], max_steps=2).fit(module, _data())  # the mask is made at step 2
    (tmp_path / MASK_FILE).unlink()
    resumed = _module(tiny_llama, mask_warmup_steps=1)
    _trainer(tmp_path, max_steps=3).fit(resumed, _data(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert not (tmp_path / MASK_FILE).exists()  # no second mask
    for name, layer in module.layers.items():
        assert torch.equal(resumed.layers[name].sparse_index, layer.sparse_index)


def test_qrosa_hub_round_trip(tiny_llama, tmp_path):
    pytest.importorskip("bitsandbytes")
    module = _with_random_mask(_module(tiny_llama, quantize="nf4", density=0.02))
    module.save_pretrained(tmp_path / "hub")
    loaded = RoSAModule.from_pretrained(tmp_path / "hub")
    ids = torch.randint(0, 384, (2, 9))
    assert torch.equal(_logits(loaded, ids), _logits(module, ids))
    with pytest.raises(ZooError, match="merge"):
        module.merged_model()


def test_evaluation_prompts_carry_no_bos_as_lm_eval_harness(tiny_llama, monkeypatch):
    # lm-eval-harness (2c18e367, hf-causal-experimental) encodes a causal LM's context with add_special_tokens=False:
    # the paper's Llama-2 was scored on "Question: ...\nAnswer:" without the BOS its tokenizer would add
    from .conftest import llama_style_tokenizer

    module = _module(tiny_llama)
    module.tokenizer = tok = llama_style_tokenizer()
    seen = []

    def fake_generate(input_ids, **kw):
        seen.append(input_ids)
        return torch.cat([input_ids, torch.full((len(input_ids), 1), tok.eos_token_id)], dim=1)

    monkeypatch.setattr(module.model, "generate", fake_generate)
    prompts = ["Question: 2+2?\nAnswer:", "Question: the sum of 10 and 7?\nAnswer:"]
    module.test_step({"prompt": prompts, "question": ["2+2?", "10+7?"], "answer": ["2+2=4\n#### 4", "#### 17"]}, 0)
    (ids,) = seen
    for row, prompt in zip(ids.tolist(), prompts):
        want = tok(prompt, add_special_tokens=False)["input_ids"]
        assert row[len(row) - len(want):] == want and tok.bos_token_id not in row
