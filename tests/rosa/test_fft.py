"""FullFinetuneModule (the paper's FFT baseline): every weight trains, checkpoints and Hub copies hold the whole
model also for a named base, `export_dir` writes a Hugging Face directory that `from_pretrained` reads back and
that another run adapts as its `model` (how configs/sweeps/rosa_tiny.yaml makes its base)."""

from __future__ import annotations

import json

import lightning.pytorch as L
import pytest
import torch

from datamodules.gsm8k import GSM8KDataModule
from zoo.errors import ZooError
from zoo.rosa import FullFinetuneModule, LoRABaselineModule, RoSAModule


def _data(**kw):
    # 96 bytes is shorter than most questions: the plain format cuts them, llm-foundry's would skip those examples
    return GSM8KDataModule(source="embedded", tokenizer="byt5", max_length=96, batch_size=2, eval_batch_size=4,
                           num_test=4, embedded_size=16, **{"tokenization": "plain", **kw})


def _trainer(tmp_path, **kw):
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=str(tmp_path), **kw)


def _logits(model, ids):
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


def _fft(model, **kw):
    torch.manual_seed(0)
    return FullFinetuneModule(model=model, tokenizer="byt5", lr=1e-3, lr_warmup_steps=0, max_new_tokens=4, **kw)


def test_every_weight_trains_and_the_export_is_the_model(tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM

    module = _fft(tiny_llama, export_dir="hf_model")
    before = {k: v.clone() for k, v in module.model.named_parameters()}
    assert all(p.requires_grad for p in module.model.parameters())
    _trainer(tmp_path, max_steps=2).fit(module, _data())
    after = dict(module.model.named_parameters())
    # every weight matrix moved (AdamW's first steps move each entry by about lr)
    assert all(not torch.equal(before[k], after[k]) for k in before if before[k].dim() == 2)
    # written when the fit ended, inside the run directory, and HF's own loader gives the same function
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf_model")
    ids = torch.randint(0, 384, (2, 9))
    torch.testing.assert_close(_logits(hf, ids), _logits(module.model, ids), rtol=0, atol=0)
    assert (tmp_path / "hf_model" / "tokenizer_config.json").is_file()


def test_a_named_base_is_saved_in_full(tiny_llama, tmp_path):
    _fft(tiny_llama).export(tmp_path / "base")
    module = _fft(str(tmp_path / "base"))
    state = module.state_dict()
    assert set(module.hub_state_dict()) == set(state)  # not adapters only: FFT changes every weight
    meta = module.card_metadata()
    assert meta["base_model"] == str(tmp_path / "base") and "lora" not in meta["tags"]
    checkpoint = {"state_dict": dict(state)}
    module.on_save_checkpoint(checkpoint)
    assert set(checkpoint["state_dict"]) == set(state)
    with torch.no_grad():
        next(module.model.parameters()).add_(1.0)
    module.save_pretrained(tmp_path / "hub")
    loaded = FullFinetuneModule.from_pretrained(tmp_path / "hub")
    ids = torch.randint(0, 384, (2, 9))
    assert torch.equal(_logits(loaded.model, ids), _logits(module.model, ids))


def test_a_local_base_is_named_by_its_directory_not_as_a_hub_model(tiny_llama, tmp_path):
    """A card's base_model names Hub models only: a run on a local directory says which directory it was."""
    from types import SimpleNamespace

    from callbacks.model_card import run_card_metadata
    from zoo.cards import render_card

    _fft(tiny_llama).export(tmp_path / "base")
    meta = run_card_metadata(SimpleNamespace(lightning_module=_fft(str(tmp_path / "base")), datamodule=None))
    assert meta["base_model"] is None and meta["base_model_path"] == str((tmp_path / "base").resolve())
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text(json.dumps({"paper": "rosa", "card_metadata": meta}))
    card = render_card(tmp_path / "run")
    front = card.split("---")[1]
    assert "base_model" not in front and str(tmp_path) not in front
    assert f"- Base model: the local directory `{(tmp_path / 'base').resolve()}`" in card
    named = run_card_metadata(SimpleNamespace(lightning_module=SimpleNamespace(
        card_metadata=lambda: {"base_model": "meta-llama/Llama-2-7b-hf"}), datamodule=None))
    assert named["base_model"] == "meta-llama/Llama-2-7b-hf" and "base_model_path" not in named


@pytest.mark.parametrize("adapter", ["lora", "rosa"])
def test_an_exported_fft_model_is_the_base_of_an_adapter_run(tiny_llama, tmp_path, adapter):
    fft = _fft(tiny_llama)
    _trainer(tmp_path / "fft", max_steps=1).fit(fft, _data())
    fft.export(tmp_path / "base")
    torch.manual_seed(0)
    kw = dict(model=str(tmp_path / "base"), tokenizer="byt5", r=2, lora_alpha=4, lr_warmup_steps=0, max_new_tokens=4)
    module = LoRABaselineModule(**kw) if adapter == "lora" else RoSAModule(density=0.05, mask_warmup_steps=0, **kw)
    assert module.base_name == str(tmp_path / "base")
    assert all(m.training for m in module.model.modules())  # from_pretrained's eval mode is undone
    # the adapters start at zero (B = 0, S = 0), so the adapted model is the FFT model
    ids = torch.randint(0, 384, (2, 9))
    torch.testing.assert_close(_logits(module.model, ids), _logits(fft.model, ids), rtol=1e-6, atol=1e-6)
    _trainer(tmp_path / "run", max_steps=2).fit(module, _data())


def test_bad_fft_settings_are_one_line_errors(tiny_llama):
    with pytest.raises(ZooError, match="lr must be positive"):
        FullFinetuneModule(model=tiny_llama, tokenizer="byt5", lr=0.0)


def test_embedded_kinds_choose_the_templates():
    from datamodules.gsm8k import embedded_gsm8k

    sharing = embedded_gsm8k(40, 0, kinds=[2])
    assert all("equally among" in r["question"] for r in sharing)
    others = embedded_gsm8k(200, 0, kinds=[0, 1, 3])
    assert not any("equally among" in r["question"] for r in others)
    assert embedded_gsm8k(50, 3) == embedded_gsm8k(50, 3, kinds=None)  # the default stream is unchanged
    for bad in ([], [4], [-1]):
        with pytest.raises(ZooError, match="embedded_kinds must be a non-empty list from 0..3"):
            embedded_gsm8k(5, 0, kinds=bad)
    dm = _data(embedded_kinds=[2])
    assert "templates [2]" in dm.card_metadata()["data_source"]
