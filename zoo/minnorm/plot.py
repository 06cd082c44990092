"""``python -m zoo.minnorm.plot RUN_DIR... [--out risk_vs_p.png]``: bias, variance and risk against p.

Reads each run dir's (or each sweep folder's run dirs') per-instance table (``instances_test*.csv``, written by `MinNormExperiment`); a run dir
without one falls back to its ``summary.json`` means and standard errors (labelled by the run's config name).
Curves of the same design law from several run dirs are pooled; each point is the mean over instances ± 2
standard errors. Nothing is trained or solved here.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
from collections import defaultdict
from pathlib import Path

from zoo.errors import ZooError
from zoo.rundir import read_summary

PANELS = ("bias", "variance", "risk")


def read_tables(run_dirs: list[str]) -> dict[str, dict[str, dict[float, tuple[float, float]]]]:
    """{label: {metric: {p: (mean, se)}}} from run dirs (label = design law, or config name as a fallback)."""
    values: dict[str, dict[str, dict[float, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    from_summary: dict[str, dict[str, dict[float, tuple[float, float]]]] = {}
    for run in map(Path, run_dirs):
        if not run.is_dir():
            raise ZooError(f"run dir {run} does not exist")
        tables = sorted(run.rglob("instances_test*.csv"))  # a run dir, or a sweep folder of them
        if tables:
            for table in tables:
                with table.open() as fh:
                    for row in csv.DictReader(fh):
                        for m in PANELS:
                            if row.get(m) not in (None, "", "nan"):
                                values[row["law"]][m][float(row["p"])].append(float(row[m]))
            continue
        metrics = read_summary(run).get("test") or {}
        if not metrics:
            raise ZooError(f"{run} has neither instances_test.csv nor test metrics in summary.json: run `zoo test` first")
        label = read_summary(run).get("config_name", run.name)
        curves: dict[str, dict[float, tuple[float, float]]] = defaultdict(dict)
        for key, mean in metrics.items():
            hit = re.fullmatch(r"test/(bias|variance|risk)_p([0-9.]+)", key)
            if hit:
                se = metrics.get(f"test/{hit[1]}_se_p{hit[2]}", math.nan)
                curves[hit[1]][float(hit[2])] = (mean, se)
        from_summary[label] = curves
    out: dict[str, dict[str, dict[float, tuple[float, float]]]] = {}
    for label, by_metric in values.items():
        out[label] = {}
        for m, by_p in by_metric.items():
            out[label][m] = {}
            for p, xs in by_p.items():
                mean = sum(xs) / len(xs)
                var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else math.nan
                out[label][m][p] = (mean, math.sqrt(var / len(xs)))
    out.update(from_summary)
    if not out:
        raise ZooError(f"no bias/variance/risk values in {', '.join(run_dirs)}")
    return out


def plot_risk_vs_p(curves: dict[str, dict[str, dict[float, tuple[float, float]]]], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(12, 3.8))
    styles = {"gaussian": ("tab:blue", "o", "-"), "rademacher": ("tab:orange", "s", "--"),
              "uniform": ("tab:green", "^", ":")}
    for ax, metric in zip(axes, PANELS):
        for label, by_metric in sorted(curves.items()):
            pts = sorted(by_metric.get(metric, {}).items())
            if not pts:
                continue
            ps, stats = zip(*pts)
            means = [s[0] for s in stats]
            err = [0.0 if math.isnan(s[1]) else 2 * s[1] for s in stats]
            color, marker, line = styles.get(label, (None, "x", "-"))
            ax.errorbar(ps, means, yerr=err, label=label, color=color, marker=marker, linestyle=line,
                        capsize=3, markersize=4)
        ax.set_xlabel("p")
        ax.set_title({"bias": "bias ‖ŵ(Xw*) − w*‖²", "variance": "variance E Var(ŵ | X)",
                      "risk": "risk ‖ŵ − w*‖²"}[metric], fontsize=10)
        if metric != "bias":  # risk and variance are positive and span a decade: the U near p = 1 shows on a log axis
            ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8, title="design law (±2 s.e.)", title_fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.minnorm.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run dirs of `zoo test` with MinNormExperiment")
    parser.add_argument("--out", default="risk_vs_p.png", help="PNG to write (default: ./risk_vs_p.png)")
    args = parser.parse_args(argv)
    try:
        path = plot_risk_vs_p(read_tables(args.runs), args.out)
    except ZooError as e:
        parser.exit(2, f"zoo: error: {e}\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
