"""Scoring throughput on the CRUXEval gold answers: zoo's scorer vs the official harness's approach.

Official approach (facebookresearch/cruxeval evaluation/utils_execute.py, re-implemented here for timing):
per check, a `multiprocessing.Manager` for the result list plus a fresh `multiprocessing.Process` that
runs the program with a 3 s `setitimer` timer, dispatched by a `ProcessPoolExecutor`. A second peer
starts a fresh `python` interpreter per check (`subprocess.run(..., timeout=3)`), the obvious
"one process per sample" baseline (on `--fresh-checks` of the checks only: it is slow). Ours:
`zoo.cruxeval.score_answers` (strict mode: trusted check programs, values judged by the parent) on
`zoo.sandbox.Sandbox` (pre-warmed zygotes, one fork per check, namespaces, seccomp), pool start-up included.
All run the same 2 x 800 gold checks (output and input mode) in this process, one after the other.

CPU is measured for this process and *all* its descendants: from a cgroup made for the run when the
machine lets us (cgroup v2 ``cpu.stat`` or v1 ``cpuacct.usage``), else from ``getrusage`` of this process plus
its reaped children (every scorer here reaps all of its processes, the sandbox's zygotes included).

    python benchmarks/cruxeval_scoring.py [--quick] [--workers 2] [--reps 3] [--data ../shared/data/cruxeval.jsonl]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo.cruxeval.scoring import score_answers  # noqa: E402
from zoo.sandbox import Sandbox  # noqa: E402


# -- CPU of this process tree ----------------------------------------------------------------------------
class CpuMeter:
    """CPU seconds of this process and its descendants between ``start()`` and ``stop()``."""

    def __init__(self):
        self.method, self._dir, self._home = "getrusage (self + reaped children)", None, None
        try:
            self._make_cgroup()
        except OSError:
            self._dir = None

    def _make_cgroup(self) -> None:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        for line in lines:  # v1: a cpuacct hierarchy
            _, controllers, path = line.split(":", 2)
            if "cpuacct" in controllers.split(","):
                base = next((Path("/sys/fs/cgroup") / c for c in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
                             if (Path("/sys/fs/cgroup") / c / "cpuacct.usage").exists()), None)
                if base is not None:
                    self._setup(base / path.lstrip("/"), "cpuacct.usage", "cgroup v1 cpuacct.usage")
                    return
        for line in lines:  # v2: the unified hierarchy
            if line.startswith("0::"):
                self._setup(Path("/sys/fs/cgroup") / line[3:].lstrip("/"), "cpu.stat", "cgroup v2 cpu.stat")
                return

    def _setup(self, home: Path, stat: str, method: str) -> None:
        new = home / f"zoo-bench-{os.getpid()}"
        new.mkdir()
        try:
            (new / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            new.rmdir()
            raise
        self._dir, self._home, self._stat, self.method = new, home, stat, method

    def _read(self) -> float:
        if self._dir is None:
            s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
        text = (self._dir / self._stat).read_text()
        if self._stat == "cpu.stat":
            return int(text.split("usage_usec")[1].split()[0]) / 1e6
        return int(text) / 1e9

    def start(self) -> None:
        self._t0 = self._read()

    def stop(self) -> float:
        return self._read() - self._t0

    def close(self) -> None:
        if self._dir is not None:
            (self._home / "cgroup.procs").write_text(str(os.getpid()))
            for _ in range(50):
                try:
                    self._dir.rmdir()
                    break
                except OSError:  # the last reaped processes may still be leaving it
                    time.sleep(0.1)
            self._dir = None


def machine_busy() -> float:
    """Busy core-seconds of the whole machine so far (/proc/stat): shows what other jobs used meanwhile."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


# -- peer 1: the official harness's approach --------------------------------------------------------
class _Timeout(Exception):
    pass


def _official_child(program: str, result, timeout: float) -> None:
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
    p.join()
    ok = bool(result) and result[0] == "passed"
    manager.shutdown()
    return ok


def run_official(rows: list[dict], workers: int) -> list[bool]:
    with ProcessPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(official_check, official_programs(rows)))


# -- peer 2: a fresh interpreter per check ----------------------------------------------------------
def fresh_python_check(program: str, timeout: float = 3.0) -> bool:
    try:
        return subprocess.run([sys.executable, "-I", "-c", program], capture_output=True,
                              timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def run_fresh_python(rows: list[dict], workers: int) -> list[bool]:
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fresh_python_check, official_programs(rows)))


# -- ours --------------------------------------------------------------------------------------------
def run_zoo(rows: list[dict], workers: int) -> list[bool]:
    with Sandbox(workers=workers, cpu_seconds=3, wall_timeout=3, memory_mb=1024) as sb:
        out = []
        for mode in ("output", "input"):
            results = score_answers(rows, gold(rows, mode), mode, sb, ks=[1])
            out += [p for r in results for p in r.passed]
        return out


def run_zoo_raw(rows: list[dict], workers: int) -> list[bool]:
    """The same official check programs through Sandbox.map (pass = ran to its end), no scorer."""
    with Sandbox(workers=workers, cpu_seconds=3, wall_timeout=3, memory_mb=1024) as sb:
        return [v.passed for v in sb.map(official_programs(rows))]


def sandbox_at(rev: str, workdir: Path):
    """``zoo.sandbox`` as it was at git revision ``rev`` (its zygote runs from that revision's file), for a
    load-independent before/after ratio measured in the same run. Up to 4de46d6 it was one file
    (``zoo/sandbox.py``); since then a package whose ``__init__`` imports its ``zygote`` module, loaded here
    under the revision's own name so that import finds the revision's zygote, not today's."""
    import importlib.util

    def show(path: str) -> str | None:
        r = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=False)
        return r.stdout if r.returncode == 0 else None

    name = f"sandbox_{rev}"
    single = show("zoo/sandbox.py")
    if single is not None:
        path = workdir / f"{name}.py"
        path.write_text(single)
        spec = importlib.util.spec_from_file_location(name, path)
    else:
        package = workdir / name
        package.mkdir()
        (package / "zygote.py").write_text(show("zoo/sandbox/zygote.py"))
        (package / "__init__.py").write_text(show("zoo/sandbox/__init__.py").replace(
            "from zoo.sandbox.zygote import", f"from {name}.zygote import"))
        spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                      submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.Sandbox


def run_raw_with(sandbox_cls, rows: list[dict], workers: int) -> list[bool]:
    with sandbox_cls(workers=workers, cpu_seconds=3, wall_timeout=3, memory_mb=1024) as sb:
        return [v.passed for v in sb.map(official_programs(rows))]


def gold(rows: list[dict], mode: str) -> dict[str, list[str]]:
    return {r["id"]: [r["output"] if mode == "output" else f"f({r['input']})"] for r in rows}


def official_programs(rows: list[dict]) -> list[str]:
    return ([f"{r['code']}\nassert {r['output']} == {r['output']}" for r in rows]  # output mode, gold
            + [f"{r['code']}\nassert {r['output']} == f({r['input']})" for r in rows])  # input mode, gold


def bare_fork(n: int, workers: int) -> int:
    """The floor: fork()+_exit()+waitpid() of a minimal Python (``-I -S``), ``workers`` forkers at once."""
    code = f"import os\nfor _ in range({n}):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n" \
           "    os.waitpid(pid, 0)"
    procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", code]) for _ in range(workers)]
    assert all(p.wait() == 0 for p in procs)
    return n * workers


def measure(meter: CpuMeter, fn, *args) -> tuple[float, float, float, object]:
    busy0 = machine_busy()
    meter.start()
    t0 = time.perf_counter()
    out = fn(*args)
    wall = time.perf_counter() - t0
    return wall, meter.stop(), machine_busy() - busy0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "cruxeval.jsonl"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1, help="repetitions of the zoo runs (median and range)")
    ap.add_argument("--fresh-checks", type=int, default=200, help="checks for the fresh-python peer (it is slow)")
    ap.add_argument("--quick", action="store_true", help="first 100 rows only")
    ap.add_argument("--compare-rev", default=None,
                    help="also time zoo.sandbox of this git revision (same programs, same run)")
    args = ap.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    rows = [{**r, "id": r.get("id", f"sample_{i}")} for i, r in enumerate(rows)]
    if args.quick:
        rows = rows[:100]
    n = 2 * len(rows)
    fresh_rows = rows[: max(1, args.fresh_checks // 2)]
    meter = CpuMeter()
    tmp = None
    try:
        before = None
        if args.compare_rev:
            import tempfile

            tmp = tempfile.TemporaryDirectory()
            before = sandbox_at(args.compare_rev, Path(tmp.name))
        for cls in (Sandbox, before) if before else (Sandbox,):
            with cls(workers=args.workers) as sb:  # warm the page cache for the interpreter and the files
                sb.run("pass")
        reps = {"zoo": [], "raw": [], "before": []}
        for _ in range(max(1, args.reps)):
            reps["zoo"].append(measure(meter, run_zoo, rows, args.workers))
            reps["raw"].append(measure(meter, run_zoo_raw, rows, args.workers))
            if before:
                reps["before"].append(measure(meter, run_raw_with, before, rows, args.workers))
        floor = measure(meter, bare_fork, max(n // args.workers, 1), args.workers)
        official = measure(meter, run_official, rows, args.workers)
        fresh = measure(meter, run_fresh_python, fresh_rows, args.workers)
        peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    finally:
        meter.close()
        if tmp is not None:
            tmp.cleanup()

    def median(runs):
        return sorted(runs, key=lambda r: r[0])[len(runs) // 2]

    zoo = median(reps["zoo"])
    table = [("zoo.cruxeval.score_answers on zoo.sandbox (strict)", n, zoo),
             ("official approach (Manager + Process per check, 3 s timer)", n, official),
             (f"fresh `python` process per check ({2 * len(fresh_rows)} of the checks)", 2 * len(fresh_rows), fresh)]
    zoo_wall, zoo_cpu = zoo[0] / n, zoo[1] / n
    print(f"\n{n} gold checks ({len(rows)} rows x 2 modes), {args.workers} workers; CPU from {meter.method}; "
          f"{os.cpu_count()} CPUs on the machine\n")
    print("| scorer | wall s | checks/s | passed | CPU s | CPU ms/check | machine busy core-s | wall vs zoo | "
          "CPU vs zoo |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, k, (wall, cpu, busy, ok) in table:
        print(f"| {name} | {wall:.2f} | {k / wall:.0f} | {sum(ok)}/{k} | {cpu:.2f} | {1e3 * cpu / k:.2f} | "
              f"{busy:.1f} | {wall / k / zoo_wall:.2f}x | {cpu / k / zoo_cpu:.2f}x |")
    walls = [r[0] for r in reps["zoo"]]
    print(f"\nzoo runs: wall {statistics.median(walls):.2f} s median, {min(walls):.2f}-{max(walls):.2f} s over "
          f"{len(walls)} run(s); CPU {statistics.median(r[1] for r in reps['zoo']):.2f} s median")
    raw = median(reps["raw"])
    print(f"zoo.sandbox.map of the official programs (no scorer): {raw[0]:.2f} s wall, {n / raw[0]:.0f} checks/s, "
          f"{1e3 * raw[1] / n:.2f} ms CPU/check, {sum(raw[3])}/{n} passed")
    if reps["before"]:
        old = median(reps["before"])
        print(f"zoo.sandbox.map at {args.compare_rev} (same programs, same run): {old[0]:.2f} s wall, "
              f"{n / old[0]:.0f} checks/s, {1e3 * old[1] / n:.2f} ms CPU/check, {sum(old[3])}/{n} passed; "
              f"now {old[1] / raw[1]:.2f}x less CPU per check (map), {old[1] / zoo[1]:.2f}x (scorer)")
    fn = floor[3]
    print(f"floor, bare fork()+waitpid() of `python -I -S` ({args.workers} forkers): {floor[0]:.2f} s wall, "
          f"{fn / floor[0]:.0f} forks/s, {1e3 * floor[1] / fn:.2f} ms CPU/fork")
    print(f"zoo at full use of {args.workers} cores from its CPU time: {args.workers * n / zoo[1]:.0f} checks/s "
          f"(the official approach: {args.workers * n / official[1]:.0f}/s); peak child RSS {peak_rss:.0f} MiB")


if __name__ == "__main__":
    main()
