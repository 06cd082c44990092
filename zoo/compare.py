"""`zoo compare`: line runs up side by side (config keys that differ + final metrics) and plot a metric.

Runs come from local run dirs (summary.json, config.yaml, logs/fit/metrics.csv: no W&B internals needed)
or, when online, from a W&B project through the public API.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Literal, Optional

from zoo.configs import flatten, load_yaml
from zoo.errors import ZooError
from zoo.rundir import read_summary

# Keys that differ between any two runs without meaning anything.
_NOISE = ("config", "run_root", "ckpt_path", "trainer.default_root_dir")


def find_runs(paths: list[str]) -> list[Path]:
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ZooError(f"run path {p} does not exist")
        if (p / "config.yaml").exists():
            runs.append(p)
        else:
            runs += sorted(d.parent for d in p.rglob("config.yaml") if (d.parent / "summary.json").exists())
    return runs


def local_run(run_dir: Path) -> dict:
    summary = read_summary(run_dir)
    metrics = {}
    for stage in ("fit", "validate", "test"):
        metrics.update(summary.get(stage) or {})
    return {"name": f"{run_dir.parent.name}/{run_dir.name}", "config": flatten(load_yaml(run_dir / "config.yaml")),
            "metrics": metrics, "curves": lambda m, d=run_dir: _csv_curve(d, m)}


def _csv_curve(run_dir: Path, metric: str) -> list[tuple[float, float]]:
    pts = []
    for f in sorted((run_dir / "logs").glob("fit*/metrics.csv")):
        with f.open() as fh:
            for row in csv.DictReader(fh):
                if row.get(metric) not in (None, ""):
                    pts.append((float(row.get("step") or len(pts)), float(row[metric])))
    return pts


def wandb_runs(project: str) -> list[dict]:
    import wandb

    out = []
    for r in wandb.Api().runs(project):
        out.append({"name": r.name, "config": flatten(dict(r.config)),
                    "metrics": {k: v for k, v in r.summary.items() if isinstance(v, (int, float))},
                    "curves": lambda m, r=r: [(row.get("_step", i), row[m]) for i, row in
                                              enumerate(r.scan_history(keys=[m])) if row.get(m) is not None]})
    return out


def table(runs: list[dict]) -> tuple[list[str], list[list]]:
    keys = sorted({k for r in runs for k in r["config"]})
    differ = [k for k in keys if not k.startswith(_NOISE)
              and len({repr(r["config"].get(k)) for r in runs}) > 1]
    metrics = sorted({k for r in runs for k in r["metrics"]})
    header = ["run", *differ, *metrics]
    rows = [[r["name"], *(r["config"].get(k) for k in differ), *(r["metrics"].get(k) for k in metrics)] for r in runs]
    return header, rows


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def render(header: list[str], rows: list[list], fmt: str) -> str:
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        w.writerows([[_fmt(v) for v in r] for r in rows])
        return buf.getvalue()
    cells = [header] + [[_fmt(v) for v in r] for r in rows]
    if fmt == "markdown":
        out = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in cells[1:]]
        return "\n".join(out) + "\n"
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], metric: str, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for r in runs:
        pts = r["curves"](metric)
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, label=r["name"], marker="." if len(pts) < 30 else None)
            drawn += 1
    if not drawn:
        plt.close(fig)
        raise ZooError(f"no run logged metric {metric!r}")
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def compare(runs: list[str] = ["runs"], wandb_project: Optional[str] = None,
            format: Literal["terminal", "markdown", "csv"] = "terminal", output: Optional[str] = None,
            metric: Optional[str] = None, plot_path: str = "compare.png") -> str:
    """Compare runs: a table of the config keys that differ and the final metrics, plus a PNG of a metric.

    Args:
        runs: run dirs, or folders to search for run dirs (default: runs/).
        wandb_project: read runs from this W&B project (entity/project) through the public API instead.
        format: table format.
        output: write the table to this file instead of printing it.
        metric: plot this logged metric's curves (e.g. train/loss) to plot_path.
        plot_path: where the PNG goes.
    """
    loaded = wandb_runs(wandb_project) if wandb_project else [local_run(d) for d in find_runs(runs)]
    if not loaded:
        raise ZooError(f"no runs found in {', '.join(runs)}")
    header, rows = table(loaded)
    text = render(header, rows, format)
    if output:
        Path(output).write_text(text)
    else:
        print(text, end="")
    if metric:
        print(f"plot: {plot(loaded, metric, plot_path)}")
    return text
