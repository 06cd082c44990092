"""The paper's grid (GPT-Neo 125M / 1.3B / 2.7B x forget sets of 32 / 128) = a method config + one overlay.

Parsed with the real CLI parser (types checked, nothing instantiated or downloaded); the merged values must be the
paper's: the model and its tokenizer, the forget-set file, and one optimizer step over the whole forget set."""

from __future__ import annotations

import pytest

from zoo.registry import ROOT
from zoo.unlearning.module import METHODS

OVERLAYS = {  # overlay -> (model, forget-set size, unseen MA level of the model in the official analysis)
    None: ("EleutherAI/gpt-neo-125m", 32, 0.2994),
    "forget128": ("EleutherAI/gpt-neo-125m", 128, 0.2994),
    "gptneo-1.3b": ("EleutherAI/gpt-neo-1.3B", 32, 0.3327),
    "gptneo-1.3b_forget128": ("EleutherAI/gpt-neo-1.3B", 128, 0.3327),
    "gptneo-2.7b": ("EleutherAI/gpt-neo-2.7B", 32, 0.3402),
    "gptneo-2.7b_forget128": ("EleutherAI/gpt-neo-2.7B", 128, 0.3402),
}
OFFICIAL = {  # method -> the official configs' values (mem_threshold, first_threshold, first_coef)
    "ga": {}, "sga": {"sga_threshold": 0.70},
    "ta": {"switch_ma": 0.9, "ta_lambda": 3.0},
    "tau": {"sga_threshold": 0.70, "switch_ma": 0.5, "ta_lambda": 1.0},
}


def parse(*configs):
    from zoo.trainer import ZooCLI

    class Parsed(Exception):
        pass

    class ParseOnly(ZooCLI):
        def before_instantiate_classes(self):
            raise Parsed(self.config["fit"])

    args = ["fit"] + [a for c in configs for a in ("--config", str(c))]
    with pytest.raises(Parsed) as e:
        ParseOnly(args=args)
    return e.value.args[0]


def test_every_overlay_file_is_covered():
    assert {p.stem for p in (ROOT / "configs" / "unlearning").glob("*.yaml")} == {k for k in OVERLAYS if k}


@pytest.mark.parametrize("overlay", list(OVERLAYS), ids=str)
@pytest.mark.parametrize("method", METHODS)
def test_method_config_with_overlay_is_the_papers_setting(method, overlay):
    configs = [ROOT / "configs" / f"unlearning_{method}_gptneo125m.yaml"]
    if overlay:
        configs.append(ROOT / "configs" / "unlearning" / f"{overlay}.yaml")
    cfg = parse(*configs)
    model, size, gamma = OVERLAYS[overlay]
    m, d = cfg.model.init_args, cfg.data.init_args
    assert m.method == method and m.model == model and d.tokenizer == model
    assert m.lr == 5e-5 and tuple(m.betas) == (0.9, 0.98) and m.el_n == 10
    assert d.forget_path == f"data/unlearning/lm_extraction_{size}_0.csv"
    # The official UFLDataset refuses a train set whose size is not train_batch_size * gradient_accumulation_steps
    # * len(gpu_list): one optimizer step per epoch over all of D_f, in micro-batches of 8 (per GPU there).
    assert d.batch_size == 8 and d.batch_size * cfg.trainer.accumulate_grad_batches == size
    assert m.ma_threshold == gamma and (m.outlier_low, m.outlier_high) == (0.15, 0.60) and m.stop_on_el is False
    assert {k: m[k] for k in OFFICIAL[method]} == OFFICIAL[method]
    if model != "EleutherAI/gpt-neo-125m":
        assert cfg.trainer.precision == "bf16-mixed" and m.torch_dtype is None  # fp32 master weights
