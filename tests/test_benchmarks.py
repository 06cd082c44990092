"""Every benchmark script runs on a miniature setting and prints its comparison table (no timing is asserted)."""

from __future__ import annotations

import json

import pytest
from script_runner import run_script

from zoo.registry import ROOT

BENCH = ROOT / "benchmarks"


def run(script: str, *args: str, timeout: int = 240) -> str:
    code, out, err = run_script(BENCH / script, list(args), ROOT, timeout)  # `python benchmarks/<script> <args>`
    assert code == 0, err[-3000:]
    return out


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not line.startswith("|---") and not line.startswith("|:")]


@pytest.mark.timeout(300)
def test_diffoas_generation():
    out = run("diffoas_generation.py", "--quick", "--n-basis", "3", "--gmres-samples", "2")
    rows = table_rows(out)[1:]
    assert {(r[0], r[1]) for r in rows} == {("1,000", "sparse"), ("1,000", "stencil"), ("2,000", "sparse"),
                                            ("2,000", "stencil")}
    assert "per-sample CPU ms by stage" in out


@pytest.mark.timeout(300)
def test_dpformer_clipping_times_and_memory():
    times = json.loads(run("dpformer_clipping.py", "--times", "200", "10", "--methods",
                           "nonprivate,phantom,opacus-hooks", "--steps", "2", "--batch", "2", "--d", "16")
                       .strip().splitlines()[-1])
    assert set(times) == {"nonprivate", "phantom", "opacus-hooks"}
    assert all(len(v) == 2 and min(v) > 0 for v in times.values()), "one step time per round and method"
    mem = json.loads(run("dpformer_clipping.py", "--mem", "phantom", "200", "10", "--batch", "2", "--d", "16")
                     .strip().splitlines()[-1])
    assert mem["peak_mb"] >= 0
    out = run("dpformer_clipping.py", "--vocabs", "200", "--seqs", "10", "--methods", "nonprivate,phantom",
              "--steps", "2", "--batch", "2", "--d", "16")
    assert [(r[0], r[1], r[2]) for r in table_rows(out)[1:]] == [("200", "10", "nonprivate"), ("200", "10", "phantom")]


@pytest.mark.timeout(300)
def test_rosa_train_step():
    out = run("rosa_train_step.py", "--hidden", "64", "--layers", "1", "--seq", "16", "--steps", "1", "--threads", "1")
    labels = [r[0] for r in table_rows(out)[1:]]
    assert any("PEFT LoRA" in x for x in labels) and any("RoSA" in x for x in labels)
    # the GPU run's options: a bf16 base with fp32 adapters, one RoSA row per SDDMM kernel (and plan caching),
    # the profile
    out = run("rosa_train_step.py", "--hidden", "64", "--intermediate", "96", "--layers", "1", "--seq", "16",
              "--steps", "1", "--threads", "1", "--dtype", "bfloat16", "--sddmm", "csr,blocked:per-step", "--profile")
    labels = [r[0] for r in table_rows(out)[1:] if r[0].startswith(("PEFT", "RoSA", "dense"))]
    assert labels == ["PEFT LoRA r=16", "RoSA r=16, d=0.6% (csr)", "RoSA r=16, d=0.6% (blocked:per-step)",
                      "RoSA r=16, d=1.8% (csr)", "RoSA r=16, d=1.8% (blocked:per-step)", "dense masked r=16, d=1.8%"]
    assert "intermediate 96" in out and "bfloat16" in out and out.count("one forward + backward") == 5


@pytest.mark.timeout(300)
def test_score_objectives():
    out = run("score_objectives.py", "--quick", "--device", "cpu", "--reps", "1")
    assert any(r[2] == "PML SupConLoss" for r in table_rows(out)[1:])


@pytest.mark.timeout(300)
def test_cruxeval_scoring(tmp_path):
    data = tmp_path / "cruxeval.jsonl"
    rows = [{"code": f"def f(x):\n    return x + {i}", "input": "1", "output": str(1 + i)} for i in range(3)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = run("cruxeval_scoring.py", "--data", str(data), "--workers", "1")
    assert [r[3] for r in table_rows(out)[1:]] == ["6/6"] * 3  # every scorer passes the 6 gold checks


@pytest.mark.timeout(660)
def test_unlearning_el_rows_agree_with_the_reference_loop():
    # about 20 s alone; the limits are hang guards for a machine shared with other jobs
    out = run("unlearning_el.py", "--hidden", "32", "--vocab", "256", "--seq-len", "12", "--num-seqs", "2",
              "--memorize-steps", "5", "30", timeout=600)
    rows = table_rows(out)[1:]
    assert len(rows) == 9 and {r[0] for r in rows} == {"fresh (unseen-like)", "partly memorized", "memorized"}
    assert all(float(r[-1]) == 0.0 for r in rows)  # every method gives the reference's EL_n exactly


# Every other benchmark (the later papers') has a `--quick` miniature; each must run and print its table.
@pytest.mark.timeout(300)
def test_gentle_neighbour_gap_falls_with_density():
    rows = table_rows(run("gentle_neighbour_gap.py", "--quick"))[1:]
    assert [r[0] for r in rows] == ["50", "100"]
    location, w2, distance = ([float(r[c]) for r in rows] for c in (1, 2, 3))
    assert all(w >= loc for w, loc in zip(w2, location, strict=True))  # W2 of two Gaussians is at least their mean gap
    assert location[0] > location[1] and distance[0] > distance[1]  # denser covariates, closer neighbours


TESTED_ABOVE = {"diffoas_generation", "dpformer_clipping", "rosa_train_step", "score_objectives", "cruxeval_scoring",
                "unlearning_el", "gentle_neighbour_gap"}
SCRIPTS = [p for p in BENCH.glob("*.py") if not p.stem.startswith("_")]  # _memory.py etc. are shared helpers
QUICK = sorted(p.stem for p in SCRIPTS if p.stem not in TESTED_ABOVE and "--quick" in p.read_text())


def test_every_benchmark_is_run_by_this_file():
    untested = [p.stem for p in SCRIPTS if p.stem not in TESTED_ABOVE and p.stem not in QUICK]
    assert not untested, f"benchmarks without a --quick miniature tested here: {untested}"


# Peers that cannot be dependencies (momentfm's wheel pins an old transformers; installed with --no-deps): the
# miniature skips, with the reason, where the peer does not import, as the paper's own oracle tests do.
OPTIONAL_PEERS = {"moment_forward": ("momentfm", "pip install --no-deps momentfm==0.1.4")}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", QUICK)
def test_quick_benchmark_prints_its_table(script):
    if script in OPTIONAL_PEERS:
        module, how = OPTIONAL_PEERS[script]
        pytest.importorskip(module, reason=f"{module} is not installed or does not import here ({how})")
    rows = table_rows(run(f"{script}.py", "--quick", timeout=280))
    assert len(rows) >= 2 and any(any(ch.isdigit() for ch in cell) for r in rows[1:] for cell in r), rows[:3]
