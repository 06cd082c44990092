"""The sandbox's worker process, the "zygote": stdlib only, nothing from the zoo package, few modules.

Each worker of a :class:`zoo.sandbox.Sandbox` is a pre-warmed "zygote" (fast and clean for every sample): this
file, compiled once by the parent and run by ``python -I -S -B -c`` (isolated, no ``site`` .pth hooks: the
site-packages directories are put on ``sys.path`` by hand) with a minimal environment and few modules: every
page it holds makes each fork dearer (importing threading or random alone doubles the cost of a fork; compiling
this file in the zygote would leave 3 MB of parser garbage). At start-up the zygote forks a helper that enters
fresh user, mount, network, IPC and PID namespaces while the zygote, still outside, writes the helper's uid/gid
maps (a user namespace per worker: per-user kernel limits are counted per namespace, so no verdict depends on
other sandboxes on the machine). The helper builds a fresh root filesystem and forks the zygote loop as PID 1 of
the new PID namespace, which warms the interpreter (the first ``compile()`` of a process builds CPython's AST
types, 2 ms) and installs the seccomp filter on itself, once, for all its samples. For every sample the loop
``fork()``s a child, which gets a new session, rlimits and the uid ``nobody`` (mapped in the worker's own
namespace when the zygote is root; otherwise the caller's uid with every capability dropped), and ``exec``s the
code. The loop enforces the wall-clock timeout (SIGKILL) and the output caps, reaps the child and, when the
sample left anything in a scratch directory, replaces that tmpfs by a fresh one (nothing a sample leaves can
defeat that). Every sample is a fork of the zygote and can read its own raw memory, freed parts included: so
the zygote never decodes a job or a sample's output (the parent sends raw jobs, and turns the raw bytes a sample
wrote into its verdict) and keeps them in mappings that no child inherits (MADV_DONTFORK); a child gets a copy
of its own job only (see the protocol below). A worker whose harness fails for any reason is replaced and its
sample re-run once on a fresh one. Closing the pool ends each zygote by end of input, so every process is reaped
and its CPU time lands in the parent's ``RUSAGE_CHILDREN``.

The parent also imports this file as a module, for the protocol (``_send``/``_recv``, ``_send_jobs``,
``_REPLY``); nothing else of it runs in the parent.
"""

from __future__ import annotations

import builtins
import errno
import gc
import marshal
import mmap
import os
import resource
import select
import signal
import struct
import sys
import time

NOBODY = 65534


# Parent <-> zygote protocol (both ends are the zoo's trusted code; samples never hold these pipes). Control
# messages are length-prefixed marshal (built in: the zygote imports nothing for it). Every sample is a fork of the
# zygote and can read its own raw memory, freed parts included. So job data (programs, result expressions) and
# what samples wrote never become Python objects in the zygote and never lie in memory a child inherits: the
# zygote reads them straight into anonymous mappings marked MADV_DONTFORK (not mapped in any child at all: a read
# there is EFAULT) and writes replies straight from them. Only the job about to run is copied into ordinary memory
# for its own child, and zeroed in the zygote once that child is gone.
def _write_all(fd: int, *buffers) -> None:
    """Write the buffers in order, with as few writev() calls as the pipe allows (no joining: no copies)."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    while views:
        n = os.writev(fd, views[:1024])  # IOV_MAX
        while n:
            if n >= len(views[0]):
                n -= len(views.pop(0))
            else:
                views[0], n = views[0][n:], 0


def _send(fd: int, obj) -> None:
    data = marshal.dumps(obj)
    _write_all(fd, struct.pack("<Q", len(data)), data)


def _recv_into(fd: int, buf, deadline: float | None) -> bool:
    """Fill ``buf`` from ``fd`` (straight into it: no intermediate bytes objects); False at EOF or the deadline."""
    view, got = memoryview(buf).cast("B"), 0
    while got < len(view):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return False
        k = os.readv(fd, [view[got:]])
        if not k:
            return False
        got += k
    return True


def _recv(fd: int, deadline: float | None = None):
    head = bytearray(8)
    if not _recv_into(fd, head, deadline):
        return None
    body = bytearray(struct.unpack("<Q", head)[0])
    return marshal.loads(body) if _recv_into(fd, body, deadline) else None


def _private(size: int) -> mmap.mmap:
    """Zeroed anonymous memory that no forked child inherits (where the kernel has MADV_DONTFORK)."""
    m = mmap.mmap(-1, max(size, 1))
    try:
        m.madvise(mmap.MADV_DONTFORK)
    except (AttributeError, OSError):  # the zygote reports this at start-up (see _zygote)
        pass
    return m


_JOB = struct.Struct("<qq")  # a job's header: code length, result length (-1: no result expression)
_REPLY = struct.Struct("<QQQQ")  # a verdict's header: metadata length, then stdout, stderr, report lengths


def _send_jobs(fd: int, jobs) -> None:
    """Parent side: a batch as one frame of raw UTF-8 jobs (the zygote never decodes it; each child decodes its
    own job only)."""
    parts = []
    for code, result in jobs:
        c = code.encode("utf-8", "surrogatepass")
        r = b"" if result is None else result.encode("utf-8", "surrogatepass")
        parts += [_JOB.pack(len(c), -1 if result is None else len(r)), c, r]
    _write_all(fd, struct.pack("<Q", sum(map(len, parts))), *parts)


class _Stream:
    """What a child writes to one pipe, read in place into its region of a private mapping (``cap`` + 1 bytes:
    one more than allowed shows that the cap was exceeded)."""

    def __init__(self, region: memoryview):
        self.region, self.cap, self.size = region, len(region) - 1, 0

    def read(self, fd: int) -> bool:
        """One read; False at end of file (or with the region full)."""
        k = os.readv(fd, [self.region[self.size:]]) if self.size < len(self.region) else 0
        self.size += k
        return k > 0

    def view(self) -> memoryview:
        return self.region[:min(self.size, self.cap)]


def _send_replies(fd: int, replies: list) -> None:
    """Zygote side: per job, its metadata (no program data in it) and the bytes of its streams, written from the
    private mappings themselves."""
    parts = []
    for meta, streams in replies:
        data = marshal.dumps(meta)
        views = [s.view() for s in streams] or [b"", b"", b""]
        parts += [_REPLY.pack(len(data), *map(len, views)), data, *views]
    _write_all(fd, *parts)


CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (0x00020000, 0x08000000, 0x10000000,
                                                                        0x20000000, 0x40000000)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 0x4000, 1 << 18
MNT_DETACH, AT_FDCWD, AT_RECURSIVE = 2, -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 38
SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
DEVICES = ("null", "zero", "full", "random", "urandom")
# syscall numbers: (x86_64, aarch64); None where the architecture has no such call
_SYSCALLS = {"mount_setattr": (442, 442), "pivot_root": (155, 41)}
_AUDIT_ARCH = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}

# What the seccomp filter refuses, and with which errno: syscall -> (errno, x86_64 nr, aarch64 nr).
SECCOMP_DENY = {
    # no new processes or threads (RLIMIT_NPROC = 0 as well); ENOSYS for clone3 makes libc fall back to clone
    "clone": (errno.EAGAIN, 56, 220), "fork": (errno.EAGAIN, 57, None), "vfork": (errno.EAGAIN, 58, None),
    "clone3": (errno.ENOSYS, 435, 435),
    # no namespaces, mounts or root changes (a sample could otherwise mount an unbounded tmpfs of its own)
    "unshare": (errno.EPERM, 272, 97), "setns": (errno.EPERM, 308, 268), "mount": (errno.EPERM, 165, 40),
    "umount2": (errno.EPERM, 166, 39), "pivot_root": (errno.EPERM, 155, 41), "chroot": (errno.EPERM, 161, 51),
    "open_tree": (errno.EPERM, 428, 428), "move_mount": (errno.EPERM, 429, 429),
    "fsopen": (errno.EPERM, 430, 430), "fsconfig": (errno.EPERM, 431, 431), "fsmount": (errno.EPERM, 432, 432),
    "fspick": (errno.EPERM, 433, 433), "mount_setattr": (errno.EPERM, 442, 442),
    # no access to other processes' memory
    "ptrace": (errno.EPERM, 101, 117), "process_vm_readv": (errno.EPERM, 310, 270),
    "process_vm_writev": (errno.EPERM, 311, 271), "kcmp": (errno.EPERM, 312, 272),
    "pidfd_getfd": (errno.EPERM, 438, 438),
    # no System V IPC or POSIX message queues: a channel between samples, and memory outside RLIMIT_AS
    "shmget": (errno.EPERM, 29, 194), "shmat": (errno.EPERM, 30, 196), "shmctl": (errno.EPERM, 31, 195),
    "shmdt": (errno.EPERM, 67, 197), "semget": (errno.EPERM, 64, 190), "semop": (errno.EPERM, 65, 193),
    "semctl": (errno.EPERM, 66, 191), "semtimedop": (errno.EPERM, 220, 192), "msgget": (errno.EPERM, 68, 186),
    "msgsnd": (errno.EPERM, 69, 189), "msgrcv": (errno.EPERM, 70, 188), "msgctl": (errno.EPERM, 71, 187),
    "mq_open": (errno.EPERM, 240, 180), "mq_unlink": (errno.EPERM, 241, 181),
    "mq_timedsend": (errno.EPERM, 242, 182), "mq_timedreceive": (errno.EPERM, 243, 183),
    "mq_notify": (errno.EPERM, 244, 184), "mq_getsetattr": (errno.EPERM, 245, 185),
    "memfd_create": (errno.EPERM, 319, 279),
    # a Unix datagram pair can sendto() any socket path; socket(AF_UNIX, ...) is refused below
    "socketpair": (errno.EACCES, 53, 199),
    # kernel interfaces samples never need (io_uring would also bypass this filter)
    "io_uring_setup": (errno.ENOSYS, 425, 425), "io_uring_enter": (errno.ENOSYS, 426, 426),
    "io_uring_register": (errno.ENOSYS, 427, 427), "bpf": (errno.EPERM, 321, 280),
    "perf_event_open": (errno.EPERM, 298, 241), "userfaultfd": (errno.EPERM, 323, 282),
    "keyctl": (errno.EPERM, 250, 219), "add_key": (errno.EPERM, 248, 217), "request_key": (errno.EPERM, 249, 218),
    "personality": (errno.EPERM, 135, 92),
    # watching the read-only system directories would report the host's and other samples' file accesses
    "inotify_init": (errno.EPERM, 253, None), "inotify_init1": (errno.EPERM, 294, 26),
    "fanotify_init": (errno.EPERM, 300, 262),
}
# Rules on the first argument (a pid): (x86_64 nr, aarch64 nr, value, refuse when equal / refuse unless equal).
# The zygote may run as the sample's own uid (sandbox not started as root): no changing other processes'
# limits or CPU placement (pid 0 = the sample itself), and no signals to the zygote, PID 1 of the namespace
# (the kernel would drop them anyway; refusing makes the verdict the same in every mode).
SECCOMP_ARG0 = {"prlimit64": (302, 261, 0, False), "sched_setaffinity": (203, 122, 0, False),
                "kill": (62, 129, 1, True), "tkill": (200, 130, 1, True), "tgkill": (234, 131, 1, True)}
SOCKET_NR = (41, 198)
# The only socket families a sample may open: those the network namespace contains. Not AF_UNIX (host socket
# paths, abstract names), AF_VSOCK (the hypervisor of a VM, outside every network namespace), netlink, ...
SOCKET_FAMILIES = (2, 10)  # AF_INET, AF_INET6


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _errno_msg(what: str) -> str:
    import ctypes

    return f"{what}: {os.strerror(ctypes.get_errno())}"


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise OSError(_errno_msg(what))


# The zygote itself runs under the filter (installed once; samples inherit it, so no sample pays for compiling
# it), minus what the zygote needs: fork for every sample, mounts for fresh scratch tmpfs. Samples cannot use
# those: RLIMIT_NPROC = 0 stops clone/fork/threads, and mounting needs a capability they do not hold.
ZYGOTE_NEEDS = ("clone", "mount", "umount2")


def _sock_fprog(prog: list[tuple[int, int, int, int]]):
    """Classic BPF instructions (code, jt, jf, k) as the ``struct sock_fprog`` that prctl(PR_SET_SECCOMP) takes.
    ``_keep`` holds the instruction array alive and a pointer to the struct made ahead of time, so that a sample
    installs its filter without allocating."""
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(prog))(*prog)
    fprog = SockFprog(len(prog), filters)
    fprog._keep = (filters, ctypes.byref(fprog))
    return fprog


def _seccomp_program():
    """The BPF filter (classic BPF over ``struct seccomp_data``) or None when this architecture has no table."""
    col, arch = _AUDIT_ARCH.get(os.uname().machine, (None, None))
    if col is None:
        return None
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, kill, err = 0x7FFF0000, 0x80000000, 0x00050000  # SECCOMP_RET_ALLOW, _KILL_PROCESS, _ERRNO
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld, 0, 0, 0)]  # wrong ABI: kill
    if col == 0:
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, kill)]  # x32 syscall numbers on x86_64
    for name, (code, *nrs) in SECCOMP_DENY.items():
        if nrs[col] is not None and name not in ZYGOTE_NEEDS:
            prog += [(jeq, 0, 1, nrs[col]), (ret, 0, 0, err | code)]
    for *nrs, value, refuse_equal in SECCOMP_ARG0.values():  # nr matches: load the pid argument, compare
        prog += [(jeq, 0, 4, nrs[col]), (ld, 0, 0, 16), (jeq, 0, 1, value) if refuse_equal else (jeq, 1, 0, value),
                 (ret, 0, 0, err | errno.EPERM), (ret, 0, 0, allow)]
    prog += [(jeq, 0, 4, SOCKET_NR[col]), (ld, 0, 0, 16),  # socket(family, ...): families in SOCKET_FAMILIES
             (jeq, 2, 0, SOCKET_FAMILIES[0]), (jeq, 1, 0, SOCKET_FAMILIES[1]),
             (ret, 0, 0, err | errno.EACCES), (ret, 0, 0, allow)]
    return _sock_fprog(prog)


def _become_sample_user(w: _WorkerState) -> None:
    """Switch this (forked) process to the samples' uid and gid, if the sandbox runs them as another user: groups
    first (while still allowed), then gid, then uid (after which neither could change)."""
    if w.sample_ids is not None:
        if w.setgroups:
            os.setgroups([])
        os.setgid(w.sample_ids[1])
        os.setuid(w.sample_ids[0])


def _nproc_binds(w: "_WorkerState") -> bool:
    """Whether RLIMIT_NPROC = 0 stops a sample's fork. It does not when the sample's uid is the host's root
    (e.g. the sandbox started by root inside a user namespace that maps it to another uid)."""
    pid = os.fork()
    if pid == 0:
        try:
            _become_sample_user(w)
            resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
            try:
                child = os.fork()
            except OSError:
                os._exit(0)
            if child == 0:
                os._exit(0)
            os.waitpid(child, 0)
            os._exit(1)
        except BaseException:
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _no_clone_program():
    """A tiny second filter each sample adds for itself where RLIMIT_NPROC does not bind: clone fails too
    (threads and forks). Only then: attaching a filter costs a sample about 0.25 ms."""
    col, arch = _AUDIT_ARCH.get(os.uname().machine, (None, None))
    if col is None:
        return None
    nr = SECCOMP_DENY["clone"][1 + col]
    prog = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, 0x80000000), (0x20, 0, 0, 0),
            (0x15, 0, 1, nr), (0x06, 0, 0, 0x00050000 | errno.EAGAIN), (0x06, 0, 0, 0x7FFF0000)]
    return _sock_fprog(prog)


def _drop_capabilities(libc) -> None:
    """No capabilities left (in a user namespace the zygote holds all of them, e.g. to mount)."""
    import ctypes

    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    _check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")


class _WorkerState:
    """Per-worker facts the sample setup needs (decided once at start-up)."""

    pid_namespace = False
    sample_ids: tuple[int, int] | None = None  # (uid, gid) to switch to
    setgroups = False
    drop_caps = False
    ipc_per_sample = False
    no_clone = None  # the per-sample seccomp filter
    slots: list  # per position in a batch: a private mapping for that sample's stdout, stderr and report
    scratch: tuple[str, ...] = ()
    fresh_root = False
    baseline: dict = {}


def _write_id_maps(pid: int, root: bool) -> None:
    """Run in the host's user namespace: map the helper's ids (root: 0 and nobody; else the caller's own)."""
    if root:
        maps = {"uid_map": f"0 0 1\n{NOBODY} {NOBODY} 1\n", "gid_map": f"0 0 1\n{NOBODY} {NOBODY} 1\n"}
    else:
        with open(f"/proc/{pid}/setgroups", "w") as fh:
            fh.write("deny")
        maps = {"uid_map": f"{os.getuid()} {os.getuid()} 1\n", "gid_map": f"{os.getgid()} {os.getgid()} 1\n"}
    for name, text in maps.items():
        with open(f"/proc/{pid}/{name}", "w") as fh:
            fh.write(text)


def _enter_namespaces(libc, iso: dict, w: _WorkerState, proto: tuple[int, int]) -> bool:
    """Fork a helper that unshares user (when possible), mount, network, IPC and PID namespaces; this process
    writes the helper's id maps from outside and then only waits for it. Returns True in the helper."""
    root = os.geteuid() == 0
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID
    for user in ((True, False) if root else (True,)):
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # helper
            os.close(ready_r)
            os.close(go_w)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            ok = libc.unshare(flags | (CLONE_NEWUSER if user else 0)) == 0
            os.write(ready_w, b"ok" if ok else _errno_msg("unshare").encode())
            if not ok or os.read(go_r, 256) != b"go":
                os._exit(0)
            os.close(ready_w)
            os.close(go_r)
            w.sample_ids = (NOBODY, NOBODY) if root else None
            w.setgroups = root
            w.drop_caps = not root
            iso.update(network=True, ipc_namespace=True, user_namespace=user, uid_switch=root,
                       sample_uid=NOBODY if root else os.getuid())
            return True
        os.close(ready_w)
        os.close(go_r)
        said = os.read(ready_r, 256)
        os.close(ready_r)
        reply = b"go"
        if said != b"ok":
            iso["notes"].append(f"unshare({'user|' if user else ''}mount|net|ipc|pid) failed: {said.decode()}")
            reply = b"no"
        elif user:
            try:
                _write_id_maps(pid, root)
            except OSError as e:
                iso["notes"].append(f"writing the user namespace's id maps failed: {e}")
                reply = b"no"
        if reply == b"go":
            for fd in proto:  # the helper owns the protocol now
                os.close(fd)
        os.write(go_w, reply)
        os.close(go_w)
        _, status = os.waitpid(pid, 0)
        if reply == b"go":
            os._exit(max(0, os.waitstatus_to_exitcode(status)))
    if libc.unshare(CLONE_NEWNET) == 0:  # still no network, e.g. root in a container without mount rights
        iso["network"] = True
    return False


def _bind(libc, source_fd: int, target: str, ro_flags: int, iso: dict) -> None:
    import ctypes

    _check(libc.mount(f"/proc/self/fd/{source_fd}".encode(), target.encode(), None, MS_BIND | MS_REC, None),
           f"bind-mounting {target}")
    attr = (ctypes.c_uint64 * 4)(ro_flags, 0, 0, 0)
    nr = _SYSCALLS["mount_setattr"][_AUDIT_ARCH.get(os.uname().machine, (0,))[0]]
    if libc.syscall(nr, AT_FDCWD, target.encode(), AT_RECURSIVE, attr, ctypes.sizeof(attr)) != 0:
        # Linux < 5.12: remount the top mount only (mounts below it stay as they were)
        _check(libc.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, None),
               f"remounting {target} read-only")
        if "mount_setattr" not in " ".join(iso["notes"]):
            iso["notes"].append("no mount_setattr (Linux < 5.12): mounts nested below visible dirs stay writable")


def _scratch_options(tmpfs_mb: int) -> bytes:
    # nr_inodes bounds the kernel memory a sample can pin in inodes (not counted in size=)
    return f"size={tmpfs_mb}m,nr_inodes={max(4096, 256 * tmpfs_mb)},mode=1777".encode()


def _fresh_root(libc, lim: dict, iso: dict, w: _WorkerState) -> None:
    """Build a root with only the system directories, the interpreter and ``expose`` (read-only), a few
    devices and private scratch tmpfs, and pivot into it. Runs in the helper (own mount namespace)."""
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    real = os.path.realpath
    trees = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    links = [(d, os.readlink(d)) for d in SYSTEM_DIRS if os.path.islink(d)]
    wanted = {real(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                os.path.dirname(real(sys.executable)), *lim["site_paths"], *lim["expose"])
              if p and os.path.exists(p)}
    inside = lambda p, d: p == d or p.startswith(d.rstrip("/") + "/")  # noqa: E731
    extra = sorted(p for p in wanted if not any(inside(p, d) for d in trees)
                   and not any(q != p and inside(p, q) for q in wanted))
    # Handles on everything to expose, taken before anything is covered (the stage hides the host's /tmp).
    fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in trees + extra}
    devs = {d: os.open(f"/dev/{d}", os.O_PATH | os.O_CLOEXEC) for d in DEVICES if os.path.exists(f"/dev/{d}")}
    stage, pivoted = "/tmp", False
    try:
        _check(libc.mount(b"tmpfs", stage.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=755"),
               "mounting the new root")
        ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
        for p in trees + extra:
            if os.path.isdir(p):
                os.makedirs(stage + p, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(stage + p), mode=0o755, exist_ok=True)
                os.close(os.open(stage + p, os.O_CREAT | os.O_WRONLY, 0o644))
            _bind(libc, fds[p], stage + p, ro, iso)
        for d, target in links:
            os.symlink(target, stage + d)
        os.makedirs(stage + "/dev", mode=0o755)
        _check(libc.mount(b"tmpfs", (stage + "/dev").encode(), b"tmpfs", MS_NOSUID, b"size=64k,mode=755"),
               "mounting /dev")
        for d, fd in devs.items():
            os.close(os.open(f"{stage}/dev/{d}", os.O_CREAT | os.O_WRONLY, 0o666))
            _bind(libc, fd, f"{stage}/dev/{d}", MOUNT_ATTR_NOSUID, iso)
        scratch = []
        for d in SCRATCH_DIRS:
            if any(inside(p, d) for p in extra):  # the interpreter lives there: keep it read-only
                iso["notes"].append(f"{d} holds the Python installation: read-only, not a scratch directory")
                continue
            os.makedirs(stage + d, mode=0o755, exist_ok=True)
            _check(libc.mount(b"tmpfs", (stage + d).encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                              _scratch_options(lim["tmpfs_mb"])), f"mounting scratch {d}")
            scratch.append(d)
        for d in ("/proc", "/sys"):
            os.makedirs(stage + d, mode=0o555, exist_ok=True)
        iso["hidden"] = []
        for d in lim["hide_paths"]:  # inside a visible tree: cover it (unless it holds what must stay visible)
            if os.path.isdir(stage + d) and not any(inside(p, real(d)) for p in extra):
                _check(libc.mount(b"tmpfs", (stage + d).encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY,
                                  b"size=4k,mode=755"), f"covering {d}")
            iso["hidden"].append(d)
        _check(libc.mount(None, (stage + "/dev").encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID, None),
               "remounting /dev read-only")
        os.chdir(stage)
        nr = _SYSCALLS["pivot_root"][_AUDIT_ARCH.get(os.uname().machine, (0,))[0]]
        if libc.syscall(nr, b".", b".") == 0:  # the old root lands on top of the new one: detach it
            _check(libc.umount2(b".", MNT_DETACH), "detaching the old root")
        else:
            iso["notes"].append(_errno_msg("pivot_root failed; chroot instead"))
            os.chroot(".")
        pivoted = True
        os.chdir("/")
        _check(libc.mount(None, b"/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
               "remounting the new root read-only")
    except OSError:
        if not pivoted:  # back to the host's view (the stage covers the host's /tmp)
            os.chdir("/")
            libc.umount2(stage.encode(), MNT_DETACH)
        raise
    finally:
        for fd in (*fds.values(), *devs.values()):
            os.close(fd)
    w.fresh_root, w.scratch = True, tuple(scratch)
    iso.update(fresh_root=True, filesystem_readonly=True, private_tmp="/tmp" in scratch, tmpfs=list(scratch),
               proc_hidden=True, visible=sorted(trees + [d for d, _ in links] + extra + [f"/dev/{d}" for d in devs]))


def _remount_scratch(libc, lim: dict, d: str) -> None:
    """A fresh, empty tmpfs instead of whatever the last sample left (no tree walk to defeat)."""
    os.chdir("/")  # the zygote's cwd must not keep the old one alive
    _check(libc.umount2(d.encode(), MNT_DETACH), f"detaching scratch {d}")
    _check(libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, _scratch_options(lim["tmpfs_mb"])),
           f"mounting scratch {d}")


def _wipe(path: str) -> None:
    """Empty ``path`` (fallback mode, no private tmpfs). Iterative and by directory fds: a sample may leave a
    tree thousands of levels deep, deeper than recursion or PATH_MAX allow, and unreadable directories."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    down: list[str] = []
    fd = os.open(path, flags)
    try:
        while True:
            sub = None
            with os.scandir(fd) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        sub = e.name
                        break
                    os.unlink(e.name, dir_fd=fd)
            if sub is not None:
                os.chmod(sub, 0o700, dir_fd=fd)
                nxt = os.open(sub, flags, dir_fd=fd)
                os.close(fd)
                fd, _ = nxt, down.append(sub)
            elif down:
                up = os.open("..", flags, dir_fd=fd)
                os.close(fd)
                fd = up
                os.rmdir(down.pop(), dir_fd=fd)
            else:
                return
    finally:
        os.close(fd)


def _dir_state(d: str) -> tuple:
    st = os.stat(d)  # any entry made or removed changes mtime; chmod/chown/xattrs change ctime
    return st.st_mode, st.st_uid, st.st_gid, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns


def _child(job: bytearray, lim: dict, w: _WorkerState, libc, out_w: int, err_w: int, rep_w: int) -> None:
    """Runs in the forked child; never returns. Everything it needs was imported and set up by the zygote
    (signals, environment, stdio objects, scratch cwd), so the per-sample work is a few syscalls."""
    report = rep_w
    try:
        n_code, n_result = _JOB.unpack_from(job)
        code = job[_JOB.size:_JOB.size + n_code].decode("utf-8", "surrogatepass")
        result = None if n_result < 0 else job[_JOB.size + n_code:].decode("utf-8", "surrogatepass")
        os.setsid()
        if not w.pid_namespace:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        report = os.dup2(rep_w, 3)
        os.closerange(4, 1 << 16)
        cpu = max(1, int(-(-lim["cpu_seconds"] // 1)))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (lim["memory_mb"] << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lim["max_open_files"],) * 2)
        if w.ipc_per_sample:
            _check(libc.unshare(CLONE_NEWIPC), "unshare(ipc)")
        _become_sample_user(w)
        # after the uid switch: set before it, the kernel would flag the switch and fail a later exec
        # whenever any other process of that uid exists (e.g. another sandbox's sample)
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        if w.drop_caps:
            _drop_capabilities(libc)
        if w.no_clone is not None:
            _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, w.no_clone._keep[1], 0, 0), "seccomp")
        os.write(report, b"+")  # the report's first byte is the harness's: setup done ("-": failed)
    except BaseException as e:  # setup failure: report it, never run the code uncontained
        os.write(report, b"-" + repr(e).encode("utf-8", "backslashreplace"))
        os._exit(70)
    status, payload = b"ok", b""
    try:
        scope = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile(code, "<sandbox>", "exec"), scope)
        if result is not None:
            payload = repr(eval(compile(result, "<result>", "eval"), scope)).encode("utf-8", "backslashreplace")
    except SystemExit as e:
        status = b"exit"
        try:
            payload = f"SystemExit({e.code!r})".encode("utf-8", "backslashreplace")
        except BaseException:
            payload = b"SystemExit"
    except BaseException as e:
        status = b"exception"
        try:
            payload = f"{type(e).__name__}: {e}"[:500].encode("utf-8", "backslashreplace")
            sys.__excepthook__(type(e), e, e.__traceback__)  # the traceback to stderr (C code, no imports)
        except BaseException:
            payload = b"exception (unprintable)"
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    try:
        view = memoryview(status + b"\n" + payload)
        while view:
            view = view[os.write(3, view):]
    except BaseException:
        pass
    os._exit(0)


def _run_one(job: bytearray, slot: mmap.mmap, lim: dict, w: _WorkerState, libc) -> tuple[dict, list[_Stream]]:
    """Fork the child for ``job`` (its own copy) and watch it: its wait status and what it wrote, raw, into
    ``slot`` (the parent turns them into a verdict: the zygote never decodes a sample's output)."""
    t0 = time.monotonic()
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        try:
            for r, _ in pipes:
                os.close(r)
            _child(job, lim, w, libc, *(wr for _, wr in pipes))
        finally:
            os._exit(71)
    for _, wr in pipes:
        os.close(wr)
    out_fd, err_fd, rep_fd = (r for r, _ in pipes)
    region, o = memoryview(slot), lim["max_output_bytes"] + 1
    streams = {out_fd: _Stream(region[:o]), err_fd: _Stream(region[o:2 * o]), rep_fd: _Stream(region[2 * o:])}
    out, err, rep = streams.values()
    open_fds = [out_fd, err_fd, rep_fd]
    deadline = t0 + lim["wall_timeout"]
    killed_for, status_wait = None, None
    try:  # a pidfd becomes readable when the child exits: one select() waits for pipes and exit alike
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            killed_for = "timeout"
            break
        watch = open_fds + ([pidfd] if pidfd is not None else [])
        if watch:
            for fd in select.select(watch, [], [], min(left, 0.5 if pidfd is not None else 0.005))[0]:
                if fd != pidfd and not streams[fd].read(fd):
                    open_fds.remove(fd)
            if out.size + err.size > lim["max_output_bytes"]:
                killed_for = "output_limit"
                break
            if rep.size > rep.cap:
                killed_for = "value_limit"
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
    for fd in open_fds:  # drain: the child is gone and held the only write ends (it cannot fork or pass
        try:             # descriptors), so these reads end at EOF without blocking
            while streams[fd].size <= streams[fd].cap and streams[fd].read(fd):
                pass
        except OSError:
            pass
    for r, _ in pipes:
        os.close(r)
    if not w.pid_namespace:  # nothing can linger (no forks), but be sure outside a PID namespace
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if killed_for is None and rep.size > rep.cap:  # the rest of an over-long report came in the drain
        killed_for = "value_limit"
    # in place, now that the child is gone (no copy-on-write): the next child must not find this job in its memory
    memoryview(job)[:] = bytes(len(job))
    return dict(wait_status=status_wait, killed_for=killed_for, duration_s=round(time.monotonic() - t0, 6)), \
        [out, err, rep]


def _after_sample(lim: dict, w: _WorkerState, libc) -> None:
    """Scratch directories the sample touched become empty again."""
    for d in w.scratch:
        if _dir_state(d) != w.baseline[d]:
            if w.fresh_root:
                _remount_scratch(libc, lim, d)
            else:
                _wipe(d)
            w.baseline[d] = _dir_state(d)
            os.chdir(w.scratch[0])


def _warm_up() -> None:
    """Do once here what every sample would otherwise pay for: the first ``compile()`` of a process builds
    CPython's ~120 AST types (about 2 ms, more than the fork itself); the first traceback print, too."""
    scope = {"__name__": "__warm_up__", "__builtins__": builtins}
    exec(compile("def f(x):\n    return [x, {'a': (1,)}]\nassert f('s') == ['s', {'a': (1,)}]", "<warm>", "exec"),
         scope)
    repr(eval(compile("f(1)", "<warm>", "eval"), scope))
    try:
        raise ValueError("warm")
    except ValueError as e:
        sys.__excepthook__(type(e), e, e.__traceback__)  # stderr is /dev/null here
    sys.stdout.flush()
    sys.stderr.flush()


def _zygote(config: str) -> None:
    lim = marshal.loads(bytes.fromhex(config))
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    import _sitebuiltins  # the builtins `site` would add (exit, quit, help), without importing site

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    builtins.help = _sitebuiltins._Helper()
    sys.path.extend(p for p in lim["site_paths"] if p not in sys.path)
    for mod in lim["preload"]:  # trusted modules, imported with the host's view of the filesystem
        try:
            __import__(mod)
        except ImportError:
            pass
    libc = _libc()
    # What every sample inherits, set once here rather than per sample. SIGINT default: the zygote is PID 1
    # of its namespace and so ignores signals without a handler, also those a sample sends it.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGXCPU, signal.SIGALRM):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-size writes raise OSError(EFBIG) instead
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    iso = {"network": False, "ipc_namespace": False, "pid_namespace": False, "user_namespace": False,
           "filesystem_readonly": False, "fresh_root": False, "private_tmp": False, "proc_hidden": False,
           "hidden": [], "visible": [], "tmpfs": [], "uid_switch": os.geteuid() == 0,
           "sample_uid": NOBODY if os.geteuid() == 0 else os.getuid(), "seccomp": False, "notes": []}
    w = _WorkerState()
    w.slots = []
    w.sample_ids = (NOBODY, NOBODY) if os.geteuid() == 0 else None
    w.setgroups = os.geteuid() == 0
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")  # inherited by everything below
    if not lim["isolate"]:
        iso["notes"].append("isolation disabled: rlimits and seccomp only")
    elif _enter_namespaces(libc, iso, w, (proto_in, proto_out)):
        try:
            try:
                with open("/proc/sys/user/max_user_namespaces", "w") as fh:
                    fh.write("0")  # nested user namespaces would hand a sample capabilities of its own
            except OSError as e:
                iso["notes"].append(f"could not forbid nested user namespaces: {e}")
            _fresh_root(libc, lim, iso, w)
        except OSError as e:
            iso["notes"].append(f"fresh root failed, filesystem not contained: {e}")
        inner = os.fork()  # PID 1 of the new PID namespace
        if inner:
            for fd in (proto_in, proto_out):
                os.close(fd)
            _, status = os.waitpid(inner, 0)
            os._exit(max(0, os.waitstatus_to_exitcode(status)))
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        iso["pid_namespace"] = w.pid_namespace = True
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # a sample running as the zygote's own uid cannot ptrace it
    if not w.scratch:  # fallback: one private directory under the host's temp dir
        import tempfile

        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None  # tmpfs: fast
        w.scratch = (tempfile.mkdtemp(prefix="zoo-sandbox-", dir=shm),)
        if w.sample_ids is not None:
            os.chown(w.scratch[0], *w.sample_ids)
    w.baseline = {d: _dir_state(d) for d in w.scratch}
    os.chdir(w.scratch[0])
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": w.scratch[0],
                       "TMPDIR": w.scratch[0]})
    sys.argv = ["<sandbox>"]
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["file_size_mb"] << 20,) * 2)  # the zygote writes only pipes
    _warm_up()
    if lim["seccomp"]:
        import ctypes

        prog = _seccomp_program()
        if prog is None:
            iso["notes"].append(f"no seccomp table for {os.uname().machine}: no syscall filter")
        elif libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
            iso["notes"].append(_errno_msg("seccomp filter refused"))
        else:
            iso["seccomp"] = True
    if not _nproc_binds(w):
        w.no_clone = _no_clone_program() if iso["seccomp"] else None
        iso["notes"].append("RLIMIT_NPROC does not bind here (the sample's uid is the host's root): "
                            + ("each sample adds a seccomp filter against clone" if w.no_clone is not None
                               else "new processes are NOT contained"))
    # without the filter's IPC rules, a fresh IPC namespace per sample keeps samples apart
    w.ipc_per_sample = not iso["seccomp"] and iso["ipc_namespace"]
    try:  # where the kernel lacks it, children inherit the mappings that hold other jobs (see _private)
        mmap.mmap(-1, 1).madvise(mmap.MADV_DONTFORK)
        iso["private_buffers"] = True
    except (AttributeError, OSError) as e:
        iso["private_buffers"] = False
        iso["notes"].append(f"no MADV_DONTFORK ({e}): a sample can find earlier jobs and their output in its memory")
    gc.collect()
    gc.freeze()  # keep the collector from touching (and so copying) the zygote's pages in every child
    try:  # hand the start-up's freed heap (compiling this file, the warm-up) back: fewer pages to fork
        libc.malloc_trim(0)
    except AttributeError:  # not glibc
        pass
    _send(proto_out, {"isolation": iso})
    head = bytearray(8)
    while _recv_into(proto_in, head, None):  # a batch of jobs in, its replies out at its end (one write)
        size = struct.unpack("<Q", head)[0]
        batch = _private(size)
        if not _recv_into(proto_in, memoryview(batch)[:size], None):
            break
        at, broken, replies = 0, None, []
        while at < size:
            n_code, n_result = _JOB.unpack_from(batch, at)
            end, k = at + _JOB.size + n_code + max(n_result, 0), len(replies)
            if broken is not None:
                replies.append((dict(passed=False, status="not_run", reason=broken), ()))
            else:  # a harness failure (not the program's): report it, the rest is not run, the pool replaces us
                try:
                    if len(w.slots) == k:  # kept for later batches (no child has them: they need no zeroing)
                        w.slots.append(_private(2 * (lim["max_output_bytes"] + 1) + lim["max_value_bytes"] + 65))
                    job = bytearray(end - at)
                    job[:] = memoryview(batch)[at:end]  # the one job a child may see: its own
                    meta, streams = _run_one(job, w.slots[k], lim, w, libc)
                    replies.append((meta, streams))
                    rep = streams[2]
                    if (meta["killed_for"] is None and not os.WIFSIGNALED(meta["wait_status"]) and rep.size
                            and rep.region[0] == ord("-")):  # the harness's own setup-failure mark
                        broken = "the sandbox worker failed to set up a sample"
                    _after_sample(lim, w, libc)
                except Exception as e:
                    broken = f"the sandbox worker failed: {type(e).__name__}: {e}"
                    if len(replies) == k:  # the job has no reply yet
                        replies.append((dict(passed=False, status="worker_error", reason=broken), ()))
            at = end
        _send_replies(proto_out, replies)
        del batch, replies
        if broken is not None:
            break
        gc.freeze()
    if not w.fresh_root:
        try:
            _wipe(w.scratch[0])
            os.rmdir(w.scratch[0])
        except OSError:
            pass
    os._exit(0)
