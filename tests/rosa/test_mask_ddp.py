"""RoSA's mask stage under DDP (2 CPU processes, gloo, Lightning's own DDP strategy and sampler): every rank gets the
same mask, the top-k of the cross-rank mean of the Fisher scores that the ranks collected on different data, and
DDP's gradient reduction keeps the ranks' LoRA weights identical through the warm-up."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from zoo.registry import ROOT
from zoo.rosa import MASK_FILE
from zoo.rosa.mask import fisher_mask


@pytest.mark.timeout(300)
def test_ddp_ranks_share_the_mask_of_the_mean_fisher(in_tmp):
    cfg = yaml.safe_load((ROOT / "configs" / "smoke" / "rosa_gsm8k_mask.yaml").read_text())
    assert cfg["model"]["class_path"] == "zoo.rosa.RoSAModule" and cfg["model"]["init_args"]["stop_after_mask"]
    cfg["model"]["class_path"] = "rosa_ddp_probe.RoSAMaskProbe"
    cfg["trainer"].update(devices=2, strategy="ddp")
    Path("ddp.yaml").write_text(yaml.safe_dump(cfg))
    run = subprocess.run(["zoo", "fit", "--config", "ddp.yaml", "--wandb_mode", "disabled", "--run_name", "ddp"],
                         capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]

    (run_dir,) = Path("runs/ddp").iterdir()
    r0, r1 = (load_file(str(run_dir / f"probe.rank{r}.safetensors")) for r in (0, 1))
    layers = sorted(k[len("mask/"):] for k in r0 if k.startswith("mask/"))
    assert layers and sorted(k[len("mask/"):] for k in r1 if k.startswith("mask/")) == layers
    # the ranks saw different micro-batches, so their own scores differ (otherwise this test would prove nothing)
    assert any(not torch.equal(r0[f"local/{n}"], r1[f"local/{n}"]) for n in layers)
    mean = {n: (r0[f"local/{n}"] + r1[f"local/{n}"]) / 2 for n in layers}
    density = cfg["model"]["init_args"]["density"]
    expected = fisher_mask(mean, density)
    for n in layers:
        torch.testing.assert_close(r0[f"mean/{n}"], mean[n], rtol=1e-6, atol=0)
        torch.testing.assert_close(r1[f"mean/{n}"], mean[n], rtol=1e-6, atol=0)
        assert torch.equal(r0[f"mask/{n}"], r1[f"mask/{n}"]), f"ranks disagree on the mask of {n}"
        assert torch.equal(r0[f"mask/{n}"].to(expected[n].dtype), expected[n]), n
    # DDP averaged the LoRA gradients: after the warm-up and collection steps both ranks hold the same weights
    lora = [k for k in r0 if k.startswith("lora/")]
    assert lora and all(torch.equal(r0[k], r1[k]) for k in lora)
    # rank 0 saved that mask in the run directory
    saved = load_file(str(run_dir / MASK_FILE))
    for n in layers:
        assert torch.equal(saved[n], r0[f"mask/{n}"].to(saved[n].dtype))
