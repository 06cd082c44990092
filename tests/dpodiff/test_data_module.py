"""PromptsDataModule on files in the real released formats, the loss filter, and the module's bad inputs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from datamodules.prompts import PromptsDataModule
from zoo.dpodiff.embedded import EMBEDDED_PROMPTS
from zoo.errors import ZooError


def _diffusiondb(path):
    """DiffusionDB's metadata.parquet schema (poloclub/diffusiondb README: 13 columns)."""
    df = pd.DataFrame({
        "image_name": ["a.webp", "b.webp", "c.webp"], "prompt": ["a red fox", "a red fox", "a cold lake at night"],
        "part_id": pd.array([1, 1, 2], dtype="uint16"), "seed": pd.array([1, 2, 3], dtype="uint32"),
        "step": pd.array([50, 50, 50], dtype="uint16"), "cfg": pd.array([7.0, 7.0, 9.0], dtype="float32"),
        "sampler": pd.array([8, 8, 1], dtype="uint8"), "width": pd.array([512] * 3, dtype="uint16"),
        "height": pd.array([512] * 3, dtype="uint16"), "user_name": ["u1", "u1", "u2"],
        "timestamp": pd.to_datetime(["2022-08-08 00:00:00"] * 3, utc=True),
        "image_nsfw": pd.array([0.1, 0.2, 0.0], dtype="float32"), "prompt_nsfw": pd.array([0.0] * 3, dtype="float32")})
    df.to_parquet(path)


def _rows(dm):
    dm.setup("test")
    return [r for b in dm.test_dataloader() for r in b]


def test_reads_diffusiondb_metadata_parquet_and_dedupes(tmp_path):
    p = tmp_path / "metadata.parquet"
    _diffusiondb(p)
    dm = PromptsDataModule(source="diffusiondb", path=str(p), batch_size=2)
    assert [r["prompt"] for r in _rows(dm)] == ["a red fox", "a cold lake at night"]
    assert dm.card_metadata()["datasets"] == ["poloclub/diffusiondb"]


def test_reads_coco_captions_and_text(tmp_path):
    coco = {"info": {}, "licenses": [], "images": [{"id": 9, "file_name": "x.jpg", "height": 1, "width": 1}],
            "annotations": [{"image_id": 9, "id": 1, "caption": "A dog on a sofa. "},
                            {"image_id": 9, "id": 2, "caption": "Two cats."}]}
    (tmp_path / "captions_val2014.json").write_text(json.dumps(coco))
    dm = PromptsDataModule(source="coco", path=str(tmp_path / "captions_val2014.json"))
    assert [r["prompt"] for r in _rows(dm)] == ["A dog on a sofa.", "Two cats."]
    assert "datasets" not in dm.card_metadata()
    (tmp_path / "p.txt").write_text("one\n\n two \n")
    assert [r["prompt"] for r in _rows(PromptsDataModule(source="text", path=str(tmp_path / "p.txt")))] == ["one", "two"]


def test_embedded_subset_and_loss_filter(tmp_path):
    rows = _rows(PromptsDataModule(source="embedded", max_prompts=3, seed=1))
    assert len(rows) == 3 and all(r["prompt"] in EMBEDDED_PROMPTS for r in rows)
    scores = {p: (0.9 if i % 2 else 0.8) for i, p in enumerate(EMBEDDED_PROMPTS)}
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    above = _rows(PromptsDataModule(scores_path=str(tmp_path / "scores.json"), filter="above"))
    below = _rows(PromptsDataModule(scores_path=str(tmp_path / "scores.json"), filter="below"))
    assert {r["prompt"] for r in above} == {p for p, s in scores.items() if s > 0.85}
    assert {r["prompt"] for r in below} == {p for p, s in scores.items() if s < 0.85}


def test_bad_data_inputs(tmp_path):
    with pytest.raises(ZooError, match="needs path"):
        PromptsDataModule(source="coco")
    with pytest.raises(ZooError, match="needs scores_path"):
        PromptsDataModule(filter="above")
    with pytest.raises(ZooError, match="does not exist"):
        PromptsDataModule(source="text", path=str(tmp_path / "nope.txt")).setup()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ZooError, match="not a COCO captions file"):
        PromptsDataModule(source="coco", path=str(tmp_path / "bad.json")).setup()
    pd.DataFrame({"text": ["x"]}).to_parquet(tmp_path / "m.parquet")
    with pytest.raises(ZooError, match="not DiffusionDB metadata"):
        PromptsDataModule(source="diffusiondb", path=str(tmp_path / "m.parquet")).setup()


def test_module_refuses_bad_settings():
    from zoo.dpodiff.module import DPODiffModule

    tiny = dict(seed=0, unet_channels=[8, 16], vae_channels=[8, 8], latent_size=8, hidden=16, layers=1, heads=2,
                clip_image_size=16, clip_patch=8)
    with pytest.raises(ZooError, match="use space 'synonym'"):
        DPODiffModule(task="attack", space="antonym", stack=tiny)
    with pytest.raises(ZooError, match="outside the sampler's schedule"):
        DPODiffModule(stack=tiny, num_inference_steps=10)  # t_i = 15.. is past 10 steps
    with pytest.raises(ZooError, match="needs candidates_path"):
        DPODiffModule(stack=tiny, candidates="json")
    with pytest.raises(ZooError, match="unknown tiny stack keys"):
        DPODiffModule(stack={"width": 3}, num_inference_steps=30)
