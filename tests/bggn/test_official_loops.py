"""The paper configs run as many epochs (iterations) as the official loops do, not as many as the official settings
name: the predictor's ``for i in range(1, args.pred_train_epoch)``, the VAE pretraining's
``range(1, args.vae_pretrain_epoch)`` and BGGN's ``range(1, args.vae_bias_epoch)`` run one fewer than the setting;
the classifier's ``range(1, args.f_model_train_epoch + 1)`` runs all of them. The synthetic configs take the Toxic
settings (official EXPS/toxic_*.yml; the synthetic classifier CelebA's 3 epochs)."""

import pytest
import yaml

from zoo.registry import ROOT

# config -> (official setting, its value in EXPS/*.yml, epochs or iterations the official loop runs)
OFFICIAL = {
    "bggn_toxic_classifier": ("f_model_train_epoch", 2, 2),
    "bggn_celeba_classifier": ("f_model_train_epoch", 3, 3),
    "bggn_synthetic_classifier": ("f_model_train_epoch", 3, 3),
    "bggn_toxic_predictor": ("pred_train_epoch", 80, 79),
    "bggn_celeba_predictor": ("pred_train_epoch", 60, 59),
    "bggn_synthetic_predictor": ("pred_train_epoch", 80, 79),
    "bggn_toxic_vae": ("vae_pretrain_epoch", 10, 9),
    "bggn_celeba_vae": ("vae_pretrain_epoch", 3, 2),
    "bggn_synthetic_vae": ("vae_pretrain_epoch", 10, 9),
    "bggn_toxic": ("vae_bias_epoch", 700, 699),
    "bggn_celeba": ("vae_bias_epoch", 500, 499),
    "bggn_synthetic": ("vae_bias_epoch", 700, 699),
}


@pytest.mark.parametrize("stem", sorted(OFFICIAL))
def test_configs_run_what_the_official_loops_run(stem):
    setting, value, runs = OFFICIAL[stem]
    text = (ROOT / "configs" / f"{stem}.yaml").read_text()
    cfg = yaml.safe_load(text)
    if setting == "vae_bias_epoch":  # one epoch of `iterations` fine-tuning batches
        assert cfg["trainer"]["max_epochs"] == 1
        key, got = "iterations:", cfg["data"]["init_args"]["iterations"]
    else:
        key, got = "max_epochs:", cfg["trainer"]["max_epochs"]
    assert got == runs, f"{stem}: {got}, but the official loop runs {runs} ({setting}: {value})"
    # the line says why: the official setting and its value
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith(key)]
    assert f"{setting}: {value}" in line, line
