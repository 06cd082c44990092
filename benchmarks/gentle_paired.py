"""Paired per-seed comparison of a GENTLE variant against baselines over toy1 sweep dirs: each seed draws its own
data, so the difference of two variants at the same seed removes the data's share of the spread. Prints the per-seed
metric, then per baseline the mean ± std of (method - baseline), on how many seeds the method is lower, and a paired
t-test (scipy).

    python benchmarks/gentle_paired.py runs/sweeps/gentle_toy1_reconfirm --method l01_bw07
    python benchmarks/gentle_paired.py runs/sweeps/gentle_toy1 runs/sweeps/gentle_toy1_confirm --method gentle_l01
    python benchmarks/gentle_paired.py --quick      # a made-up sweep dir in a temporary folder (tests)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats


def collect(sweep_dirs: list[Path], metric: str) -> dict[str, dict[int, float]]:
    """variant -> seed -> metric from each point's summary.json (the test stage's metrics)."""
    table: dict[str, dict[int, float]] = {}
    for d in sweep_dirs:
        for point in sorted(d.glob("*/point.json")):
            summary = point.parent / "summary.json"
            if not summary.exists():
                continue
            axes = json.loads(point.read_text())["axes"]
            values = json.loads(summary.read_text())
            value = values.get("test", {}).get(metric, values.get("fit", {}).get(metric))
            if value is not None:
                table.setdefault(axes["variant"], {})[int(axes["seed"])] = float(value)
    return table


def report(table: dict[str, dict[int, float]], method: str, metric: str) -> str:
    if method not in table:
        raise SystemExit(f"no variant {method!r} in {sorted(table)}")
    seeds = sorted(set().union(*table.values()))
    names = [method, *sorted(v for v in table if v != method)]
    lines = [f"| seed | {' | '.join(names)} |", "|---" * (len(names) + 1) + "|"]
    for s in seeds:
        cells = [f"{table[v][s]:.4g}" if s in table[v] else "" for v in names]
        lines.append(f"| {s} | {' | '.join(cells)} |")
    lines.append("")
    for base in names[1:]:
        common = sorted(set(table[method]) & set(table[base]))
        d = np.array([table[method][s] - table[base][s] for s in common])
        if len(d) < 2:
            continue
        t = stats.ttest_rel([table[method][s] for s in common], [table[base][s] for s in common])
        lines.append(f"{metric} {method} - {base}: {d.mean():+.4f} ± {d.std(ddof=1):.4f} over {len(d)} seeds; "
                     f"{method} lower on {(d < 0).sum()}/{len(d)}; paired t = {t.statistic:.2f}, p = {t.pvalue:.3f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="*", type=Path)
    ap.add_argument("--method", default="l01_bw07")
    ap.add_argument("--metric", default="test/wd")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        tmp = Path(tempfile.mkdtemp())
        for v, shift in (("l01_bw07", 0.0), ("no_ot", 0.01)):
            for s in (0, 1, 2):
                p = tmp / f"variant={v},seed={s}"
                p.mkdir()
                (p / "point.json").write_text(json.dumps({"axes": {"variant": v, "seed": s}}))
                wd = 0.5 + 0.1 * s + shift * (1 + s)
                (p / "summary.json").write_text(json.dumps({"test": {"test/wd": wd}}))
        args.sweeps = [tmp]
    print(report(collect(args.sweeps, args.metric), args.method, args.metric))


if __name__ == "__main__":
    main()
