"""The datamodules read the real released formats (CelebA through torchvision from MMLab's files, Jigsaw's
all_data_with_identities.csv with DistilBERT embeddings from a local model) and refuse bad input in one line."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules.intersectional import BiasTableDataModule, IntersectionalSamplesDataModule
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


def tiny_distilbert(path):
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "you", "are", "a", "nice", "bad", "person", "."]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    DistilBertTokenizer(str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(0)
    cfg = DistilBertConfig(vocab_size=len(vocab), dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                           max_position_embeddings=64)
    DistilBertModel(cfg).save_pretrained(path)


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
    with pytest.raises(ZooError, match="leaves no training combination"):
        BiasTableDataModule(source="table", table_path=str(tmp_path / "t.csv"), unseen_share=0.9).setup("fit")
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
