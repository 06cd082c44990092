"""DPSASRecModule end to end with DPClipping + SeqRecDataModule, and the Hub round trip (tied weights)."""

import re

import lightning.pytorch as pl
import pytest
import torch

from callbacks.dp_clipping import DPClipping
from datamodules.seqrec import SeqRecDataModule
from zoo.dpformer import DPSASRecModule


def _trainer(tmp_path, callbacks, steps=3):
    return pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      limit_val_batches=1, val_check_interval=steps, callbacks=callbacks,
                      default_root_dir=tmp_path)


def _dm(poisson=True):
    return SeqRecDataModule(source="embedded", synthetic_users=120, synthetic_items=50, max_len=12,
                            batch_size=16, eval_batch_size=120, poisson_sampling=poisson)


def test_private_fit_with_re_attention_then_hub_round_trip(tmp_path):
    pl.seed_everything(0)
    module = DPSASRecModule(max_len=12, d_model=16, n_layers=2, d_ff=16, dropout=0.1, re_attention=True)
    cb = DPClipping(mode="phantom", max_grad_norm=1.0, target_epsilon=8.0)
    trainer = _trainer(tmp_path, [cb])
    trainer.fit(module, datamodule=_dm())
    assert cb.steps_taken == 3 and 7.9 < cb.epsilon <= 8.0
    assert module.hparams.num_items == 50
    assert module.model.weight_noise_var > 0 and module.model.item_noise_var[1:].min() > 0
    assert module.model.output.weight is module.model.item_emb.weight
    assert "val/ndcg10" in trainer.callback_metrics and "dp/epsilon" in trainer.callback_metrics

    module.save_pretrained(tmp_path / "hub")
    loaded = DPSASRecModule.from_pretrained(tmp_path / "hub")
    assert loaded.model.output.weight is loaded.model.item_emb.weight
    seq = torch.randint(1, 51, (4, 12))
    module.eval(), loaded.eval()
    assert torch.allclose(module(seq), loaded(seq))


def test_non_private_training_with_plain_loader(tmp_path):
    pl.seed_everything(0)
    module = DPSASRecModule(max_len=12, d_model=16, n_layers=1, d_ff=16, re_attention=False)
    trainer = _trainer(tmp_path, [], steps=2)
    trainer.fit(module, datamodule=_dm(poisson=False))
    res = trainer.test(module, datamodule=_dm(poisson=False), verbose=False)[0]
    assert 0 <= res["test/ndcg10"] <= res["test/hr10"] <= 1


def test_best_checkpoint_follows_a_configured_top_k():
    """The best checkpoint monitors NDCG at the configured cut-off (it was hard-coded to val/ndcg10, so any other
    top_k broke checkpointing once validation ran)."""
    from zoo.dpformer import DPSASRecModule

    assert DPSASRecModule(num_items=20, top_k=10).monitor == "val/ndcg10"
    assert DPSASRecModule(num_items=20, top_k=5).monitor == "val/ndcg5"


def test_smoke_fit_with_top_k_5_keeps_a_best_checkpoint(in_tmp):
    from pathlib import Path

    from zoo.cli import main
    from zoo.registry import PAPERS

    cfg = PAPERS["dpformer"].config_path("dpformer_movielens", smoke=True)
    assert main(["fit", "--config", str(cfg), "--wandb_mode", "disabled", "--model.init_args.top_k", "5"]) == 0
    (run,) = Path("runs", "dpformer_movielens").iterdir()
    assert list((run / "checkpoints").glob("best-*.ckpt")), "no best checkpoint by val/ndcg5"


@pytest.mark.parametrize("kwargs, needle", [
    ({"d_model": 15, "n_heads": 2}, "d_model=15 must be a positive multiple of n_heads=2"),  # was a traceback
    ({"n_heads": 0}, "n_heads=0"),  # was a ZeroDivisionError
    ({"top_k": 0}, "top_k=0"),  # HR@0 is 0 for every model: the run went on reporting it
])
def test_architecture_and_cut_off_out_of_range_are_refused(kwargs, needle):
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match=re.escape(needle)):
        DPSASRecModule(num_items=20, **kwargs)
