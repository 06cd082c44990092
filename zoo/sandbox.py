"""Run untrusted Python (model-written code) in a contained child process.

One sandbox for the whole zoo (CRUXEval, and any later paper that executes generated code).

    with Sandbox(workers=2, cpu_seconds=3, memory_mb=512, wall_timeout=5) as sb:
        v = sb.run("assert 1 + 1 == 2")          # Verdict(passed=True, status="passed", ...)
        vs = sb.map(["print(1)", "while True: pass"])

Architecture (why it is fast *and* per-sample clean): each worker is a pre-warmed Python process (a
"zygote", this file run as a script with ``python -I``) started with an empty environment. At start-up
the zygote enters its own network, mount and PID namespaces (``unshare(2)`` through ctypes; Python 3.11
has no ``os.unshare``; plus a user namespace when not root). For every sample it ``fork()``s a fresh
child, so nothing the sample does to interpreter state survives into the next one; the child gets a new
session (process group), a fresh private working directory, rlimits and (when the zygote is root) the
unprivileged uid ``nobody``, then ``exec``s the code. The zygote enforces the wall-clock timeout (SIGKILL
to the child's whole process group) and the output cap, wipes every writable directory, and reports a
:class:`Verdict`. A zygote that dies is replaced.

What is contained (kernel facilities, not Python monkeypatching):

* CPU time (RLIMIT_CPU, hard limit = SIGKILL), address space (RLIMIT_AS), file size (RLIMIT_FSIZE),
  open files (RLIMIT_NOFILE), core dumps off, **no new processes or threads** (RLIMIT_NPROC = 0; the
  kernel ignores it for root, hence the switch to uid ``nobody`` when running as root).
* Wall clock: SIGKILL to the process group, which the sample cannot catch, block or ignore.
* Network: a fresh network namespace has only a down loopback device, so no connection to anything,
  not even to the host's 127.0.0.1 services.
* Processes: a PID namespace per worker, so a sample sees and can signal nothing outside it.
* Privileges: the sample holds no capabilities and runs with no_new_privs (exec of a setuid binary gains
  nothing); the zygote is non-dumpable, so a sample cannot ptrace it.
* Filesystem: inside the mount namespace the whole tree is re-mounted read-only (``mount_setattr``,
  Linux >= 5.12) and ``/tmp``, ``/var/tmp``, ``/dev/shm`` are private size-capped tmpfs that are emptied
  after every sample; ``/proc`` (other processes' environments and command lines) and home directories
  are hidden behind empty tmpfs (the Python installation is bind-mounted back, read-only, if it lives there).
* Environment: the zygote starts with a minimal environment (PATH, LANG, HOME=/tmp), no inherited
  variables, no inherited file descriptors; stdout/stderr are captured and capped.

What is *not* contained: the sample can read world-readable files outside the hidden paths (read-only);
it shares the kernel with the host (no seccomp filter); the verdict is decided inside the sample's own
process (a program that deliberately inspects the runner's frames can forge a pass: containment, not
scoring integrity, is the boundary). Without namespaces (e.g. a container that forbids ``unshare``) the
sandbox falls back to rlimits + process-group kill + clean environment + private temp dir and says so in
:attr:`Sandbox.isolation`; then network, filesystem writes (beyond file permissions) and, when not root,
signals to the same user's processes and their ``/proc/<pid>/environ`` are *not* contained. (As root
without namespaces, a Python installed in a private directory such as /root/.pyenv is unreadable to
``nobody``: only modules the zygote preloaded can be imported.)
Only Linux is supported.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from queue import SimpleQueue
from typing import Any, Iterable

__all__ = ["Sandbox", "Verdict"]

NOBODY = 65534


@dataclass
class Verdict:
    """The outcome of one sandboxed program.

    ``status`` is one of: ``passed`` (ran to its end), ``error`` (uncaught exception, incl. AssertionError
    and MemoryError; ``reason`` names it), ``exited`` (sys.exit/os._exit before the end), ``timeout``
    (wall clock), ``cpu_limit``, ``killed`` (any other signal, e.g. SIGSEGV from a C-stack overflow),
    ``output_limit``, ``worker_error`` (the harness itself failed; the worker was replaced).
    """

    passed: bool
    status: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0

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


# --------------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------------

def _send(fd: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _recv_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv(fd: int, deadline: float | None = None) -> Any:
    head = _recv_exact(fd, 8, deadline)
    if head is None:
        return None
    body = _recv_exact(fd, struct.unpack("<Q", head)[0], deadline)
    return None if body is None else json.loads(body)


class _Worker:
    """One zygote process and its two protocol pipes."""

    def __init__(self, limits: _Limits):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", os.path.abspath(__file__), "--zygote", json.dumps(asdict(limits))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, close_fds=True, start_new_session=True, cwd="/")
        self.wall = limits.wall_timeout
        hello = _recv(self.proc.stdout.fileno(), time.monotonic() + 60)
        if not hello or "isolation" not in hello:
            self.kill()
            raise RuntimeError(f"sandbox worker failed to start: {hello!r}")
        self.isolation: dict[str, Any] = hello["isolation"]

    def run_batch(self, codes: list[str]) -> list[Verdict]:
        """Several programs in one round trip (each still in its own fresh child)."""
        _send(self.proc.stdin.fileno(), {"codes": codes})
        reply = _recv(self.proc.stdout.fileno(), time.monotonic() + len(codes) * (self.wall + 5) + 30)
        if reply is None or len(reply.get("verdicts", ())) != len(codes):
            raise RuntimeError("sandbox worker stopped answering")
        return [Verdict(**v) for v in reply["verdicts"]]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
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


class Sandbox:
    """A pool of contained Python executors.

    Args:
        workers: number of zygote processes (parallel samples).
        cpu_seconds: CPU-time limit per sample (RLIMIT_CPU; fractional values round up to whole seconds).
        memory_mb: address-space limit per sample (RLIMIT_AS), on top of nothing: it bounds the whole
            process, interpreter included (a bare interpreter needs ~30 MB).
        wall_timeout: wall-clock seconds per sample before SIGKILL of its process group.
        max_output_bytes: stdout + stderr cap; exceeding it kills the sample (status ``output_limit``).
        file_size_mb: largest file a sample may write (RLIMIT_FSIZE).
        tmpfs_mb: size of each private tmpfs (/tmp, /var/tmp, /dev/shm) inside the namespace.
        max_open_files: RLIMIT_NOFILE.
        isolate: enter user/mount/network namespaces when the kernel allows (False: rlimits only).
        require_isolation: raise instead of falling back when namespaces are unavailable.
        preload: modules imported once in each zygote so samples that import them start faster.
        hide_paths: directories covered by an empty tmpfs (skipped if they hold the Python install).
    """

    def __init__(self, workers: int = 2, cpu_seconds: float = 3.0, memory_mb: int = 512,
                 wall_timeout: float = 5.0, max_output_bytes: int = 65536, file_size_mb: int = 16,
                 tmpfs_mb: int = 64, max_open_files: int = 64, isolate: bool = True,
                 require_isolation: bool = False, preload: Iterable[str] = (),
                 hide_paths: Iterable[str] = ("/root", "/home")):
        if not sys.platform.startswith("linux"):
            raise RuntimeError("zoo.sandbox needs Linux (rlimits, namespaces)")
        if workers < 1 or cpu_seconds <= 0 or wall_timeout <= 0 or memory_mb < 16 or max_output_bytes < 0:
            raise ValueError("sandbox limits must be positive (workers>=1, memory_mb>=16)")
        self.limits = _Limits(float(cpu_seconds), int(memory_mb), float(wall_timeout), int(max_output_bytes),
                              int(file_size_mb), int(tmpfs_mb), int(max_open_files), bool(isolate),
                              tuple(preload), tuple(hide_paths))
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

    @property
    def isolation(self) -> dict[str, Any]:
        """What the kernel granted: network namespace, read-only filesystem, uid switch, hidden paths."""
        if self._isolation is None:
            w = self._idle.get()
            try:
                w = w if w is not None and w.alive() else self._spawn()
            finally:
                self._idle.put(w)
        return dict(self._isolation or {})

    def run(self, code: str) -> Verdict:
        """Execute ``code`` as ``__main__`` in a fresh contained child; never raises for bad code."""
        return self._run_batch([code])[0]

    def _run_batch(self, codes: list[str]) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(codes)
        todo = []
        for i, c in enumerate(codes):
            if isinstance(c, str):
                todo.append(i)
            else:
                out[i] = Verdict(False, "worker_error", f"code must be str, got {type(c).__name__}")
        if not todo:
            return out
        w = self._idle.get()
        try:
            if w is None or not w.alive():
                if w is not None:
                    self._retire(w)
                w = self._spawn()
            try:
                for i, v in zip(todo, w.run_batch([codes[i] for i in todo])):
                    out[i] = v
                return out
            except (OSError, RuntimeError, ValueError, TypeError) as e:
                self._retire(w)
                w = None
                error = e
        finally:
            self._idle.put(w)
        if len(todo) == 1:
            out[todo[0]] = Verdict(False, "worker_error", f"sandbox worker died and was replaced: {error}")
            return out
        for i in todo:  # find the program that broke the worker: rerun one by one on fresh workers
            out[i] = self._run_batch([codes[i]])[0]
        return out

    def map(self, codes: Iterable[str]) -> list[Verdict]:
        """Run many programs on the pool; results keep the input order. Programs travel to the workers in
        small batches (one round trip each) but every program still runs in its own fresh child."""
        from concurrent.futures import ThreadPoolExecutor

        codes = list(codes)
        size = max(1, min(16, -(-len(codes) // (4 * self.workers))))
        chunks = [codes[i:i + size] for i in range(0, len(codes), size)]
        if self.workers == 1 or len(chunks) <= 1:
            return [v for c in chunks for v in self._run_batch(c)]
        with ThreadPoolExecutor(max_workers=self.workers) as ex:
            return [v for vs in ex.map(self._run_batch, chunks) for v in vs]

    def close(self) -> None:
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.kill()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# --------------------------------------------------------------------------------------------------
# Zygote side (this file executed as a script: stdlib only, nothing from the zoo package)
# --------------------------------------------------------------------------------------------------

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 0x4000, 1 << 18
SYS_MOUNT_SETATTR = 442  # same number on x86_64 and the asm-generic table (aarch64, riscv)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _errno_msg(what: str) -> str:
    import ctypes

    e = ctypes.get_errno()
    return f"{what}: {os.strerror(e)}"


def _enter_namespaces(lim: _Limits, libc) -> dict[str, Any]:
    """Unshare net+mount (+user when unprivileged); returns what actually took effect."""
    import ctypes

    iso: dict[str, Any] = {"network": False, "filesystem_readonly": False, "private_tmp": False,
                           "proc_hidden": False, "hidden": [], "uid_switch": os.geteuid() == 0, "notes": []}
    if not lim.isolate:
        iso["notes"].append("isolation disabled: rlimits only")
        return iso
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNS | CLONE_NEWNET | (0 if root else CLONE_NEWUSER)) != 0:
        iso["notes"].append(_errno_msg("unshare(user|mount|net) failed; network and filesystem not contained"))
        # Still try a bare network namespace (works for root without mount rights, e.g. some containers).
        if libc.unshare(CLONE_NEWNET) == 0:
            iso["network"] = True
        return iso
    iso["network"] = True
    if not root:  # map our own uid so files on the private tmpfs have an owner
        try:
            for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                               ("/proc/self/gid_map", f"{gid} {gid} 1")):
                with open(path, "w") as fh:
                    fh.write(text)
        except OSError as e:
            iso["notes"].append(f"uid map failed: {e}")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        iso["notes"].append(_errno_msg("mount private failed"))
        return iso

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
        iso["filesystem_readonly"] = True
    else:
        iso["notes"].append(_errno_msg("mount_setattr(read-only) failed; filesystem writable per permissions"))
    # Covered directories get a fresh tmpfs; if the Python installation lives inside one (pyenv under
    # /root, a venv under /tmp, ...) it is bind-mounted back, read-only, so imports keep working.
    needed = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                   sys.base_exec_prefix, os.path.dirname(sys.executable))})
    needed = [p for p in needed if not any(p.startswith(q + "/") for q in needed)]

    def cover(d: str, options: bytes, readonly: bool) -> bool:
        real = os.path.realpath(d)
        if not os.path.isdir(real) or any(p == real or real.startswith(p + "/") for p in needed):
            return False
        inside = [p for p in needed if p.startswith(real + "/")]
        keep = [os.open(p, os.O_PATH) for p in inside]  # handles to the real trees before covering them
        try:
            if libc.mount(b"tmpfs", real.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
                iso["notes"].append(_errno_msg(f"covering {d} failed"))
                return False
            for p, fd in zip(inside, keep):
                os.makedirs(p, mode=0o755, exist_ok=True)
                if (libc.mount(f"/proc/self/fd/{fd}".encode(), p.encode(), None, MS_BIND | MS_REC, None) != 0
                        or libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, p.encode(), AT_RECURSIVE, ctypes.byref(attr),
                                        ctypes.sizeof(attr)) != 0):
                    iso["notes"].append(_errno_msg(f"re-exposing the Python install under {d} failed"))
            if readonly:
                libc.mount(None, real.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
            return True
        finally:
            for fd in keep:
                os.close(fd)

    mounted = [d for d in WRITABLE if cover(d, f"size={lim.tmpfs_mb}m,mode=1777".encode(), readonly=False)]
    iso["private_tmp"] = "/tmp" in mounted
    iso["tmpfs"] = mounted
    iso["hidden"] = [d for d in lim.hide_paths if cover(d, b"size=1m,mode=755", readonly=True)]
    if libc.mount(b"tmpfs", b"/proc", b"tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, b"size=4k,mode=755") == 0:
        iso["proc_hidden"] = True
    return iso


def _wipe(dirs: dict[str, frozenset[str]]) -> None:
    """Empty the writable directories, keeping their start-up skeleton (e.g. a re-exposed Python install)."""
    for d, keep in dirs.items():
        try:
            entries = [e for e in os.scandir(d) if e.name not in keep]
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


def _drop_privileges(libc) -> None:
    """No capabilities (in a user namespace the zygote holds all of them, e.g. to re-mount / read-write)
    and no_new_privs (exec of a setuid binary gains nothing)."""
    import ctypes

    class CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(_errno_msg("prctl(PR_SET_NO_NEW_PRIVS)"))
    if libc.capset(ctypes.byref(CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), (CapData * 2)()) != 0:
        raise OSError(_errno_msg("capset"))


def _child(code: str, lim: _Limits, workdir: str, out_w: int, err_w: int, st_w: int, nonce: str, libc) -> None:
    """Runs in the forked child; never returns (everything it needs is imported by the zygote already)."""
    try:
        os.setsid()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU, signal.SIGALRM):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-size writes raise OSError(EFBIG) instead
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(st_w, 3)
        os.closerange(4, 65536)
        os.chdir(workdir)
        cpu = max(1, int(-(-lim.cpu_seconds // 1)))
        mb = 1024 * 1024
        for res, v in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (lim.memory_mb * mb,) * 2),
                       (resource.RLIMIT_FSIZE, (lim.file_size_mb * mb,) * 2), (resource.RLIMIT_CORE, (0, 0)),
                       (resource.RLIMIT_NOFILE, (lim.max_open_files,) * 2), (resource.RLIMIT_NPROC, (0, 0))):
            resource.setrlimit(res, v)
        if os.geteuid() == 0:  # RLIMIT_NPROC does not bind root; become nobody
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        _drop_privileges(libc)
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir})
        sys.argv = ["<sandbox>"]
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, errors="backslashreplace")
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
    except BaseException as e:  # setup failure: report it, do not run the code uncontained
        os.write(st_w, json.dumps({"nonce": nonce, "status": "setup", "error": repr(e)}).encode())
        os._exit(70)
    status, error = "ok", ""
    try:
        exec(compile(code, "<sandbox>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as e:
        status, error = "exit", f"SystemExit({e.code!r})"
    except BaseException as e:
        status = "exception"
        try:
            error = f"{type(e).__name__}: {e}"[:500]
            traceback.print_exc()
        except BaseException:
            error = "exception (unprintable)"
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    try:
        os.write(3, json.dumps({"nonce": nonce, "status": status, "error": error}).encode())
    except BaseException:
        pass
    os._exit(0)


def _run_one(code: str, lim: _Limits, libc, tmp_root: str, cleanup: dict[str, frozenset[str]]) -> dict[str, Any]:
    t0 = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="sample-", dir=tmp_root)
    if os.geteuid() == 0:
        os.chown(workdir, NOBODY, NOBODY)
    nonce = os.urandom(16).hex()
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        try:
            for r, _ in pipes:
                os.close(r)
            _child(code, lim, workdir, pipes[0][1], pipes[1][1], pipes[2][1], nonce, libc)
        finally:
            os._exit(71)
    for _, w in pipes:
        os.close(w)
    bufs = {r: bytearray() for r, _ in pipes}
    open_fds = [r for r, _ in pipes]
    out_fd, err_fd, st_fd = (r for r, _ in pipes)
    deadline = t0 + lim.wall_timeout
    killed_for = None
    status_wait = None
    try:  # a pidfd becomes readable when the child exits: one select() waits for pipes and exit alike
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            killed_for = "timeout"
            break
        # With a pidfd the status pipe (a few bytes, never fills) is read after the exit: one wake-up less.
        watch = [fd for fd in open_fds if pidfd is None or fd != st_fd] + ([pidfd] if pidfd is not None else [])
        if watch:
            ready = select.select(watch, [], [], min(left, 0.5 if pidfd is not None else 0.005))[0]
            for fd in ready:
                if fd == pidfd:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.remove(fd)
                elif fd != st_fd or len(bufs[fd]) < 4096:
                    bufs[fd] += chunk
            if len(bufs[out_fd]) + len(bufs[err_fd]) > lim.max_output_bytes:
                killed_for = "output_limit"
                break
        else:
            time.sleep(0.002)
        wp, st = os.waitpid(pid, os.WNOHANG)
        if wp == pid:
            status_wait = st
            break
    if pidfd is not None:
        os.close(pidfd)
    if killed_for is not None:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
        status_wait = os.waitpid(pid, 0)[1]
    # drain what is left in the pipes (the child is gone, so this cannot block for long)
    for fd in open_fds:
        try:
            while len(bufs[fd]) <= lim.max_output_bytes + 4096:
                ready = select.select([fd], [], [], 0)[0]
                chunk = os.read(fd, 65536) if ready else b""
                if not chunk:
                    break
                bufs[fd] += chunk
        except OSError:
            pass
    for r, _ in pipes:
        os.close(r)
    try:  # nothing can linger with NPROC=0, but the rlimits-only fallback may lack it
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _wipe(cleanup)  # the work dir lives in tmp_root, which is one of them

    cap = lim.max_output_bytes
    stdout = bytes(bufs[out_fd][:cap]).decode("utf-8", "replace")
    stderr = bytes(bufs[err_fd][:cap]).decode("utf-8", "replace")
    exit_code = os.WEXITSTATUS(status_wait) if os.WIFEXITED(status_wait) else None
    sig = os.WTERMSIG(status_wait) if os.WIFSIGNALED(status_wait) else None
    try:
        report = json.loads(bytes(bufs[st_fd]).decode())
        report = report if isinstance(report, dict) and report.get("nonce") == nonce else None
    except ValueError:
        report = None
    if killed_for == "timeout":
        res = ("timeout", f"wall-clock timeout after {lim.wall_timeout:g} s")
    elif killed_for == "output_limit":
        res = ("output_limit", f"stdout+stderr exceeded {cap} bytes")
    elif sig in (signal.SIGXCPU,) or (sig == signal.SIGKILL and _cpu_exhausted(lim, t0)):
        res = ("cpu_limit", f"CPU time limit of {lim.cpu_seconds:g} s")
    elif sig is not None:
        res = ("killed", f"killed by signal {signal.Signals(sig).name}")
    elif report is None:
        res = ("exited", f"exited with code {exit_code} before the end of the program")
    elif report["status"] == "ok":
        res = ("passed", "")
    elif report["status"] == "exit":
        res = ("exited", report["error"])
    elif report["status"] == "setup":
        res = ("worker_error", f"sandbox setup failed: {report['error']}")
    else:
        res = ("error", report["error"])
    return dict(passed=res[0] == "passed", status=res[0], reason=res[1], exit_code=exit_code, signal=sig,
                stdout=stdout, stderr=stderr, duration_s=round(time.monotonic() - t0, 6))


def _cpu_exhausted(lim: _Limits, t0: float) -> bool:
    # The hard RLIMIT_CPU delivers SIGKILL one second after the soft SIGXCPU was ignored.
    return time.monotonic() - t0 >= max(1.0, lim.cpu_seconds)


def _zygote(config: str) -> None:
    lim = _Limits(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(config).items()})
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    libc = _libc()
    # No PDEATHSIG here: it fires when the parent *thread* ends (pool threads come and go); the zygote
    # instead exits when its protocol pipe reaches EOF.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        iso = _enter_namespaces(lim, libc)
    except Exception as e:  # never die here: report the fallback
        iso = {"network": False, "filesystem_readonly": False, "notes": [f"namespace setup error: {e!r}"]}
    # Non-dumpable: a sample running as the zygote's own uid (user-namespace mode) cannot ptrace it.
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    iso["pid_namespace"] = False
    if lim.isolate and libc.unshare(CLONE_NEWPID) == 0:
        # Samples must not see or signal anything outside (the harness runs as the same user when not
        # root): the zygote loop moves into a child that is PID 1 of a fresh PID namespace.
        inner = os.fork()
        if inner:
            os.waitpid(inner, 0)
            os._exit(0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        iso["pid_namespace"] = True
    for mod in lim.preload:
        try:
            __import__(mod)
        except ImportError:
            pass
    if iso.get("private_tmp"):
        tmp_root, dirs = "/tmp", tuple(iso.get("tmpfs", ()))
    else:  # fallback: a private directory under the host's temp dir
        tmp_root = tempfile.mkdtemp(prefix="zoo-sandbox-")
        if os.geteuid() == 0:
            os.chmod(tmp_root, 0o755)
        dirs = (tmp_root,)
    cleanup = {d: frozenset(os.listdir(d)) for d in dirs}
    import gc

    gc.collect()
    gc.freeze()  # keep the collector from touching (and so copying) the zygote's pages in every child
    _send(proto_out, {"isolation": iso})
    while True:
        msg = _recv(proto_in)
        if msg is None:
            break
        verdicts = []
        for code in msg["codes"]:
            try:
                verdicts.append(_run_one(code, lim, libc, tmp_root, cleanup))
            except Exception as e:
                verdicts.append(dict(passed=False, status="worker_error", reason=f"{type(e).__name__}: {e}"))
        _send(proto_out, {"verdicts": verdicts})
    if not iso.get("private_tmp"):
        shutil.rmtree(tmp_root, ignore_errors=True)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--zygote":
    _zygote(sys.argv[2])
