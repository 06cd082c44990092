"""Damaged local data files (empty, random bytes, truncated, another format, a folder for a file) end in a one-line
ZooError naming the file, through the datamodule a user configures (each case was a traceback before: a PIL,
numpy, zipfile, gzip, tarfile, scipy, pandas, pyarrow, json or UnicodeDecodeError, an AssertionError in
torchvision's MNIST parser, or an IndexError in its CelebA parser)."""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from zoo.errors import ZooError

RANDOM = random.Random(0).randbytes(512)  # starts 0xcd: neither UTF-8 nor any container's magic


def damage(path: Path, how: str) -> Path:
    """Damage a written file in place: empty, random bytes, its first half, or a folder of that name."""
    if how == "empty":
        path.write_bytes(b"")
    elif how == "random":
        path.write_bytes(RANDOM)
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "dir":
        path.unlink()
        path.mkdir()
        (path / "x").write_text("x")
    else:
        raise AssertionError(how)
    return path


def written(path: Path, data: bytes = RANDOM) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def png(path: Path, size: int = 16, mode: str = "RGB", value=None) -> Path:
    rng = np.random.default_rng(0)
    shape = (size, size, 3) if mode == "RGB" else (size, size)
    arr = rng.integers(0, 255, shape, dtype=np.uint8) if value is None else np.full(shape, value, np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


# ------------------------------------------------------------------------------------------------ anomaly
def _mvtec(root: Path) -> None:
    png(root / "bottle/train/good/000.png")
    png(root / "bottle/test/broken/000.png")
    png(root / "bottle/ground_truth/broken/000_mask.png", mode="L", value=255)


@pytest.mark.parametrize("how", ["empty", "truncated", "dir"])
def test_mvtec_image(tmp_path, how):
    from datamodules.anomaly import AnomalyDataModule

    _mvtec(tmp_path)
    bad = damage(tmp_path / "bottle/train/good/000.png", how)
    dm = AnomalyDataModule(source="mvtec", root=str(tmp_path), classes=["bottle"], image_size=16)
    dm.setup("fit")
    with pytest.raises(ZooError, match=f"{bad} is not a readable image"):
        dm._sets["train"][0]  # images are read when a batch is drawn


def test_mvtec_mask(tmp_path):
    from datamodules.anomaly import AnomalyDataModule

    _mvtec(tmp_path)
    bad = damage(tmp_path / "bottle/ground_truth/broken/000_mask.png", "random")
    dm = AnomalyDataModule(source="mvtec", root=str(tmp_path), classes=["bottle"], image_size=16)
    dm.setup("test")
    with pytest.raises(ZooError, match=f"{bad} is not a readable mask image .UnidentifiedImageError"):
        dm._sets["test"][0]


def test_visa_split_csv(tmp_path):
    from datamodules.anomaly import AnomalyDataModule

    bad = written(tmp_path / "split_csv/1cls.csv")
    with pytest.raises(ZooError, match=f"{bad} is not a readable VisA split CSV .UnicodeDecodeError"):
        AnomalyDataModule(source="visa", root=str(tmp_path), classes=["candle"]).setup("fit")


def test_visa_split_csv_with_an_unknown_split(tmp_path):
    """A row whose split is neither train nor test was dropped from both, silently."""
    from datamodules.anomaly import AnomalyDataModule

    csv = written(tmp_path / "split_csv/1cls.csv", b"object,split,label,image,mask\ncandle,tain,normal,a.JPG,\n")
    with pytest.raises(ZooError, match=f"{csv}: split 'tain' of a.JPG is not 'train' or 'test'"):
        AnomalyDataModule(source="visa", root=str(tmp_path), classes=["candle"]).setup("fit")


# ------------------------------------------------------------------------------------------------ breaking bad
def _breaking_bad(root: Path):
    from datamodules.breaking_bad import BreakingBadDataModule, synthetic_fracture

    _, parts = synthetic_fracture(np.random.default_rng(3), 2, subdivisions=2)
    folder = root / "everyday/Bottle/0a1b/fractured_0"
    folder.mkdir(parents=True)
    for i, p in enumerate(parts):
        p.export(folder / f"piece_{i}.obj")
    (root / "data_list").mkdir()
    for s in ("train", "val"):
        (root / f"data_list/everyday_{s}.txt").write_text("002 everyday/Bottle/0a1b/fractured_0\n")
    return BreakingBadDataModule(source="breaking_bad", data_root=str(root), category="everyday", n_points=600,
                                 min_points_per_part=100)


def test_breaking_bad_split_file(tmp_path):
    dm = _breaking_bad(tmp_path)
    bad = damage(tmp_path / "data_list/everyday_train.txt", "random")
    with pytest.raises(ZooError, match=f"{bad} is not a readable split file .*UnicodeDecodeError"):
        dm.setup("fit")


@pytest.mark.parametrize("how", ["truncated", "dir"])
def test_breaking_bad_mesh(tmp_path, how):
    dm = _breaking_bad(tmp_path)
    bad = damage(tmp_path / "everyday/Bottle/0a1b/fractured_0/piece_1.obj", how)
    dm.setup("fit")
    with pytest.raises(ZooError, match=f"{bad} is not a readable OBJ mesh"):
        dm._sets["train"][0]


# ------------------------------------------------------------------------------------------------ byzantine
def _features(path: Path) -> Path:
    rng = np.random.default_rng(0)
    np.savez(path, x_train=rng.normal(size=(400, 5)), y_train=np.arange(400) % 10, x_test=rng.normal(size=(50, 5)),
             y_test=np.arange(50) % 10)
    return path


@pytest.mark.parametrize("how, problem", [("empty", "EOFError"), ("truncated", "BadZipFile"), ("random", "pickled")])
def test_byzantine_npz(tmp_path, how, problem):
    from datamodules.byzantine import ByzantineDataModule

    bad = damage(_features(tmp_path / "f.npz"), how)
    dm = ByzantineDataModule(source="npz", path=str(bad), machines=2, n_per_machine=10, n_components=5)
    with pytest.raises(ZooError, match=f"{bad} is not a readable .npz of numeric arrays .*{problem}"):
        dm.setup("fit")


def test_byzantine_feature_cache(tmp_path):
    from datamodules.byzantine import ByzantineDataModule

    dm = ByzantineDataModule(source="torchvision", root=str(tmp_path / "nowhere"), machines=2, n_per_machine=10,
                             n_components=5, weights=None, image_size=32, cache_dir=str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    cache = tmp_path / "cache/mnist_resnet18_125d90d940.npz"  # the name of the key (mnist, weights None, 32 px)
    cache.write_bytes(b"")
    with pytest.raises(ZooError, match=f"{cache} is not a readable feature cache .*EOFError"):
        dm.setup("fit")


@pytest.mark.parametrize("how, problem", [("random", "AssertionError"), ("truncated", "RuntimeError")])
def test_byzantine_mnist_raw_files(tmp_path, how, problem):
    from datamodules.byzantine import ByzantineDataModule

    raw = tmp_path / "MNIST/raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", 8), ("t10k", 4)):
        images = np.zeros((n, 28, 28), np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            bytes([0, 0, 8, 3]) + b"".join(int(s).to_bytes(4, "big") for s in images.shape) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            bytes([0, 0, 8, 1]) + n.to_bytes(4, "big") + bytes(range(n)))
    damage(raw / "train-images-idx3-ubyte", how)
    dm = ByzantineDataModule(source="torchvision", root=str(tmp_path), machines=2, n_per_machine=2, n_components=2,
                             weights=None, image_size=32)
    with pytest.raises(ZooError, match=f"MNIST files in {raw} are damaged .{problem}"):
        dm.setup("fit")


# ------------------------------------------------------------------------------------------------ cruxeval
@pytest.mark.parametrize("how, problem", [("random", "UnicodeDecodeError"), ("dir", "IsADirectoryError"),
                                          ("empty", "holds no rows")])
def test_cruxeval_jsonl(tmp_path, how, problem):
    from datamodules.cruxeval import CRUXEvalDataModule

    path = tmp_path / "cruxeval.jsonl"
    path.write_text(json.dumps({"code": "def f(x):\n    return x", "input": "1", "output": "1", "id": "s0"}) + "\n")
    bad = damage(path, how)
    with pytest.raises(ZooError, match=f"{bad} .*{problem}"):
        CRUXEvalDataModule(source="local", path=str(bad)).setup("test")


# ------------------------------------------------------------------------------------------------ gfn envs
def test_gfn_dag_list_empty(tmp_path):
    from datamodules.gfn_envs import GFNEnvDataModule

    bad = tmp_path / "DAG-3-list.npy"
    bad.write_bytes(b"")
    dm = GFNEnvDataModule(env="bn", source="embedded", dag_list_path=str(bad), n_nodes=3, n_edges=2)
    with pytest.raises(ZooError, match=f"DAG list {bad} is not a .npy array"):
        dm.setup("fit")


# ------------------------------------------------------------------------------------------------ graphs
def _mtx() -> bytes:
    import scipy.io as sio
    import scipy.sparse as sp

    b = io.BytesIO()
    sio.mmwrite(b, sp.random(12, 12, density=0.3, random_state=0))
    return b.getvalue()


def _tar_gz() -> bytes:
    data, b = _mtx(), io.BytesIO()
    with tarfile.open(fileobj=b, mode="w:gz") as t:
        info = tarfile.TarInfo("ca-Test/ca-Test.mtx")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return b.getvalue()


EDGES = "# SNAP\n" + "".join(f"{i}\t{(i * 7 + 1) % 30}\n" for i in range(30))


@pytest.mark.parametrize("name, content, how, problem", [
    ("ca-Test.txt", EDGES.encode(), "random", "not a readable SNAP edge list .*UnicodeDecodeError"),
    ("ca-Test.txt", EDGES.encode(), "dir", "not a readable SNAP edge list .*IsADirectoryError"),
    ("ca-Test.txt.gz", gzip.compress(EDGES.encode()), "truncated", "not a readable SNAP edge list .*EOFError"),
    ("ca-Test.txt.gz", gzip.compress(EDGES.encode()), "random", "not a readable SNAP edge list .*BadGzipFile"),
    ("ca-Test.mtx", _mtx(), "random", "not a readable Matrix Market file .*Missing banner"),
    ("ca-Test.mtx", _mtx(), "truncated", "not a readable Matrix Market file .*Truncated"),
    ("ca-Test.mtx.gz", gzip.compress(_mtx()), "random", "not a readable Matrix Market file .*BadGzipFile"),
    ("ca-Test.tar.gz", _tar_gz(), "empty", "not a readable tar.gz archive .*ReadError"),
    ("ca-Test.tar.gz", _tar_gz(), "truncated", "not a readable tar.gz archive .*EOFError"),
    ("ca-Test.mat", b"", "empty", "as a MATLAB file: Mat file appears to be truncated"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 16 else "")
def test_snap_graph_files(tmp_path, name, content, how, problem):
    from datamodules.graphs import GraphDataModule

    path = tmp_path / name
    path.write_bytes(content)
    bad = damage(path, how)
    with pytest.raises(ZooError, match=f"{bad}.* {problem}"):
        GraphDataModule(source="snap", path=str(tmp_path)).setup("test")


def test_mat_graph_empty(tmp_path):
    from datamodules.graphs import GraphDataModule

    bad = tmp_path / "KarateA.mat"
    bad.write_bytes(b"")
    with pytest.raises(ZooError, match=f"cannot read {bad} as a MATLAB file"):
        GraphDataModule(source="mat", path=str(tmp_path)).setup("test")


# ------------------------------------------------------------------------------------------------ gsm8k
@pytest.mark.parametrize("how, problem", [("random", "is not a readable GSM8K jsonl .*UnicodeDecodeError"),
                                          ("empty", "holds no rows")])
def test_gsm8k_jsonl(tmp_path, how, problem):
    from datamodules.gsm8k import load_gsm8k

    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n")
    bad = damage(tmp_path / "train.jsonl", how)
    with pytest.raises(ZooError, match=f"{bad} {problem}"):
        load_gsm8k("local", str(tmp_path))


def test_gsm8k_parquet(tmp_path):
    from datamodules.gsm8k import load_gsm8k

    for split in ("train", "test"):
        written(tmp_path / f"{split}-00000-of-00001.parquet")
    with pytest.raises(ZooError, match="train-00000-of-00001.parquet is not a readable GSM8K parquet file .ArrowInvalid"):
        load_gsm8k("local", str(tmp_path))


# ------------------------------------------------------------------------------------------------ intersectional
def test_toxic_csv_empty(tmp_path):
    from datamodules.intersectional import IntersectionalSamplesDataModule

    bad = tmp_path / "all_data_with_identities.csv"
    bad.write_bytes(b"")
    with pytest.raises(ZooError, match=f"{bad} is not a readable CSV .EmptyDataError"):
        IntersectionalSamplesDataModule(source="toxic", csv_path=str(bad)).setup("fit")


def test_toxic_csv_non_numeric_labels(tmp_path):
    from datamodules.intersectional import read_toxic

    bad = tmp_path / "all_data_with_identities.csv"
    bad.write_text("comment_text,toxicity,male\nhello,high,0.5\n")
    with pytest.raises(ZooError, match=f"{bad}: toxicity and \\['male'\\] must be numbers"):
        read_toxic(str(bad), ["male"])


def test_bias_table_random(tmp_path):
    from datamodules.intersectional import BiasTableDataModule

    bad = written(tmp_path / "bias_table.csv")
    with pytest.raises(ZooError, match=f"{bad} is not a readable bias table CSV .UnicodeDecodeError"):
        BiasTableDataModule(source="table", table_path=str(bad)).setup("fit")


@pytest.mark.parametrize("how", ["empty", "random", "truncated", "dir"])
def test_celeba_list_files(tmp_path, how):
    from datamodules.intersectional import IntersectionalSamplesDataModule

    base = tmp_path / "celeba"
    (base / "img_align_celeba").mkdir(parents=True)
    names = [f"{i + 1:06d}.jpg" for i in range(6)]
    attrs = [f"a{k}" for k in range(40)]
    (base / "list_attr_celeba.txt").write_text("6\n" + " ".join(attrs) + "\n" + "".join(
        f"{f} " + " ".join(["1"] * 40) + "\n" for f in names))
    (base / "list_eval_partition.txt").write_text("".join(f"{f} {i % 3}\n" for i, f in enumerate(names)))
    (base / "identity_CelebA.txt").write_text("".join(f"{f} {i + 1}\n" for i, f in enumerate(names)))
    (base / "list_bbox_celeba.txt").write_text("6\nimage_id x_1 y_1 width height\n" +
                                              "".join(f"{f} 95 71 226 313\n" for f in names))
    (base / "list_landmarks_align_celeba.txt").write_text("6\n" + " ".join(f"p{k}" for k in range(10)) + "\n" +
                                                          "".join(f"{f}" + " 1" * 10 + "\n" for f in names))
    damage(base / "list_attr_celeba.txt", how)
    dm = IntersectionalSamplesDataModule(source="celeba", root=str(tmp_path), verify_md5=False)
    with pytest.raises(ZooError, match=f"list_attr_celeba.txt.* in {base} are not readable"):
        dm.setup("fit")


# ------------------------------------------------------------------------------------------------ npz readers
@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_linear_designs_npz(tmp_path, how):
    from datamodules.linear_designs import LinearDesignsDataModule

    path = tmp_path / "p.npz"
    np.savez(path, X=np.ones((2, 10, 5)), y=np.ones((2, 10)))
    bad = damage(path, how)
    with pytest.raises(ZooError, match=f"{bad} is not a readable .npz"):
        LinearDesignsDataModule(source="local", path=str(bad)).setup("fit")


@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_medmnist_npz(tmp_path, how):
    from datamodules.medmnist import MedMNISTDataModule

    path = tmp_path / "organamnist.npz"
    np.savez(path, **{f"{s}_{k}": np.zeros((4, 28, 28) if k == "images" else (4, 1), np.uint8)
                      for s in ("train", "val", "test") for k in ("images", "labels")})
    damage(path, how)
    with pytest.raises(ZooError, match="cannot read MedMNIST file .*organamnist.npz"):
        MedMNISTDataModule(flag="organamnist", root=str(tmp_path), num_workers=0).setup("fit")


def test_pde_npz_truncated(tmp_path):
    from datamodules.pde import PDEDataModule

    train, test = tmp_path / "train.npz", tmp_path / "test.npz"
    for p in (train, test):
        np.savez(p, a=np.zeros((2, 8, 8)), f=np.zeros((2, 8, 8)), u=np.zeros((2, 8, 8)))
        damage(p, "truncated")
    dm = PDEDataModule(source="local", train_path=str(train), test_path=str(test), n_train=1, n_val=0, n_test=1)
    with pytest.raises(ZooError, match=f"{test} is not a readable PDE dataset .*BadZipFile"):
        dm.setup("fit")


# ------------------------------------------------------------------------------------------------ memorization
@pytest.mark.parametrize("content, problem", [(RANDOM, "is not a readable extraction-benchmark CSV"),
                                              (b"doc_id,corpus,text\n1,c\n", ":2: a row needs doc_id, corpus, text")],
                         ids=["random", "short-row"])
def test_extraction_csv(tmp_path, content, problem):
    from datamodules.memorization import read_extraction_csv

    bad = tmp_path / "forget.csv"
    bad.write_bytes(content)
    with pytest.raises(ZooError, match=f"{bad}{problem if problem[0] == ':' else ' ' + problem}"):
        read_extraction_csv(bad)


# ------------------------------------------------------------------------------------------------ prompts
def test_prompt_text_random(tmp_path):
    from datamodules.prompts import PromptsDataModule

    bad = written(tmp_path / "prompts.txt")
    with pytest.raises(ZooError, match=f"{bad} is not a readable text file of prompts .*UnicodeDecodeError"):
        PromptsDataModule(source="text", path=str(bad)).setup("test")


def test_coco_captions_random(tmp_path):
    from datamodules.prompts import PromptsDataModule

    bad = written(tmp_path / "captions.json")
    with pytest.raises(ZooError, match=f"{bad} is not a COCO captions file"):
        PromptsDataModule(source="coco", path=str(bad)).setup("test")


@pytest.mark.parametrize("content, problem", [
    ("", "is not a readable scores JSON .JSONDecodeError"),
    ('{"cat 1": 0.9', "is not a readable scores JSON .JSONDecodeError"),
    ('["cat 1", 0.9]', "holds a JSON list, not an object"),
    ('{"cat 1": "high"}', ": the score of 'cat 1' is 'high', not a number"),
])
def test_prompt_scores_json(tmp_path, content, problem):
    from datamodules.prompts import PromptsDataModule

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("cat 1\ncat 2\n")
    bad = tmp_path / "scores.json"
    bad.write_text(content)
    dm = PromptsDataModule(source="text", path=str(prompts), scores_path=str(bad), filter="above", threshold=0.5)
    with pytest.raises(ZooError, match=f"{bad}.?{problem}"):
        dm.setup("test")


# ------------------------------------------------------------------------------------------------ regal
@pytest.mark.parametrize("how, problem", [("random", "is not a readable ReGAL logo jsonl .*UnicodeDecodeError"),
                                          ("empty", "holds no rows")])
def test_regal_jsonl(tmp_path, how, problem):
    from datamodules.regal import ReGALDataModule

    for name in ("train_200.jsonl", "test.jsonl"):
        (tmp_path / name).write_text(json.dumps({"program": "forward(1)", "language": ["a line"]}) + "\n")
    bad = damage(tmp_path / "train_200.jsonl", how)
    with pytest.raises(ZooError, match=f"{bad} {problem}"):
        ReGALDataModule(domain="logo", source="local", path=str(tmp_path)).setup("fit")


# ------------------------------------------------------------------------------------------------ restoration
def test_kernel_png_random(tmp_path):
    from datamodules.restoration import RestorationDataModule

    png(tmp_path / "set12/01.png", 32, "L")
    for i in range(1, 9):
        png(tmp_path / f"kernels/kevin_{i}.png", 5, "L")
    bad = damage(tmp_path / "kernels/kevin_1.png", "random")
    dm = RestorationDataModule(source="local", test_dir=str(tmp_path / "set12"), kernels_path=str(tmp_path / "kernels"),
                               image_size=None, task="deblur")
    with pytest.raises(ZooError, match=f"{bad} is not a readable kernel image .UnidentifiedImageError"):
        dm.setup("test")


def test_kernel_mat_empty(tmp_path):
    from datamodules.restoration import RestorationDataModule

    png(tmp_path / "set12/01.png", 32, "L")
    bad = tmp_path / "kernels_12.mat"
    bad.write_bytes(b"")
    dm = RestorationDataModule(source="local", test_dir=str(tmp_path / "set12"), kernels_path=str(bad),
                               image_size=None, task="deblur")
    with pytest.raises(ZooError, match=f"kernel file {bad} is not a MAT v5 file"):
        dm.setup("test")


@pytest.mark.parametrize("first, problem", [
    (np.array(["zz"]), "is not an array of numbers"),  # was float()'s ValueError
    (np.zeros((0, 9)), r"is not a 2-D kernel \(shape \(0, 9\)\)"),  # was a RuntimeError in the solver
    (np.ones((3, 3, 3)), r"is not a 2-D kernel \(shape \(3, 3, 3\)\)"),
    (np.zeros((9, 9)), "must hold finite, non-negative values"),  # these three: the solver's message, no file
    (np.full((9, 9), np.nan), "must hold finite, non-negative values"),
    (-np.ones((9, 9)), "must hold finite, non-negative values"),
])
def test_kernel_mat_cell_contents(tmp_path, first, problem):
    """A kernels_12.mat cell whose first kernel is not a blur kernel names the kernel and the file."""
    from scipy.io import savemat

    from datamodules.restoration import load_kernels

    cell = np.empty((1, 2), dtype=object)
    cell[0, 0], cell[0, 1] = first, np.ones((9, 9))
    savemat(tmp_path / "kernels_12.mat", {"kernels": cell})
    with pytest.raises(ZooError, match=f"kernel 1 of {tmp_path / 'kernels_12.mat'} {problem}"):
        load_kernels(str(tmp_path / "kernels_12.mat"))


# ------------------------------------------------------------------------------------------------ seqrec
MOVIELENS = "".join(f"{u}::{(u * 3 + k) % 20 + 1}::5::{978300000 + k}\n" for u in range(1, 10) for k in range(5))


@pytest.mark.parametrize("how", ["truncated", "random", "dir"])
def test_movielens_zip(tmp_path, how):
    from datamodules.seqrec import SeqRecDataModule

    path = tmp_path / "ml-1m.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ml-1m/ratings.dat", MOVIELENS)
    bad = damage(path, how)
    with pytest.raises(ZooError, match=f"{bad} is not a readable zip archive"):
        SeqRecDataModule(source="movielens", path=str(bad)).setup("fit")


def test_movielens_timestamp_not_a_number(tmp_path):
    from datamodules.seqrec import SeqRecDataModule

    bad = tmp_path / "ratings.dat"
    bad.write_text(MOVIELENS + "1::2::5::yesterday\n")
    with pytest.raises(ZooError, match=f"{bad}:46: the Timestamp 'yesterday' is not an integer"):
        SeqRecDataModule(source="movielens", path=str(bad)).setup("fit")


# ------------------------------------------------------------------------------------------------ timeseries
@pytest.mark.parametrize("how, problem", [("empty", "EmptyDataError"), ("random", "UnicodeDecodeError")])
def test_ett_csv(tmp_path, how, problem):
    from datamodules.timeseries import ETTh1DataModule

    bad = tmp_path / "ETTh1.csv"
    bad.write_bytes(b"" if how == "empty" else RANDOM)
    with pytest.raises(ZooError, match=f"{bad} is not a readable ETT CSV .{problem}"):
        ETTh1DataModule(source="local", path=str(bad)).setup("fit")


def test_ett_csv_too_short_names_the_file(tmp_path):
    from datamodules.timeseries import ETTh1DataModule, embedded_ett

    short = tmp_path / "ETTh1.csv"
    embedded_ett(600, 0).to_csv(short, index=False)
    with pytest.raises(ZooError, match=f"file {short} .ETT CSV.: 600 rows cannot hold"):
        ETTh1DataModule(source="local", path=str(short)).setup("fit")


def test_ts_random(tmp_path):
    from datamodules.timeseries import UCRClassificationDataModule

    bad, test = tmp_path / "X_TRAIN.ts", tmp_path / "X_TEST.ts"
    bad.write_bytes(RANDOM)
    test.write_text("@problemName X\n@data\n1,2,3:a\n")
    with pytest.raises(ZooError, match=f"{bad} is not a readable .ts file .*UnicodeDecodeError"):
        UCRClassificationDataModule(source="local", train_path=str(bad), test_path=str(test)).setup("fit")


@pytest.mark.parametrize("train, test, problem", [
    ("1,2,3:a\n2,3,4:a\n", "1,2,3:a\n", "1 class label.s. .'a'.; classification needs cases of at least 2 classes"),
    ("1,2,3:a\n2,3,4:b\n", "1,2,3:a\n", "val_fraction=0.9 of 2 training cases leaves none to train on"),
])
def test_ts_too_few_classes_or_cases(tmp_path, train, test, problem):
    # one class trained a 1-way classifier (every case right); no training case left an empty training loader
    from datamodules.timeseries import UCRClassificationDataModule

    head = "@problemName X\n@classLabel true a b\n@data\n"
    (tmp_path / "X_TRAIN.ts").write_text(head + train)
    (tmp_path / "X_TEST.ts").write_text(head + test)
    with pytest.raises(ZooError, match=problem):
        UCRClassificationDataModule(source="local", train_path=str(tmp_path / "X_TRAIN.ts"),
                                    test_path=str(tmp_path / "X_TEST.ts"), val_fraction=0.9).setup("fit")


@pytest.mark.parametrize("suffix, rows, problem", [
    (".txt", ["0.5"] * 5 + ["nan"] + ["0.5"] * 1994, "point 5 is nan .1 non-finite point"),  # a nan window
    (".txt", ["0.5"] * 5 + ["inf"] + ["0.5"] * 1994, "point 5 is inf"),  # sklearn's traceback
    (".out", ["0.5,0"] * 1000 + ["0.5,2"] * 1000, r"labels must be 0 or 1, found \[2.0\]"),  # 2000 anomalous points
    (".out", ["0.5,0"] * 1000 + ["0.5,0.5"] * 1000, r"labels must be 0 or 1, found \[0.5\]"),  # read as 0
])
def test_ucr_anomaly_values_and_labels(tmp_path, suffix, rows, problem):
    from datamodules.timeseries import UCRAnomalyDataModule

    bad = tmp_path / f"001_UCR_Anomaly_Test_1000_1500_1550{suffix}"
    bad.write_text("\n".join(rows) + "\n")
    with pytest.raises(ZooError, match=f"{bad}: {problem}"):
        UCRAnomalyDataModule(source="local", path=str(bad)).setup("fit")


@pytest.mark.parametrize("how, problem", [("empty", "EmptyDataError"), ("random", "UnicodeDecodeError")])
def test_ucr_anomaly_out(tmp_path, how, problem):
    from datamodules.timeseries import UCRAnomalyDataModule

    bad = tmp_path / "001_UCR_Anomaly_Test_1000_1500_1550.out"
    bad.write_bytes(b"" if how == "empty" else RANDOM)
    with pytest.raises(ZooError, match=f"{bad} is not a readable UCR anomaly file .{problem}"):
        UCRAnomalyDataModule(source="local", path=str(bad)).setup("fit")
