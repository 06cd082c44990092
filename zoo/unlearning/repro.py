"""CPU reproduction: memorize-then-unlearn with GA, SGA, TA and TAU over several seeds.

    python -m zoo.unlearning.repro --seeds 0 1 2 --out runs/unlearning_repro

For each seed the embedded MemorizationDataModule trains a tiny GPT-Neo until its forget sequences are memorized
to graded degrees (cached); the unseen-data levels of that theta_0 are measured once and shared by the four methods;
each method then unlearns from the same theta_0 with its own defaults (the official lambdas 3 / 1, TA's switch at
mean MA 0.9, SGA's threshold = the band's high edge). A reference row scores the same model retrained on the
background alone (it never saw D_f): what an ideal unlearner reaches. Reported per method (mean +- std over seeds):
epochs, c(D_f) = forget sequences outside the unseen MA band (still memorized: MA >= high; unlearned too far:
MA <= low), mean MA / EL_10 of the forget set, membership-attack AUCs (forget vs unseen; score MA, and the paper's
perturbation discrepancy), utility = held-out perplexity. Writes results.csv and results.md under --out.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import lightning as L
import torch

from datamodules.memorization import MemorizationDataModule
from zoo.unlearning.attack import memorization_attack_auc
from zoo.unlearning.metrics import attack_auc, outlier_counts, score_sequences, unseen_thresholds
from zoo.unlearning.module import METHODS, TINY_GPT_NEO, UnlearningModule

DATA = dict(tokenizer="byt5", seq_len=32, num_forget=16, num_unseen=16, num_heldout=16, num_background=1024,
            batch_size=16, memorize_steps=900)
TINY = {**TINY_GPT_NEO, "window_size": 32, "max_position_embeddings": 64}
REFERENCE = "retrained without D_f (reference)"


def perturbation_auc(model, dm, n_perturbations: int = 25) -> float:
    """The paper's attack (DetectGPT perturbation discrepancy), with random word spans drawn from the unseen texts
    in place of t5-large fills (offline); single-word spans, at least one per text: the 32-byte texts hold about six
    words, too few for the official two-word spans at pct 0.3."""
    return memorization_attack_auc(model, dm.tokenizer, dm.forget_set, dm.unseen_set, n_perturbations=n_perturbations,
                                   span_length=1, ceil_pct=True)


def evaluate(model, dm, thr: dict, el_n: int) -> dict:
    sf = score_sequences(model, dm.forget_set.input_ids, dm.forget_set.attention_mask, el_n)
    su = score_sequences(model, dm.unseen_set.input_ids, dm.unseen_set.attention_mask, None)
    sh = score_sequences(model, dm.heldout_set.input_ids, dm.heldout_set.attention_mask, None)
    high, low = outlier_counts(sf.ma, thr["high"], thr["low"])
    return {"outliers": high + low, "high": high, "low": low, "forget_ma": float(sf.ma.mean()),
            "forget_el": float(sf.el.mean()), "unseen_ma": float(su.ma.mean()), "auc": attack_auc(sf.ma, su.ma),
            "auc_perturb": perturbation_auc(model, dm), "ppl": sh.perplexity}


def run(seeds: list[int], methods: list[str], out: Path, lr: float, max_epochs: int, cache_dir: str | None,
        lambdas: list[float] | None, el_n: int = 10, threshold_std: float = 0.0,
        outlier_std: float = 2.0) -> list[dict]:
    rows = []
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        dm = MemorizationDataModule(seed=seed, cache_dir=cache_dir, **DATA)
        dm.setup()
        base = UnlearningModule(model=TINY, el_n=el_n)
        dm.memorize(base.model)
        su = score_sequences(base.model, dm.unseen_set.input_ids, dm.unseen_set.attention_mask, el_n)
        thr = unseen_thresholds(su, threshold_std, outlier_std)
        r0 = {"seed": seed, "method": "none (memorized)", "epochs": 0, **evaluate(base.model, dm, thr, el_n)}
        rows.append(r0)
        print(r0, flush=True)
        # the ideal unlearner: the same model trained on the background alone (never saw D_f), scored against
        # theta_0's thresholds; what any unlearning method can at best reach
        ref_dm = MemorizationDataModule(seed=seed, cache_dir=cache_dir, forget_fraction=0.0, **DATA)
        ref = UnlearningModule(model=TINY, el_n=el_n)
        ref_dm.memorize(ref.model)
        r_ref = {"seed": seed, "method": REFERENCE, "epochs": 0, **evaluate(ref.model, dm, thr, el_n)}
        rows.append(r_ref)
        print(r_ref, flush=True)
        for method in methods:
            t0 = time.time()
            L.seed_everything(seed, verbose=False)
            m = UnlearningModule(model=TINY, method=method, lr=lr, el_n=el_n, ma_threshold=thr["ma"],
                                 el_threshold=thr["el"], outlier_low=thr["low"], outlier_high=thr["high"],
                                 ta_lambda_grid=lambdas)
            trainer = L.Trainer(max_epochs=max_epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(out))
            trainer.fit(m, dm)
            r = {"seed": seed, "method": method, "epochs": trainer.current_epoch,
                 **evaluate(m.model, dm, thr, el_n), "seconds": round(time.time() - t0, 1)}
            rows.append(r)
            print(r, flush=True)
    with (out / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    return rows


def table(rows: list[dict]) -> str:
    keys = [("epochs", "{:.1f}"), ("outliers", "{:.1f}"), ("high", "{:.1f}"), ("low", "{:.1f}"),
            ("forget_ma", "{:.3f}"), ("forget_el", "{:.3f}"), ("unseen_ma", "{:.3f}"), ("auc", "{:.3f}"),
            ("auc_perturb", "{:.3f}"), ("ppl", "{:.2f}")]
    head = ("| method | epochs | c(D_f) | still memorized | unlearned too far | forget MA | forget EL_10 | unseen MA "
            "| attack AUC (MA) | attack AUC (perturbation) | held-out ppl |")
    lines = [head, "|" + "---|" * 11]
    for method in dict.fromkeys(r["method"] for r in rows):
        rs = [r for r in rows if r["method"] == method]
        cells = []
        for k, fmt in keys:
            v = [float(r[k]) for r in rs]
            sd = statistics.pstdev(v) if len(v) > 1 else 0.0
            cells.append(fmt.format(statistics.mean(v)) + " ± " + fmt.format(sd))
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--max-epochs", type=int, default=200)
    p.add_argument("--lambdas", type=float, nargs="+", default=None,
                   help="task-arithmetic lambda grid (default: the official 3 for TA, 1 for TAU)")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--threshold-std", type=float, default=0.0,
                   help="thresholds = unseen mean + k * std (0: the mean, Jang et al.'s level)")
    p.add_argument("--outlier-std", type=float, default=2.0, help="outlier band = unseen mean MA -/+ k * std")
    p.add_argument("--out", type=Path, default=Path("runs/unlearning_repro"))
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)  # tiny models: extra intra-op threads only contend on a shared CPU
    rows = run(a.seeds, a.methods, a.out, a.lr, a.max_epochs, a.cache_dir, a.lambdas, threshold_std=a.threshold_std,
               outlier_std=a.outlier_std)
    md = table(rows)
    (a.out / "results.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
