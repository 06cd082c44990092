"""Every smoke config runs end to end through the real `zoo` command: fit, then test, then the card."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import idle_probe
import pytest

from zoo.checks import one_process_reason
from zoo.cli import main
from zoo.configs import read_yaml
from zoo.registry import PAPERS
from zoo.trainer import ZooCLI

NOT_DETERMINISTIC = "does not have a deterministic implementation"  # torch's warn-only alert
CASES = [(p, stem) for p in PAPERS.values() if p.status != "planned" for stem in p.configs
         if p.config_path(stem, smoke=True).exists()]


@pytest.mark.timeout(600)  # a hang guard: the first config of a session also pays the imports, slow on a busy machine
@pytest.mark.parametrize("paper, stem", CASES, ids=[s for _, s in CASES])
def test_smoke_config_end_to_end(in_tmp, paper, stem):
    cfg = str(paper.config_path(stem, smoke=True))
    # W&B is exercised by the framework tests; here it would only add start-up time per config.
    common = ["--config", cfg, "--wandb_mode", "disabled"]
    if "fit" in paper.smoke_verbs:
        idle_probe.SEEN.clear()
        fit_warnings = _run_warned(["fit", *common, "--trainer.callbacks+=idle_probe.IdleParameters"])
        assert_ddp_is_told_of_idle_parameters(cfg)
        # the README's exact resume: every training loader can say where it stood (a fork's ranks are not seen here)
        assert not [w for w in fit_warnings if "not stateful" in str(w.message)]
        # a config without a validation set turns the loop off instead of handing Lightning an empty loader
        assert not [w for w in fit_warnings if "across ranks is zero" in str(w.message)]
        # every kernel of the fit has a deterministic form on CPU (callbacks/determinism.py)
        assert not [w for w in fit_warnings if NOT_DETERMINISTIC in str(w.message)]
        (run,) = Path("runs", stem).iterdir()
        last = run / "checkpoints" / "last.ckpt"
        assert last.exists()
        # zoo's two checkpoints and nothing else (Lightning added a full one of its own per epoch for a module
        # without a monitor)
        extra = [p for p in run.rglob("*.ckpt") if p != last and not re.fullmatch(r"best-\d+-\d+\.ckpt", p.name)]
        assert not extra and len(list(run.rglob("best-*.ckpt"))) <= 1, extra
        test_warnings = _run_warned(["test", *common, "--ckpt_path", str(last)])
        assert not [w for w in test_warnings for m in ZooCLI.EVAL_RESTORE_NOISE if re.match(m, str(w.message))]
        assert not [w for w in test_warnings if NOT_DETERMINISTIC in str(w.message)]
        assert_publishes_exactly(run)
    else:
        assert not [w for w in _run_warned(["test", *common]) if NOT_DETERMINISTIC in str(w.message)]
        (run,) = Path("runs", stem).iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["paper"] == paper.id
    assert any(k.startswith("test/") for k in summary.get("test", {})), summary
    card_text = (run / "README.md").read_text()
    assert "model-index" in card_text and "## Results of this run" in card_text
    # the card says what this run used: a random-init smoke model has no base model, embedded data no Hub dataset
    from huggingface_hub import ModelCard

    card, meta = ModelCard(card_text), summary.get("card_metadata", {})
    assert card.data.base_model == meta.get("base_model")
    assert (card.data.datasets or []) == list(meta.get("datasets") or [])
    assert meta.get("data_source"), "the datamodule's card_metadata() names the data this run used"
    assert "## What this run used" in card_text and meta["data_source"] in card_text
    # a run with no model of its own (an algorithm, stored data, released generations) says so, not "randomly
    # initialised"; front matter never carries these prose lines
    assert (f"- Model: {meta['model_source']}" if meta.get("model_source") else "- Base model: ") in card_text
    assert "model_source" not in card_text.split("---")[1]
    for r in card.data.eval_results:  # readable metric names, the split apart
        assert "/" not in r.metric_type and r.dataset_split in ("test", "validation", "train")


def assert_ddp_is_told_of_idle_parameters(cfg: str) -> None:
    """A module that may train under DDP and whose backwards leave parameters without a gradient declares
    `ddp_find_unused_parameters`: DDP would stop it at its second step (tests/support/idle_probe.py). A fit on forked
    ranks (bymi_ddp_digits) is seen by no probe here: it trains under DDP itself."""
    forked = "fork" in str((read_yaml(cfg).get("trainer") or {}).get("strategy"))
    assert forked or len(idle_probe.SEEN) == 1, f"the probe saw {len(idle_probe.SEEN)} fits"
    for r in idle_probe.SEEN:
        if r["idle"] and not r["declared"] and not one_process_reason(r["module"], "fit"):
            step, names = r["idle"][0]
            pytest.fail(f"{r['module'].__name__} leaves {len(names)} of {r['params']} trainable parameters without "
                        f"a gradient in {len(r['idle'])} backward(s), first at step {step} ({', '.join(names[:4])}) "
                        f"and does not declare ddp_find_unused_parameters")


def _run_warned(argv: list[str]) -> list[warnings.WarningMessage]:
    """Run a `zoo` command, which must succeed, and return every warning it raised."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(argv) == 0
    return seen


def assert_publishes_exactly(run: Path) -> None:
    """What `zoo push` uploads (the run's module through save_pretrained) loads back with from_pretrained to the
    very weights and buffers the run's last checkpoint holds."""
    import torch

    from zoo.hub import module_from_run

    module = module_from_run(run)
    published = module.save_pretrained(run / "published")
    again = type(module).from_pretrained(published)
    want, got = module.state_dict(), again.state_dict()
    assert want and sorted(got) == sorted(want)
    for k, v in want.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(got[k], v), k

