"""Scoring throughput on the 800 CRUXEval gold answers: zoo.sandbox vs the official harness's approach.

Official approach (facebookresearch/cruxeval evaluation/utils_execute.py, re-implemented here for timing):
per check, a `multiprocessing.Manager` for the result list plus a fresh `multiprocessing.Process` that
runs the program with a 3 s `setitimer` timer, dispatched by a `ProcessPoolExecutor`. A second peer
starts a fresh `python` interpreter per check (`subprocess.run(..., timeout=3)`), the obvious
"one process per sample" baseline. Ours: `Sandbox.map` (pre-warmed zygotes, one fork per check, rlimits,
namespaces). All three run the same 2 x 800 programs (output and input mode) in the same process.

    python benchmarks/cruxeval_scoring.py [--quick] [--workers 2] [--data ../shared/data/cruxeval.jsonl]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo.sandbox import Sandbox  # noqa: E402


# -- peer 1: the official harness's approach --------------------------------------------------------
class _Timeout(Exception):
    pass


def _official_child(program: str, result, timeout: float) -> None:
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)

        def handler(signum, frame):
            raise _Timeout()

        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(program, {})
            result.append("passed")
        except _Timeout:
            result.append("timed out")
        except BaseException as e:
            result.append(f"failed: {e}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def official_check(program: str, timeout: float = 3.0) -> bool:
    manager = multiprocessing.Manager()
    result = manager.list()
    p = multiprocessing.Process(target=_official_child, args=(program, result, timeout))
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    ok = bool(result) and result[0] == "passed"
    manager.shutdown()
    return ok


def run_official(programs: list[str], workers: int) -> list[bool]:
    with ProcessPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(official_check, programs))


# -- peer 2: a fresh interpreter per check ----------------------------------------------------------
def fresh_python_check(program: str, timeout: float = 3.0) -> bool:
    try:
        return subprocess.run([sys.executable, "-I", "-c", program], capture_output=True,
                              timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def run_fresh_python(programs: list[str], workers: int) -> list[bool]:
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fresh_python_check, programs))


def run_zoo(programs: list[str], workers: int) -> list[bool]:
    with Sandbox(workers=workers, cpu_seconds=3, wall_timeout=3, memory_mb=1024) as sb:
        sb.run("pass")  # start-up is included below via a fresh pool; this one only warms the page cache
    with Sandbox(workers=workers, cpu_seconds=3, wall_timeout=3, memory_mb=1024) as sb:
        return [v.passed for v in sb.map(programs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "cruxeval.jsonl"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="first 100 rows only")
    args = ap.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    if args.quick:
        rows = rows[:100]
    programs = [f"{r['code']}\nassert {r['output']} == {r['output']}" for r in rows]  # output mode, gold
    programs += [f"{r['code']}\nassert {r['output']} == f({r['input']})" for r in rows]  # input mode, gold

    results = {}
    for name, fn in [("zoo.sandbox (pre-warmed fork + rlimits + namespaces)", run_zoo),
                     ("official approach (Manager + Process per check, 3 s timer)", run_official),
                     ("fresh `python` process per check", run_fresh_python)]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        ok = fn(programs, args.workers)
        dt = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        results[name] = (dt, sum(ok), after.ru_maxrss / 1024, (after.ru_utime + after.ru_stime)
                         - (before.ru_utime + before.ru_stime))

    base = results["zoo.sandbox (pre-warmed fork + rlimits + namespaces)"][0]
    print(f"\n{len(programs)} gold checks ({len(rows)} rows x 2 modes), {args.workers} workers\n")
    print("| scorer | wall s | checks/s | passed | child CPU s | peak child RSS MiB | time vs zoo |")
    print("|---|---|---|---|---|---|---|")
    for name, (dt, npass, rss, cpu) in results.items():
        print(f"| {name} | {dt:.2f} | {len(programs) / dt:.0f} | {npass}/{len(programs)} | {cpu:.1f} | "
              f"{rss:.0f} | {dt / base:.2f}x |")


if __name__ == "__main__":
    main()
