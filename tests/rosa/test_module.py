"""RoSAModule / LoRABaselineModule wiring: mask warm-up + restart, checkpoints, Hub round trip, export, errors."""

from __future__ import annotations

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from callbacks.rosa_mask import RoSAMaskWarmup
from datamodules.gsm8k import GSM8KDataModule
from zoo.errors import ZooError
from zoo.rosa import LoRABaselineModule, RoSAModule
from zoo.rosa.mask import load_mask


def _module(tiny_llama, **kw):
    torch.manual_seed(0)
    args = dict(model=tiny_llama, tokenizer="byt5", r=2, lora_alpha=4, density=0.05, lr_warmup_steps=1,
                max_new_tokens=4)
    return RoSAModule(**{**args, **kw})


def _data():
    return GSM8KDataModule(source="embedded", tokenizer="byt5", max_length=96, batch_size=2, eval_batch_size=4,
                           num_test=4, embedded_size=16)


def _trainer(tmp_path, callbacks=(), **kw):
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=list(callbacks), **kw)


class _Record(Callback):
    """Runs after RoSAMaskWarmup.on_fit_start: records the adapters the main phase starts from."""

    def on_fit_start(self, trainer, pl_module):
        self.state = pl_module.adapter_state()


def _logits(module, ids):
    module.eval()
    with torch.no_grad():
        return module.model(input_ids=ids).logits


def test_warmup_mask_restart_checkpoint_and_test(tiny_llama, tmp_path):
    module = _module(tiny_llama)
    initial = module.adapter_state()
    record = _Record()
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = _trainer(tmp_path, [RoSAMaskWarmup(warmup_steps=2, collect_steps=1), record, ckpt], max_steps=2,
                       accumulate_grad_batches=2, limit_test_batches=1)
    trainer.fit(module, _data())
    # the warmed-up LoRA is discarded: the main phase starts from the initial adapters, now with a mask
    for k, v in initial.items():
        if not k.endswith(("sparse_index", "sparse_ready")):
            assert torch.equal(record.state[k], v), k
    assert module.has_mask
    masks = load_mask(tmp_path / "rosa_mask.safetensors", module.layers)
    for name, layer in module.layers.items():
        assert layer.nnz == int(0.05 * layer.in_features * layer.out_features)
        assert torch.equal(masks[name], layer.sparse_index.long())
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
    # the saved mask reloads through mask_path (the official second run), skipping the warm-up
    again = _module(tiny_llama, mask_path=str(tmp_path / "rosa_mask.safetensors"))
    assert again.has_mask and torch.equal(next(iter(again.layers.values())).sparse_index,
                                          next(iter(module.layers.values())).sparse_index)


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
    module = LoRABaselineModule(model=tiny_llama, tokenizer="byt5", r=2, lora_alpha=4, lr_warmup_steps=1,
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
    with pytest.raises(ZooError, match="not found"):
        _module(tiny_llama, mask_path=str(tmp_path / "missing.safetensors"))
    other = _with_random_mask(_module(tiny_llama, density=0.1))
    other.save_mask(tmp_path / "d10.safetensors")
    with pytest.raises(ZooError, match="does not fit"):
        _module(tiny_llama, density=0.05, mask_path=str(tmp_path / "d10.safetensors"))
    with pytest.raises(ZooError, match="RoSAMaskWarmup"):  # density > 0 without a mask or the warm-up callback
        _trainer(tmp_path, max_steps=1).fit(_module(tiny_llama), _data())


def test_resumed_fit_keeps_its_mask_and_skips_the_warmup(tiny_llama, tmp_path):
    module = _module(tiny_llama)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _trainer(tmp_path, [RoSAMaskWarmup(warmup_steps=1), ckpt], max_steps=1).fit(module, _data())
    resumed = _module(tiny_llama)
    warmup = RoSAMaskWarmup(warmup_steps=1, mask_file="second.safetensors")
    _trainer(tmp_path, [warmup], max_steps=2).fit(resumed, _data(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert not (tmp_path / "second.safetensors").exists()  # no second warm-up
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
