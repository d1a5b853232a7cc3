"""Each wall of the sandbox, alone, against the attacks it is there for — and the proof that these tests notice
when that wall is gone.

The attacks start where an escape from the Python layers would leave an attacker: the static check off and (for
the kernel walls) the audit hook off, holding the worker's real `os` and builtins. Host tripwires decide the
outcome, never an error message: a secret file, another environment's data (on disk and in another worker's
memory), `/etc/passwd`, the host's process table, a unix socket and a TCP listener, a world-writable marker folder,
the CPU limit. A payload is refused only when every tripwire stayed silent.

For each wall, `test_<wall>_alone_holds` runs with that wall as the only one up and `test_<wall>_removed_is_noticed`
runs the same payload with it down too and asserts a tripwire fires: if a change ever removes the wall, the first
test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gustforge.errors import SandboxError, SandboxTimeout
from gustforge.sandbox import SandboxLimits, SandboxWorker
from gustforge.sandbox.walls import kernel_walls
from gustforge.sandbox.worker import SandboxLayers
from gustforge.sandbox.zygote import Zygote
from tests.gustforge._tripwire_sockets import UnixListener
from tests.gustforge.redteam_payloads import _REAL, tool

pytestmark = pytest.mark.skipif(not kernel_walls().available, reason=f"no kernel walls: {kernel_walls().reason}")

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=8)
KERNEL_ONLY = SandboxLayers(worker_seccomp=False, audit_hook=False)  # namespaces + read-only root + wall filter
# Without the kernel walls the interpreter's files are the host's (root's, here): the worker keeps its uid so the
# attack can import what it needs, as an attacker who had it would.
SECCOMP_ONLY = SandboxLayers(kernel_walls=False, audit_hook=False, parent_limits=False, drop_privileges=False)
NOTHING = SandboxLayers(
    kernel_walls=False, worker_seccomp=False, audit_hook=False, parent_limits=False, drop_privileges=False
)


@dataclass
class Tripwires:
    root: Path
    secret: str
    other_env_secret: str
    unix: UnixListener
    outputs: list[str] = field(default_factory=list)

    def fill(self, source: str) -> str:
        return (
            source.replace("ROOT", str(self.root))
            .replace("SECRET_FILE", str(self.root / "secret.txt"))
            .replace("OTHER_DB", str(self.root / "other-env" / "db.json"))
            .replace("UNIX_SOCKET", str(self.unix.path))
            .replace("REPO_README", str(Path(__file__).resolve().parents[2] / "README.md"))
        )

    def clean(self) -> None:
        """Remove what an attack left (only the tests that take a wall down leave anything)."""
        self.unix.hits.clear()
        for path in self.root.iterdir():
            if path.name in {"other-env", "secret.txt", "unix.sock"}:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

    def fired(self, outputs: list[str]) -> list[str]:
        """Which tripwires fired (empty: the attack was refused)."""
        blob = "\n".join(outputs)
        found = []
        if sorted(p.name for p in self.root.iterdir()) != ["other-env", "secret.txt", "unix.sock"]:
            found.append(f"a file reached the host: {sorted(p.name for p in self.root.iterdir())}")
        if self.secret in blob:
            found.append("the secret file was read")
        if self.other_env_secret in blob:
            found.append("another environment's data was read")
        if "root:x:0:0" in blob:
            found.append("/etc/passwd was read")
        if "pytest" in blob:
            found.append("a host process's command line was read")
        if "## Quickstart" in blob:
            found.append("the project's checkout (where run folders live) was read")
        if self.unix.hits:
            found.append("the host's unix socket was reached")
        return found


@pytest.fixture(scope="module")
def wires() -> Iterator[Tripwires]:
    root = Path(tempfile.mkdtemp(prefix="gust-walls-", dir="/tmp"))
    root.chmod(0o777)  # only the sandbox, not file permissions, stands between a worker and this folder
    secret = f"HOST-SECRET-{uuid.uuid4().hex}"
    (root / "secret.txt").write_text(secret)
    (root / "secret.txt").chmod(0o666)
    other = root / "other-env"
    other.mkdir(mode=0o755)
    other_secret = f"OTHER-ENV-{uuid.uuid4().hex}"
    (other / "db.json").write_text(json.dumps({"vault": other_secret}))
    (other / "db.json").chmod(0o644)
    unix = UnixListener(root / "unix.sock")
    try:
        yield Tripwires(root=root, secret=secret, other_env_secret=other_secret, unix=unix)
    finally:
        unix.close()
        shutil.rmtree(root, ignore_errors=True)


def _real(body: str) -> str:
    """A tool that starts from the worker's real `os` globals (G) and builtins (B) and runs `body`, collecting
    whatever it reads into `found` (returned in the message), and every exception text."""
    indented = "".join(f"    {line}\n" for line in body.strip().splitlines())
    return tool(
        "found = []\ntry:\n" + indented + "except B['BaseException'] as exc:\n"
        "    found.append(B['type'](exc).__name__ + ': ' + str(exc))\n"
        "return {'status': 'success', 'message': repr(found)[:200000]}\n",
        header=_REAL,
    )


READ_HOST = _real(
    "for path in ('SECRET_FILE', 'OTHER_DB', '/etc/passwd', 'REPO_README'):\n"
    "    try:\n        found.append(B['open'](path).read())\n"
    "    except B['OSError'] as exc:\n        found.append(str(exc))\n"
    "for pid in G['listdir']('/proc'):\n"
    "    if pid.isdigit():\n"
    "        try:\n            found.append(B['open']('/proc/' + pid + '/cmdline', 'rb').read().decode('latin-1'))\n"
    "        except B['OSError'] as exc:\n            found.append(str(exc))\n"
)
WRITE_HOST = _real(
    "for make in (lambda: G['mknod']('ROOT/node'), lambda: G['mkfifo']('ROOT/fifo'),\n"
    "             lambda: B['open']('ROOT/marker', 'w').close(), lambda: G['mkdir']('ROOT/dir'),\n"
    "             lambda: G['symlink']('/', 'ROOT/link')):\n"
    "    try:\n        make()\n    except B['OSError'] as exc:\n        found.append(str(exc))\n"
)
UNIX_SOCKET = _real(
    "sock = B['__import__']('socket')\n"
    "s = sock.socket(sock.AF_UNIX, sock.SOCK_STREAM)\n"
    "s.connect('UNIX_SOCKET')\n"
    "found.append('connected')\n"
)
CPU_UNLIMITED = _real(
    "res, sig = B['__import__']('resource'), B['__import__']('signal')\n"
    "for step in (lambda: sig.signal(sig.SIGXCPU, sig.SIG_IGN),\n"
    "             lambda: res.setrlimit(res.RLIMIT_CPU, res.getrlimit(res.RLIMIT_CPU)[1:] * 2)):\n"
    "    try:\n        step()\n    except (B['OSError'], ValueError) as exc:\n        found.append(str(exc))\n"
    "x = 0\nwhile True:\n    x += 1\n"
)
OTHER_WORKER_MEMORY = _real(
    "for pid in G['listdir']('/proc'):\n"
    "    if pid.isdigit() and int(pid) != G['getpid']():\n"
    "        for part in ('environ', 'mem', 'maps'):\n"
    "            try:\n                found.append(B['open']('/proc/' + pid + '/' + part, 'rb').read(1 << 20)"
    ".decode('latin-1'))\n"
    "            except B['OSError'] as exc:\n                found.append(str(exc))\n"
    "        try:\n            G['kill'](int(pid), 9)\n        except B['OSError'] as exc:\n            found.append(str(exc))\n"
)


@pytest.fixture(autouse=True)
def _clean_after(wires: Tripwires) -> Iterator[None]:
    yield
    wires.clean()


def _run(wires: Tripwires, source: str, layers: SandboxLayers, limits: SandboxLimits = LIMITS) -> list[str]:
    outputs: list[str] = []
    with SandboxWorker(limits, static_check=False, layers=layers) as worker:
        try:
            worker.load(wires.fill(source), {})
            outputs.append(json.dumps(worker.call("attack", {})))
        except SandboxError as exc:
            outputs.append(f"{type(exc).__name__}: {exc}")
    return outputs


# ---- the mount namespace and read-only minimal root ------------------------------------------------------------
def test_mount_walls_alone_hold(wires: Tripwires) -> None:
    for source in (READ_HOST, WRITE_HOST, UNIX_SOCKET):
        outputs = _run(wires, source, KERNEL_ONLY)
        assert wires.fired(outputs) == [], outputs


def test_mount_walls_removed_is_noticed(wires: Tripwires) -> None:
    fired = wires.fired(_run(wires, READ_HOST, NOTHING))
    assert "the secret file was read" in fired and "another environment's data was read" in fired
    assert "a host process's command line was read" in fired and "/etc/passwd was read" in fired
    assert "the project's checkout (where run folders live) was read" in fired
    assert any("a file reached the host" in f for f in wires.fired(_run(wires, WRITE_HOST, NOTHING)))


# ---- seccomp -------------------------------------------------------------------------------------------------
def test_seccomp_alone_holds(wires: Tripwires) -> None:
    """No namespaces, no read-only root, no audit hook: the worker filter alone refuses sockets and device
    nodes / FIFOs (the host's socket and the marker folder are reachable by path)."""
    outputs = _run(wires, UNIX_SOCKET, SECCOMP_ONLY) + _run(wires, WRITE_HOST.replace("B['open']", "None and B"),
                                                            SECCOMP_ONLY)  # fmt: skip
    fired = wires.fired(outputs)
    assert not any("unix socket" in f or "fifo" in f or "node" in f for f in fired), (fired, outputs)


def test_seccomp_removed_is_noticed(wires: Tripwires) -> None:
    assert "the host's unix socket was reached" in wires.fired(_run(wires, UNIX_SOCKET, NOTHING))
    fired = wires.fired(_run(wires, WRITE_HOST.replace("B['open']", "None and B"), NOTHING))
    assert any("fifo" in f and "node" in f for f in fired), fired


# ---- limits the child cannot lift -------------------------------------------------------------------------------
def test_parent_limits_hold_when_the_worker_lifts_its_own() -> None:
    """SIGXCPU ignored and the soft CPU limit raised (seccomp off, hook off): the parent still ends the request on
    CPU time, long before the wall-clock limit."""
    layers = SandboxLayers(worker_seccomp=False, audit_hook=False)
    generous_wall = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=60)
    with SandboxWorker(generous_wall, static_check=False, layers=layers) as worker:
        worker.load(CPU_UNLIMITED, {})
        with pytest.raises(SandboxTimeout, match="measured by the parent"):
            worker.call("attack", {})


def test_parent_limits_hold_in_a_pooled_worker() -> None:
    """The same for a worker forked from a zygote (its host pid is found through the zygote's PID namespace)."""
    layers = SandboxLayers(worker_seccomp=False, audit_hook=False)
    generous_wall = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=60)
    zygote = Zygote(layers)
    try:
        with SandboxWorker(generous_wall, static_check=False, zygote=zygote) as worker:
            worker.load(CPU_UNLIMITED, {})
            with pytest.raises(SandboxTimeout, match="measured by the parent"):
                worker.call("attack", {})
    finally:
        zygote.close()


def test_parent_limits_removed_is_noticed() -> None:
    layers = SandboxLayers(worker_seccomp=False, audit_hook=False, parent_limits=False)
    short_wall = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)
    with SandboxWorker(short_wall, static_check=False, layers=layers) as worker:
        worker.load(CPU_UNLIMITED, {})
        with pytest.raises(SandboxTimeout, match="wall-clock"):  # only the wall clock was left to end it
            worker.call("attack", {})


def test_worker_seccomp_refuses_a_sigxcpu_handler_and_other_rlimits() -> None:
    """The worker filter refuses a SIGXCPU handler and any rlimit change but the CPU arming (whose soft limit can
    reach the lifetime cap: the parent's measurement is what holds a request to its CPU limit)."""
    probe = _real(
        "res, sig = B['__import__']('resource'), B['__import__']('signal')\n"
        "for step in (lambda: sig.signal(sig.SIGXCPU, sig.SIG_IGN),\n"
        "             lambda: res.setrlimit(res.RLIMIT_NOFILE, (8, 8)),\n"
        "             lambda: G['setuid'](0), lambda: G['fork']()):\n"
        "    try:\n        step()\n        found.append('STEP-ALLOWED')\n"
        "    except (B['OSError'], ValueError) as exc:\n        found.append(str(exc))\n"
    )
    for layers, expect_refused in ((SandboxLayers(audit_hook=False), True), (SECCOMP_ONLY, True)):
        with SandboxWorker(LIMITS, static_check=False, layers=layers) as worker:
            worker.load(probe, {})
            message = worker.call("attack", {})["message"]
        assert ("STEP-ALLOWED" not in message) is expect_refused, message
        assert message.count("Operation not permitted") >= 3, message


# ---- other workers: uids, memory, signals ----------------------------------------------------------------------
def test_a_worker_cannot_reach_another_workers_memory(wires: Tripwires) -> None:
    """Two workers of one pool (one zygote, so one PID namespace): the attacker reads every /proc/<pid>/ it can
    see and signals every pid; the other worker's DB stays its own and it keeps answering."""
    layers = SandboxLayers(audit_hook=False)
    victim_db = {"vault": wires.other_env_secret}
    zygote = Zygote(layers)
    try:
        with SandboxWorker(LIMITS, zygote=zygote) as victim, \
                SandboxWorker(LIMITS, zygote=zygote, static_check=False) as attacker:  # fmt: skip
            victim.load("def peek(db):\n    return {'status': 'success', 'message': str(len(db))}\n", victim_db)
            if os.geteuid() == 0:
                assert victim.isolation["privileges"] != attacker.isolation["privileges"]
            attacker.load(OTHER_WORKER_MEMORY, {})
            outputs = [json.dumps(attacker.call("attack", {}))]
            assert "Permission denied" in outputs[0] or "Operation not permitted" in outputs[0], outputs[0][:2000]
            assert wires.fired(outputs) == [], outputs[0][:2000]
            assert victim.call("peek", {})["message"] == "1"
    finally:
        zygote.close()


def test_walls_are_reported() -> None:
    with SandboxWorker(LIMITS) as worker:
        report = worker.isolation
    assert report["mount_namespace"] == "new, read-only minimal root"
    assert report["network_namespace"] == "new" and report["pid_namespace"] == "new"
    assert report["seccomp"] == "wall filter + worker filter loaded"
    assert report["parent_limits"].startswith("CPU and memory enforced")
    assert report["dumpable"] == "no"


# ---- the in-process gadgets (closed although the kernel walls would hold behind them) ---------------------------
GADGETS = {
    "copy_of_a_bound_method": (
        "import copy\nclass Box:\n    def keys(self):\n        return []\n"
        "def attack(db):\n    return {'status': 'success', 'message': str(copy.copy(Box().keys))}\n",
        "copies plain data only",
    ),
    "deepcopy_of_a_class": (
        "import copy\nclass Box:\n    pass\n"
        "def attack(db):\n    return {'status': 'success', 'message': str(copy.deepcopy([Box]))}\n",
        "copies plain data only",
    ),
    "dunder_namedtuple_typename": (
        "from collections import namedtuple\n"
        "def attack(db):\n    T = namedtuple('__globals__', 'a')\n    return {'status': 'success', 'message': str(T)}\n",
        "typename must be an identifier",
    ),
}


@pytest.mark.parametrize("name", sorted(GADGETS))
def test_copy_and_namedtuple_gadgets_are_refused(name: str) -> None:
    source, refusal = GADGETS[name]
    with SandboxWorker(LIMITS) as worker:
        worker.load(source, {})
        out = worker.call("attack", {})
    assert out["status"] == "error" and refusal in out["message"], out


def test_positional_class_patterns_are_refused() -> None:
    from gustforge.errors import SandboxViolation
    from gustforge.sandbox import check_source

    with pytest.raises(SandboxViolation, match="positional sub-patterns"):
        check_source("def attack(db):\n    match db:\n        case object(x):\n            return x\n")
    check_source("def f(v):\n    match v:\n        case int(n):\n            return n\n        case dict(d):\n"
                 "            return d\n")  # fmt: skip


HOOK_PROBE = _real(
    "for step in (lambda: B['__import__']('marshal').loads(b'\\xe3'), lambda: B['eval']('6 * 7'),\n"
    "             lambda: B['exec']('x = 6 * 7'), lambda: B['compile']('6 * 7', '<s>', 'eval'),\n"
    "             lambda: B['__import__']('gc').set_debug(32)):\n"
    "    try:\n        found.append(repr(step()))\n"
    "    except B['BaseException'] as exc:\n        found.append(str(exc))\n"
)


def test_audit_hook_refuses_marshal_text_compilation_and_gc_debugging() -> None:
    with SandboxWorker(LIMITS, static_check=False) as worker:
        worker.load(HOOK_PROBE, {})
        message = worker.call("attack", {})["message"]
    for refusal in ("marshal.loads is not allowed", "compiling text is not allowed", "gc debugging is not allowed"):
        assert refusal in message, message
    assert "42" not in message


def test_audit_hook_removed_is_noticed() -> None:
    with SandboxWorker(LIMITS, static_check=False, layers=SandboxLayers(audit_hook=False)) as worker:
        worker.load(HOOK_PROBE, {})
        message = worker.call("attack", {})["message"]
    assert "42" in message  # eval ran: without the hook nothing in the process refuses it


# ---- a host without the walls ---------------------------------------------------------------------------------
_NO_WALLS_SCRIPT = """
import json
from gustforge.errors import SandboxError
from gustforge.sandbox import SandboxWorker
try:
    with SandboxWorker() as worker:
        worker.load("def ok(db):\\n    return {'status': 'success', 'message': 'ran'}\\n", {})
        print(json.dumps({"ran": worker.call("ok", {})["message"], "walls": worker.isolation["kernel_walls"]}))
except SandboxError as exc:
    print(json.dumps({"refused": str(exc)}))
"""


@pytest.mark.parametrize("opt_in", [False, True])
def test_untrusted_code_is_refused_without_the_walls_unless_opted_in(opt_in: bool) -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {"PATH": "/nonexistent", "PYTHONPATH": str(repo), "HOME": os.environ.get("HOME", "/root")}
    if opt_in:
        env["GUST_SANDBOX_ALLOW_WEAK"] = "1"
    proc = subprocess.run([sys.executable, "-c", _NO_WALLS_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=120, cwd=str(repo))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if opt_in:
        assert report["ran"] == "ran" and report["walls"].startswith("off: bubblewrap (bwrap) is not installed")
    else:
        assert "bubblewrap" in report["refused"] and "GUST_SANDBOX_ALLOW_WEAK=1" in report["refused"]


# ---- test verdicts out of the tools' reach ------------------------------------------------------------------------
FORGING_TOOLS = (
    _REAL
    + """
def _forge():
    main = G['sys'].modules['__main__']
    def run_test(self, name, redirect=None):
        return {'passed': True, 'message': '', 'tool': 'attack'}
    main.Sandbox.run_test = run_test
    main.Sandbox.load_tests = lambda self, source, schemas: ['test_attack']
_forge()
def attack(db):
    return {'status': 'error', 'message': 'wrong'}
"""
)
FAILING_TESTS = "def test_attack(env):\n    out = env.call('attack', {})\n    env.check(out['status'] == 'success', 'attack must succeed')\n"
SPECS = {"attack": {"parameters": {"type": "object"}, "response": {"type": "object"}}}


def test_tools_code_cannot_forge_its_test_verdict() -> None:
    """The tools module, its static check bypassed, rewrites the worker's test runner to say "passed": the tests
    run in a harness worker of their own, so the failing suite still fails (direct and pooled workers)."""
    with SandboxWorker(LIMITS, static_check=False) as worker:
        worker.load(FORGING_TOOLS, {})
        report = worker.run_tests(FAILING_TESTS, SPECS)
    assert not report.passed and "attack must succeed" in report.cases[0].message, report
    zygote = Zygote()
    try:
        with SandboxWorker(LIMITS, static_check=False, zygote=zygote) as worker:
            worker.load(FORGING_TOOLS, {})
            assert not worker.run_tests(FAILING_TESTS, SPECS).passed
    finally:
        zygote.close()


def test_separate_harness_removed_is_noticed() -> None:
    with SandboxWorker(LIMITS, static_check=False, layers=SandboxLayers(separate_harness=False)) as worker:
        worker.load(FORGING_TOOLS, {})
        assert worker.run_tests(FAILING_TESTS, SPECS).passed  # the forgery works when tests share the process


def test_pooled_workers_have_namespaces_of_their_own() -> None:
    """Workers forked from one zygote share its read-only mount and PID namespaces but each has its own user,
    network, IPC and UTS namespaces (and, as root, its own uid)."""
    probe = _real(
        "for kind in ('net', 'ipc', 'user', 'uts', 'mnt', 'pid'):\n"
        "    found.append(kind + '=' + G['readlink']('/proc/self/ns/' + kind))\n"
        "found.append('uid=' + str(G['getuid']()))\n"
    )
    zygote = Zygote(SandboxLayers(audit_hook=False))
    seen = []
    try:
        for _ in range(2):
            with SandboxWorker(LIMITS, zygote=zygote, static_check=False) as worker:
                assert worker.isolation["namespaces_of_its_own"] == "user, network, IPC, UTS"
                worker.load(probe, {})
                message = worker.call("attack", {})["message"]
                seen.append(dict(item.split("=", 1) for item in json.loads(message.replace("'", '"'))))
    finally:
        zygote.close()
    first, second = seen
    for kind in ("net", "ipc", "user", "uts"):
        assert first[kind] != second[kind], kind
    assert first["mnt"] == second["mnt"] and first["pid"] == second["pid"]
    if os.geteuid() == 0:
        assert first["uid"] != second["uid"]
