"""Run a Python script as `python script.py args` does, in a process forked from a server that has already imported
torch and Lightning (`zoo.sweep.runner.forkserver_context`, which a sweep's tasks fork from): the benchmark
miniatures of tests/test_benchmarks.py spent more time importing than running. The child gets the caller's
environment and working directory, `sys.argv` and `sys.path[0]` as the interpreter sets them, and its own stdout and
stderr."""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
from pathlib import Path

from zoo.sweep.runner import forkserver_context


def run_script(script: Path, args: list[str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the script; TimeoutError past `timeout` seconds (the child is killed)."""
    ctx = forkserver_context()
    with tempfile.TemporaryDirectory() as d:
        out, err = Path(d, "stdout"), Path(d, "stderr")
        p = ctx.Process(target=_child, args=(str(script), list(args), str(cwd), dict(os.environ), str(out), str(err)))
        p.start()
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
            raise TimeoutError(f"{script.name} {' '.join(args)} ran past {timeout} s")
        return p.exitcode, out.read_text(), err.read_text()


def _child(script: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    for fd, path in ((1, out), (2, err)):  # the file descriptors, so output of C code and subprocesses lands too
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).parent)  # what `python script.py` puts first (the server's is its own)
    # SystemExit and exceptions become the exit code (and a traceback on stderr) in multiprocessing's bootstrap,
    # which also flushes sys.stdout and sys.stderr
    runpy.run_path(script, run_name="__main__")
