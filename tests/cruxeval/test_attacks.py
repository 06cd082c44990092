"""The holes of issue #16: hostile programs that got through the sandbox or the scorer, one test (or more) each.

Every test here failed on the sandbox and scorer before the fix (run against the committed code of that time),
except ``test_abstract_unix_sockets_are_unreachable``, which guards what the network namespace already gave.
"""

import ast
import io
import json
import os
import secrets
import socket
import sys
import threading
import time
import tokenize
from pathlib import Path

import pytest

from zoo.cruxeval import score_answers, summarize
from zoo.sandbox import MAX_SAME_HASH, MAX_VALUE_TOKENS, Sandbox, _tokens, parse_value

LIMITS = dict(cpu_seconds=2, memory_mb=256, wall_timeout=4, max_output_bytes=4096, file_size_mb=1, tmpfs_mb=8)


def _gold(rows, mode):
    return {r["id"]: [r["output"] if mode == "output" else f"f({r['input']})"] for r in rows}


# -- 1. one sample must not disable a worker (cleanup that a deep tree defeats) ---------------------------

DEEP_TREE = "import os\nos.chdir('/tmp')\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')"


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "fallback"])
def test_deep_tree_left_behind_does_not_break_the_worker(isolate):
    with Sandbox(workers=1, isolate=isolate, **LIMITS) as sb:
        if isolate and not sb.isolation.get("private_tmp"):
            pytest.skip(f"no private /tmp here: {sb.isolation.get('notes')}")
        code = DEEP_TREE if isolate else DEEP_TREE.replace("os.chdir('/tmp')", "pass")  # fallback: its cwd
        v = sb.run(code)
        assert v.passed, (v.status, v.reason)
        assert all(v.passed for v in sb.map(["assert 1 + 1 == 2"] * 5))
        v = sb.run("import os\nassert os.listdir('.') == [] and os.listdir(os.environ['TMPDIR']) == []")
        assert v.passed, v.reason
        assert sb.restarts == 0


def test_deep_tree_answer_costs_only_its_own_row(crux_rows):
    # the run: one hostile answer among gold answers took 143 other rows down with it
    rows = crux_rows[:30]
    answers = _gold(rows, "output")
    answers[rows[0]["id"]] = ["[__import__('os').chdir('/tmp')] + [(__import__('os').mkdir('d'), "
                              "__import__('os').chdir('d')) for _ in range(1500)]"]
    with Sandbox(workers=1, **LIMITS) as sb:
        results = score_answers(rows, answers, "output", sb, ks=[1])
    assert [r.passed[0] for r in results] == [False] + [True] * (len(rows) - 1)
    summary = summarize(results, [1])
    assert summary["pass@1"] == pytest.approx(100 * 29 / 30)
    assert summary["num_sandbox_errors"] == 0


def test_harness_failure_is_rerun_once_on_a_fresh_worker():
    with Sandbox(workers=1, **LIMITS) as sb:
        assert sb.run("pass").passed
        sb._all[0].proc.kill()  # the worker dies under the next batch: every job is rerun, none is lost
        out = sb.map([f"print({i})" for i in range(4)])
        assert [v.stdout for v in out] == [f"{i}\n" for i in range(4)]
        assert all(v.status == "passed" for v in out)


# -- 2. System V shared memory: a leak past the pool and a channel between samples -------------------------

SHM_WRITE = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget({key}, {size}, 0o1666)  # IPC_CREAT | 0666
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    ctypes.memset(addr, 1, {size})
    ctypes.memmove(addr, b"{msg}", {n})
    libc.shmdt(ctypes.c_void_p(addr))
print("shmid", shmid)
"""
SHM_READ = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget({key}, 0, 0)
if shmid >= 0:
    print(ctypes.string_at(libc.shmat(shmid, None, 0), {n}))
"""


def _host_segments(key):
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return []
    return [int(f.split()[1]) for f in lines if int(f.split()[0]) == key]


def test_shared_memory_neither_leaks_nor_connects_samples():
    key, msg = secrets.randbelow(2 ** 30) + 1, secrets.token_hex(8)
    size = 8 << 20
    try:
        with Sandbox(workers=1, **LIMITS) as sb:  # one worker: both samples meet in the same zygote
            w = sb.run(SHM_WRITE.format(key=key, size=size, msg=msg, n=len(msg)))
            r = sb.run(SHM_READ.format(key=key, n=len(msg)))
            assert w.passed and r.passed, (w.reason, r.reason)
            assert msg not in r.stdout  # no channel from one sample to the next
        assert _host_segments(key) == []  # nothing allocated outlives the sandbox
    finally:
        import ctypes

        for shmid in _host_segments(key):  # the old sandbox left them behind: do not leak on the machine
            ctypes.CDLL(None).shmctl(shmid, 0, None)  # IPC_RMID


# -- 3. Unix-domain sockets on the filesystem: the network namespace does not cover them --------------------

CLIENTS = {
    "stream": "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ns.settimeout(2)\n"
              "s.connect({path!r})\ns.sendall(b'hello')\nprint(s.recv(16))",
    "datagram_pair": "import socket\na, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                     "a.sendto(b'hello', {path!r})",
}


@pytest.fixture
def host_socket(request):
    """A host process listening on a Unix socket in a directory the old sandbox showed (the repo's tests)."""
    kind = request.param
    path = str(Path(__file__).resolve().parent / f".zoo-sock-{os.getpid()}-{secrets.token_hex(3)}")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM)
    server.bind(path)
    os.chmod(path, 0o777)
    got = []

    def serve():
        server.settimeout(6)
        try:
            if kind == "stream":
                server.listen(1)
                conn, _ = server.accept()
                got.append(conn.recv(16))
                conn.sendall(b"pong")
                conn.close()
            else:
                got.append(server.recv(16))
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield kind, path, got
    finally:
        server.close()
        os.unlink(path)


@pytest.mark.parametrize("host_socket", sorted(CLIENTS), indirect=True)
@pytest.mark.parametrize("exposed", [False, True], ids=["hidden_dir", "exposed_dir"])
def test_host_unix_sockets_are_unreachable(host_socket, exposed):
    kind, path, got = host_socket
    # exposed: the socket's directory is visible on purpose; the syscall filter must still refuse
    extra = dict(expose=[os.path.dirname(path)]) if exposed else {}
    with Sandbox(workers=1, **LIMITS, **extra) as sb:
        v = sb.run(CLIENTS[kind].format(path=path))
    assert not v.passed, v.stdout
    assert got == []


def test_abstract_unix_sockets_are_unreachable():
    name = f"\0zoo-test-{secrets.token_hex(4)}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(1)
    try:
        with Sandbox(workers=1, **LIMITS) as sb:
            v = sb.run(CLIENTS["stream"].format(path=name))
    finally:
        server.close()
    assert not v.passed


# -- 4. a model answer forging a pass ----------------------------------------------------------------------

# Finds the runner's frame (it holds the verdict channel's nonce), writes a passing report itself and exits:
# against the old sandbox this constant answer scored pass@1 = 100 on every row in both tasks.
_FIND_RUNNER = ("(lambda w: w(w, __import__('sys')._getframe()))"
                "(lambda w, fr: fr if fr is None or 'nonce' in fr.f_locals else w(w, fr.f_back))")
FORGE_OLD = ("f((lambda fr, os: (os.write(3, ('{\"nonce\": \"%s\", \"status\": \"ok\", \"error\": \"\"}' "
             f"% fr.f_locals['nonce']).encode()), os._exit(0)))({_FIND_RUNNER}, __import__('os')))")
# The same idea against the current protocol: report "ran to its end, value True".
FORGE_NEW = "f((__import__('os').write(3, b'ok\\nTrue'), __import__('os')._exit(0)))"


@pytest.mark.parametrize("compat", [None, "strict", "official"])
@pytest.mark.parametrize("mode", ["output", "input"])
def test_answers_cannot_forge_a_pass(crux_rows, sandbox, mode, compat):
    rows = crux_rows[:25]
    kw = {} if compat is None else {"compat": compat}
    forged = score_answers(rows, {r["id"]: [FORGE_OLD] for r in rows}, mode, sandbox, ks=[1], **kw)
    assert summarize(forged, [1])["pass@1"] == 0.0
    # Against the new protocol a forger only chooses a value (here True): it can do no better than the
    # plain answer `True` (output task) and nothing at all where the value must be f's arguments (input task).
    forged = score_answers(rows, {r["id"]: [FORGE_NEW] for r in rows}, mode, sandbox, ks=[1], **kw)
    for row, res in zip(rows, forged):
        assert not res.passed[0] or (mode == "output" and ast.literal_eval(row["output"]) == True)  # noqa: E712


# -- 5. operator precedence in the check program ------------------------------------------------------------

PRECEDENCE = {"output": "None or True", "input": "f(0) if False else True"}


@pytest.mark.parametrize("mode", ["output", "input"])
def test_precedence_abuse_fails_unless_official(crux_rows, sandbox, mode):
    rows = [r for r in crux_rows[:60] if ast.literal_eval(r["output"]) not in (True, None)][:20]
    answers = {r["id"]: [PRECEDENCE[mode]] for r in rows}
    assert summarize(score_answers(rows, answers, mode, sandbox, ks=[1]), [1])["pass@1"] == 0.0  # default
    assert summarize(score_answers(rows, answers, mode, sandbox, ks=[1], compat="strict"), [1])["pass@1"] == 0.0
    # the official harness pastes the answer unparenthesised and so passes it: compat="official" reproduces that
    with pytest.warns(RuntimeWarning, match="judged inside their own process"):
        official = score_answers(rows, answers, mode, sandbox, ks=[1], compat="official")
    assert summarize(official, [1])["pass@1"] == 100.0
    assert summarize(official, [1])["num_in_process_verdicts"] == len(rows)


# -- 6. verdicts must not depend on other sandboxes running on the machine ---------------------------------

EXEC_SHELL = "import os\nos.execv('/bin/sh', ['sh', '-c', 'echo pwned > x; exit 0'])"


def _descendants_with_uid(pid, uid):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{d}/status").read_text().splitlines()
                              if ":\t" in line)
            except OSError:
                continue
            children.setdefault(int(fields["PPid"]), []).append((int(d), int(fields["Uid"].split()[0])))
    found, todo = [], [pid]
    while todo:
        for child, child_uid in children.get(todo.pop(), []):
            todo.append(child)
            if child_uid == uid:
                found.append(child)
    return found


def test_verdicts_do_not_depend_on_other_sandboxes():
    # A sample of another sandbox runs (as root: under the same uid `nobody`) while this one execs a shell:
    # with per-user limits shared between sandboxes, the exec failed with EAGAIN (BlockingIOError).
    with Sandbox(workers=1, **LIMITS) as other, Sandbox(workers=1, **LIMITS) as sb:
        uid = other.isolation.get("sample_uid", 65534 if os.geteuid() == 0 else os.getuid())
        sb.isolation  # both pools started
        busy = threading.Thread(target=other.run, args=("import time\ntime.sleep(1.5)",))
        busy.start()
        deadline = time.monotonic() + 10
        while not _descendants_with_uid(other._all[0].proc.pid, uid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _descendants_with_uid(other._all[0].proc.pid, uid), "the other sandbox's sample never started"
        v = sb.run(EXEC_SHELL)
        fork = sb.run("import os\nos.fork()")
        busy.join()
    assert v.status == "exited", (v.status, v.reason)
    assert fork.status == "error" and "BlockingIOError" in fork.reason


def test_pool_graceful_close_reaps_every_process():
    # closing the pool ends each zygote by end of input: its samples are reaped (their CPU time is counted)
    sb = Sandbox(workers=2, **LIMITS)
    sb.map(["x = sum(range(10 ** 5))"] * 4)
    procs = [w.proc for w in sb._all]
    sb.close()
    assert all(p.returncode == 0 for p in procs)


def test_results_cannot_smuggle_objects(sandbox):
    # the parent only ever parses data: a result whose repr is code is refused, not executed
    v = sandbox.run("class X:\n    def __repr__(self):\n        return \"__import__('os').system('true')\"\nx = X()",
                    result="x")
    assert not v.passed and v.status == "error" and "not plain data" in v.reason
    v = sandbox.run("print('ok\\n123')", result="[1, (2, 3), {'a': {4}}, b'x', None]")
    assert v.passed and v.value == [1, (2, 3), {"a": {4}}, b"x", None] and v.stdout == "ok\n123\n"
    v = sandbox.run("pass", result="'x' * (1 << 21)")
    assert v.status == "output_limit"
    assert json.dumps(sandbox.isolation)  # the isolation report stays plain data


# -- 7. red team: what one sample could learn of its batch, fake about the harness, or reach past the netns ----

SNOOP = """import gc, sys
token, found, seen, todo = ''.join(['ZOO', 'SECRET']), [], set(), []
gc.unfreeze()  # the zygote's objects are in the permanent generation
todo += [o for o in gc.get_objects() if isinstance(o, (list, tuple, dict))]
f = sys._getframe()
while f is not None:  # the callers' frames first (the end of the list)
    todo.append(dict(f.f_locals))
    f = f.f_back
while todo and len(seen) < 300000:
    x = todo.pop()
    if isinstance(x, str):
        if token in x and x is not token:
            found.append(x[:40])
    elif isinstance(x, (list, tuple, dict)) and id(x) not in seen:
        seen.add(id(x))
        todo += [*x.keys(), *x.values()] if isinstance(x, dict) else x
print(found)
"""


def test_a_sample_cannot_read_the_other_jobs_of_its_batch():
    # one batch holds other programs' code, their result expressions (in CRUXEval scoring: a trusted check
    # `(gold output) == (answer)`) and the earlier programs' verdicts; the zygote held them all in the frames
    # a sample's code can walk (sys._getframe().f_back...) and in gc.get_objects()
    with Sandbox(workers=1, **LIMITS) as sb:  # 12 programs on one worker: batches of 3, the snoop in the middle
        out = sb.map(["print('ZOOSECRET-out')", SNOOP, "x = 1"] * 4, result=[None, None, "'ZOOSECRET-gold'"] * 4)
    assert all(v.passed for v in out), [v.reason for v in out]
    assert [v.stdout for v in out[1::3]] == ["[]\n"] * 4
    assert [v.value for v in out[2::3]] == ["ZOOSECRET-gold"] * 4


def test_a_program_cannot_pass_itself_off_as_a_harness_failure():
    # `worker_error` means "the harness failed, not the program": the pool retires the worker and reruns
    # the program on a fresh one. A program that wrote the harness's setup-failure report itself got exactly
    # that (two worker restarts per program, and a verdict blaming the sandbox).
    with Sandbox(workers=1, **LIMITS) as sb:
        v = sb.run("import os\nos.write(3, b'setup\\nRuntimeError()')\nos._exit(0)")
        assert v.status == "exited", (v.status, v.reason)
        v = sb.run("import os\nos.write(3, b'-setup\\nRuntimeError()')")  # the new marker, written too late
        assert v.status == "exited", (v.status, v.reason)
        assert sb.restarts == 0


def test_only_internet_sockets_which_the_network_namespace_contains():
    # vsock (to the hypervisor of a VM) and other families are not confined by the network namespace
    with Sandbox(workers=1, **LIMITS) as sb:
        if not sb.isolation.get("seccomp"):
            pytest.skip(f"no syscall filter here: {sb.isolation.get('notes')}")
        v = sb.run("import socket\nfor family, kind in ((40, 1), (16, 3), (17, 3), (38, 5)):  # vsock, netlink, "
                   "packet, alg\n    try:\n        socket.socket(family, kind).close()\n        print(family)\n"
                   "    except OSError:\n        pass\nsocket.socket(socket.AF_INET).close()\n"
                   "socket.socket(socket.AF_INET6).close()")
    assert v.passed and v.stdout == "", (v.status, v.reason, v.stdout)


def test_no_watching_the_hosts_files():
    # inotify on the read-only system directories reported the host's (and other samples') file accesses
    with Sandbox(workers=1, **LIMITS) as sb:
        if not sb.isolation.get("seccomp"):
            pytest.skip(f"no syscall filter here: {sb.isolation.get('notes')}")
        v = sb.run("import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.inotify_init1(0), libc.fanotify_init(0, 0))")
    assert v.passed and v.stdout == "-1 -1\n", (v.status, v.reason, v.stdout)


# -- 8. raw memory: what a sample finds of the zygote's earlier traffic in its own address space ------------

# Reads every page it can reach around its own heap, its mmap'd regions and the interpreter's data (through a
# pipe: the kernel answers EFAULT for an unmapped page instead of crashing) and collects "ZOOSECRET-<word>".
# Against the zygote before the fix it found other programs' code, their result expressions (a gold value),
# the values they returned and what they printed, from the same batch and from earlier ones.
HEAP_SCAN = r"""import ctypes, os, sys
libc = ctypes.CDLL(None)
libc.sbrk.restype = ctypes.c_void_p
libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
(pr, pw), page, token = os.pipe(), 4096, b''.join([b'ZOO', b'SECRET', b'-'])
leaks, seen = set(), set()
def read_page(p):
    return os.read(pr, page) if libc.write(pw, p, page) == page else None
def scan_from(seed):
    for step in (page, -page):  # outwards until 8 MiB without a readable page
        p, gap = (seed & ~(page - 1)) + (0 if step > 0 else -page), 0
        while gap < 2048 and p > 0:
            blob = None if p in seen else read_page(p)
            if blob is None:
                gap += p not in seen
            else:
                seen.add(p)
                gap = 0
                blob += read_page(p + page) or b''
                i = blob.find(token)
                while 0 <= i < page:
                    j = i + len(token)
                    while j < len(blob) and (blob[j:j + 1].isalnum()):
                        j += 1
                    if j > i + len(token):
                        leaks.add(blob[i:j].decode())
                    i = blob.find(token, i + 1)
            p += step
big = bytearray(1 << 20)
for seed in (id(None), id(leaks), id(big), id(sys.modules), id(ctypes), libc.sbrk(0) - 1):
    scan_from(seed)
leaks = sorted(leaks)
"""
assert "ZOOSECRET-" not in HEAP_SCAN


def test_a_sample_finds_no_other_jobs_in_its_raw_memory():
    # other programs' code, a result expression holding a gold value, another program's returned value and
    # printed output; in the batch before the scan and in the same batch (batches of 3 on one worker)
    others = [("x = 'ZOOSECRET-code'", "(x, 'ZOOSECRET-gold')"), ("print('ZOOSECRET' + '-printed')", None),
              ("v = 'ZOOSECRET' + '-value'", "v"), ("pass", None)]
    jobs = others + [(HEAP_SCAN, "leaks")] + others + [(HEAP_SCAN, "leaks")]  # batches: 0-2, 3-5, 6-8, 9
    with Sandbox(workers=1, **LIMITS) as sb:
        out = sb.map([c for c, _ in jobs], result=[r for _, r in jobs])
    assert all(v.passed for v in out), [(v.status, v.reason) for v in out]
    assert out[1].stdout == "ZOOSECRET-printed\n" and out[2].value == "ZOOSECRET-value"  # they did travel
    assert out[4].value == [] and out[9].value == [], (out[4].value, out[9].value)
    with Sandbox(workers=1, **LIMITS) as sb:  # a fresh worker, one batch, the scan first: the job after it
        first = sb._run_jobs([(HEAP_SCAN, "leaks"), others[0]])[0]
    assert first.passed and first.value == [], first.value


def test_no_gold_value_of_a_scoring_run_in_a_later_samples_memory():
    # CRUXEval scoring checks an honest answer with a trusted program whose result expression holds the gold
    # output, `(gold) == (answer)`; a sample that ran later on the same worker (e.g. the next run's untrusted
    # answer, evaluated in a sandbox of its own) found those gold values in its raw memory
    rows = [{"id": f"r{i}", "code": "def f(x):\n    return x", "input": f"'ZOOSECRET-{i}x{i}'",
             "output": f"'ZOOSECRET-{i}x{i}'"} for i in range(16)]
    with Sandbox(workers=1, **LIMITS) as sb:
        res = score_answers(rows, {r["id"]: [r["output"]] for r in rows}, "output", sb, ks=[1])
        v = sb.run(HEAP_SCAN, result="leaks")
    assert all(r.passed == [True] and r.verdicts[0]["check"] == "trusted" for r in res)
    assert v.passed and v.value == [], (v.status, v.value)


# -- 9. the parent's cost of parsing a hostile result --------------------------------------------------------

M = sys.hash_info.modulus
# each cost the parent seconds of CPU (1 MiB of "[]," 5 s and 480 MB; 50,000 colliding ints 15-17 s)
HOSTILE = {"empty lists": "[" + "[]," * 350_000 + "]", "empty strings": "[" + "''," * 350_000 + "]",
           "set of colliding ints": "{" + ",".join(str(M * k) for k in range(1, 2000)) + "}",
           "dict of colliding ints": "{" + ",".join(f"{M * k}: 0" for k in range(1, 2000)) + "}",
           "colliding tuple keys": "{" + ",".join(f"(0, {-M * k})" for k in range(1, 200)) + "}",
           "colliding complex": "{" + ",".join(f"{-1000003 * k}+{k}j" for k in range(1, 200)) + "}"}  # hash 0


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_result_is_refused_within_its_budget(name):
    text = HOSTILE[name]
    value, why = parse_value(text)
    assert value is None and ("max_value_tokens" in why or f"more than {MAX_SAME_HASH} keys" in why), why
    if "max_value_tokens" in why:  # refused before parsing: by a token count that bounds the parser's tree
        assert _tokens(text) > MAX_VALUE_TOKENS and f"has {_tokens(text)} tokens" in why


def _nodes(tree):  # not counting contexts and operators: one shared instance each
    return sum(not isinstance(n, (ast.expr_context, ast.operator, ast.unaryop)) for n in ast.walk(tree))


@pytest.mark.parametrize("text", ["[[], [[]], ()]", "set.set.set", "set()()()", "[1][0][0][::2]", "-+-1", "1, 2, 3",
                                  "{1: -2, 3: {4}}", "[1, # a comment\n 2, \\\n 3]", "'a' 'b' b'c' ...", "(1)(2)[3]",
                                  "1+2j-3j", "{**{}}", "[*()]"])
def test_the_token_count_bounds_the_tree(text):
    # the soundness of the budget: ast.parse builds at most one node per token (+ the root)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return
    try:
        n = _tokens(text)
    except ValueError:  # refused outright (a name, operator, ...): nothing is parsed
        return
    assert _nodes(tree) <= n + 1, (text, _nodes(tree), n)


ORDINARY = [0, -1, -2, {-1, -2}, 2 ** 100, -(2 ** 70), 1.5, -0.0, 1e300, -1e-300, 1j, complex(1, -2),
            complex(-0.0, 1), "", "unicode é\n\t'\"\\ #", b"\x00\xff'\"", b"", (), (1,), ((1, (2, ())),), [],
            [[], [[]]], {}, set(), {1, 2}, {(1, 2): [3, {"a": None}], "b": {True, False}}, frozenset({1}), float("inf"),
            float("nan"), Ellipsis, bytearray(b"x"), list(range(-5000, 5000)),
            {f"k{i}": {"a": [i, i * 1.5, None], "b": (True, b"x", -i)} for i in range(300)}]
TEXTS = [repr(v) for v in ORDINARY] + ["...", " \t[1,\n 2]  # c", "'a' 'b'", "u'x'", "rb'\\x'", "0x_1F", "1_000.5e-3j",
                                       "--1", "1 + 2", "f'{1}'", "[1, 2", "inf", "(1, 2) + (3,)"]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_parse_value_agrees_with_literal_eval(text):
    try:
        expected, ok = ast.literal_eval(text), True
    except (ValueError, TypeError, SyntaxError):
        expected, ok = None, False
    # the default budget, and the exact one (which takes the token-counting path on every longer text)
    kinds = (tokenize.OP, tokenize.NAME, tokenize.NUMBER, tokenize.STRING, tokenize.COMMENT)
    tokens = sum(t.type in kinds for t in tokenize.generate_tokens(io.StringIO(text.strip()).readline)) if ok else None
    for budget in (MAX_VALUE_TOKENS, tokens) if ok and "..." not in text else (MAX_VALUE_TOKENS,):
        value, why = parse_value(text, budget)
        assert (why == "") == ok, (text, why)
        assert repr(value) == repr(expected) and type(value) is type(expected)
    if ok and tokens > 1 and "..." not in text:
        assert "max_value_tokens" in parse_value(text, tokens - 1)[1] or len(text) <= tokens - 1


def test_sandbox_results_are_parsed_within_a_budget(sandbox):
    v = sandbox.run("x = [[]] * 250_000", result="x")  # a 1 MB repr, a million tokens
    assert v.status == "error" and "max_value_tokens" in v.reason, (v.status, v.reason)
    v = sandbox.run("import sys", result="{k * sys.hash_info.modulus for k in range(1, 100)}")
    assert v.status == "error" and "share a hash" in v.reason, (v.status, v.reason)
    with Sandbox(workers=1, max_value_tokens=4, **LIMITS) as sb:
        assert sb.run("pass", result="[1, 2, 3]").reason.endswith("over the parser's budget of 4 (max_value_tokens)")
        assert sb.run("pass", result="[1]").value == [1]
