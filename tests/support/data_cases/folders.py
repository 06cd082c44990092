"""Released folder layouts: blur kernels (PnP denoiser: Levin's kernels_12.mat cell), fracture meshes with their
split lists (PMTR: Breaking Bad) and VisA's images with its split CSV (VPDM)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from fuzz_data import BOGUS, Case, _mat_bytes


def kernels(folder: Path) -> list[str]:
    rng = np.random.default_rng(0)
    cell = np.empty((1, 2), dtype=object)
    for i in range(2):
        k = rng.random((9, 9))
        cell[0, i] = k / k.sum()
    (folder / "kernels_12.mat").write_bytes(_mat_bytes({"kernels": cell}))
    return [f"--data.init_args.kernels_path={folder / 'kernels_12.mat'}", "--data.init_args.n_synthetic_kernels=0"]


def kernel_changes(path: Path) -> list[tuple[str, bytes]]:
    """The first kernel of the cell changed: all zero, a NaN, negative, one row, of strings, empty."""
    from scipy.io import loadmat

    cell = loadmat(path)["kernels"]
    k = np.asarray(cell.flat[0], dtype=np.float64)
    nan, neg = k.copy(), -k
    nan[0, 0] = math.nan
    out = []
    for label, first in (("all zero", np.zeros_like(k)), ("with a NaN", nan), ("negative", neg), ("one row", k[:1]),
                         ("of strings", k.astype(str)), ("empty", k[:0]), ("a vector", k.reshape(-1))):
        changed = cell.copy()
        changed.flat[0] = first
        out.append((f"kernel 1 {label}", _mat_bytes({"kernels": changed})))
    return out


def fractures(folder: Path) -> list[str]:
    from datamodules.breaking_bad import synthetic_fracture

    _, parts = synthetic_fracture(np.random.default_rng(3), 2, subdivisions=2)
    for i in range(2):
        fracture = folder / "everyday" / "Bottle" / f"id{i}" / "fractured_0"
        fracture.mkdir(parents=True)
        for j, p in enumerate(parts):
            p.export(fracture / f"piece_{j}.obj")
    lists = folder / "data_list"
    lists.mkdir()
    (lists / "everyday_train.txt").write_text("002 everyday/Bottle/id0/fractured_0\n")
    (lists / "everyday_val.txt").write_text("002 everyday/Bottle/id1/fractured_0\n")
    return ["--data.init_args.source=breaking_bad", f"--data.init_args.data_root={folder}",
            "--data.init_args.category=everyday"]


def line_changes(path: Path) -> list[tuple[str, bytes]]:
    """Changes of a text file of whitespace-separated fields (a split list, an OBJ mesh): empty, blank lines only, a
    field of the first line a word, -1, nan or 0, a field dropped or added; for OBJ, a face naming a vertex that is
    not there."""
    lines = path.read_text().splitlines()
    out = [("empty", b""), ("blank lines only", b"\n\n")]
    first = next(i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith("#"))
    if path.suffix == ".obj":  # the first vertex line and the first face line
        first = next(i for i, ln in enumerate(lines) if ln.startswith("v "))
        face = next(i for i, ln in enumerate(lines) if ln.startswith("f "))
        out.append(("a face naming vertex 99999", _with(lines, face, "f 1 2 99999")))
        out.append(("a face naming vertex 0", _with(lines, face, "f 0 1 2")))
    fields = lines[first].split()
    for j in range(len(fields)):
        for label, value in (("a word", BOGUS), ("-1", "-1"), ("nan", "nan"), ("0", "0")):
            out.append((f"line {first + 1} field {j + 1} {label}", _with(lines, first, " ".join(
                [*fields[:j], value, *fields[j + 1:]]))))
    out.append((f"line {first + 1} a field dropped", _with(lines, first, " ".join(fields[:-1]))))
    out.append((f"line {first + 1} a field added", _with(lines, first, " ".join([*fields, "7"]))))
    return out


def _with(lines: list[str], i: int, line: str) -> bytes:
    return ("\n".join([*lines[:i], line, *lines[i + 1:]]) + "\n").encode()


def visa(folder: Path) -> list[str]:
    from PIL import Image

    rng = np.random.default_rng(0)
    rows = ["object,split,label,image,mask"]
    for i, (split, label) in enumerate([("train", "normal"), ("train", "normal"), ("test", "normal"),
                                        ("test", "anomaly")]):
        image = f"candle/Data/Images/{'Anomaly' if label == 'anomaly' else 'Normal'}/{i:03d}.JPG"
        mask = f"candle/Data/Masks/Anomaly/{i:03d}.png" if label == "anomaly" else ""
        (folder / image).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(folder / image, format="JPEG")
        if mask:
            (folder / mask).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((40, 40), 255, np.uint8)).save(folder / mask)
        rows.append(f"candle,{split},{label},{image},{mask}")
    (folder / "split_csv").mkdir()
    (folder / "split_csv/1cls.csv").write_text("\n".join(rows) + "\n")
    return ["--data.init_args.source=visa", f"--data.init_args.root={folder}", "--data.init_args.classes=[candle]",
            "--data.init_args.image_size=32"]


CASES = [
    Case("pcdenoiser_kernels", "configs/smoke/pcdenoiser_deblur_set12.yaml", kernels, verb="test",
         more=kernel_changes),  # kernels blur the test images; fit trains the denoiser alone
    Case("pmtr_breaking_bad", "configs/smoke/pmtr_everyday.yaml", fractures, keep=("*/id1/*/*.obj", "*/piece_1.obj"),
         more=lambda p: line_changes(p) if p.suffix in (".txt", ".obj") else []),
    Case("vpdm_visa", "configs/smoke/vpdm_visa.yaml", visa, keep=("*.JPG", "*.png")),
]
