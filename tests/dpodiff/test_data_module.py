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
    # three rows in DiffusionDB's format are a user's own prompts: named by their path, never claimed as the release
    assert "datasets" not in dm.card_metadata() and str(p) in dm.card_metadata()["data_source"]


def test_diffusiondb_is_claimed_only_for_the_released_tables(tmp_path, monkeypatch):
    from datamodules import prompts

    p = tmp_path / "metadata.parquet"
    _diffusiondb(p)
    monkeypatch.setattr(prompts, "DIFFUSIONDB_ROWS", frozenset({3}))  # the release's 2M rows, scaled down
    assert PromptsDataModule(source="diffusiondb", path=str(p)).card_metadata()["datasets"] == ["poloclub/diffusiondb"]
    pd.DataFrame({"prompt": ["a", "b", "c"]}).to_parquet(tmp_path / "prompts.parquet")  # its rows, not its columns
    assert "datasets" not in PromptsDataModule(source="diffusiondb", path=str(tmp_path / "prompts.parquet")).card_metadata()


def test_null_diffusiondb_prompts_are_dropped_not_read_as_none(tmp_path):
    pd.DataFrame({"prompt": ["a red fox", None]}).to_parquet(tmp_path / "m.parquet")
    assert [r["prompt"] for r in _rows(PromptsDataModule(source="diffusiondb", path=str(tmp_path / "m.parquet")))] == [
        "a red fox"]


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
    # were diffusers' and transformers' tracebacks
    for bad in ({"hidden": 0}, {"clip_patch": -1}, {"unet_channels": [8, 0]}, {"vae_channels": []}):
        with pytest.raises(ZooError, match=f"tiny stack sizes must be positive integers, got {next(iter(bad))}="):
            DPODiffModule(stack={**tiny, **bad}, num_inference_steps=30)


def test_a_prompt_without_candidates_is_skipped_and_counted_not_the_end_of_the_run(in_tmp):
    """One prompt of a dataset whose words have no candidates (no antonyms) used to stop the whole evaluation."""
    from pathlib import Path

    from zoo.cli import main
    from zoo.dpodiff.embedded import EMBEDDED_CANDIDATES

    prompt, bare = EMBEDDED_PROMPTS[0], "a robot reading a book in a library"
    (in_tmp / "prompts.txt").write_text(f"{bare}\n{prompt}\n")
    (in_tmp / "candidates.json").write_text(json.dumps(
        {"antonym": {prompt: EMBEDDED_CANDIDATES["antonym"][prompt], bare: {}}}))
    config = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "dpodiff_improve_diffusiondb.yaml"
    assert main(["test", "--config", str(config), "--wandb_mode", "disabled", "--data.init_args.source", "text",
                 "--data.init_args.path", "prompts.txt", "--data.init_args.max_prompts", "2",
                 "--data.init_args.batch_size", "2", "--model.init_args.candidates", "json",
                 "--model.init_args.candidates_path", "candidates.json"]) == 0
    run = next((in_tmp / "runs" / "dpodiff_improve_diffusiondb").iterdir())
    metrics = json.loads((run / "summary.json").read_text())["test"]
    assert metrics["test/skipped_prompts"] == 1.0 and "test/loss_best" in metrics
    records = [json.loads(line) for line in (run / "dpodiff_test.jsonl").read_text().splitlines()]
    assert [("skipped" in r, r["prompt"]) for r in records] == [(True, bare), (False, prompt)]
