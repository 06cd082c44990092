"""PCDenoiserModule: the training loss, Hub round trip, a fit -> restoration test through Lightning, refusals."""

import lightning as L
import pytest
import torch

from datamodules.restoration import RestorationDataModule
from zoo.errors import ZooError
from zoo.pcdenoiser import PCDenoiserModule, jacobian_spectral_norm_sq, spc_operator, spc_penalty
from zoo.pcdenoiser.denoisers import DeepinvDRUNet

TINY = dict(denoiser="dncnn", dncnn_features=4, dncnn_depth=3, power_iters=3, diagnostic_every=0, diagnostic_iters=3)


def test_training_loss_is_l1_plus_r_times_the_hinged_penalty():
    torch.manual_seed(0)
    m = PCDenoiserModule(**TINY, penalty_weight=0.5, constrain="residual")
    noisy, clean, sigma = torch.rand(3, 1, 12, 12), torch.rand(3, 1, 12, 12), torch.tensor([0.1, 0.2, 0.05])
    torch.manual_seed(7)
    loss = m.training_step((noisy, clean, sigma), 0)
    l1 = torch.nn.functional.l1_loss(m(noisy, sigma), clean)
    f = spc_operator(lambda z: z - m(z, sigma[:1]), 0.9)  # residual: T = I - D, at the first image's sigma
    torch.manual_seed(7)
    norm = jacobian_spectral_norm_sq(f, noisy[:1], 3)
    torch.testing.assert_close(loss, l1 + 0.5 * spc_penalty(norm, 0.2))
    loss.backward()  # differentiable through the power iteration
    assert m.denoiser.body[0].weight.grad.abs().sum() > 0


def test_hub_round_trip(tmp_path):
    m = PCDenoiserModule(**TINY, a=0.8, b=0.15, solver="hqs")
    m.save_pretrained(tmp_path)
    m2 = PCDenoiserModule.from_pretrained(tmp_path)
    x = torch.rand(2, 1, 8, 8)
    torch.testing.assert_close(m.eval()(x, 0.1), m2(x, 0.1))
    assert m2.hparams.solver == "hqs" and m2.hparams.a == 0.8


def test_drunet_is_deepinvs_with_the_papers_layout():
    net = DeepinvDRUNet(1, (8, 16, 32, 64), nb=1)
    assert all(c.bias is None for c in net.modules() if isinstance(c, torch.nn.Conv2d))  # bias-free
    assert net(torch.rand(1, 1, 16, 16), 0.1).shape == (1, 1, 16, 16)
    assert net.net.m_head.in_channels == 2  # image + noise map


def test_fit_then_restore_with_init_from(tmp_path):
    data = dict(source="skimage", skimage_train=["camera"], skimage_val=["coins"], skimage_test=["camera"],
                image_size=32, patch_size=16, batch_size=2, samples_per_epoch=4, n_synthetic_kernels=1,
                synthetic_kernel_size=5)
    L.seed_everything(0, verbose=False)
    kw = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer = L.Trainer(max_steps=2, limit_val_batches=1, num_sanity_val_steps=0, default_root_dir=tmp_path / "fit",
                        **kw)
    trainer.fit(PCDenoiserModule(**TINY), datamodule=RestorationDataModule(**data))
    ckpt = tmp_path / "fit" / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    assert {"train/l1", "train/jacobian_norm_sq", "val/psnr"} <= set(trainer.callback_metrics)
    restorer = PCDenoiserModule(**TINY, init_from=str(ckpt), solver="fbs", iters=4, lam=1.0)
    tester = L.Trainer(default_root_dir=tmp_path / "test", **kw)
    (res,) = tester.test(restorer, datamodule=RestorationDataModule(**data, task="deblur"))
    assert {"test/psnr", "test/ssim", "test/psnr_best_iter", "test/jacobian_norm_sq_median",
            "test/lambda_max_sym_median"} <= set(res)
    lines = (tmp_path / "test" / "restoration_curves.csv").read_text().splitlines()
    assert lines[0] == "iter,psnr_mean,relative_change_mean" and len(lines) == 5
    torch.testing.assert_close(restorer.denoiser.body[0].weight, trainer.lightning_module.denoiser.body[0].weight)
    # the weights of another architecture are refused
    wrong = PCDenoiserModule(**{**TINY, "dncnn_features": 6}, init_from=str(ckpt))
    with pytest.raises(ZooError, match="does not fit this denoiser"):
        L.Trainer(default_root_dir=tmp_path / "t2", **kw).test(wrong, datamodule=RestorationDataModule(**data))


@pytest.mark.parametrize("kwargs,match", [
    (dict(denoiser_sigma=12.75), r"\[0, 1\] units"),
    (dict(a=0.15, b=0.3), "0 < b < a"),
    (dict(a=0.9, b=0.15), "a \\+ b <= 1"),
    (dict(lam=-1.0), "lambda must be > 0"),
    (dict(channels=2), "channels must be 1"),
    (dict(k=1.0), "k must be in"),
    (dict(admm_rho=0.0), "admm_rho must be > 0"),
    (dict(ishikawa_outer="gamma"), "ishikawa_outer must be"),
])
def test_bad_configuration_is_refused(kwargs, match):
    with pytest.raises(ZooError, match=match):
        PCDenoiserModule(**{**TINY, **kwargs})
