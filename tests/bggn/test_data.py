"""The datamodules read the real released formats (CelebA through torchvision from MMLab's files, Jigsaw's
all_data_with_identities.csv with DistilBERT embeddings from a local model) and refuse bad input in one line."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from data_cases.corpora import tiny_distilbert  # tests/support: the fuzzer's toxic case loads it too

from datamodules.intersectional import BiasTableDataModule, IntersectionalSamplesDataModule, embed_texts
from zoo.bggn import BGGNModule
from zoo.bggn.bias import write_bias_table
from zoo.errors import ZooError

CELEBA_ATTRS = ("5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair "
                "Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair "
                "Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face "
                "Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair "
                "Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()


def write_celeba(root, n=6):
    """MMLab's release layout: celeba/img_align_celeba/*.jpg and the five list files (counts, headers, -1/1)."""
    from PIL import Image

    base = root / "celeba"
    (base / "img_align_celeba").mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"{i + 1:06d}.jpg" for i in range(n)]
    attrs = rng.choice([-1, 1], (n, 40))
    for f in names:
        Image.fromarray(rng.integers(0, 255, (218, 178, 3), dtype=np.uint8)).save(base / "img_align_celeba" / f)
    (base / "list_attr_celeba.txt").write_text(f"{n}\n" + " ".join(CELEBA_ATTRS) + " \n" + "".join(
        f"{f} " + " ".join(f"{v:2d}" for v in row) + "\n" for f, row in zip(names, attrs)))
    (base / "list_eval_partition.txt").write_text("".join(f"{f} {i % 3}\n" for i, f in enumerate(names)))
    (base / "identity_CelebA.txt").write_text("".join(f"{f} {i + 1}\n" for i, f in enumerate(names)))
    (base / "list_bbox_celeba.txt").write_text(f"{n}\nimage_id x_1 y_1 width height\n" +
                                              "".join(f"{f}    95  71 226 313\n" for f in names))
    (base / "list_landmarks_align_celeba.txt").write_text(
        f"{n}\nlefteye_x lefteye_y righteye_x righteye_y nose_x nose_y leftmouth_x leftmouth_y rightmouth_x "
        "rightmouth_y\n" + "".join(f"{f} 69 109 106 113 77 142 73 152 108 154\n" for f in names))
    return attrs


def test_celeba_through_torchvision(tmp_path):
    attrs = write_celeba(tmp_path)
    dm = IntersectionalSamplesDataModule(source="celeba", root=str(tmp_path), verify_md5=False, batch_size=4)
    dm.setup("fit")
    assert len(dm.names) == 20 and dm.names[0] == "Bags_Under_Eyes"
    x, y, a = next(iter(dm.test_dataloader()))
    assert x.shape == (4, 3, 256, 256)
    assert y.tolist() == ((attrs[:4, 2] + 1) // 2).tolist()  # Attractive, -1/1 -> 0/1
    assert a[0].tolist() == ((attrs[0, [CELEBA_ATTRS.index(n) for n in dm.names]] + 1) // 2).tolist()
    assert len(dm.train_set) == 2 and len(dm.val_set) == 2  # partition 0 / 1
    bad = IntersectionalSamplesDataModule(source="celeba", root=str(tmp_path), verify_md5=False,
                                          sensitive=["Male", "Left_Handed"])
    with pytest.raises(ZooError, match=r"\['Left_Handed'\] absent from CelebA"):
        bad.setup("fit")
    with pytest.raises(ZooError, match="CelebA not found"):  # the md5 sums of the real release are checked
        IntersectionalSamplesDataModule(source="celeba", root=str(tmp_path), verify_md5=True).setup("fit")


def test_toxic_csv_with_local_distilbert(tmp_path):
    model = tmp_path / "distilbert"
    model.mkdir()
    tiny_distilbert(model)
    # the released header (a subset of its 45 columns, in their order) with fractions of raters per identity
    df = pd.DataFrame({"id": [1, 2, 3, 4], "comment_text": ["you are nice", "bad person", "you are bad", "nice ."],
                       "split": ["train", "train", "val", "test"], "toxicity": [0.0, 0.8, 0.5, 0.1],
                       "male": [0.0, 0.5, 0.0, 1.0], "female": [0.2, 0.0, 0.05, 0.0], "black": [0.0, 0.0, 1.0, 0.0],
                       "identity_any": [0, 1, 1, 1]})
    df.loc[4] = [5, "no identity annotation", "train", 0.9, np.nan, np.nan, np.nan, 0]
    df.to_csv(tmp_path / "all_data_with_identities.csv", index=False)
    dm = IntersectionalSamplesDataModule(source="toxic", csv_path=str(tmp_path / "all_data_with_identities.csv"),
                                         embedding_model=str(model), embedding_cache=str(tmp_path / "emb"),
                                         sensitive=["male", "female", "black"], batch_size=8)
    dm.setup("fit")
    x, y, a = next(iter(dm.test_dataloader()))
    assert x.shape == (4, 16)  # the row without identities is dropped
    assert y.tolist() == [0, 1, 1, 0]  # toxicity > 0.4
    assert a.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 0, 0]]  # identity > 0.1
    assert len(dm.val_set) == 1 and list((tmp_path / "emb").glob("*.npy"))
    bad = IntersectionalSamplesDataModule(source="toxic", csv_path=str(tmp_path / "all_data_with_identities.csv"),
                                          embedding_model=str(model), sensitive=["male", "muslim"])
    with pytest.raises(ZooError, match=r"\['muslim'\] absent"):
        bad.setup("fit")


def test_table_source_and_refusals(tmp_path):
    a = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    write_bias_table(tmp_path / "t.csv", ["x", "y"], a, np.array([0.1, 0.2, 0.3, 0.9]), np.array([5, 5, 5, 5]))
    dm = BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=0.25, batch_size=2)
    dm.setup("fit")
    assert dm.names == ["x", "y"] and int(dm.table.seen.sum()) == 3
    one_hot, bias, bins, w = next(iter(dm.train_dataloader()))
    assert one_hot.shape == (2, 4) and torch.allclose(one_hot.view(2, 2, 2).sum(-1), torch.ones(2, 2))
    held = BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=0.9)
    held.setup("fit")  # official int(0.9 * 4) = 3 held out: a share < 1 always leaves a training combination
    assert int(held.table.seen.sum()) == 1
    with pytest.raises(ZooError, match="unseen_share must be in"):
        BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=1.0).setup("fit")
    with pytest.raises(ZooError, match="bias table .* not found"):
        BiasTableDataModule(source="table", table_path=str(tmp_path / "none.csv")).setup("fit")
    # fewer training combinations than BGGN's top-k mask needs
    model = BGGNModule(d=2, latent_dim=4, hidden_dim=8, predictor_hidden_dim=8, predictor_feature_dim=8,
                       gen_batch_size=8)
    model._trainer = SimpleNamespace(datamodule=dm)
    with pytest.raises(ZooError, match="3 training combinations, fewer than the top-8 mask needs"):
        model.setup("fit")
    few = BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=0.25, batch_size=4,
                              iterations=3)
    few.setup("fit")
    with pytest.raises(ZooError, match="3 training combinations, fewer than the batch of 4"):
        few.train_dataloader()


def test_toxic_refuses_labels_outside_zero_one_and_names_the_file_on_the_card(tmp_path):
    model = tmp_path / "distilbert"
    model.mkdir()
    tiny_distilbert(model)
    df = pd.DataFrame({"comment_text": ["you are nice", "bad person", "you are bad"], "toxicity": [0.0, 0.8, 0.5],
                       "male": [0.0, 0.5, 1.0], "female": [0.2, 0.0, 0.05]})
    path = tmp_path / "mine.csv"
    df.to_csv(path, index=False)
    dm = IntersectionalSamplesDataModule(source="toxic", csv_path=str(path), embedding_model=str(model),
                                         sensitive=["male", "female"])
    assert str(path) in dm.card_metadata()["data_source"]  # the user's file, not "Jigsaw all_data_with_identities"
    # a missing toxicity (else labelled 0 by `nan > 0.4`) and an identity outside [0, 1] (else thresholded as 1)
    for col, value, shown in (("toxicity", np.nan, "nan"), ("male", 7.0, "7.0")):
        bad = df.copy()
        bad.loc[1, col] = value
        bad.to_csv(path, index=False)
        with pytest.raises(ZooError, match=rf"mine.csv: {col} is {shown} in row 1 .* fractions of raters in \[0, 1\]"):
            IntersectionalSamplesDataModule(source="toxic", csv_path=str(path), embedding_model=str(model),
                                            sensitive=["male", "female"]).setup("fit")


def test_toxic_embedding_cache_follows_the_texts(tmp_path):
    model = tmp_path / "distilbert"
    model.mkdir()
    tiny_distilbert(model)
    path = tmp_path / "all_data_with_identities.csv"
    kw = {"source": "toxic", "csv_path": str(path), "embedding_model": str(model),
          "embedding_cache": str(tmp_path / "emb"), "sensitive": ["male"]}
    pd.DataFrame({"comment_text": ["you are nice", "bad person"], "toxicity": [0.0, 0.8], "male": [0.0, 1.0]}) \
        .to_csv(path, index=False)
    IntersectionalSamplesDataModule(**kw).setup("fit")
    # the same file name and row count, other texts: the cached embeddings of the old texts must not be reused
    pd.DataFrame({"comment_text": ["bad person", "you are nice"], "toxicity": [0.8, 0.0], "male": [1.0, 0.0]}) \
        .to_csv(path, index=False)
    dm = IntersectionalSamplesDataModule(**kw)
    dm.setup("fit")
    x = dm.all_set.tensors[0].numpy()
    np.testing.assert_allclose(x, embed_texts(["bad person", "you are nice"], str(model)), rtol=1e-5, atol=1e-6)


def test_table_refuses_non_finite_bias_and_repeated_combinations(tmp_path):
    a = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    write_bias_table(tmp_path / "t.csv", ["x", "y"], a, np.array([0.1, np.inf, 0.3, 0.9]), np.array([5, 5, 5, 5]))
    with pytest.raises(ZooError, match=r"t.csv: non-finite bias \(inf\) in row 1"):  # else only a nan training loss
        BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv")).setup("fit")
    write_bias_table(tmp_path / "t.csv", ["x", "y"], a[[0, 1, 2, 1]], np.array([0.1, 0.2, 0.3, 0.9]), np.full(4, 5))
    with pytest.raises(ZooError, match=r"combination \[0, 1\] appears 2 times; one row per distinct combination"):
        BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv")).setup("fit")


def test_table_source_keeps_the_synthetic_d_out_of_its_hparams(tmp_path):
    # a model with d = the table's 2 attributes next to the datamodule's unused synthetic default d=10: Lightning
    # refuses differing hparams shared by model and datamodule, so d must not be one of the table source's
    import lightning.pytorch as L

    from zoo.bggn import BiasPredictorModule

    a = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    write_bias_table(tmp_path / "t.csv", ["x", "y"], a, np.array([0.1, 0.2, 0.3, 0.9]), np.full(4, 5))
    dm = BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=0.25, batch_size=2)
    assert "d" not in dm.hparams and BiasTableDataModule(source="synthetic").hparams.d == 10
    model = BiasPredictorModule(d=2, hidden_dim=8, feature_dim=8)
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=L.loggers.CSVLogger(tmp_path),
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0)
    trainer.fit(model, datamodule=dm)


def test_file_options_with_the_synthetic_source_are_refused(tmp_path):
    # the smoke configs say source: synthetic; a table_path or csv_path added alone would be ignored
    with pytest.raises(ZooError, match="table_path=.* is read only with source='table'.*--data.init_args.source table"):
        BiasTableDataModule(source="synthetic", table_path=str(tmp_path / "t.csv"))
    with pytest.raises(ZooError, match="csv_path=.* is read only with source='toxic'.*--data.init_args.source toxic"):
        IntersectionalSamplesDataModule(source="synthetic", csv_path=str(tmp_path / "c.csv"))
