"""JSON-lines benchmarks read from a local copy of the release: GSM8K, CRUXEval, ReGAL (the first rows of the real
files in ../shared/data)."""

from __future__ import annotations

from pathlib import Path

from fuzz_data import Case
from fuzz_settings import ROOT

SHARED = ROOT.parent / "shared" / "data"


def head(src: Path, dst: Path, n: int) -> Path:
    """The first `n` rows of a real jsonl file."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(src.read_text().splitlines(keepends=True)[:n]))
    return dst


def gsm8k(folder: Path) -> list[str]:
    head(SHARED / "gsm8k/train.jsonl", folder / "train.jsonl", 8)
    head(SHARED / "gsm8k/test.jsonl", folder / "test.jsonl", 4)
    return ["--data.init_args.source=local", f"--data.init_args.path={folder}"]


def cruxeval(folder: Path) -> list[str]:
    path = head(SHARED / "cruxeval.jsonl", folder / "cruxeval.jsonl", 4)
    return ["--data.init_args.source=local", f"--data.init_args.path={path}"]


def regal(domain: str, train: str, test: str):
    def write(folder: Path) -> list[str]:
        head(SHARED / "regal" / domain / train, folder / train, 4)
        head(SHARED / "regal" / domain / test, folder / test, 2)
        return ["--data.init_args.source=local", f"--data.init_args.path={folder}"]
    return write


CASES = [
    Case("gsm8k", "configs/smoke/rosa_gsm8k.yaml", gsm8k, args=["--data.init_args.num_test=2"]),
    Case("cruxeval", "configs/smoke/cruxeval_output.yaml", cruxeval, verb="test"),
    Case("regal_logo", "configs/smoke/regal_logo.yaml", regal("logo", "train_200.jsonl", "test.jsonl")),
    Case("regal_date", "configs/smoke/regal_date.yaml", regal("date", "train_combined.jsonl", "test.jsonl")),
]
