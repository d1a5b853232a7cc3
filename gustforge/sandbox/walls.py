"""The kernel walls around every sandbox worker: bubblewrap namespaces, a minimal read-only root, seccomp, uids.

The in-process layers (`policy.py`, the audit hook in `child.py`) are Python; a bug in them, or in CPython, is a
way out. These walls are the kernel's, and assume the Python layers have already fallen:

- **namespaces** (bubblewrap; not `--die-with-parent`, whose parent-death signal follows the *thread* that started
  bubblewrap, and pools start workers from short-lived threads: a worker ends when its pipes close, and the parent
  kills the sandboxed interpreter itself): new mount, PID, network, IPC, UTS and cgroup namespaces, and a user namespace
  whenever the parent is not root. The root is a read-only tmpfs holding only the interpreter, its standard
  library, the system libraries, the few site packages the worker imports (jsonschema and what it needs) and the
  sandbox's own three files — no host `/proc`, `/tmp`, `/etc`, home, sockets, environment folders or build
  outputs. `/proc` is a fresh one of the worker's own PID namespace. The worker never reads an environment from
  disk: the parent sends its code and data over the pipe.
- **seccomp** (filters compiled by libseccomp through `pyseccomp`, in the parent): the *wall filter* (applied by
  bubblewrap to the zygote and every worker) refuses new sockets, device nodes and FIFOs, `ptrace` and
  cross-process memory access, mounts, joining namespaces (`setns`; `unshare` is left to the zygote's forks, which
  each take user, network, IPC and UTS namespaces of their own), kernel keyrings, BPF, io_uring, `pidfd_getfd` and
  the like; the stricter *worker filter*, loaded by each worker once it has hardened itself, also refuses `execve`,
  new processes and threads, signals to anything, raising any rlimit but its own CPU arming, `SIGXCPU` handlers,
  `prctl` and uid changes.
- **uids**: as root, each worker drops to a uid/gid the *parent* allocates (unique among its live workers), so a
  worker cannot signal, trace or read `/proc/<pid>/` of another; as a normal user every worker runs in a user
  namespace without capabilities.
- **limits the child cannot lift**: the parent measures each request's CPU time and the worker's memory from
  `/proc` on the host and kills the worker past its limits, whatever the worker did to its own rlimits or
  signal handlers (`SandboxWorker`).

Where bubblewrap or namespaces are missing, untrusted code is refused unless the caller opts into the weaker
in-process-only mode (`GUST_SANDBOX_ALLOW_WEAK=1`); what was up is reported in every environment's manifest.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from gustforge.errors import SandboxError

__all__ = [
    "ALLOW_WEAK_ENV",
    "KernelWalls",
    "WallFilters",
    "allocate_uid",
    "kernel_walls",
    "seccomp_filters",
    "require_walls",
]

ALLOW_WEAK_ENV = "GUST_SANDBOX_ALLOW_WEAK"
INSIDE_ROOT = "/gust"  # where the sandbox's own files and site packages appear inside the worker's root
INSIDE_SITE = f"{INSIDE_ROOT}/site"
CHILD_INSIDE = f"{INSIDE_ROOT}/gustforge/sandbox/child.py"
# Top-level modules the worker imports from site-packages: jsonschema (argument checks, generated tests) and
# everything it loads, including the optional format checkers it picks up when they are installed.
SITE_MODULES = (
    "jsonschema", "jsonschema_specifications", "referencing", "rpds", "attr", "attrs", "typing_extensions",
    "idna", "jsonpointer", "rfc3339_validator", "rfc3986_validator", "rfc3987", "rfc3987_syntax", "uri_template",
    "webcolors", "fqdn", "isoduration", "arrow", "dateutil", "six", "lark",
)  # fmt: skip
SYSTEM_LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/lib32", "/lib32")
UID_BASE = 100_000
UIDS_PER_PARENT = 1_000

# Refused by the wall filter (zygote and workers). Default: allowed, so the interpreter keeps working as the
# kernel and glibc evolve; everything here reaches outside the process or changes the kernel's view of it.
WALL_REFUSED = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "mknod", "mknodat", "ptrace",
    "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "mount",
    "umount2", "pivot_root", "chroot", "setns", "mount_setattr", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff",
    "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "fanotify_init", "lookup_dcookie", "vhangup", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "syslog", "personality", "setdomainname", "sethostname",
)  # fmt: skip
# Also refused once a worker has hardened itself (on top of the wall filter).
WORKER_REFUSED = (
    "execve", "execveat", "fork", "vfork", "clone", "kill", "tkill", "tgkill", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "prctl", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setfsuid", "setfsgid", "capset", "seccomp", "memfd_create", "unshare",
)  # fmt: skip
_CLONE_NAMESPACE_FLAGS = (0x10000000, 0x00020000, 0x20000000, 0x40000000, 0x08000000, 0x04000000, 0x02000000)
_TIOCSTI = 0x5412
_RLIMIT_CPU = 0


class KernelWalls(BaseModel):
    """What this host provides: the bubblewrap command that wraps a worker, or why there is none."""

    model_config = ConfigDict(frozen=True)

    available: bool
    reason: str
    prefix: tuple[str, ...] = ()  # bwrap and its options, up to (not including) the interpreter
    interpreter: str = sys.executable  # the interpreter's path as the worker sees it
    child_script: str = ""
    user_namespace: bool = False
    drops_uid: bool = False  # root: each worker switches to a parent-allocated uid


class WallFilters(BaseModel):
    """The two compiled seccomp programs (raw BPF, as the kernel takes them)."""

    model_config = ConfigDict(frozen=True)

    wall: bytes
    worker: bytes


def allow_weak() -> bool:
    return os.environ.get(ALLOW_WEAK_ENV, "").strip().lower() in {"1", "true", "yes"}


@functools.cache
def kernel_walls() -> KernelWalls:
    """Probe once per process: is bubblewrap here, and does a worker start behind it?"""
    if not sys.platform.startswith("linux"):
        return KernelWalls(available=False, reason=f"no Linux namespaces on {sys.platform}")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return KernelWalls(available=False, reason="bubblewrap (bwrap) is not installed")
    try:
        filters = seccomp_filters()
    except (OSError, ImportError, ValueError) as exc:
        return KernelWalls(available=False, reason=f"seccomp filters cannot be compiled: {exc}")
    walls = _walls_for(bwrap)
    problem = _probe(walls, filters.wall)
    if problem:
        return KernelWalls(available=False, reason=problem)
    return walls


def require_walls() -> KernelWalls:
    """The kernel walls, or `SandboxError` naming what is missing and the opt-in to the weaker mode."""
    walls = kernel_walls()
    if walls.available or allow_weak():
        return walls
    raise SandboxError(
        f"the sandbox's kernel walls are not available here: {walls.reason}. Untrusted environment code runs only "
        "behind them: install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`) on a kernel with user "
        f"namespaces, or set {ALLOW_WEAK_ENV}=1 to accept the in-process layers alone (not for code you did not "
        "write)"
    )


def _walls_for(bwrap: str) -> KernelWalls:
    root = os.geteuid() == 0
    namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if not root:
        namespaces.insert(0, "--unshare-user")
    caps = ["--cap-drop", "ALL"]
    if root:  # the zygote switches each fork to its own uid and kills forks of other uids
        caps += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    interpreter = os.path.realpath(sys.executable)
    prefix = [
        bwrap, *namespaces, "--new-session", *caps, "--hostname", "gust-sandbox",
        *_system_library_args(), *_bind_args(_interpreter_paths(interpreter)),
        *_site_args(), *_own_file_args(), "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/",
        "--chdir", "/", "--clearenv", "--setenv", "PYTHONHASHSEED", "0", "--setenv", "LC_ALL", "C.UTF-8",
        "--setenv", "PYTHONPATH", INSIDE_SITE,
    ]  # fmt: skip
    return KernelWalls(
        available=True,
        reason="bubblewrap: mount, PID, network, IPC, UTS namespaces" + ("" if root else " and a user namespace"),
        prefix=tuple(prefix),
        interpreter=interpreter,
        child_script=CHILD_INSIDE,
        user_namespace=not root,
        drops_uid=root,
    )


def _system_library_args() -> list[str]:
    args: list[str] = []
    for path in SYSTEM_LIBRARY_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _interpreter_paths(interpreter: str) -> list[str]:
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}  # a venv's own lib/ is not the stdlib
    paths = [interpreter, sysconfig.get_path("stdlib", vars=base), sysconfig.get_path("platstdlib", vars=base)]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        ldlibrary = sysconfig.get_config_var("LDLIBRARY") or ""
        paths += [str(p) for p in Path(libdir).glob(ldlibrary + "*")] if libdir and ldlibrary else []
    return paths


def _bind_args(paths: Iterable[str]) -> list[str]:
    """`--ro-bind` for each existing path not already inside another one (system library dirs included)."""
    kept: list[str] = []
    covered = [p for p in SYSTEM_LIBRARY_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    for path in sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)}):
        if not any(path == c or path.startswith(c.rstrip("/") + "/") for c in [*covered, *kept]):
            kept.append(path)
    return [arg for path in kept for arg in ("--ro-bind", path, path)]


def _site_args() -> list[str]:
    args = ["--dir", INSIDE_SITE]
    for name in SITE_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or spec.origin in {"built-in", "frozen"}:
            continue
        origin = Path(spec.origin)
        source = origin.parent if spec.submodule_search_locations else origin
        args += ["--ro-bind", str(source), f"{INSIDE_SITE}/{source.name}"]
    return args


def _own_file_args() -> list[str]:
    here = Path(__file__).resolve().parent
    files = {
        here / "child.py": CHILD_INSIDE,
        here / "policy.py": f"{INSIDE_ROOT}/gustforge/sandbox/policy.py",
        here.parent / "schemas.py": f"{INSIDE_ROOT}/gustforge/schemas.py",
    }
    return [arg for source, target in files.items() for arg in ("--ro-bind", str(source), target)]


def _probe(walls: KernelWalls, wall_filter: bytes) -> str:
    """Start an interpreter behind the walls once; '' when it worked, else why not."""
    code = "import sys; sys.stdout.write('ok')"
    try:
        with seccomp_pipe(wall_filter) as fd:
            proc = subprocess.run(
                [*walls.prefix, "--seccomp", str(fd), walls.interpreter, "-S", "-s", "-B", "-c", code],
                capture_output=True, timeout=30, pass_fds=(fd,), check=False,
            )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not start: {exc}"
    if proc.returncode != 0 or proc.stdout != b"ok":
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return f"bubblewrap could not start a worker: {detail[0][:300]}"
    return ""


class seccomp_pipe:  # noqa: N801 - used like a function: `with seccomp_pipe(bpf) as fd`
    """A pipe's read end holding `program`, for bubblewrap's `--seccomp FD` (it reads and closes its copy)."""

    def __init__(self, program: bytes) -> None:
        self.program = program
        self.fd = -1

    def __enter__(self) -> int:
        read, write = os.pipe()
        try:
            os.write(write, self.program)  # a few KB: well inside the pipe's buffer
        finally:
            os.close(write)
        self.fd = read
        return read

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.fd)


@functools.cache
def seccomp_filters() -> WallFilters:
    """Compile both filters with libseccomp (native architecture; other ABIs are killed by libseccomp's default
    bad-architecture action)."""
    import pyseccomp as sc

    eperm = sc.ERRNO(1)
    wall = sc.SyscallFilter(sc.ALLOW)
    _refuse(wall, eperm, WALL_REFUSED)
    for flag in _CLONE_NAMESPACE_FLAGS:  # a new namespace through clone() is `unshare` by another name
        wall.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    wall.add_rule(sc.ERRNO(38), "clone3")  # ENOSYS: glibc falls back to clone(), whose flags are checked above
    wall.add_rule(eperm, "ioctl", sc.Arg(1, sc.EQ, _TIOCSTI))

    worker = sc.SyscallFilter(sc.ALLOW)
    _refuse(worker, eperm, (*WALL_REFUSED, *WORKER_REFUSED))
    worker.add_rule(sc.ERRNO(38), "clone3")
    # rlimits: reading is fine; the only change left is the worker's own per-request CPU arming
    worker.add_rule(eperm, "prlimit64", sc.Arg(1, sc.NE, _RLIMIT_CPU), sc.Arg(2, sc.NE, 0))
    worker.add_rule(eperm, "prlimit64", sc.Arg(0, sc.NE, 0), sc.Arg(2, sc.NE, 0))
    worker.add_rule(eperm, "setrlimit", sc.Arg(0, sc.NE, _RLIMIT_CPU))
    worker.add_rule(eperm, "rt_sigaction", sc.Arg(0, sc.EQ, int(signal.SIGXCPU)))
    return WallFilters(wall=_export(wall), worker=_export(worker))


def _refuse(filter_: object, action: int, names: Iterable[str]) -> None:
    for name in dict.fromkeys(names):
        try:
            filter_.add_rule(action, name)  # type: ignore[attr-defined]
        except (OSError, ValueError):  # a syscall this architecture does not have
            continue


def _export(filter_: object) -> bytes:
    with tempfile.TemporaryFile() as handle:
        filter_.export_bpf(handle)  # type: ignore[attr-defined]
        handle.seek(0)
        return handle.read()


_uid_counter = itertools.count()
_uid_lock = threading.Lock()


def allocate_uid() -> int:
    """A uid/gid for the next worker: unique among this parent's live workers (a counter over 1,000 slots) and
    across parents (the parent's host pid picks the block)."""
    with _uid_lock:
        slot = next(_uid_counter) % UIDS_PER_PARENT
    return UID_BASE + (os.getpid() % 4_194_304) * UIDS_PER_PARENT + slot  # pid_max <= 2^22: below 2^32 - 2
