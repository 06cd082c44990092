"""Run untrusted Python (model-written code) in contained child processes.

One sandbox for the whole zoo (CRUXEval now, ReGAL and any later paper that executes generated code).

    with Sandbox(workers=2, cpu_seconds=3, memory_mb=512, wall_timeout=5) as sb:
        v = sb.run("assert 1 + 1 == 2")                    # Verdict(passed=True, status="passed", ...)
        vs = sb.map(["print(1)", "while True: pass"])       # in input order
        v = sb.run("def f(x):\n    return 2 * x", result="f(21)")
        v.value                                             # 42: data the *parent* parsed, see below

**Results a caller can trust.** A sample runs in its own process, so everything decided inside that process
is the program's own account: ``status`` (``passed`` = "the program's process reported reaching its end") can
be faked by a hostile program, e.g. by writing the runner's report itself and exiting. What a program cannot
do is make the parent misjudge *data*:

* ``run(code, result=EXPR)`` evaluates ``EXPR`` in the program's globals after ``code`` ran and sends
  ``repr(value)`` to the parent over a pipe of its own (not stdout/stderr, capped at ``max_value_bytes``).
  The parent parses that text with :func:`ast.literal_eval` into plain data (``Verdict.value``; numbers,
  strings, bytes, tuples, lists, dicts, sets, booleans, None): never unpickled, never executed. A program
  that writes the pipe itself only chooses *which* data the parent gets, i.e. gives another answer.
* ``Verdict.stdout``/``stderr`` are exactly what the program wrote (capped); parse them as data.

So decide pass/fail in the parent: compare ``v.value`` (or parsed stdout) with the expected value there, or
run only trusted code (e.g. a benchmark's own function on plain-data arguments) when the status itself must
be believed. ``zoo.cruxeval.scoring`` does both; ReGAL-style checks (LOGO traces, Date answers) would return
the trace or answer as ``result`` and compare it in the parent.

**Architecture.** Each worker is a pre-warmed, forking "zygote" process (:mod:`zoo.sandbox.zygote`, which
says how it works and why it is fast); every sample runs in a fresh child of it.

**Containment** (kernel facilities, not Python monkeypatching), with namespaces and seccomp available:

===========================  ===============================================================================
contained                    how
===========================  ===============================================================================
CPU, memory, files           RLIMIT_CPU (hard = SIGKILL), RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE, no cores;
                             scratch tmpfs capped in size and inodes; memfd_create, SysV shm denied
wall clock, output           SIGKILL after ``wall_timeout``; stdout+stderr and the result pipe capped
processes and threads        RLIMIT_NPROC = 0, counted in the worker's own user namespace (independent of
                             other sandboxes on the machine); seccomp refuses fork/vfork/clone3 too
                             (clone itself stays open: the zygote forks every sample)
network                      own network namespace (only a down loopback): no TCP/UDP to anything; seccomp
                             allows only AF_INET/AF_INET6 sockets (vsock, netlink, ... are not namespaced)
Unix sockets                 fresh root (no host socket paths visible) and seccomp: ``socket(AF_UNIX)`` and
                             ``socketpair`` fail; abstract sockets are per network namespace
IPC between samples/host     own IPC namespace per worker; SysV shm/sem/msg and POSIX mqueues denied
files                        fresh root: only /usr, /bin, /sbin, /lib*, /etc, the Python installation(s),
                             ``expose`` paths (all read-only), a few /dev nodes, private scratch tmpfs
                             (/tmp, /var/tmp, /dev/shm) replaced after a sample that wrote there
other processes              own PID namespace; /proc and /sys absent; the zygote is PID 1 (immune to
                             signals from inside), non-dumpable, and ptrace/process_vm/prlimit on other
                             processes are denied
privileges                   no capabilities (so no mounts), no_new_privs (setuid binaries gain nothing),
                             no new namespaces, keyrings, bpf, perf, userfaultfd or io_uring
environment                  minimal environment, no inherited file descriptors; the batch a sample came in
                             (other programs, their results) emptied from its copy of the zygote's objects
                             (not from raw memory: see below); no inotify/fanotify on the visible trees
===========================  ===============================================================================

Not contained: a sample reads the world-readable files of the visible system directories (/usr, /etc: e.g.
/etc/passwd) and of the Python installation including its site-packages; the project's own source, data and
home directories are *not* visible (unless the interpreter lives inside them: then that installation
directory, read-only). It shares the host kernel (seccomp narrows, but does not remove, the kernel attack
surface) and can spend its CPU/memory limits. A sample that reads its own raw memory (ctypes) finds freed
remnants of the zygote's earlier traffic: other programs' code, results and output. The parent parses a result
of up to ``max_value_bytes`` (1 MiB) with :func:`ast.literal_eval`: one built to be expensive (a megabyte of
nested empty lists, or a set of integers with colliding hashes) can cost the parent hundreds of megabytes or
seconds of CPU per result; lower ``max_value_bytes`` where results are small. Without user namespaces, as
root, the sample runs as the host's ``nobody`` (per-user kernel counters then shared with other ``nobody``
processes; RLIMIT_NPROC still stops forks, set after the uid switch so exec keeps working). Without namespaces
at all (a container that forbids ``unshare``, or ``isolate=False``) the sandbox falls back to rlimits +
seccomp + process-group kill + clean environment + private scratch directory and says so in
:attr:`Sandbox.isolation`: network, the filesystem (beyond file permissions) and, when not root, signals to
the same user's processes are then *not* contained. Seccomp needs x86_64 or aarch64 (else
``isolation["seccomp"]`` is False and per-sample IPC namespaces stand in for the IPC rules). Only Linux is
supported.
"""

from __future__ import annotations

import ast
import marshal
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import Any

from zoo.sandbox.zygote import _recv, _send

__all__ = ["Sandbox", "Verdict", "parse_value"]

_CONSTANTS = {"True": True, "False": False, "None": None}
_ZYGOTE = Path(__file__).with_name("zygote.py")
# The zygote's bootstrap: it reads the compiled zygote.py from its stdin and runs it.
_BOOT = """import marshal, os, sys
n, code = int(sys.argv[1]), bytearray()
while len(code) < n:
    chunk = os.read(0, n - len(code))
    if not chunk:
        raise SystemExit(1)
    code += chunk
scope = {"__name__": "__zoo_zygote__"}
exec(marshal.loads(bytes(code)), scope)
scope["_zygote"](sys.argv[2])
"""
_zygote_code: bytes | None = None


def _compiled_zygote() -> bytes:
    """zygote.py compiled, once per process. Compiling it in the zygote instead would leave ~3 MB of parser
    garbage in its heap, which every fork copies."""
    global _zygote_code
    if _zygote_code is None:
        _zygote_code = marshal.dumps(compile(_ZYGOTE.read_text(encoding="utf-8"), str(_ZYGOTE), "exec",
                                             dont_inherit=True))
    return _zygote_code


def parse_value(text: str | None) -> tuple[Any, str]:
    """``(value, "")`` when ``text`` is the repr of plain data (:func:`ast.literal_eval`), else
    ``(None, reason)``. Used on results that come out of a sandbox: it never executes anything."""
    if text is None:
        return None, "no result"
    if text in _CONSTANTS:  # the common case (a comparison's result) without the parser
        return _CONSTANTS[text], ""
    try:
        return ast.literal_eval(text), ""
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        return None, f"the result is not plain data ({type(e).__name__}): {text[:80]!r}"


@dataclass
class Verdict:
    """The outcome of one sandboxed program.

    ``status`` is one of: ``passed`` (ran to its end: the program's own report, see the module docstring),
    ``error`` (uncaught exception, incl. AssertionError and MemoryError, or a ``result`` that is not plain
    data; ``reason`` names it), ``exited`` (sys.exit/os._exit before the end), ``timeout`` (wall clock),
    ``cpu_limit``, ``killed`` (any other signal, e.g. SIGSEGV), ``output_limit`` (stdout+stderr or the
    result's repr over its cap), ``worker_error`` (the harness failed twice, also after a re-run on a fresh
    worker; not the program's fault).

    ``value``: with ``result=EXPR``, the value of ``EXPR`` as plain data parsed by the parent
    (``value_repr`` is the text it came as; None when the program delivered none).
    """

    passed: bool
    status: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    value: Any = None
    value_repr: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Limits:
    cpu_seconds: float
    memory_mb: int
    wall_timeout: float
    max_output_bytes: int
    file_size_mb: int
    tmpfs_mb: int
    max_open_files: int
    isolate: bool
    preload: tuple[str, ...] = ()
    hide_paths: tuple[str, ...] = ()
    max_value_bytes: int = 1 << 20
    seccomp: bool = True
    expose: tuple[str, ...] = ()
    site_paths: tuple[str, ...] = ()


class _WorkerDied(RuntimeError):
    pass


class _Worker:
    """One zygote process and its two protocol pipes."""

    def __init__(self, limits: _Limits):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
        code = _compiled_zygote()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", _BOOT, str(len(code)), marshal.dumps(asdict(limits)).hex()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, close_fds=True, start_new_session=True, cwd="/")
        self.wall = limits.wall_timeout
        try:
            view = memoryview(code)
            while view:
                view = view[os.write(self.proc.stdin.fileno(), view):]
        except OSError:
            pass  # it died at once: reported below
        hello = _recv(self.proc.stdout.fileno(), time.monotonic() + 60)
        if not hello or "isolation" not in hello:
            self.kill()
            raise RuntimeError(f"sandbox worker failed to start: {hello!r}")
        self.isolation: dict[str, Any] = hello["isolation"]

    def run_batch(self, jobs: list[tuple[str, str | None]]) -> list[dict[str, Any]]:
        """Several programs in one round trip (each still in its own fresh child)."""
        try:
            _send(self.proc.stdin.fileno(), {"jobs": jobs})
            reply = _recv(self.proc.stdout.fileno(), time.monotonic() + len(jobs) * (self.wall + 5) + 30)
        except (OSError, ValueError) as e:
            raise _WorkerDied(f"{type(e).__name__}: {e}") from e
        if reply is None or len(reply.get("verdicts", ())) != len(jobs):
            raise _WorkerDied("the sandbox worker stopped answering")
        return reply["verdicts"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def shutdown(self) -> None:
        """End of input: the zygote finishes, reaping its samples, so the parent's child CPU time includes
        them (a killed PID 1 would take its samples' CPU time with it)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def kill(self, wait: float = 0.0) -> None:
        if wait > 0:
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def _site_paths() -> tuple[str, ...]:
    """The parent's site-packages directories: the zygote runs without ``site`` (its .pth files import
    half the standard library, which would make every fork dearer), so they are put on its path by hand."""
    return tuple(p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p))


class Sandbox:
    """A pool of contained Python executors.

    Args:
        workers: number of zygote processes (parallel samples).
        cpu_seconds: CPU-time limit per sample (RLIMIT_CPU; fractional values round up to whole seconds).
        memory_mb: address-space limit per sample (RLIMIT_AS), interpreter included (~30 MB).
        wall_timeout: wall-clock seconds per sample before SIGKILL.
        max_output_bytes: stdout + stderr cap; exceeding it kills the sample (status ``output_limit``).
        file_size_mb: largest file a sample may write (RLIMIT_FSIZE).
        tmpfs_mb: size of each private scratch tmpfs (/tmp, /var/tmp, /dev/shm).
        max_open_files: RLIMIT_NOFILE.
        isolate: enter user/mount/network/IPC/PID namespaces when the kernel allows (False: rlimits and
            seccomp only).
        require_isolation: raise instead of falling back when namespaces are unavailable.
        preload: modules imported once in each zygote (before its root is replaced; trusted) so samples that
            import them start faster. A module that imports ``threading`` makes every fork dearer.
        hide_paths: directories that stay hidden even where they lie inside a visible tree.
        max_value_bytes: cap on the repr of a ``result`` (status ``output_limit`` above it).
        seccomp: install the syscall filter (see the module docstring) when the architecture has a table.
        expose: extra host paths made visible read-only (e.g. a library the programs import).
    """

    def __init__(self, workers: int = 2, cpu_seconds: float = 3.0, memory_mb: int = 512,
                 wall_timeout: float = 5.0, max_output_bytes: int = 65536, file_size_mb: int = 16,
                 tmpfs_mb: int = 64, max_open_files: int = 64, isolate: bool = True,
                 require_isolation: bool = False, preload: Iterable[str] = (),
                 hide_paths: Iterable[str] = ("/root", "/home"), max_value_bytes: int = 1 << 20,
                 seccomp: bool = True, expose: Iterable[str] = ()):
        if not sys.platform.startswith("linux"):
            raise RuntimeError("zoo.sandbox needs Linux (rlimits, namespaces)")
        if (workers < 1 or cpu_seconds <= 0 or wall_timeout <= 0 or memory_mb < 16 or max_output_bytes < 0
                or max_value_bytes < 0 or tmpfs_mb < 1):
            from zoo.errors import ZooError  # a ValueError the CLI prints as one line (a model's sandbox settings)

            raise ZooError(f"sandbox limits must be positive (workers>=1, memory_mb>=16, tmpfs_mb>=1); got workers="
                           f"{workers}, cpu_seconds={cpu_seconds}, wall_timeout={wall_timeout}, memory_mb={memory_mb}, "
                           f"max_output_bytes={max_output_bytes}, max_value_bytes={max_value_bytes}, tmpfs_mb={tmpfs_mb}")
        self.limits = _Limits(float(cpu_seconds), int(memory_mb), float(wall_timeout), int(max_output_bytes),
                              int(file_size_mb), int(tmpfs_mb), int(max_open_files), bool(isolate),
                              tuple(preload), tuple(hide_paths), int(max_value_bytes), bool(seccomp),
                              tuple(os.path.abspath(p) for p in expose), _site_paths())
        self.workers = workers
        self.require_isolation = require_isolation
        self._idle: SimpleQueue[_Worker | None] = SimpleQueue()
        for _ in range(workers):
            self._idle.put(None)  # started lazily
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._isolation: dict[str, Any] | None = None
        self.restarts = 0

    # -- pool -----------------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        w = _Worker(self.limits)
        if self.require_isolation and not (w.isolation.get("network") and w.isolation.get("filesystem_readonly")):
            w.kill()
            raise RuntimeError(f"sandbox isolation unavailable: {w.isolation}")
        with self._lock:
            self._all.append(w)
            self._isolation = w.isolation
        return w

    def _retire(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            if w in self._all:
                self._all.remove(w)
            self.restarts += 1

    def _checkout(self) -> _Worker:
        w = self._idle.get()
        try:
            if w is not None and not w.alive():
                self._retire(w)
                w = None
            return w if w is not None else self._spawn()
        except BaseException:
            self._idle.put(None)  # keep the slot
            raise

    @property
    def isolation(self) -> dict[str, Any]:
        """What the kernel granted: namespaces, fresh root, seccomp, uid switch, visible and hidden paths."""
        if self._isolation is None:
            self._idle.put(self._checkout())
        return dict(self._isolation or {})

    def run(self, code: str, result: str | None = None) -> Verdict:
        """Execute ``code`` as ``__main__`` in a fresh contained child; never raises for bad code. With
        ``result``, that expression is evaluated afterwards and its value returned as ``Verdict.value``."""
        return self._run_jobs([(code, result)])[0]

    def _run_jobs(self, jobs: list[tuple[Any, Any]], retry: bool = True) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(jobs)
        todo = []
        for i, (c, r) in enumerate(jobs):
            if isinstance(c, str) and (r is None or isinstance(r, str)):
                todo.append(i)
            else:
                out[i] = Verdict(False, "worker_error", f"code and result must be str, got {type(c).__name__}, "
                                 f"{type(r).__name__}")
        if not todo:
            return out
        batch = [jobs[i] for i in todo]
        w = self._checkout()
        try:
            replies = w.run_batch(batch)
            broken = any(r["status"] in ("worker_error", "not_run") for r in replies)
        except _WorkerDied as e:
            replies, broken, died = None, True, str(e)
        if broken:
            self._retire(w)
            w = None
        self._idle.put(w)
        if replies is None:  # which program broke it is unknown: each again on its own (one more try each)
            if len(batch) > 1:
                for i in todo:
                    out[i] = self._run_jobs([jobs[i]], retry)[0]
            elif retry:
                out[todo[0]] = self._run_jobs(batch, retry=False)[0]
            else:
                out[todo[0]] = Verdict(False, "worker_error", f"sandbox worker died, also on a fresh one: {died}")
            return out
        not_run = [i for i, r in zip(todo, replies) if r["status"] == "not_run"]
        for i, r in zip(todo, replies):
            if r["status"] == "worker_error" and retry:
                out[i] = self._run_jobs([jobs[i]], retry=False)[0]
            elif r["status"] != "not_run":
                out[i] = self._verdict(r, jobs[i][1])
        for i, v in zip(not_run, self._run_jobs([jobs[i] for i in not_run], retry) if not_run else ()):
            out[i] = v
        return out

    @staticmethod
    def _verdict(r: dict[str, Any], result: str | None) -> Verdict:
        v = Verdict(**{k: r[k] for k in ("passed", "status", "reason") if k in r},
                    **{k: r.get(k) for k in ("exit_code", "signal", "value_repr")},
                    stdout=r.get("stdout", ""), stderr=r.get("stderr", ""), duration_s=r.get("duration_s", 0.0))
        if v.status == "passed" and result is not None:
            v.value, why = parse_value(v.value_repr)
            if why:
                v.passed, v.status, v.reason = False, "error", why
        return v

    def map(self, codes: Iterable[str], result: str | None | Sequence[str | None] = None) -> list[Verdict]:
        """Run many programs on the pool; results keep the input order. ``result``: one expression for all
        programs or one per program (None: no result). Programs travel to the workers in small batches
        (one round trip each) but every program still runs in its own fresh child."""
        from concurrent.futures import ThreadPoolExecutor

        codes = list(codes)
        results = list(result) if result is not None and not isinstance(result, str) else [result] * len(codes)
        if len(results) != len(codes):
            raise ValueError(f"{len(results)} results for {len(codes)} programs")
        jobs = list(zip(codes, results))
        size = max(1, min(16, -(-len(jobs) // (4 * self.workers))))
        chunks = [jobs[i:i + size] for i in range(0, len(jobs), size)]
        if self.workers == 1 or len(chunks) <= 1:
            return [v for c in chunks for v in self._run_jobs(c)]
        with ThreadPoolExecutor(max_workers=self.workers) as ex:
            return [v for vs in ex.map(self._run_jobs, chunks) for v in vs]

    def close(self) -> None:
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.shutdown()
        deadline = time.monotonic() + 5
        for w in workers:
            w.kill(wait=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
