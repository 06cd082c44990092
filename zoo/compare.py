"""`zoo compare`: runs side by side, or a sweep's seeds aggregated per group, as a table and a plot.

Runs come from local run dirs (summary.json, config.yaml, point.json, logs/*/metrics.csv: no W&B internals) or
from a W&B project through the public API. Without `group_by` every run is a row (the config keys that differ and
the final metrics); with `group_by` the runs of each group (e.g. a sweep's variant) are aggregated over the other
axes — usually the seeds — as mean, standard deviation, n and a 95% t-interval.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import math
from pathlib import Path
from typing import Any, Literal, Optional

from zoo.configs import flatten, load_yaml
from zoo.errors import ZooError, flat
from zoo.rundir import check_output_file, fit_config, read_point, read_summary

# Keys that differ between any two runs without meaning anything.
_NOISE = ("config", "run_root", "run_dir", "run_name", "ckpt_path", "trainer.default_root_dir")


def is_finished(run_dir: Path) -> bool:
    """A run that recorded at least one finished stage and whose last command did not fail or stop early."""
    s = read_summary(run_dir)
    return bool(s.get("stages")) and s.get("status") not in ("failed", "interrupted")


def find_runs(paths: list[str]) -> list[Path]:
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ZooError(f"run path {p} does not exist")
        if not p.is_dir():
            raise ZooError(f"run path {p} is a file; give a run dir (runs/<config>/<timestamp>) or a folder of runs")
        found = [p] if (p / "config.yaml").exists() else sorted(d.parent for d in p.rglob("summary.json"))
        runs += [d for d in found if (d / "config.yaml").exists() and is_finished(d) and d not in runs]
    return runs


def local_run(run_dir: Path) -> dict:
    summary = read_summary(run_dir)
    metrics = {}
    for stage in ("fit", "validate", "test"):
        metrics.update(summary.get(stage) or {})
    point = read_point(run_dir)
    axes = dict(point.get("axes") or {})
    if point:
        axes["stage"] = point["stage"]
    return {"name": f"{run_dir.parent.name}/{run_dir.name}", "config": flatten(load_yaml(fit_config(run_dir))),
            "metrics": metrics, "axes": axes, "curves": lambda m, d=run_dir: _csv_curve(d, m)}


def _csv_curve(run_dir: Path, metric: str) -> list[tuple[float, float]]:
    pts = []
    for f in sorted((run_dir / "logs").glob("fit*/metrics.csv")):
        try:
            with f.open() as fh:
                for row in csv.DictReader(fh):
                    if row.get(metric) not in (None, ""):
                        pts.append((float(row.get("step") or len(pts)), float(row[metric])))
        except (UnicodeDecodeError, csv.Error, ValueError) as e:  # ValueError: a value that is not a number
            raise ZooError(f"{f} is not a readable metrics log ({e})") from e
    return pts


def wandb_runs(project: str) -> list[dict]:
    import wandb

    out = []
    try:
        runs = list(wandb.Api().runs(project))
    except (wandb.errors.Error, ValueError, OSError) as e:  # not logged in, no network, no such project
        raise ZooError(f"cannot read W&B project {project!r}: {flat(e)} (local run dirs need no W&B: zoo compare "
                       "RUN_DIR...)") from e
    for r in runs:
        config = flatten(dict(r.config))
        axes = {k[len("sweep."):]: v for k, v in config.items() if k.startswith("sweep.") and k != "sweep.stage"}
        if "sweep.stage" in config:
            axes["stage"] = config["sweep.stage"]
        out.append({"name": r.name, "config": config, "axes": axes,
                    "metrics": {k: v for k, v in r.summary.items() if isinstance(v, (int, float))},
                    "curves": lambda m, r=r: [(row.get("_step", i), row[m]) for i, row in
                                              enumerate(r.scan_history(keys=[m])) if row.get(m) is not None]})
    return out


def differing_keys(runs: list[dict]) -> list[str]:
    keys = sorted({k for r in runs for k in r["config"]})
    return [k for k in keys if not k.startswith(_NOISE) and len({repr(r["config"].get(k)) for r in runs}) > 1]


# Without --metrics, the first stage here that any run logged: a table of the test metrics, not of every training
# and validation number as well (`--metrics '*'` shows all).
DEFAULT_METRICS = ("test/*", "val/*")


def pick_metrics(runs: list[dict], patterns: Optional[list[str]]) -> list[str]:
    names = sorted({k for r in runs for k in r["metrics"]})
    if patterns:
        picked = [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]
        if not picked:
            raise ZooError(f"no run logged a metric matching {patterns}; metrics: {', '.join(names) or 'none'}")
        return picked
    for pattern in DEFAULT_METRICS:
        picked = [n for n in names if fnmatch.fnmatch(n, pattern)]
        if picked:
            return picked
    return names


def table(runs: list[dict], metrics: Optional[list[str]] = None) -> tuple[list[str], list[list]]:
    differ = differing_keys(runs)
    metrics = pick_metrics(runs, metrics)
    header = ["run", *differ, *metrics]
    rows = [[r["name"], *(r["config"].get(k) for k in differ), *(r["metrics"].get(k) for k in metrics)] for r in runs]
    return header, rows


# -- aggregation over seeds ---------------------------------------------------------------------------------

def t_quantile(q: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def aggregate(values: list[float]) -> dict[str, float]:
    """mean, sample std (ddof 1), n and the 95% t-interval of the mean (std and interval are nan when n = 1)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    half = t_quantile(0.975, n - 1) * std / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "std": std, "n": n, "ci_low": mean - half, "ci_high": mean + half}


def _axis_key(runs: list[dict], name: str) -> str:
    """An axis by its short name, its dotted config key, or `stage`."""
    known = {k for r in runs for k in r["axes"]}
    if name in known:
        return name
    tails = [k for k in known if k.rsplit(".", 1)[-1] == name]
    if len(tails) == 1:
        return tails[0]
    raise ZooError(f"no run has axis {name!r} to group by; axes: {', '.join(sorted(known)) or 'none (not a sweep)'}")


def groups_of(runs: list[dict], group_by: list[str]) -> dict[tuple, list[dict]]:
    keys = [_axis_key(runs, g) for g in group_by]
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(tuple(r["axes"].get(k) for k in keys), []).append(r)
    return groups


def grouped_table(runs: list[dict], group_by: list[str], metrics: Optional[list[str]], fmt: str
                  ) -> tuple[list[str], list[list]]:
    groups = groups_of(runs, group_by)
    metrics = pick_metrics(runs, metrics)
    header = [*group_by, "n"]
    rows = []
    for key, members in groups.items():
        stats = {m: aggregate([float(r["metrics"][m]) for r in members if r["metrics"].get(m) is not None])
                 for m in metrics if any(r["metrics"].get(m) is not None for r in members)}
        row: list[Any] = [*key, len(members)]
        for m in metrics:
            s = stats.get(m)
            if fmt == "csv":
                row += [s and s[k] for k in ("mean", "std", "n", "ci_low", "ci_high")]
            else:
                row += ["" if s is None else _mean_std(s),
                        "" if s is None or s["n"] < 2 else f"[{_num(s['ci_low'])}, {_num(s['ci_high'])}]"]
        rows.append(row)
    for m in metrics:
        header += ([f"{m} {k}" for k in ("mean", "std", "n", "ci95_low", "ci95_high")] if fmt == "csv"
                   else [f"{m} (mean ± std)", f"{m} 95% CI"])
    return header, rows


def paired_table(runs: list[dict], group_by: list[str], baseline: str, metrics: Optional[list[str]], fmt: str
                 ) -> tuple[list[str], list[list]]:
    """Each group minus the `baseline` group, run by run: runs are matched on every axis outside `group_by` (in a
    sweep, the seed), so the spread the seed puts into both (its data, its initialisation) cancels. Per metric:
    the mean ± std of the differences, how many are below / above zero, and the two-sided paired t-test p (scipy)."""
    from scipy.stats import ttest_1samp

    keys = {_axis_key(runs, g) for g in group_by}
    groups = groups_of(runs, group_by)
    label = {k: ",".join(map(str, k)) for k in groups}
    base = [k for k in groups if label[k] == baseline]
    if not base:
        raise ZooError(f"no group {baseline!r} to pair against; groups: {', '.join(sorted(label.values()))}")

    def by_match(members: list[dict]) -> dict[tuple, dict]:
        return {tuple(sorted((k, str(v)) for k, v in r["axes"].items() if k not in keys)): r for r in members}

    reference = by_match(groups[base[0]])
    metrics = pick_metrics(runs, metrics)
    header = [*group_by, "pairs"]
    for m in metrics:
        header += ([f"{m} diff {k}" for k in ("mean", "std", "below", "above", "p")] if fmt == "csv"
                   else [f"{m} − {baseline} (mean ± std)", f"{m} below/above", f"{m} paired p"])
    rows = []
    for key, members in groups.items():
        if key == base[0]:
            continue
        matched = [(r, reference[m]) for m, r in by_match(members).items() if m in reference]
        row: list[Any] = [*key, len(matched)]
        for m in metrics:
            d = [float(a["metrics"][m]) - float(b["metrics"][m]) for a, b in matched
                 if a["metrics"].get(m) is not None and b["metrics"].get(m) is not None]
            s = aggregate(d) if d else None
            p = float(ttest_1samp(d, 0.0).pvalue) if len(d) > 1 else float("nan")  # = the paired t-test
            below, above = sum(x < 0 for x in d), sum(x > 0 for x in d)
            if s is None:
                row += [None] * 5 if fmt == "csv" else [""] * 3
            elif fmt == "csv":
                row += [s["mean"], s["std"], below, above, p]
            else:
                row += [_mean_std(s), f"{below}/{above}", _num(p)]
        rows.append(row)
    return header, rows


def _num(v: float) -> str:
    return "nan" if v != v else f"{v:.4g}"


def _mean_std(s: dict[str, float]) -> str:
    """`mean ± std` over a group's values; one value has no spread, so it stands alone (not `± nan`)."""
    return f"{_num(s['mean'])} ± {_num(s['std'])}" if s["n"] > 1 else _num(s["mean"])


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
    # one table row per run: a value's line breaks are shown as \n (a prompt template held one and split the row),
    # and a markdown cell's | is escaped
    cells = [[c.replace("\r", "\\r").replace("\n", "\\n") for c in r]
             for r in [header] + [[_fmt(v) for v in r] for r in rows]]
    if fmt == "markdown":
        cells = [[c.replace("|", "\\|") for c in r] for r in cells]
        out = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in cells[1:]]
        return "\n".join(out) + "\n"
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


# -- plots --------------------------------------------------------------------------------------------------

def run_labels(runs: list[dict]) -> list[str]:
    """Each run named by the config values that tell it apart (the timestamp only when nothing else does)."""
    differ = differing_keys(runs)
    labels = []
    for r in runs:
        parts = [f"{k.rsplit('.', 1)[-1]}={_fmt(r['config'].get(k))}" for k in differ[:4]]
        labels.append(", ".join(parts) or r["name"])
    if len(set(labels)) < len(labels):
        labels = [f"{lab} ({r['name']})" for lab, r in zip(labels, runs)]
    return labels


def curve_groups(runs: list[dict], metric: str, group_by: Optional[list[str]] = None) -> list[tuple]:
    """(group key, its runs' logged curves of `metric`) under `group_by`, else (run label, [its curve]) per run;
    groups and runs that never logged it are left out."""
    if group_by:
        items = groups_of(runs, group_by).items()
    else:
        items = zip(run_labels(runs), ([r] for r in runs))
    out = []
    for key, members in items:
        curves = [c for c in (r["curves"](metric) for r in members) if c]
        if curves:
            out.append((key, curves))
    return out


def _band(curves: list[list[tuple[float, float]]]) -> tuple[list[float], list[float], list[float]]:
    """Mean and std over the runs at the steps every run logged."""
    common = sorted(set.intersection(*(set(x for x, _ in c) for c in curves)))
    by_step = [dict(c) for c in curves]
    means, stds = [], []
    for s in common:
        vals = [d[s] for d in by_step]
        means.append(sum(vals) / len(vals))
        stds.append(math.sqrt(sum((v - means[-1]) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0)
    return common, means, stds


def plot_file(path: str) -> str:
    """Where the plot will really go: matplotlib writes `compare` as `compare.png` and fails only at the end on a
    format it cannot write, so both are settled (and the folder checked) before any run is read."""
    from matplotlib.backend_bases import FigureCanvasBase

    p = Path(path)
    if not p.is_dir():  # a folder: check_output_file names it
        p = p if p.suffix else p.with_name(p.name + ".png")
        formats = FigureCanvasBase.get_supported_filetypes()
        if p.suffix[1:].lower() not in formats:
            raise ZooError(f"--plot_path {path}: matplotlib cannot write {p.suffix!r} files; use one of "
                           f"{', '.join('.' + f for f in sorted(formats))}")
    return str(check_output_file(p, "--plot_path"))


def plot(runs: list[dict], metric: str, path: str, group_by: Optional[list[str]] = None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    drawn = 0
    for key, curves in curve_groups(runs, metric, group_by):
        if group_by:
            xs, mean, std = _band(curves)
            if not xs:
                continue
            label = ", ".join(f"{g}={_fmt(v)}" for g, v in zip(group_by, key)) + f" (n={len(curves)})"
            (line,) = ax.plot(xs, mean, label=label)
            ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                            color=line.get_color(), alpha=0.2, linewidth=0)
        else:
            xs, ys = zip(*curves[0])
            ax.plot(xs, ys, label=key, marker="." if len(xs) < 30 else None)
        drawn += 1
    title = f"{metric}: mean ± std over runs per group" if group_by else f"{metric} per run"
    if not drawn:
        plt.close(fig)
        raise ZooError(f"no run logged metric {metric!r}")
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def check_window(window: int) -> None:
    if window < 1:
        raise ZooError(f"--curve_window must be >= 1, got {window}")


def curve_table(runs: list[dict], metric: str, window: int, group_by: Optional[list[str]] = None
                ) -> tuple[list[str], list[list]]:
    """The plotted curve as numbers: per group (or run), the mean of `metric` over each window of `window`
    consecutive logged points (e.g. epochs for a metric logged once per epoch), averaged over the group's runs at
    the steps every run logged (as the plot's band)."""
    check_window(window)
    rows, longest = [], 0
    for key, curves in curve_groups(runs, metric, group_by):
        _, mean, _ = _band(curves)
        windows = [sum(mean[i:i + window]) / len(mean[i:i + window]) for i in range(0, len(mean), window)]
        longest = max(longest, len(windows))
        rows.append([", ".join(_fmt(v) for v in key) if group_by else key, len(curves), *windows])
    if not rows:
        raise ZooError(f"no run logged metric {metric!r}")
    for row in rows:
        row += [float("nan")] * (longest + 2 - len(row))
    header = [",".join(group_by) if group_by else "run", "n"]
    header += [f"{metric} points {i * window + 1}-{(i + 1) * window}" for i in range(longest)]
    return header, rows


def compare(runs: Optional[list[str]] = None, group_by: Optional[list[str]] = None,
            metrics: Optional[list[str]] = None, wandb_project: Optional[str] = None,
            format: Literal["terminal", "markdown", "csv"] = "terminal", output: Optional[str] = None,
            metric: Optional[str] = None, plot_path: str = "compare.png", paired_against: Optional[str] = None,
            curve_window: Optional[int] = None) -> str:
    """Compare runs as a table (config keys that differ, final metrics) and a plot; --group_by aggregates seeds.

    With --group_by, each group's runs are aggregated (mean ± std, n, 95% t-interval); --metric plots curves.

    Args:
        runs: run dirs, sweep dirs or folders to search for run dirs (default: runs/), e.g.
            `zoo compare runs/sweeps/score_digits --group_by variant`.
        group_by: aggregate the runs that share these sweep axes (e.g. variant, imbalance_ratio, stage); the others
            (usually seed) are what is averaged over.
        metrics: only these metrics (names or globs such as 'test/*'; `'*'`: all). Default: the test metrics, or the
            validation metrics where no run was tested, or all.
        wandb_project: read runs from this W&B project (entity/project) through the public API instead.
        format: table format.
        output: write the table to this file instead of printing it.
        metric: plot this logged metric's curves (e.g. train/loss); per group with a ±std band under --group_by.
        plot_path: where the PNG goes.
        paired_against: with --group_by, one group's label (its values joined by commas, e.g. `no_ot`): every other
            group minus that one, matched run by run on the remaining axes (the seed), with the mean ± std of the
            differences, how many fall below / above zero and the paired t-test p.
        curve_window: with --metric, also print its curves as a table: the mean over each window of this many
            logged points (e.g. 80 for a metric logged once per epoch: epochs 1-80, 81-160, ...), per group.
    """
    if curve_window is not None and not metric:
        raise ZooError("--curve_window needs --metric (the curve to tabulate)")
    if curve_window is not None:
        check_window(curve_window)
    if output:
        check_output_file(output, "--output")
    if metric:
        plot_path = plot_file(plot_path)
    paths = runs or ["runs"]
    loaded = wandb_runs(wandb_project) if wandb_project else [local_run(d) for d in find_runs(paths)]
    if not loaded:
        raise ZooError(f"no finished runs found in {', '.join(paths)}")
    if paired_against and not group_by:
        raise ZooError("--paired_against needs --group_by (the axes whose groups are compared)")
    if paired_against:
        header, rows = paired_table(loaded, group_by, paired_against, metrics, format)
    elif group_by:
        header, rows = grouped_table(loaded, group_by, metrics, format)
    else:
        header, rows = table(loaded, metrics)
    text = render(header, rows, format)
    if output:
        Path(output).write_text(text)
    else:
        print(text, end="")
    if metric:
        if curve_window is not None:
            print(render(*curve_table(loaded, metric, curve_window, group_by), format), end="")
        print(f"plot: {plot(loaded, metric, plot_path, group_by)}")
    return text
