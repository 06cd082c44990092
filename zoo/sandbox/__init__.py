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
  The parent parses that text with :func:`parse_value` (what :func:`ast.literal_eval` accepts, within a
  budget) into plain data (``Verdict.value``; numbers, strings, bytes, tuples, lists, dicts, sets, booleans,
  None): never unpickled, never executed. A program that writes the pipe itself only chooses *which* data the
  parent gets, i.e. gives another answer.
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
environment                  minimal environment, no inherited file descriptors; no inotify/fanotify on the
                             visible trees
other jobs' data             the zygote never decodes a job or a sample's output: it keeps them, raw, in
                             mappings no child inherits (MADV_DONTFORK; ``isolation["private_buffers"]``)
                             and gives each child a copy of its own job only (zeroed once it is gone). So
                             other programs, their result expressions (e.g. gold values), results and output
                             are neither in a sample's objects nor in its raw memory
the parent's parsing         a result is parsed only with at most ``max_value_tokens`` tokens (250,000;
                             counted in one ``re`` pass before parsing: a bound on the parser's tree) and
                             at most 32 keys sharing a hash in any set or dict (colliding ints)
===========================  ===============================================================================

Not contained: a sample reads the world-readable files of the visible system directories (/usr, /etc: e.g.
/etc/passwd) and of the Python installation including its site-packages; the project's own source, data and
home directories are *not* visible (unless the interpreter lives inside them: then that installation
directory, read-only). It shares the host kernel (seccomp narrows, but does not remove, the kernel attack
surface) and can spend its CPU/memory limits. A sample that reads its own raw memory (ctypes) still finds the
zygote's bookkeeping of earlier samples (exit statuses, durations, the sizes of jobs and outputs), and on a
kernel without MADV_DONTFORK (``isolation["private_buffers"]`` False, with a note) their data too. A result
within the budget still costs the parent about 0.5 KB per token while it is parsed (up to ~120 MB and a fraction
of a second at the default, per result being parsed: one per worker thread); lower ``max_value_tokens`` or
``max_value_bytes`` where results are small. Without user namespaces, as
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
import re
import select
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

from zoo.sandbox.zygote import _REPLY, _recv, _send_jobs

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


# What parse_value may spend on one result. Parsing costs about 0.5 KB of AST per token (CPython builds the whole
# tree first): a megabyte of "[],[],..." is a million tokens, 480 MB and seconds of CPU. Hence a token budget,
# checked before parsing: 250,000 tokens (a list of 120,000 small ints) cost at most ~120 MB, a fraction of a second.
MAX_VALUE_TOKENS = 250_000
# Distinct ints (floats, complex, tuples of them) can share a hash (k * sys.hash_info.modulus all hash to 0), and a
# set or dict of n such keys costs n**2 / 2 comparisons: 50,000 of them took the parent 15 s. Strings and bytes
# hash with a random key. No ordinary data has more than a few keys with one hash (-1 and -2 do).
MAX_SAME_HASH = 32
# Every literal (string, number, True/False/None/set), comment or line continuation becomes one "0"; what is left
# of a text literal_eval can accept is only punctuation and whitespace. An f-string (whose braces hold code) is not
# a literal here: its prefix is a stray letter and the text is refused. Leftmost-first, like the tokenizer: a quote
# inside a comment or a "#" inside a string does not start anything. Only loops over one character class or
# "unrolled" ones, possessive where `re` has them (3.11): a loop over an alternation costs `re` memory per character.
# Numbers are matched loosely (a malformed one still counts one token; the parser then refuses it).
_LITERALS = re.compile(r"""
    \#[^\r\n]*+ | \\\r?\n
  | (?<!\w)[bBrRuU]{0,2}(?: '''[^'\\]*+(?:(?:\\.|'(?!''))[^'\\]*+)*+'''
                          | \"\"\"[^"\\]*+(?:(?:\\.|"(?!""))[^"\\]*+)*+\"\"\"
                          | '[^'\\\r\n]*+(?:\\.[^'\\\r\n]*+)*+' | "[^"\\\r\n]*+(?:\\.[^"\\\r\n]*+)*+" )
  | 0[xXoObB][0-9a-fA-F_]*+
  | (?:\d[\d_]*+(?:\.[\d_]*+)?|\.\d[\d_]*+)(?:[eE][+-]?\d[\d_]*+)?[jJ]?
  | (?<!\w)(?:True|False|None|set)(?!\w)""".replace("*+", "*+" if sys.version_info >= (3, 11) else "*"),
                       re.VERBOSE | re.DOTALL)
_PUNCTUATION = re.compile(r"[0()\[\]{},:+\-. \t\n\r\f]*")  # each non-blank character left is one token


class _Refused(ValueError):
    pass


def _tokens(text: str) -> int:
    """How many tokens ``text`` has (ValueError: it is no literal). An upper bound on what :func:`ast.parse` can
    build from it: after the literals only punctuation is left, and every AST node needs a token of its own (a
    literal, or an opening bracket, comma, colon, sign or dot), so the tree has at most ``_tokens(text) + 1``
    nodes. Costs one pass of ``re`` in C and no memory beyond a copy of the text."""
    rest = _LITERALS.sub("0", text)
    if not _PUNCTUATION.fullmatch(rest):  # a name, operator or f-string: literal_eval would refuse it too
        raise ValueError("not a literal")
    return len(rest) - sum(rest.count(c) for c in " \t\n\r\f")


def _check_hashes(tree: ast.AST) -> None:
    """Refuse a set or dict with more than ``MAX_SAME_HASH`` keys of one hash, before :func:`ast.literal_eval`
    builds it (only sets and dicts with more keys than that are looked at; their keys are evaluated once more)."""
    for node in ast.walk(tree):
        keys = node.elts if isinstance(node, ast.Set) else node.keys if isinstance(node, ast.Dict) else ()
        if len(keys) <= MAX_SAME_HASH:
            continue
        counts: dict[int, int] = {}  # keyed by hash values: distinct ints, which do not collide among themselves
        for key in keys:
            if key is None:  # a **mapping: literal_eval refuses it
                continue
            h = hash(ast.literal_eval(key))  # TypeError for an unhashable key, as set() and dict() would raise
            counts[h] = counts.get(h, 0) + 1
            if counts[h] > MAX_SAME_HASH:
                raise _Refused(f"the result is not plain data: more than {MAX_SAME_HASH} keys of one set or dict "
                               "share a hash (MAX_SAME_HASH)")


def parse_value(text: str | None, max_tokens: int = MAX_VALUE_TOKENS) -> tuple[Any, str]:
    """``(value, "")`` when ``text`` is the repr of plain data (what :func:`ast.literal_eval` accepts), else
    ``(None, reason)``. Used on results that come out of a sandbox: it never executes anything and never raises,
    and its cost is bounded: at most ``max_tokens`` tokens (checked before parsing; ``[1, 2]`` is 5) and at most
    ``MAX_SAME_HASH`` keys with one hash in any set or dict (see the constants above)."""
    if text is None:
        return None, "no result"
    if text in _CONSTANTS:  # the common case (a comparison's result) without the parser
        return _CONSTANTS[text], ""
    try:
        if len(text) > max_tokens and (n := _tokens(text)) > max_tokens:  # a shorter text has fewer tokens
            return None, f"the result has {n} tokens, over the parser's budget of {max_tokens} (max_value_tokens)"
        tree = ast.parse(text.lstrip(" \t"), mode="eval")
        _check_hashes(tree)
        return ast.literal_eval(tree), ""
    except _Refused as e:
        return None, str(e)
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
        self.limits = limits
        self.wall = limits.wall_timeout
        self._inbox = bytearray()  # replies read ahead: one read() often takes several
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
        """Several programs in one message (each still in its own fresh child); one reply per program."""
        deadline = time.monotonic() + len(jobs) * (self.wall + 5) + 30
        replies = []
        try:
            _send_jobs(self.proc.stdin.fileno(), jobs)
            for _, result in jobs:
                sizes = _REPLY.unpack(self._read(_REPLY.size, deadline))
                body, ends = self._read(sum(sizes), deadline), [sum(sizes[:i + 1]) for i in range(4)]
                replies.append(_outcome(marshal.loads(body[:ends[0]]), body[ends[0]:ends[1]], body[ends[1]:ends[2]],
                                        body[ends[2]:], self.limits, result))
        except (OSError, ValueError, TypeError, EOFError) as e:
            raise _WorkerDied(f"{type(e).__name__}: {e}") from e
        return replies

    def _read(self, n: int, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        while len(self._inbox) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise _WorkerDied("the sandbox worker stopped answering")
            chunk = os.read(fd, max(1 << 16, n - len(self._inbox)))
            if not chunk:
                raise _WorkerDied("the sandbox worker stopped answering")
            self._inbox += chunk
        data = bytes(self._inbox[:n])
        del self._inbox[:n]
        return data

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


def _outcome(meta: dict[str, Any], out: bytes, err: bytes, report: bytes, lim: _Limits,
             result: str | None) -> dict[str, Any]:
    """A verdict's fields from what the zygote observed (wait status, why it killed the child, the raw bytes
    the child wrote). Decided here, in the parent, so that no sample's output is ever decoded in the zygote."""
    if "wait_status" not in meta:  # the zygote's own account: worker_error / not_run
        return meta
    status_wait, killed_for, duration = meta["wait_status"], meta["killed_for"], meta["duration_s"]
    exit_code = os.WEXITSTATUS(status_wait) if os.WIFEXITED(status_wait) else None
    sig = os.WTERMSIG(status_wait) if os.WIFSIGNALED(status_wait) else None
    setup, report = report[:1], report[1:]
    word, _, payload = report.partition(b"\n")
    text = payload.decode("utf-8", "replace")
    value_repr = None
    cap = lim.max_output_bytes
    if killed_for == "timeout":
        res = ("timeout", f"wall-clock timeout after {lim.wall_timeout:g} s")
    elif killed_for == "output_limit":
        res = ("output_limit", f"stdout+stderr exceeded {cap} bytes")
    elif killed_for == "value_limit":
        res = ("output_limit", f"the result's repr exceeded {lim.max_value_bytes} bytes")
    elif sig == signal.SIGXCPU or (sig == signal.SIGKILL and duration >= max(1.0, lim.cpu_seconds)):
        res = ("cpu_limit", f"CPU time limit of {lim.cpu_seconds:g} s")  # hard RLIMIT_CPU: SIGKILL 1 s later
    elif sig is not None:
        res = ("killed", f"killed by signal {signal.Signals(sig).name if sig in set(signal.Signals) else sig}")
    elif setup == b"-":  # written before the program ran: the program cannot fake a harness failure
        res = ("worker_error", f"sandbox setup failed: {report.decode('utf-8', 'replace')}")
    elif word == b"ok" and exit_code == 0:
        res = ("passed", "")
        value_repr = text if result is not None else None
    elif word == b"exit":
        res = ("exited", text)
    elif word == b"exception":
        res = ("error", text)
    else:
        res = ("exited", f"exited with code {exit_code} before the end of the program")
    return {"passed": res[0] == "passed", "status": res[0], "reason": res[1], "exit_code": exit_code, "signal": sig,
            "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace"),
            "duration_s": duration, "value_repr": value_repr}


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
        max_value_tokens: the parser's budget for a ``result`` (see :func:`parse_value`; status ``error`` above it).
        seccomp: install the syscall filter (see the module docstring) when the architecture has a table.
        expose: extra host paths made visible read-only (e.g. a library the programs import).
    """

    def __init__(self, workers: int = 2, cpu_seconds: float = 3.0, memory_mb: int = 512,
                 wall_timeout: float = 5.0, max_output_bytes: int = 65536, file_size_mb: int = 16,
                 tmpfs_mb: int = 64, max_open_files: int = 64, isolate: bool = True,
                 require_isolation: bool = False, preload: Iterable[str] = (),
                 hide_paths: Iterable[str] = ("/root", "/home"), max_value_bytes: int = 1 << 20,
                 seccomp: bool = True, expose: Iterable[str] = (), max_value_tokens: int = MAX_VALUE_TOKENS):
        if not sys.platform.startswith("linux"):
            raise RuntimeError("zoo.sandbox needs Linux (rlimits, namespaces)")
        if (workers < 1 or cpu_seconds <= 0 or wall_timeout <= 0 or memory_mb < 16 or max_output_bytes < 0
                or max_value_bytes < 0 or tmpfs_mb < 1 or max_value_tokens < 1):
            from zoo.errors import ZooError  # a ValueError the CLI prints as one line (a model's sandbox settings)

            raise ZooError(f"sandbox limits must be positive (workers>=1, memory_mb>=16, tmpfs_mb>=1); got workers="
                           f"{workers}, cpu_seconds={cpu_seconds}, wall_timeout={wall_timeout}, memory_mb={memory_mb}, "
                           f"max_output_bytes={max_output_bytes}, max_value_bytes={max_value_bytes}, "
                           f"tmpfs_mb={tmpfs_mb}, max_value_tokens={max_value_tokens}")
        self.limits = _Limits(float(cpu_seconds), int(memory_mb), float(wall_timeout), int(max_output_bytes),
                              int(file_size_mb), int(tmpfs_mb), int(max_open_files), bool(isolate),
                              tuple(preload), tuple(hide_paths), int(max_value_bytes), bool(seccomp),
                              tuple(os.path.abspath(p) for p in expose), _site_paths())
        self.workers = workers
        self.max_value_tokens = int(max_value_tokens)
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
                out[i] = self._verdict(r, jobs[i][1], self.max_value_tokens)
        for i, v in zip(not_run, self._run_jobs([jobs[i] for i in not_run], retry) if not_run else ()):
            out[i] = v
        return out

    @staticmethod
    def _verdict(r: dict[str, Any], result: str | None, max_tokens: int) -> Verdict:
        v = Verdict(**{k: r[k] for k in ("passed", "status", "reason") if k in r},
                    **{k: r.get(k) for k in ("exit_code", "signal", "value_repr")},
                    stdout=r.get("stdout", ""), stderr=r.get("stderr", ""), duration_s=r.get("duration_s", 0.0))
        if v.status == "passed" and result is not None:
            v.value, why = parse_value(v.value_repr, max_tokens)
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
