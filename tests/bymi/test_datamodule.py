"""Byzantine datamodules: the official .Rdata release, .npz features, torchvision MNIST files (idx format) through a
ResNet18, the embedded digits and Gaussian sources, stratified machine partitions, and their one-line errors."""

from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules.byzantine import ByzantineDataModule, MachineShardDataModule, stratified_partition
from zoo.data import is_resumable
from zoo.errors import ZooError

DATA = Path(__file__).parent / "data"
# written by R 4.2.2 with: set.seed(21); N <- 120; x_train <- matrix(round(rnorm(N*4), 6), N, 4);
# y_train <- rep(1:3, length.out = N) + 0; x_test <- matrix(round(rnorm(30*4), 6), 30, 4);
# y_test <- rep(1:3, length.out = 30) + 0; save(x_train, y_train, x_test, y_test, file = "tiny_resnet18_pca_4.Rdata")
RDATA = DATA / "tiny_resnet18_pca_4.Rdata"


def test_reads_the_official_rdata_layout():
    dm = ByzantineDataModule(source="rdata", path=str(RDATA), machines=6, n_per_machine=18, n_components=4,
                             n_repeats=2)
    dm.setup("fit")
    x_tr, y_tr, x_te, y_te = dm._arrays
    # R's x_train[1, ] and x_test[30, ] (print(..., digits = 10)); labels 1..3 become 0..2
    np.testing.assert_array_equal(x_tr[0], [0.793013, -0.318102, -1.804041, 0.385990])
    np.testing.assert_array_equal(x_te[29], [-0.232410, 0.031723, 0.796636, -0.065409])
    assert y_tr[:4].tolist() == [0, 1, 2, 0] and np.bincount(y_tr).tolist() == [40, 40, 40]
    # the layout, but not the release (4 features, 3 classes, another name): no Hub dataset, the path named
    assert dm.n_classes == 3 and "datasets" not in dm.card_metadata() and str(RDATA) in dm.card_metadata()["data_source"]
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (18, 4) and batch["x"].dtype == torch.float64
    repeats = list(dm.test_dataloader())
    assert len(repeats) == 2 and repeats[0]["x"].shape == (6, 18, 4)
    # the master keeps its data; the workers are re-partitioned every repeat, never overlapping the master
    assert torch.equal(repeats[0]["x"][0], batch["x"]) and torch.equal(repeats[1]["x"][0], batch["x"])
    assert not torch.equal(repeats[0]["x"][1:], repeats[1]["x"][1:])


def test_only_the_official_rdata_file_is_named_as_the_dataset(tmp_path):
    import pandas as pd
    import rdata

    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.standard_normal((60, 20)), "y_train": pd.Categorical(np.tile(np.arange(1, 11), 6)),
              "x_test": rng.standard_normal((20, 20)), "y_test": pd.Categorical(np.tile(np.arange(1, 11), 2))}
    for name, hub in (("mnist_resnet18_pca_20.Rdata", ["ylecun/mnist"]), ("my_features.Rdata", None)):
        rdata.write_rda(tmp_path / name, arrays)
        dm = ByzantineDataModule(source="rdata", dataset="mnist", path=str(tmp_path / name), machines=3,
                                 n_per_machine=10, n_components=20)
        assert "datasets" not in dm.card_metadata()  # not read yet: nothing is claimed
        dm.setup("fit")
        assert dm.card_metadata().get("datasets") == hub


def test_npz_features_and_their_errors(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "f.npz", x_train=rng.standard_normal((60, 3)), y_train=np.repeat([3, 7], 30),
             x_test=rng.standard_normal((10, 3)), y_test=np.repeat([3, 7], 5))
    dm = ByzantineDataModule(source="npz", path=str(tmp_path / "f.npz"), machines=3, n_per_machine=10,
                             n_components=3)
    dm.setup("fit")
    assert dm.n_classes == 2 and "datasets" not in dm.card_metadata()
    assert str(tmp_path / "f.npz") in dm.card_metadata()["data_source"]  # one's own file, named by its path
    np.savez(tmp_path / "newlabel.npz", x_train=rng.standard_normal((60, 3)), y_train=np.repeat([3, 7], 30),
             x_test=rng.standard_normal((10, 3)), y_test=np.repeat([3, 9], 5))
    with pytest.raises(ZooError, match=r"newlabel.npz: test labels \[9\] do not occur in y_train"):
        ByzantineDataModule(source="npz", path=str(tmp_path / "newlabel.npz"), machines=3, n_per_machine=10,
                            n_components=3).setup("fit")
    np.savez(tmp_path / "bad.npz", x_train=rng.standard_normal((60, 3)), y_train=np.zeros(60))
    with pytest.raises(ZooError, match="lacks x_test, y_test"):
        ByzantineDataModule(source="npz", path=str(tmp_path / "bad.npz"), n_components=3).setup("fit")
    with pytest.raises(ZooError, match="has 3 columns but n_components=20|features have 3 columns"):
        ByzantineDataModule(source="npz", path=str(tmp_path / "f.npz"), machines=3, n_per_machine=10).setup("fit")
    with pytest.raises(ZooError, match="not found"):
        ByzantineDataModule(source="rdata", path=str(tmp_path / "none.Rdata")).setup("fit")
    (tmp_path / "junk.Rdata").write_bytes(b"not R at all")
    with pytest.raises(ZooError, match="not a readable R data file"):
        ByzantineDataModule(source="rdata", path=str(tmp_path / "junk.Rdata")).setup("fit")
    with pytest.raises(ZooError, match="exceed the 60 available"):
        ByzantineDataModule(source="npz", path=str(tmp_path / "f.npz"), machines=7, n_per_machine=10,
                            n_components=3).setup("fit")
    with pytest.raises(ZooError, match="must be even"):
        ByzantineDataModule(n_per_machine=9)
    with pytest.raises(ZooError, match="needs data.init_args.path"):
        ByzantineDataModule(source="rdata").setup("fit")


def _write_idx(path: Path, array: np.ndarray) -> None:
    """MNIST's idx format (big-endian header: magic 0x0000080N, then the dims), unpacked as torchvision keeps it."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_torchvision_mnist_files_through_resnet18(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for split, n in (("train", 24), ("t10k", 6)):
        _write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(raw / f"{split}-labels-idx1-ubyte", np.arange(n) % 2)
    import torchvision

    assert len(torchvision.datasets.MNIST(str(tmp_path), train=True, download=False)) == 24
    dm = ByzantineDataModule(source="torchvision", dataset="mnist", root=str(tmp_path), machines=3, n_per_machine=8,
                             n_components=5, weights=None, image_size=32, cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    assert dm._arrays[0].shape == (24, 5) and dm._arrays[2].shape == (6, 5)
    assert len(list((tmp_path / "cache").glob("mnist_resnet18_*.npz"))) == 1
    # random-init ResNet18 here: no base model; with the default timm weights the card names them
    assert "base_model" not in dm.card_metadata() and dm.card_metadata()["datasets"] == ["ylecun/mnist"]
    assert ByzantineDataModule(source="torchvision").card_metadata()["base_model"] == "timm/resnet18.tv_in1k"
    assert MachineShardDataModule(source="torchvision").card_metadata()["base_model"] == "timm/resnet18.tv_in1k"
    with pytest.raises(ZooError, match="FashionMNIST not found under"):
        ByzantineDataModule(source="torchvision", dataset="fmnist", root=str(tmp_path), weights=None).setup("fit")


def test_stratified_partition_spreads_classes_evenly():
    y = np.repeat(np.arange(5), [50, 40, 30, 20, 10])
    parts = stratified_partition(y, np.arange(len(y)), 7, 20, np.random.default_rng(0))
    assert parts.shape == (7, 20) and len(np.unique(parts)) == 140
    counts = np.stack([np.bincount(y[p], minlength=5) for p in parts])
    assert (counts.max(0) - counts.min(0) <= 1).all()


def test_digits_and_gaussian_sources():
    dm = ByzantineDataModule(source="digits", machines=40, n_per_machine=34, n_repeats=1)
    dm.setup("test")
    assert dm.card_metadata()["data_source"].startswith("embedded: scikit-learn digits")
    rep = next(iter(dm.test_dataloader()))
    assert rep["x"].shape == (40, 34, 20)
    gm = ByzantineDataModule(source="gaussian", machines=11, n_per_machine=40, dim=3, rho=0.5, n_repeats=7,
                             repeats_per_batch=4)
    gm.setup("test")
    blocks = list(gm.test_dataloader())
    assert [b["xbar1"].shape for b in blocks] == [(4, 10, 3), (3, 10, 3)] and blocks[0]["n_half"] == 20
    assert gm.model_kind == "location" and gm.n_features == 3
    with pytest.raises(ZooError, match="repeats_per_batch >= 1; got 11, 40, 7, 0"):  # was a ZeroDivisionError in test
        ByzantineDataModule(source="gaussian", machines=11, n_per_machine=40, n_repeats=7, repeats_per_batch=0)
    big = ByzantineDataModule(source="gaussian", machines=2, n_per_machine=40, dim=3, rho=0.5, n_master=20000)
    big.setup("fit")
    cov = np.cov(big._master.numpy().T)
    np.testing.assert_allclose(cov, 0.5 ** np.abs(np.subtract.outer(range(3), range(3))), atol=0.04)


def test_machine_shards():
    dm = MachineShardDataModule(machines=3, n_per_machine=50, machine=2, batch_size=25)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (25, 20) and x.dtype == torch.float32
    assert len(dm.train_dataloader().dataset) == 50 and set(dm.shards[2]).isdisjoint(dm.shards[0])
    with pytest.raises(ZooError, match="outside the 3 shards"):
        MachineShardDataModule(machines=3, machine=3)


def test_training_loaders_resume_where_they_stood():
    """A fit resumed mid-epoch reads the rest of that epoch's batches, not the epoch again from its start."""
    dm = MachineShardDataModule(machines=3, n_per_machine=50, machine=1, batch_size=10)
    dm.setup("fit")

    def epoch(loader, epoch_no, skip_state=None):
        loader.sampler.set_epoch(epoch_no)
        if skip_state is not None:
            loader.load_state_dict(skip_state)
        return [y.tolist() for _, y in loader]

    straight = epoch(dm.train_dataloader(), 3)
    first = dm.train_dataloader()
    first.sampler.set_epoch(3)
    it = iter(first)
    seen = [next(it)[1].tolist() for _ in range(2)]
    assert seen == straight[:2]
    assert epoch(dm.train_dataloader(), 3, first.state_dict()) == straight[2:]
    assert epoch(dm.train_dataloader(), 4) != straight  # the epoch reshuffles
    master = ByzantineDataModule(source="digits", machines=3, n_per_machine=20)
    master.setup("fit")
    assert is_resumable(master.train_dataloader())
