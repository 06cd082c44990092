"""SCoRe data in its released formats: an RGB MedMNIST .npz against the model's channels, CIFAR checksum failures.

* MedMNIST v2/v3 (zenodo 10519652): ``dermamnist.npz`` holds ``{train,val,test}_images`` uint8 (N, 28, 28, 3) and
  ``{train,val,test}_labels`` uint8 (N, 1), 7 classes (``dermamnist_64.npz``: 64 x 64).
* CIFAR-10 python version (cs.toronto.edu/~kriz/cifar.html): ``cifar-10-batches-py/`` with ``data_batch_1..5``,
  ``test_batch`` (pickled dicts: b"data" uint8 (N, 3072), b"labels") and ``batches.meta``.
"""

import pickle
from pathlib import Path

import numpy as np
import pytest

from datamodules.cifar_lt import CIFARLTDataModule
from datamodules.medmnist import MedMNISTDataModule
from zoo.cli import main
from zoo.errors import ZooError

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke" / "score_organamnist.yaml")


def write_dermamnist(path: Path, size: int = 28, n=(70, 14, 21)):
    rng = np.random.default_rng(0)
    data = {}
    for split, k in zip(("train", "val", "test"), n):
        data[f"{split}_images"] = rng.integers(0, 256, (k, size, size, 3), dtype=np.uint8)
        data[f"{split}_labels"] = (np.arange(k) % 7).reshape(-1, 1).astype(np.uint8)
    np.savez_compressed(path, **data)


def _fit(root, *extra):
    return main(["fit", "--config", SMOKE, "--wandb_mode", "disabled", "--trainer.max_epochs", "1",
                 "--data.init_args.source", "local", "--data.init_args.flag", "dermamnist",
                 "--data.init_args.root", str(root), "--data.init_args.imbalance_ratio", "null",
                 "--model.init_args.num_classes", "7", *extra])


def test_rgb_medmnist_with_a_one_channel_model_is_a_one_line_error(in_tmp, capsys):
    write_dermamnist(in_tmp / "dermamnist.npz")
    assert _fit(in_tmp, "--model.init_args.in_chans", "1", "--data.init_args.as_rgb", "false") == 2  # was a convolution traceback: expected input[..., 3, 28, 28] to have 1 channels
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "zoo: error: model.in_chans=1 but the data has 3-channel images; set --model.init_args.in_chans 3"


def test_medmnist_64_rgb_exposes_its_channels(tmp_path):
    write_dermamnist(tmp_path / "dermamnist_64.npz", size=64, n=(14, 7, 7))
    dm = MedMNISTDataModule(flag="dermamnist", root=str(tmp_path), size=64, batch_size=4, num_workers=0)
    dm.setup("fit")
    assert dm.num_channels == 3 and dm.num_classes == 7
    assert next(iter(dm.train_dataloader()))[0].shape == (4, 2, 3, 64, 64)
    with pytest.raises(ZooError, match="batch_size and eval_batch_size must be >= 1, got 0"):
        MedMNISTDataModule(batch_size=0)


def _write_cifar10(folder: Path):
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, 20).tolist(),
                 b"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * 20}
        (folder / name).write_bytes(pickle.dumps(batch))
    meta = {b"num_cases_per_batch": 20, b"label_names": [b"airplane", b"automobile", b"bird", b"cat", b"deer",
                                                         b"dog", b"frog", b"horse", b"ship", b"truck"]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))


def test_cifar_checksum_failure_names_the_files_and_where_to_get_them(tmp_path):
    _write_cifar10(tmp_path / "cifar-10-batches-py")  # the real layout, but not the released bytes
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    dm = CIFARLTDataModule(dataset="cifar10", source="local", root=str(tmp_path), num_workers=0)
    with pytest.raises(ZooError) as e:
        dm.setup("fit")
    msg = str(e.value)
    assert "fail their MD5 check: data_batch_1 (checksum mismatch)" in msg and "data_batch_3 (missing)" in msg
    assert "batches.meta (checksum mismatch)" in msg
    assert "cifar-10-python.tar.gz" in msg and "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in msg
    assert "this datamodule never downloads" in msg and "\n" not in msg
