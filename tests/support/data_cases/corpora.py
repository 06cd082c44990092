"""Local corpora, tables and graphs: the unlearning extraction-benchmark CSVs, DPO-Diff's prompt files (text, COCO
captions, DiffusionDB metadata.parquet, scores.json), BGGN's Jigsaw CSV and bias table, IML's CVDB table, and the
cluster-deletion graphs (MATLAB .mat with key A, dense and as released (sparse), and SNAP edge lists). Written small,
in each release's documented format; the smallgraphs .mat is the real file in ../shared/data."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
from fuzz_data import BOGUS, Case
from fuzz_settings import ROOT

SHARED = ROOT.parent / "shared" / "data"
KARATE = SHARED / "cluster_deletion" / "smallgraphs" / "KarateA.mat"


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return path


# ------------------------------------------------------------------------------------------------ unlearning
_TEXT = ("the river ran past the old mill and the miller counted his sacks of grain before the winter came "
          "while the children sang songs about the mountain and the sea and the long road home to the north")
_WORDS = _TEXT.split()


def _texts(offset: int, n: int) -> list[str]:
    """n distinct texts of about 60 characters (the smoke's seq_len is 32 bytes)."""
    return [" ".join(_WORDS[(offset + 3 * i + k) % len(_WORDS)] for k in range(12)) + f" {offset + i}"
            for i in range(n)]


def _extraction(path: Path, name: str, offset: int, n: int) -> Path:
    corpora = ["pile-cc", "github", "openwebtext2", "freelaw"]  # as the released lm_extraction_*.csv spell them
    return write_csv(path, ["doc_id", "corpus", "text"],
                     [[f"{name}{i}", corpora[i % len(corpora)], t] for i, t in enumerate(_texts(offset, n))])


def unlearning(background: bool):
    def write(folder: Path) -> list[str]:
        args = ["--data.init_args.source=local"]
        for name, offset, n in (("forget", 0, 4), ("unseen", 100, 4), ("heldout", 200, 2)):
            args.append(f"--data.init_args.{name}_path={_extraction(folder / f'{name}.csv', name, offset, n)}")
        if background:
            args.append(f"--data.init_args.background_path={_extraction(folder / 'background.csv', 'bg', 300, 8)}")
        return args
    return write


# ------------------------------------------------------------------------------------------------ dpodiff
def _prompts() -> list[str]:
    from zoo.dpodiff.embedded import EMBEDDED_PROMPTS

    return list(EMBEDDED_PROMPTS[:3])  # candidates: embedded covers only these


def dpodiff_text(folder: Path) -> list[str]:
    (folder / "prompts.txt").write_text("\n".join(_prompts()) + "\n")
    return ["--data.init_args.source=text", f"--data.init_args.path={folder / 'prompts.txt'}"]


def text_more(path: Path) -> list[tuple[str, bytes]]:
    lines = path.read_text().splitlines()
    return [("empty file", b""), ("blank lines only", b"\n \n\t\n"),
            ("Latin-1 bytes", ("\n".join(lines) + "\ncaf\xe9\n").encode("latin-1")),
            ("CRLF line ends", ("\r\n".join(lines) + "\r\n").encode()),
            ("a NUL byte in a line", ("\n".join(lines) + "\nab\x00c\n").encode()),
            ("a number only", b"7\n")]


# captions_val2014.json's `images` and `annotations`; its `info` and `licenses` are left out: the reader never looks
# at them, and each change of theirs would cost a full DPO-Diff run (about a minute here)
_COCO = {"images": [{"id": 9, "file_name": "COCO_val2014_000000000009.jpg", "height": 480, "width": 640}],
         "annotations": []}


def dpodiff_coco(folder: Path) -> list[str]:
    data = {**_COCO, "annotations": [{"image_id": 9, "id": i + 1, "caption": p} for i, p in enumerate(_prompts())]}
    (folder / "captions_val2014.json").write_text(json.dumps(data))
    return ["--data.init_args.source=coco", f"--data.init_args.path={folder / 'captions_val2014.json'}"]


def coco_more(path: Path) -> list[tuple[str, bytes]]:
    """Inside `annotations` (the generic changes stop at the top level): each field of the first annotation
    dropped or of another kind, an annotation that is not an object, `annotations` not a list."""
    data = json.loads(path.read_text())
    anns = data["annotations"]
    out = []

    def dump(label, first=None, annotations=None):
        a = annotations if annotations is not None else [first, *anns[1:]]
        out.append((label, json.dumps({**data, "annotations": a}).encode()))

    for key in anns[0]:
        dump(f"annotation 1 {key!r} dropped", {k: v for k, v in anns[0].items() if k != key})
        for label, v in (("null", None), ("a number", 7), ("empty", ""), ("a list", [BOGUS]), ("an object", {})):
            dump(f"annotation 1 {key!r} {label}", {**anns[0], key: v})
    dump("annotation 1 not an object", annotations=[[1, 2], *anns[1:]])
    dump("annotations an object", annotations={"0": anns[0]})  # type: ignore[arg-type]
    dump("every caption whitespace", annotations=[{**a, "caption": "  "} for a in anns])
    return out


def _parquet(df) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf)
    return buf.getvalue()


def _diffusiondb_frame(prompts: list[str]):
    """DiffusionDB's metadata.parquet schema (poloclub/diffusiondb README: 13 columns)."""
    import pandas as pd

    n = len(prompts)
    return pd.DataFrame({
        "image_name": [f"{i}.webp" for i in range(n)], "prompt": prompts,
        "part_id": pd.array([1] * n, dtype="uint16"), "seed": pd.array(range(n), dtype="uint32"),
        "step": pd.array([50] * n, dtype="uint16"), "cfg": pd.array([7.0] * n, dtype="float32"),
        "sampler": pd.array([8] * n, dtype="uint8"), "width": pd.array([512] * n, dtype="uint16"),
        "height": pd.array([512] * n, dtype="uint16"), "user_name": ["u1"] * n,
        "timestamp": pd.to_datetime(["2022-08-08 00:00:00"] * n, utc=True),
        "image_nsfw": pd.array([0.1] * n, dtype="float32"), "prompt_nsfw": pd.array([0.0] * n, dtype="float32")})


def dpodiff_diffusiondb(folder: Path) -> list[str]:
    (folder / "metadata.parquet").write_bytes(_parquet(_diffusiondb_frame(_prompts())))
    return ["--data.init_args.source=diffusiondb", f"--data.init_args.path={folder / 'metadata.parquet'}"]


def parquet_more(path: Path) -> list[tuple[str, bytes]]:
    import pandas as pd

    df = pd.read_parquet(path)
    out = [("no rows", _parquet(df.iloc[:0])), ("column 'prompt' dropped", _parquet(df.drop(columns="prompt"))),
           ("column 'prompt' renamed", _parquet(df.rename(columns={"prompt": BOGUS})))]
    for label, values in (("all null", [None] * len(df)), ("of integers", list(range(len(df)))),
                          ("of floats with a NaN", [np.nan] + [1.5] * (len(df) - 1)),
                          ("of lists", [[BOGUS]] * len(df)), ("all empty", [""] * len(df))):
        out.append((f"column 'prompt' {label}", _parquet(df.assign(prompt=values))))
    return out


def dpodiff_scores(folder: Path) -> list[str]:
    # scores.json as a dpodiff run writes it: prompt -> original spherical CLIP loss; filter above 0.85 keeps one
    prompts = _prompts()
    (folder / "scores.json").write_text(json.dumps({prompts[0]: 0.9, prompts[1]: 0.8}, indent=1))
    return ["--data.init_args.source=embedded", f"--data.init_args.scores_path={folder / 'scores.json'}",
            "--data.init_args.filter=above", "--data.init_args.max_prompts=null"]


# ------------------------------------------------------------------------------------------------ bggn
def tiny_distilbert(path: Path) -> None:
    """A DistilBERT saved like the Hub's (vocab.txt, config, weights): the toxic source loads it offline."""
    import torch
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "you", "are", "a", "nice", "bad", "person", "."]
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    DistilBertTokenizer(str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(0)
    cfg = DistilBertConfig(vocab_size=len(vocab), dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                           max_position_embeddings=64)
    DistilBertModel(cfg).save_pretrained(path)


def bggn_toxic(folder: Path) -> list[str]:
    tiny_distilbert(folder / "distilbert")
    # the released header (a subset of its 45 columns, in their order), identities as fractions of raters
    texts = ["you are nice", "bad person", "you are bad", "nice .", "a nice person", "you are a bad person",
             "nice", "bad"]
    splits = ["train", "train", "val", "test", "train", "train", "val", "train"]
    rows = [[i + 1, t, s, [0.0, 0.8, 0.5, 0.1][i % 4], [0.0, 0.5, 0.0, 1.0][i % 4], [0.2, 0.0, 0.05, 0.0][i % 4],
             [0.0, 0.0, 1.0, 0.0][(i + 1) % 4], 1] for i, (t, s) in enumerate(zip(texts, splits))]
    path = write_csv(folder / "all_data_with_identities.csv",
                     ["id", "comment_text", "split", "toxicity", "male", "female", "black", "identity_any"], rows)
    return ["--data.init_args.source=toxic", f"--data.init_args.csv_path={path}",
            f"--data.init_args.embedding_model={folder / 'distilbert'}", "--data.init_args.sensitive=[male,female,black]"]


def bggn_table(folder: Path) -> list[str]:
    # phase 0's bias_table.csv (zoo.bggn.bias.write_bias_table): one 0/1 column per attribute, count, bias
    a = (np.arange(8)[:, None] >> np.arange(2, -1, -1)) & 1
    rows = [[*r, 20 + i, round(0.1 + 0.1 * i, 3)] for i, r in enumerate(a.tolist())]
    path = write_csv(folder / "bias_table.csv", ["s0", "s1", "s2", "count", "bias"], rows)
    return ["--data.init_args.source=table", f"--data.init_args.table_path={path}"]


# ------------------------------------------------------------------------------------------------ iml
def iml_cvdb(folder: Path) -> list[str]:
    # the CVDB release's column layout (a subset of its columns, in its order); Latin-1 as released
    header = ["wikidata_code", "birth", "death", "gender", "name", "level3_main_occ", "string_citizenship_raw_d",
              "un_region", "wiki_readers_2015_2018"]
    occ, cit = ["painter", "composer", "poet", "physicist"], ["France", "'Spain'_'France'", "Iceland", "Czech_Republic"]
    rows = [[f"Q{1000 + k}", 1500 + 7 * k, 1560 + 7 * k, "Male" if k % 2 else "Female", f"Person_{k}",
             occ[k % 4], cit[k % 4], "Europe", 1000 + 37 * k] for k in range(40)]
    path = folder / "cross-verified-database.csv"
    path.write_bytes(_csv_text(header, rows).encode("latin-1"))
    return ["--data.init_args.source=local", f"--data.init_args.path={path}", "--data.init_args.num_ents=40"]


def _csv_text(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ graphs
def _mat_bytes(arrays: dict) -> bytes:
    from scipy.io import savemat

    buf = io.BytesIO()
    savemat(buf, arrays)
    return buf.getvalue()


def clusterdel_mat_dense(folder: Path) -> list[str]:
    from scipy.io import loadmat

    (folder / "KarateA.mat").write_bytes(_mat_bytes({"A": loadmat(KARATE)["A"].toarray()}))
    return ["--data.init_args.source=mat", f"--data.init_args.path={folder}", "--data.init_args.names=null"]


# The released smallgraphs hold a sparse A, which the generic array changes cannot change (a sparse matrix has no
# string dtype): the copy is named so that they skip it, and `sparse_more` changes it instead. A file path is read
# whatever its suffix.
SPARSE_NAME = "KarateA.mat.v5"


def clusterdel_mat_sparse(folder: Path) -> list[str]:
    shutil.copyfile(KARATE, folder / SPARSE_NAME)
    return ["--data.init_args.source=mat", f"--data.init_args.path={folder / SPARSE_NAME}",
            "--data.init_args.names=null"]


def sparse_more(path: Path) -> list[tuple[str, bytes]]:
    import scipy.sparse as sp
    from scipy.io import loadmat

    a = sp.csc_matrix(loadmat(path)["A"])
    i, j = (int(x[0]) for x in a.nonzero())

    def with_entry(value, at=(i, j)):
        b = a.tolil(copy=True)
        b[at] = value
        return sp.csc_matrix(b)

    one_way = a.tolil(copy=True)
    one_way[i, j] = 0
    return [(label, _mat_bytes(arrays)) for label, arrays in (
        ("key 'A' dropped", {"B": a}), ("'A' dense", {"A": a.toarray()}),
        ("'A' of strings", {"A": a.toarray().astype(str)}),
        ("'A' a string", {"A": BOGUS}), ("'A' empty (0 x 0)", {"A": sp.csc_matrix((0, 0))}),
        ("'A' no edges", {"A": sp.csc_matrix(a.shape)}), ("'A' not square", {"A": a[:, :-1]}),
        ("'A' flattened", {"A": sp.csc_matrix(a.reshape(1, -1))}), ("'A' with a NaN", {"A": with_entry(np.nan)}),
        ("'A' with an inf", {"A": with_entry(np.inf)}), ("'A' with a -1 (both ways)", {"A": _sym(a, i, j, -1)}),
        ("'A' with a 2 (both ways)", {"A": _sym(a, i, j, 2)}), ("'A' asymmetric", {"A": sp.csc_matrix(one_way)}),
        ("'A' with a self-loop", {"A": with_entry(1, (0, 0))}), ("'A' complex", {"A": a.astype(complex)}),
        ("'A' boolean", {"A": a.astype(bool)}), ("'A' a struct", {"A": {"x": a}}))]


def _sym(a, i: int, j: int, value):
    import scipy.sparse as sp

    b = a.tolil(copy=True)
    b[i, j] = b[j, i] = value
    return sp.csc_matrix(b)


def clusterdel_snap_txt(folder: Path) -> list[str]:
    # SNAP's edge list (e.g. CA-GrQc.txt): '#' comment lines, then FromNodeId<TAB>ToNodeId, each edge both ways
    edges = [(3466, 937), (3466, 5233), (937, 5233), (5233, 8579), (8579, 10310), (10310, 5233), (937, 10310)]
    lines = ["# Directed graph (each unordered pair of nodes is saved once): CA-GrQc.txt",
             "# Collaboration network of Arxiv General Relativity category", "# Nodes: 5 Edges: 14",
             "# FromNodeId\tToNodeId", *(f"{u}\t{v}" for e in edges for u, v in (e, e[::-1]))]
    (folder / "CA-GrQc.txt").write_text("\n".join(lines) + "\n")
    return ["--data.init_args.source=snap", f"--data.init_args.path={folder}", "--data.init_args.names=null"]


def edge_list_more(path: Path) -> list[tuple[str, bytes]]:
    lines = path.read_text().splitlines()
    head = [ln for ln in lines if ln.startswith("#")]
    body = [ln for ln in lines if not ln.startswith("#")]

    def text(new_body):
        return ("\n".join([*head, *new_body]) + "\n").encode()

    first = body[0].split("\t")
    out = [("comments only", text([])), ("empty file", b""), ("one edge only", text(body[:1])),
           ("self-loops only", text([f"{first[0]}\t{first[0]}"])),
           ("spaces instead of tabs", text([ln.replace("\t", " ") for ln in body])),
           ("a third column", text([ln + "\t1" for ln in body])),
           ("CRLF line ends", ("\r\n".join(lines) + "\r\n").encode()),
           ("Latin-1 byte in a comment", ("\n".join(["# caf\xe9", *lines]) + "\n").encode("latin-1"))]
    for label, cell in (("a word", BOGUS), ("empty", ""), ("-1", "-1"), ("a float", "1.5"), ("nan", "nan"),
                        ("huge", str(2**70))):
        out.append((f"node id {label} in row 1", text([f"{cell}\t{first[1]}", *body[1:]])))
    return out


# DPO-Diff's cheapest run that still scores the prompt read: one GPO step over two sampler steps
DPODIFF = ["--model.init_args.num_inference_steps=2", "--model.init_args.gpo_iters=1", "--model.init_args.gpo_samples=1"]
CASES = [
    # the memorize stage reads all four sets (the mix trains on forget + background); `zoo test` of it scores the
    # forget / unseen / held-out sets with the unlearning metrics (the perturbation attack included)
    Case("unlearning_memorize", "configs/smoke/unlearning_memorize_markov.yaml", unlearning(background=True),
         args=["--data.init_args.mix_batches=2"]),
    Case("unlearning_metrics", "configs/smoke/unlearning_memorize_markov.yaml", unlearning(background=False),
         verb="test", args=["--data.init_args.train_set=forget", "--trainer.callbacks.init_args.n_perturbations=2"]),
    Case("dpodiff_text", "configs/smoke/dpodiff_improve_coco.yaml", dpodiff_text, verb="test", args=DPODIFF,
         more=text_more),
    Case("dpodiff_coco", "configs/smoke/dpodiff_improve_coco.yaml", dpodiff_coco, verb="test", args=DPODIFF,
         more=coco_more),
    Case("dpodiff_diffusiondb", "configs/smoke/dpodiff_improve_coco.yaml", dpodiff_diffusiondb, verb="test",
         args=DPODIFF, more=parquet_more),
    Case("dpodiff_scores", "configs/smoke/dpodiff_improve_coco.yaml", dpodiff_scores, verb="test", args=DPODIFF),
    Case("bggn_toxic", "configs/smoke/bggn_toxic_classifier.yaml", bggn_toxic, keep=("distilbert/*",),
         args=["--model.init_args.in_dim=16", "--trainer.max_steps=2"]),
    Case("bggn_table", "configs/smoke/bggn_toxic_predictor.yaml", bggn_table,
         args=["--model.init_args.d=3", "--trainer.max_steps=2"]),
    Case("iml_cvdb", "configs/smoke/iml_cvdb_stage1.yaml", iml_cvdb,
         args=["--trainer.max_steps=2", "--trainer.val_check_interval=2"]),
    Case("clusterdel_mat", "configs/smoke/clusterdel_snap.yaml", clusterdel_mat_dense, verb="test"),
    Case("clusterdel_mat_sparse", "configs/smoke/clusterdel_snap.yaml", clusterdel_mat_sparse, verb="test",
         more=sparse_more),
    Case("clusterdel_snap_txt", "configs/smoke/clusterdel_snap.yaml", clusterdel_snap_txt, verb="test",
         more=edge_list_more),
]
