"""Containment: each hostile program ends as a failure verdict and the pool keeps working afterwards."""

import os
import socket
import threading

import pytest

from zoo.sandbox import Sandbox, Verdict

HOSTILE = {
    "infinite_loop": ("while True:\n    pass", {"cpu_limit", "timeout"}),
    "sleep": ("import time\ntime.sleep(60)", {"timeout"}),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", {"error"}),
    "os_system": ("import os\nassert os.system('true') == 0", {"error"}),
    "subprocess": ("import subprocess\nsubprocess.run(['true'])", {"error"}),
    "thread": ("import threading\nthreading.Thread(target=print).start()", {"error"}),
    "memory_bomb": ("x = bytearray(2 * 1024 ** 3)", {"error"}),
    "memory_creep": ("x = []\nwhile True:\n    x.append(' ' * 10 ** 6)", {"error", "killed"}),
    "recursion_bomb": ("def r(n):\n    return r(n + 1)\nr(0)", {"error"}),
    "deep_recursion": ("import sys\nsys.setrecursionlimit(10 ** 8)\ndef r(n):\n    return r(n + 1) + 1\nr(0)",
                       {"killed", "cpu_limit", "error", "timeout"}),
    "output_flood": ("while True:\n    print('x' * 1000)", {"output_limit"}),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('y' * 1000)", {"output_limit"}),
    "sys_exit_0": ("import sys\nsys.exit(0)", {"exited"}),
    "exit_builtin": ("exit()", {"exited"}),
    "os_exit_0": ("import os\nos._exit(0)", {"exited"}),
    "signal_tampering": ("import signal\nfor s in (signal.SIGXCPU, signal.SIGTERM, signal.SIGALRM, signal.SIGINT):\n"
                         "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass", {"cpu_limit", "timeout"}),
    "kill_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", {"error", "worker_error"}),
    "big_file": ("open('big', 'wb').write(b'0' * (4 * 1024 * 1024))", {"error"}),
    "syntax_error": ("def f(:\n    pass", {"error"}),
    "exec_shell": ("import os\nos.execv('/bin/sh', ['sh', '-c', 'echo pwned > x; exit 0'])", {"exited"}),
    "segfault": ("import ctypes\nctypes.string_at(0)", {"killed"}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_fails_and_pool_survives(sandbox, name):
    code, statuses = HOSTILE[name]
    v = sandbox.run(code)
    assert isinstance(v, Verdict) and not v.passed
    assert v.status in statuses, (v.status, v.reason)
    assert v.reason
    assert sandbox.run("assert 1 + 1 == 2").passed  # the harness keeps working


def test_plain_program_passes_with_output(sandbox):
    v = sandbox.run("print('hello')\nimport collections\nassert collections.Counter('aab')['a'] == 2")
    assert v.passed and v.status == "passed" and v.stdout == "hello\n"
    v = sandbox.run("assert 1 == 2, 'nope'")
    assert not v.passed and v.status == "error" and "AssertionError: nope" in v.reason


def _contained(sandbox, *keys):
    iso = sandbox.isolation
    if not any(iso.get(k) for k in keys):
        pytest.skip(f"needs one of {keys} (this kernel/container gave {iso})")


def test_no_secrets_from_parent_environment():
    os.environ["ZOO_TEST_SECRET"] = "hunter2"
    try:
        with Sandbox(workers=1, cpu_seconds=1, wall_timeout=2, memory_mb=256) as sb:
            v = sb.run("import os\nprint(sorted(os.environ.items()))")
            assert v.passed, v.reason
            assert "hunter2" not in v.stdout and "ZOO_TEST_SECRET" not in v.stdout
            _contained(sb, "proc_hidden", "uid_switch")  # other processes' environments via /proc
            v = sb.run("import os\nfor p in os.listdir('/proc'):\n    try:\n"
                       "        print(open(f'/proc/{p}/environ', 'rb').read())\n    except OSError:\n        pass")
    finally:
        del os.environ["ZOO_TEST_SECRET"]
    assert v.passed, v.reason
    assert "hunter2" not in v.stdout


def test_cannot_write_outside_its_temp_dir(sandbox, tmp_path):
    _contained(sandbox, "filesystem_readonly", "uid_switch")
    target = tmp_path / "escaped.txt"
    v = sandbox.run(f"open({str(target)!r}, 'w').write('x')")
    assert not v.passed and v.status == "error"
    assert not target.exists()


def test_samples_do_not_see_each_other(sandbox):
    # whatever one sample leaves in its writable places is gone for the next one (same workers)
    for _ in range(2 * sandbox.workers):
        sandbox.run("open('here', 'w').write('x')")
    assert sandbox.run("import os\nassert os.listdir('.') == []").passed
    if sandbox.isolation.get("private_tmp"):
        for _ in range(2 * sandbox.workers):
            sandbox.run("open('/tmp/leftover', 'w').write('x')")
        v = sandbox.run("import os\nassert not os.path.exists('/tmp/leftover')")
        assert v.passed, v.reason
    v = sandbox.run("import builtins\nbuiltins.len = lambda x: 0")
    assert v.passed
    assert all(v.passed for v in sandbox.map(["assert len('ab') == 2"] * (2 * sandbox.workers)))


def test_no_network_even_to_loopback(sandbox):
    if not sandbox.isolation.get("network"):
        pytest.skip(f"no network namespace here: {sandbox.isolation.get('notes')}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    got = []
    t = threading.Thread(target=lambda: got.append(server.accept()), daemon=True)
    t.start()
    try:
        v = sandbox.run(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)")
    finally:
        server.close()
    assert not v.passed and v.status == "error"
    assert not got


def test_filesystem_read_only_when_isolated(sandbox):
    if not sandbox.isolation.get("filesystem_readonly"):
        pytest.skip(f"no read-only mount namespace here: {sandbox.isolation.get('notes')}")
    v = sandbox.run("import os, tempfile\nopen(os.path.join(os.path.dirname(tempfile.__file__), 'x.py'), 'w')")
    assert not v.passed and ("Read-only" in v.reason or "Permission" in v.reason)


def test_cannot_signal_processes_outside(sandbox):
    _contained(sandbox, "pid_namespace", "uid_switch")  # without both, kill(-1) would hit the user's processes
    v = sandbox.run("import os, signal\nos.kill(-1, signal.SIGKILL)")
    assert not v.passed
    assert sandbox.run("pass").passed


def test_rlimit_only_fallback_still_contains_resources():
    with Sandbox(workers=1, cpu_seconds=1, wall_timeout=2, memory_mb=256, max_output_bytes=1000,
                 isolate=False) as sb:
        assert not sb.isolation["network"] and sb.isolation["notes"]
        out = sb.map(["while True:\n    pass", "import os\nos.fork()", "x = bytearray(2 * 1024 ** 3)",
                      "while True:\n    print('x')", "import os\nos._exit(0)", "print('ok')"])
        assert out[0].status in ("cpu_limit", "timeout")  # which fires first depends on the machine's load
        assert [v.status for v in out[1:]] == ["error", "error", "output_limit", "exited", "passed"]


def test_dead_worker_is_replaced():
    with Sandbox(workers=1, cpu_seconds=1, wall_timeout=2, memory_mb=256) as sb:
        assert sb.run("pass").passed
        sb._all[0].proc.kill()  # the zygote dies between samples (e.g. OOM killer)
        v = sb.run("pass")  # either noticed before sending (replaced, passes) or while sending (reported)
        assert v.passed or (v.status == "worker_error" and "replaced" in v.reason)
        assert sb.run("pass").passed
        sb._all[0].proc.kill()  # in a batch: the batch is rerun program by program on a fresh worker
        assert all(v.passed for v in sb.map(["pass"] * 6))
        assert sb.restarts == 2


def test_map_keeps_order_and_handles_bad_input(sandbox):
    codes = [f"print({i})" for i in range(10)] + ["raise ValueError('boom')"]
    out = sandbox.map(codes)
    assert [v.stdout for v in out[:10]] == [f"{i}\n" for i in range(10)]
    assert out[10].status == "error" and "ValueError: boom" in out[10].reason
    assert sandbox.run(None).status == "worker_error"  # not a string: a verdict, not a crash


def test_sample_holds_no_privileges(sandbox):
    code = """import ctypes
libc = ctypes.CDLL(None)
assert libc.prctl(39, 0, 0, 0, 0) == 1  # PR_GET_NO_NEW_PRIVS
hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)()
assert libc.capget(hdr, data) == 0
assert list(data) == [0] * 6, list(data)
assert libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) != 0
"""
    v = sandbox.run(code)
    assert v.passed, v.reason + v.stderr
