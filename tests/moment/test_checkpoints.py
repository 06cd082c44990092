"""Loading official-format checkpoints: a local copy written as the AutonLab repos are (config.json with an inline
t5_config + model.safetensors with momentfm's names), strictness, refusals, and a real cached checkpoint."""

import json

import pytest
import torch
from safetensors.torch import save_file

from zoo.errors import ZooError
from zoo.moment import MOMENT, MOMENTFM_KEY_TABLE, MomentConfig, load_moment
from zoo.moment.checkpoints import CHECKPOINTS, map_key
from zoo.moment.embedding import sinusoidal_positions


def official_state(tiny_t5) -> dict[str, torch.Tensor]:
    """A reconstruction MOMENT's weights under momentfm's names (inverse of the key table, written out)."""
    m = MOMENT(MomentConfig(t5_config=tiny_t5))
    out = {}
    for k, v in m.state_dict().items():
        k = k.replace("patch_embedding.projection.", "patch_embedding.value_embedding.")
        out[k] = v.clone()
    out["patch_embedding.position_embedding.pe"] = sinusoidal_positions(5000, tiny_t5["d_model"])[None]
    return out


@pytest.fixture
def official_dir(tmp_path, tiny_t5):
    d = tmp_path / "MOMENT-1-tiny"
    d.mkdir()
    cfg = {"task_name": "reconstruction", "model_name": "MOMENT", "transformer_type": "encoder_only", "d_model": None,
           "seq_len": 512, "patch_len": 8, "patch_stride_len": 8, "device": "cpu",
           "transformer_backbone": "google/flan-t5-large", "model_kwargs": {}, "t5_config": tiny_t5}
    (d / "config.json").write_text(json.dumps(cfg))
    state = official_state(tiny_t5)
    save_file(state, str(d / "model.safetensors"))
    return d, state


def test_key_table_maps_every_official_name(tiny_t5):
    names = official_state(tiny_t5)
    assert all(map_key(k)[0] for k in names)
    assert map_key("patch_embedding.value_embedding.weight") == (True, "patch_embedding.projection.weight")
    assert map_key("patch_embedding.position_embedding.pe") == (True, None)
    assert map_key("encoder.block.0.layer.0.SelfAttention.q.weight")[1] == "encoder.block.0.layer.0.SelfAttention.q.weight"
    assert not map_key("normalizer.affine_weight")[0]
    assert len(MOMENTFM_KEY_TABLE) == 5


@pytest.mark.parametrize("task, kw", [("reconstruction", {}), ("forecasting", {"forecast_horizon": 48}),
                                      ("embedding", {})])
def test_local_official_copy_loads_strictly(official_dir, task, kw):
    d, state = official_dir
    m = load_moment(str(d), task, **kw)
    own = m.state_dict()
    torch.testing.assert_close(own["patch_embedding.projection.weight"], state["patch_embedding.value_embedding.weight"])
    torch.testing.assert_close(own["encoder.final_layer_norm.weight"], state["encoder.final_layer_norm.weight"])
    if task == "reconstruction":  # the pre-trained head is loaded only for its own task
        torch.testing.assert_close(own["head.linear.weight"], state["head.linear.weight"])
    elif task == "forecasting":
        assert own["head.linear.weight"].shape == (48, 64 * 32)


def test_unmapped_keys_are_listed(official_dir):
    d, state = official_dir
    save_file({**state, "normalizer.affine_weight": torch.ones(1, 1, 1)}, str(d / "model.safetensors"))
    with pytest.raises(ZooError, match="do not map onto MOMENT: normalizer.affine_weight"):
        load_moment(str(d))


def test_missing_encoder_weights_are_an_error(official_dir):
    d, state = official_dir
    state.pop("encoder.final_layer_norm.weight")
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(ZooError, match="missing.*final_layer_norm"):
        load_moment(str(d))


def test_pickled_only_copy_is_refused(official_dir):
    d, state = official_dir
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(ZooError, match=r"only pickled weights \(pytorch_model.bin\)"):
        load_moment(str(d))


@pytest.mark.parametrize("override, match", [
    ({"revin_affine": True}, r"revin_affine: true is not supported"),
    ({"transformer_type": "encoder_decoder"}, r"'encoder_decoder' is not supported: MOMENT is encoder-only"),
], ids=["revin_affine", "encoder_decoder"])
def test_unsupported_moment_variants_are_refused(official_dir, override, match):
    # cards/moment.md: `revin_affine: true` and encoder-decoder MOMENT variants are refused
    d, _ = official_dir
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **override}))
    with pytest.raises(ZooError, match=match):
        load_moment(str(d))


def test_uncached_hub_checkpoint_offline_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ZooError, match="not in the local HF cache"):
        load_moment("AutonLab/MOMENT-1-small")


def test_a_cached_real_checkpoint_loads_strictly():
    from huggingface_hub import try_to_load_from_cache

    cached = [r for r in CHECKPOINTS if isinstance(try_to_load_from_cache(r, "model.safetensors"), str)
              and isinstance(try_to_load_from_cache(r, "config.json"), str)]
    if not cached:
        pytest.skip("no AutonLab/MOMENT-1-* checkpoint in the local HF cache (no downloads in tests)")
    m = load_moment(cached[0], "reconstruction")  # strict: raises on any unmapped or missing tensor
    with torch.no_grad():
        out, _ = m.eval().reconstruct(torch.sin(torch.linspace(0, 40, 512)).repeat(2, 1, 1))
    assert torch.isfinite(out).all()
