"""The sandbox worker process: runs untrusted tools/tests modules. Standard library only; never imported by the parent.

Started by `gustforge.sandbox.worker.SandboxWorker` as `python -s -P -B child.py <limits-json>`. It speaks JSON lines:
one request per line on stdin, one response per line on the (private copy of) stdout. Responses are
`{"ok": true, "result": ...}` or `{"ok": false, "fault": "violation" | "memory" | "error", "message": ...}`.

Walls inside this process, in two layers. The first is the static policy: the policy check again (`policy.py`,
loaded by path), restricted builtins, a guarded importer that hands out read-only module proxies exposing only
`policy.MODULE_EXPORTS`. The second does not trust the first (`_harden`): before any untrusted code runs, the child
imports and warms everything it will need, drops to an unprivileged uid/gid when started as root, lowers every
hard rlimit to its soft value (CPU keeps a fixed lifetime cap above the per-request soft limit, whose SIGXCPU
kills the process uncatchably) and installs a PEP 578 audit hook that refuses file opens, new imports, sockets,
process creation and signalling, `ctypes`, frame and code-object access and gc introspection. The hook cannot be
removed and reads no mutable state. Network/PID namespaces are added by the parent (`unshare`) where permitted.
Everything here is process-local; the parent restarts the process after any fault and uses one process per env.
"""

from __future__ import annotations

import copy
import datetime
import encodings.idna  # noqa: F401 - warmed before the audit hook refuses new imports
import functools
import hashlib
import importlib.util
import itertools
import json
import math
import os
import random
import re
import resource
import signal
import statistics
import string
import sys
import types
import uuid
from collections import ChainMap, Counter, OrderedDict, defaultdict, deque, namedtuple
from pathlib import Path
from typing import Any

__all__: list[str] = []


def _load_by_path(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with the package
        raise RuntimeError(f"sandbox module not found: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


POLICY = _load_by_path("gust_sandbox_policy", Path(__file__).with_name("policy.py"))
SCHEMAS = _load_by_path("gust_sandbox_schemas", Path(__file__).parents[1] / "schemas.py")
MAX_MESSAGE_CHARS = 2000
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 4, 38, 22, 2
_COLLECTIONS = {
    "Counter": Counter,
    "OrderedDict": OrderedDict,
    "defaultdict": defaultdict,
    "deque": deque,
    "ChainMap": ChainMap,
}
_REAL_MODULES: dict[str, Any] = {
    "math": math,
    "json": json,
    "re": re,
    "copy": copy,
    "datetime": datetime,
    "string": string,
    "itertools": itertools,
    "functools": functools,
    "statistics": statistics,
    "uuid": uuid,
    "hashlib": hashlib,
}
_SAFE_BUILTIN_NAMES = (
    "abs",
    "all",
    "any",
    "ascii",
    "bin",
    "bool",
    "bytes",
    "callable",
    "chr",
    "complex",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "format",
    "frozenset",
    "hash",
    "hex",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "oct",
    "ord",
    "pow",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "slice",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    "object",
    "property",
    "staticmethod",
    "classmethod",
    "NotImplemented",
    "Ellipsis",
    "Exception",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "IndexError",
    "KeyError",
    "LookupError",
    "NameError",
    "NotImplementedError",
    "OverflowError",
    "RecursionError",
    "RuntimeError",
    "StopIteration",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
    "UnicodeError",
)


class _Sealed:
    """Harness objects refuse copying and pickling: a copy protocol (`deepcopy(x, memo)`, `__reduce_ex__`) would
    hand a test the harness's internal lists."""

    __slots__ = ()

    def __copy__(self) -> Any:
        raise TypeError(f"{type(self).__name__} cannot be copied in the sandbox")

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError(f"{type(self).__name__} cannot be copied in the sandbox")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"{type(self).__name__} cannot be pickled or copied in the sandbox")

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} cannot be pickled or copied in the sandbox")


def _copy(x: Any) -> Any:
    """`copy.copy` of plain data only: the copy protocol of anything else runs code of its choosing (a bound
    method's `__reduce__` is `getattr(self, name)`)."""
    _require_plain(x)
    return copy.copy(x)


def _deepcopy(x: Any) -> Any:
    """`copy.deepcopy` of plain data only, without `memo` (a test-supplied memo collects the originals it copied)."""
    _require_plain(x)
    return copy.deepcopy(x)


_COPYABLE_ATOMS = frozenset(
    {str, int, float, bool, bytes, complex, type(None), datetime.date, datetime.datetime, datetime.time,
     datetime.timedelta, datetime.timezone}
)  # fmt: skip
_COPYABLE_CONTAINERS = frozenset({dict, list, tuple, set, frozenset})


def _require_plain(value: Any) -> None:
    """Raise `TypeError` unless `value` is JSON-like data (exact builtin containers and scalars, dates)."""
    stack, seen = [value], 0
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in _COPYABLE_ATOMS:
            continue
        if kind not in _COPYABLE_CONTAINERS:
            raise TypeError(f"copy in the sandbox copies plain data only, not {kind.__name__}")
        seen += 1
        if seen > 1_000_000:
            raise TypeError("copy in the sandbox: value too large or cyclic")
        stack.extend(node.items() if kind is dict else node)


_ATOMS = frozenset({str, int, float, bool, type(None)})
_PLAIN_DEPTH = 100


class _NotPlain(Exception):
    pass


def _plain(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    if depth > _PLAIN_DEPTH:  # deeper than any JSON data the harness hands out; maybe a cycle
        raise _NotPlain
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) not in _ATOMS:
                raise _NotPlain
            out[key] = item if type(item) in _ATOMS else _plain(item, depth + 1)
        return out
    if kind is list:
        return [item if type(item) in _ATOMS else _plain(item, depth + 1) for item in value]
    raise _NotPlain


def _data_copy(value: Any) -> Any:
    """A deep copy of the DB handed to a test: plain dicts, lists and scalars (exact types) are copied directly,
    anything else a tool left there goes through `copy.deepcopy` (the result is equal either way)."""
    try:
        return _plain(value, 0)
    except _NotPlain:
        return copy.deepcopy(value)


def _namedtuple(typename: Any, field_names: Any, *, rename: bool = False, defaults: Any = None) -> Any:
    """`namedtuple` with a fixed module (the real one walks `sys._getframe`, which the audit hook refuses) and a
    plain typename: a dunder typename names the methods it generates after interpreter machinery."""
    if type(typename) is not str or not typename.isidentifier() or typename.startswith("_"):
        raise ValueError("namedtuple typename must be an identifier that does not start with an underscore")
    return namedtuple(typename, field_names, rename=rename, defaults=defaults, module="sandbox")


class ModuleProxy(_Sealed):
    """A read-only stand-in for an allowed module: only the exported attributes, no submodules."""

    __slots__ = ("_name", "_attrs")

    def __init__(self, name: str, attrs: dict[str, Any]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_attrs", attrs)

    def __getattr__(self, item: str) -> Any:
        try:
            return self._attrs[item]
        except KeyError:
            raise AttributeError(f"module {self._name!r} has no attribute {item!r} in the sandbox") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"module {self._name!r} is read-only in the sandbox")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"module {self._name!r} is read-only in the sandbox")

    def __repr__(self) -> str:
        return f"<sandboxed module {self._name!r}>"


class Fault(Exception):
    """A sandbox-level failure reported to the parent (as opposed to a tool error shown to the agent)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _proxies(seed: int) -> dict[str, ModuleProxy]:
    rng = random.Random(seed)

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    overrides: dict[str, dict[str, Any]] = {
        "random": {name: getattr(rng, name) for name in POLICY.MODULE_EXPORTS["random"] if name != "Random"}
        | {"Random": random.Random},
        "uuid": {"uuid4": uuid4},
        "collections": {**_COLLECTIONS, "namedtuple": _namedtuple},
        "copy": {"copy": _copy, "deepcopy": _deepcopy},
    }
    proxies = {}
    for name in POLICY.MODULE_EXPORTS:
        source = overrides.get(name, {})
        attrs = {attr: source[attr] if attr in source else real for attr, real in _real_exports(name)}
        proxies[name] = ModuleProxy(name, attrs)
    return proxies


@functools.cache
def _real_exports(name: str) -> tuple[tuple[str, Any], ...]:
    """(attribute, real value) of an allowed module's exports, sorted; None where an override supplies it."""
    module = _REAL_MODULES.get(name)
    return tuple((attr, getattr(module, attr, None)) for attr in sorted(POLICY.MODULE_EXPORTS[name]))


def _builtins(proxies: dict[str, ModuleProxy]) -> dict[str, Any]:
    import builtins

    def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level != 0 or name not in proxies:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        return proxies[name]

    def quiet_print(*args: Any, **kwargs: Any) -> None:
        return None

    safe = {name: getattr(builtins, name) for name in _SAFE_BUILTIN_NAMES}
    safe.update({"__import__": guarded_import, "__build_class__": builtins.__build_class__, "print": quiet_print})
    return safe


def _compile(source: str, label: str, *, static_check: bool = True) -> types.CodeType:
    if not static_check:  # parsed by the policy's parser (its text compiles pass the audit hook), not checked
        return compile(POLICY._parse(source), f"<{label}>", "exec", dont_inherit=True)
    tree, violations = POLICY.checked_tree(source)
    if violations or tree is None:
        raise Fault("violation", f"{label}: " + "; ".join(violations or ["source cannot be parsed"]))
    return compile(tree, f"<{label}>", "exec", dont_inherit=True)  # the tree that was checked, not a re-parse


class Limits:
    """Process rlimits with every hard limit lowered to its soft value, and a per-request CPU soft limit.

    SIGXCPU's default action ends the process, which untrusted code cannot catch. The CPU hard limit is a fixed
    lifetime cap (`cpu_cap`): nothing in the process can raise it again once the worker is not root.
    """

    def __init__(self, cpu_seconds: float, memory_mb: int, cpu_cap: int) -> None:
        self.cpu_seconds = cpu_seconds
        self.cpu_cap = cpu_cap
        memory = memory_mb * 1024 * 1024
        fixed = {
            resource.RLIMIT_AS: memory,
            resource.RLIMIT_FSIZE: 0,
            resource.RLIMIT_CORE: 0,
            resource.RLIMIT_NOFILE: 16,
            resource.RLIMIT_CPU: cpu_cap,
        }
        if hasattr(resource, "RLIMIT_NPROC"):
            fixed[resource.RLIMIT_NPROC] = 0
        for limit, value in fixed.items():
            try:
                resource.setrlimit(limit, (value, value))
            except (ValueError, OSError):
                if limit != getattr(resource, "RLIMIT_NPROC", None):  # NPROC may be refused; nothing else may
                    raise
        for name in dir(resource):  # every other limit: hard lowered to soft, so nothing can raise it later
            limit = getattr(resource, name)
            if not name.startswith("RLIMIT_") or limit in fixed:
                continue
            try:
                soft, _ = resource.getrlimit(limit)
                resource.setrlimit(limit, (soft, soft))
            except (ValueError, OSError):
                pass
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)

    def arm(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(math.ceil(usage.ru_utime + usage.ru_stime + self.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (min(max(soft, 1), self.cpu_cap), self.cpu_cap))

    def disarm(self) -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_cap, self.cpu_cap))

    @staticmethod
    def hard_equals_soft() -> bool:
        names = [n for n in dir(resource) if n.startswith("RLIMIT_")]
        return all(resource.getrlimit(getattr(resource, n))[0] == resource.getrlimit(getattr(resource, n))[1]
                   for n in names)  # fmt: skip


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + f" [... {len(text)} chars]"


def _tool_error(exc: BaseException) -> dict[str, Any]:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose str() fails must still become a tool error
        text = "<unprintable>"
    return {"status": "error", "message": _clip(f"{type(exc).__name__}: {text}")}


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, iteratively (a deep value must not recurse in the checker either)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((item, level + 1) for item in node)
    return deepest


class Sandbox(_Sealed):
    """The live state of one worker: the tools module, its DB and (optionally) a tests module.

    `static_check=False` exists only for the red-team tests that prove the second layer holds on its own.
    """

    def __init__(self, limits: Limits, *, static_check: bool = True, validation: bool = True) -> None:
        self.limits = limits
        self.static_check = static_check
        self.validation = validation
        self.tools_code: types.CodeType | None = None
        self.extensions: list[types.CodeType] = []  # extra functions exec'd into the tools module (mutants)
        self.db_json = "{}"
        self.seed = 0
        self.db: dict[str, Any] = {}
        self.tools: dict[str, Any] = {}
        self.tests: dict[str, Any] = {}
        self.schemas: dict[str, Any] = {}
        self.schemas_json = "{}"
        self.parameters: dict[str, Any] = {}
        self._compiled: dict[tuple[str, str], types.CodeType] = {}  # the last few modules checked and compiled
        self.remote: RemoteTools | None = None  # a harness worker: the tools run in another process
        self.remote_tools: list[str] = []

    def load(self, source: str, db: dict[str, Any], seed: int, parameters: dict[str, Any] | None = None) -> list[str]:
        self.unload()
        if parameters and not self.validation:
            raise Fault("error", "this worker was started without validation: it cannot check tool arguments")
        self.tools_code = self._compile(source, "tools")
        self.db_json, self.seed = json.dumps(db), seed
        self.parameters = dict(parameters or {})
        self.reset()
        return list(self.tools)

    def _compile(self, source: str, label: str) -> types.CodeType:
        """`_compile`, remembered per text: the same env's module loaded again (tests, then mutation) is checked
        and compiled once per process (a code object is immutable; each load still execs it afresh)."""
        key = (label, source)
        code = self._compiled.get(key)
        if code is None:
            code = _compile(source, label, static_check=self.static_check)
            while len(self._compiled) >= 4:
                del self._compiled[next(iter(self._compiled))]
            self._compiled[key] = code
        return code

    def unload(self) -> None:
        self.tools_code, self.db, self.tools, self.tests, self.schemas = None, {}, {}, {}, {}
        self.parameters, self.extensions, self.schemas_json = {}, [], "{}"
        self.remote, self.remote_tools = None, []

    def backend(self) -> Any:
        """Where a test's tool calls go: the tools in this process, or (a harness worker) in the tools worker."""
        return self.remote if self.remote is not None else LocalTools(self)

    def tool_names(self) -> list[str]:
        return list(self.remote_tools) if self.remote is not None else list(self.tools)

    def load_harness(self, source: str, schemas: dict[str, Any], tools: Any, seed: int, ask: Any) -> list[str]:
        """Become a test harness: load a tests module whose `env` calls the tools loaded in another worker (the
        parent relays each call). The verdict is kept here, where the tools' code never runs."""
        self.unload()
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise Fault("error", "load_harness needs the tools worker's function names")
        self.seed = int(seed)
        names = self.load_tests(source, schemas)
        self.remote, self.remote_tools = RemoteTools(ask), list(tools)
        return names

    def extend(self, source: str) -> list[str]:
        """Exec `source` into the tools module after it, now and on every reset; it passes the same check."""
        if self.tools_code is None:
            raise Fault("error", "no tools module is loaded")
        self.extensions.append(self._compile(source, "tools"))
        self.reset()
        return list(self.tools)

    def reset(self, db: dict[str, Any] | None = None) -> None:
        """Fresh tools module and initial DB; `db` (sent by the parent, which holds the authoritative copy) wins."""
        if self.tools_code is None:
            raise Fault("error", "no tools module is loaded")
        if db is not None:
            self.db_json = json.dumps(db)
        self.db = json.loads(self.db_json)
        namespace = self._exec(self.tools_code, "tools", *self.extensions)
        self.tools = {name: value for name, value in namespace.items() if _is_public_function(name, value, "tools")}

    def set_db(self, db: dict[str, Any]) -> None:
        self.db = json.loads(json.dumps(db))

    def _exec(self, code: types.CodeType, module_name: str, *more: types.CodeType) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__builtins__": _builtins(_proxies(self.seed)), "__name__": module_name}
        self.limits.arm()
        try:
            for part in (code, *more):
                exec(part, namespace)
        except MemoryError:
            raise
        except Exception as exc:
            message = _tool_error(exc)["message"]
            raise Fault("error", f"{module_name} module failed at import: {message}") from None
        finally:
            self.limits.disarm()
        return namespace

    def call(self, tool: str, args: dict[str, Any], *, validate: bool = True) -> dict[str, Any]:
        function = self.tools.get(tool)
        if function is None:
            known = ", ".join(sorted(self.tools)) or "(none)"
            return {"status": "error", "message": f"unknown tool {tool!r}; available: {known}"}
        self.limits.arm()
        try:
            schema = self.parameters.get(tool)
            # Arguments are validated here, under the CPU limit, not in the parent: a hostile schema (a
            # catastrophic `pattern`) costs this worker its limit instead of hanging the parent.
            errors = SCHEMAS.validation_errors(args, schema) if validate and schema is not None else []
            if errors:
                return {"status": "error", "message": _clip("invalid arguments: " + "; ".join(errors))}
            return _json_output(tool, function(self.db, **args))
        except MemoryError:
            raise
        except Exception as exc:
            return _tool_error(exc)
        finally:
            self.limits.disarm()

    def load_tests(self, source: str, schemas: dict[str, Any]) -> list[str]:
        if not self.validation:
            raise Fault("error", "this worker was started for sessions only (validation=False): it cannot run tests")
        code = self._compile(source, "tests")
        self.schemas_json = json.dumps(schemas)
        self.schemas = json.loads(self.schemas_json)
        namespace = self._exec(code, "tests")
        self.tests = {
            name: value
            for name, value in namespace.items()
            if name.startswith("test_") and _is_public_function(name, value, "tests")
        }
        return list(self.tests)

    def run_test(self, name: str, redirect: Any = None) -> dict[str, Any]:
        """Run one test on a fresh module and DB; `redirect` {tool: function} points its `env.call_tool(tool)`
        calls at another loaded function (a mutant), names and schemas staying the tool's."""
        test = self.tests.get(name)
        if test is None:
            raise Fault("error", f"unknown test {name!r}")
        redirect = dict(redirect or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in redirect.items()):
            raise Fault("error", "redirect must map tool names to function names")
        self.backend().reset()
        unknown = sorted(v for v in redirect.values() if v not in self.tool_names())
        if unknown:
            raise Fault("error", f"redirect to functions that are not loaded: {unknown[:5]}")
        env = TestEnv(self, redirect)
        self.limits.arm()
        try:
            returned = test(env)
            if returned is not None:  # a generator test returns before its body (and its checks) ran
                env._failures.append(f"test returned {type(returned).__name__} instead of running: not run")
        except MemoryError:
            raise
        except Exception as exc:
            env._failures.append(_tool_error(exc)["message"])
        finally:
            self.limits.disarm()
        tool = _tool_for_test(name, list(self.schemas) or self.tool_names(), env._called)
        return {"passed": not env._failures, "message": _clip("; ".join(env._failures)), "tool": tool}


def _is_public_function(name: str, value: Any, module_name: str) -> bool:
    return not name.startswith("_") and isinstance(value, types.FunctionType) and value.__module__ == module_name


def _json_output(tool: str, output: Any) -> dict[str, Any]:
    if not isinstance(output, dict):
        return {
            "status": "error",
            "message": f"ToolError: tool {tool!r} returned {type(output).__name__}, expected a dict",
        }
    try:
        text = json.dumps(output, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")  # lone surrogates are not text: refused here, not printed by the parent
        output = json.loads(text)
    except UnicodeEncodeError:
        return {"status": "error", "message": f"ToolError: tool {tool!r} returned text that is not valid Unicode"}
    except (TypeError, ValueError, RecursionError) as exc:
        return {"status": "error", "message": _clip(f"ToolError: tool {tool!r} returned a non-JSON output: {exc}")}
    if _depth(output) > MAX_DEPTH:
        return {"status": "error", "message": f"ToolError: tool {tool!r} returned an output nested deeper than "
                f"{MAX_DEPTH} levels"}  # fmt: skip
    return output


def _tool_for_test(test_name: str, tools: list[str], called: list[str]) -> str:
    stem = test_name[len("test_") :]
    matches = [tool for tool in tools if stem == tool or stem.startswith(tool + "_")]
    if matches:
        return max(matches, key=len)
    return called[0] if called else ""


class TestEnv(_Sealed):
    """The `env` handed to generated tests (contract: call, call_tool, db, reset, validate, schemas, check).

    It refuses copying and pickling (`_Sealed`): a copy made through a test-supplied memo would expose
    `_failures`, and a test could clear its own failures.
    """

    __slots__ = ("_sandbox", "_tools", "_failures", "_called", "_redirect", "schemas")

    def __init__(self, sandbox: Sandbox, redirect: dict[str, str] | None = None) -> None:
        self._sandbox = sandbox
        self._tools = sandbox.backend()
        self._redirect = dict(redirect or {})
        self._failures: list[str] = []
        self._called: list[str] = []
        self.schemas = json.loads(sandbox.schemas_json)  # each test its own copy (the schemas are JSON)

    def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Same semantics as `EnvSession.call`: JSON arguments, validated against the tool's schema first."""
        self._called.append(str(tool))
        try:
            args = json.loads(json.dumps({} if args is None else args, allow_nan=False))
        except (TypeError, ValueError) as exc:
            return {"status": "error", "message": f"invalid arguments: not JSON: {exc}"}
        if not isinstance(args, dict):
            return {"status": "error", "message": "invalid arguments: arguments must be a JSON object"}
        schema = self._sandbox.schemas.get(tool, {}).get("parameters")
        if tool in self._sandbox.tool_names() and schema is not None:
            errors = self.validate(args, schema)
            if errors:
                return {"status": "error", "message": "invalid arguments: " + "; ".join(errors)}
        return self._tools.call(tool, args, True)

    def call_tool(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call the tool code directly (JSON arguments, no schema check): the tool itself must reject bad input."""
        self._called.append(str(tool))
        try:
            args = json.loads(json.dumps({} if args is None else args, allow_nan=False))
        except (TypeError, ValueError) as exc:
            return {"status": "error", "message": f"invalid arguments: not JSON: {exc}"}
        target = self._redirect.get(tool, tool) if isinstance(tool, str) else tool
        return self._tools.call(target, args if isinstance(args, dict) else {}, False)

    def db(self) -> dict[str, Any]:
        return _data_copy(self._tools.db())

    def reset(self) -> None:
        self._tools.reset()

    def validate(self, instance: Any, schema: dict[str, Any]) -> list[str]:
        """jsonschema messages (empty = valid). Only strings come back: no third-party objects reach the test."""
        try:
            return SCHEMAS.validation_errors(instance, schema)
        except MemoryError:
            raise
        except Exception as exc:  # unresolvable $ref, unknown type, ...: report, never leak the exception object
            return [_clip(f"validation failed: {type(exc).__name__}: {exc}")]

    def check(self, condition: Any, message: str = "check failed") -> None:
        if not condition:
            self._failures.append(_clip(str(message)))


class LocalTools(_Sealed):
    """The tools loaded in this worker, as a test's `env` reaches them."""

    __slots__ = ("_sandbox",)

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def call(self, tool: str, args: dict[str, Any], validate: bool) -> dict[str, Any]:
        return self._sandbox.call(tool, args, validate=validate)

    def db(self) -> dict[str, Any]:
        return self._sandbox.db

    def reset(self) -> None:
        self._sandbox.reset()


class HarnessFault(Exception):
    """The tools worker faulted on a test's call (the parent also fails the test, whatever the test does)."""


class RemoteTools(_Sealed):
    """The tools of another worker, reached through the parent: each request is a `need` line on this worker's
    protocol stream, answered by one line."""

    __slots__ = ("_ask",)

    def __init__(self, ask: Any) -> None:
        self._ask = ask

    def call(self, tool: str, args: dict[str, Any], validate: bool) -> dict[str, Any]:
        result = self._ask({"op": "call", "tool": str(tool), "args": args, "validate": bool(validate)})
        return result if isinstance(result, dict) else {"status": "error", "message": "tool answered no object"}

    def db(self) -> dict[str, Any]:
        result = self._ask({"op": "db"})
        return result if isinstance(result, dict) else {}

    def reset(self) -> None:
        self._ask({"op": "reset"})


def _asker(reader: Any, writer: Any, current: list[Any]) -> Any:
    """`ask(need) -> result` over this worker's protocol streams (`current[0]`: the id of the request served)."""

    def ask(need: dict[str, Any]) -> Any:
        writer.write((json.dumps({"need": need, "id": current[0]}, ensure_ascii=False) + "\n").encode("utf-8"))
        writer.flush()
        line = reader.readline()
        if not line:
            os._exit(0)  # the parent is gone
        answer = json.loads(line)
        if not isinstance(answer, dict) or "fault" in answer:
            raise HarnessFault(str(answer.get("fault") if isinstance(answer, dict) else "malformed answer"))
        return answer.get("result")

    return ask


def _handle(sandbox: Sandbox, request: dict[str, Any], ask: Any = None) -> Any:
    op = request.get("op")
    if op == "load":
        return sandbox.load(request["source"], request["db"], int(request.get("seed", 0)), request.get("parameters"))
    if op == "call":
        return sandbox.call(request["tool"], request.get("args") or {}, validate=request.get("validate") is not False)
    if op == "get_db":
        return sandbox.db
    if op == "set_db":
        return sandbox.set_db(request["db"])
    if op == "reset":
        return sandbox.reset(request.get("db"))
    if op == "unload":
        return sandbox.unload()
    if op == "extend":
        return sandbox.extend(request["source"])
    if op == "load_tests":
        return sandbox.load_tests(request["source"], request["schemas"])
    if op == "load_harness":
        return sandbox.load_harness(request["source"], request["schemas"], request.get("tools"),
                                    int(request.get("seed", 0)), ask)  # fmt: skip
    if op == "run_test":
        return sandbox.run_test(request["name"], request.get("redirect"))
    if op == "ping":
        return "pong"
    raise Fault("error", f"unknown op {op!r}")


def _respond(request: dict[str, Any], sandbox: Sandbox, ask: Any = None) -> bytes:
    try:
        response: dict[str, Any] = {"ok": True, "result": _handle(sandbox, request, ask)}
    except Fault as fault:
        response = {"ok": False, "fault": fault.kind, "message": _clip(str(fault))}
    except MemoryError:
        sandbox.db = {}
        response = {"ok": False, "fault": "memory", "message": "MemoryError: memory limit exceeded"}
    except RecursionError as exc:
        response = {"ok": False, "fault": "error", "message": _clip(f"RecursionError: {exc}")}
    response["id"] = request.get("id")
    if response["ok"] and _depth(response.get("result")) > MAX_DEPTH:
        response = {"ok": False, "fault": "error", "message": f"result nested deeper than {MAX_DEPTH} levels",
                    "id": request.get("id")}  # fmt: skip
    try:
        line = (json.dumps(response, ensure_ascii=False) + "\n").encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        response = {"ok": False, "fault": "error", "message": _clip(f"unserialisable result: {exc}")}
        line = b""
    if len(line) > MAX_RESPONSE_BYTES:
        response = {"ok": False, "fault": "error", "message": f"result larger than {MAX_RESPONSE_BYTES} bytes"}
        line = b""
    if not line:
        response["id"] = request.get("id")
        line = (json.dumps(response, ensure_ascii=False) + "\n").encode("utf-8")
    return line


# ---- the second layer ------------------------------------------------------------------------------------------
# Audit events refused outright, and refused by prefix. `open` covers io.open, os.open and os.fdopen; `import`
# fires only for modules not yet in sys.modules, and everything the worker needs is imported before the hook.
REFUSED_EVENTS = (
    "open", "import", "builtins.input", "builtins.breakpoint", "sys.addaudithook", "sys.settrace",
    "sys.setprofile", "sys._getframe", "sys._current_frames", "sys._current_exceptions", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "resource.prlimit", "code.__new__", "function.__new__",
    "cpython.run_command", "cpython.run_file", "cpython.run_module", "cpython.run_startup",
    "cpython.remove_audit_hooks", "urllib.Request", "http.client.connect", "webbrowser.open", "marshal.loads",
    "marshal.load", "marshal.dumps", "pickle.find_class", "code.replace",
)  # fmt: skip
REFUSED_PREFIXES = (
    "os.", "socket.", "subprocess.", "ctypes.", "_ctypes.", "shutil.", "pty.", "fcntl.", "mmap.", "tempfile.",
    "glob.", "sqlite3.", "syslog.", "ftplib.", "smtplib.", "imaplib.", "poplib.", "nntplib.", "telnetlib.",
    "_posixsubprocess.", "_winapi.", "msvcrt.", "winreg.", "signal.", "faulthandler.", "pdb", "time.sleep",
)  # fmt: skip
# Attribute reads the interpreter audits (`object.__getattr__`) that lead to frames and code objects.
REFUSED_READS = ("gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "f_code", "__code__")
REFUSED_WRITES = ("__code__", "__defaults__", "__kwdefaults__", "__bases__", "__class__", "__globals__")

# The hook is compiled from source with every rule as a literal constant, so it reads no global or closure that
# code in this process could rebind. Whatever a rebound `PermissionError` does, `raise` still raises.
_HOOK_SOURCE = """
def gust_audit_hook(event, args):
    if event in {events!r} or event.startswith({prefixes!r}):
        raise PermissionError("sandbox: " + event + " is not allowed")
    if event == "object.__getattr__":
        for name in {reads!r}:
            if name.__eq__(args[1]) is not False:
                raise PermissionError("sandbox: reading " + name + " is not allowed")
    if event == "object.__setattr__" or event == "object.__delattr__":
        for name in {writes!r}:
            if name.__eq__(args[1]) is not False:
                raise PermissionError("sandbox: setting " + name + " is not allowed")
    if event == "resource.setrlimit" and ({cpu!r}).__eq__(args[0]) is not True:
        raise PermissionError("sandbox: resource.setrlimit is not allowed")
    if event == "compile" and args[0].__class__ in ("".__class__, b"".__class__):
        # Text compiled after start-up (eval/exec/compile of a string) is refused. The worker itself compiles
        # only trees it checked; the texts it parses are the policy check's, and namedtuple's `__new__` lambda.
        if args[1].__eq__("<gust-policy-check>") is True:
            return
        text = args[0] if args[0].__class__ is "".__class__ else args[0].decode("latin-1")
        if not text.startswith("lambda _cls, "):
            raise PermissionError("sandbox: compiling text is not allowed")
        for ch in text:
            if ch not in {lambda_chars!r}:
                raise PermissionError("sandbox: compiling text is not allowed")
"""


def _audit_hook() -> Any:
    source = _HOOK_SOURCE.format(
        events=REFUSED_EVENTS, prefixes=REFUSED_PREFIXES, reads=REFUSED_READS, writes=REFUSED_WRITES,
        cpu=resource.RLIMIT_CPU, lambda_chars="".join(sorted(string.ascii_letters + string.digits + "_, ():")),
    )  # fmt: skip
    namespace: dict[str, Any] = {"__builtins__": {"PermissionError": PermissionError}}
    exec(compile(source, "<gust-audit-hook>", "exec", dont_inherit=True), namespace)
    return namespace["gust_audit_hook"]


def _warm_up(validation: bool) -> None:
    """Import and exercise everything lazily loaded later: the audit hook refuses new imports and file opens.

    jsonschema (a third of the start-up time) is only warmed for workers that will run generated tests.
    """
    import _strptime  # noqa: F401 - datetime.strptime imports it on first use
    import ctypes  # noqa: F401 - for prctl (dumpable, seccomp) after the privilege drop

    datetime.datetime.strptime("2024-01-02", "%Y-%m-%d")
    for encoding in ("idna", "latin-1", "ascii", "utf-16", "utf-32", "cp1252", "punycode", "unicode_escape"):
        "x".encode(encoding).decode(encoding)
    copy.deepcopy({"a": [namedtuple("T", "a", module="sandbox")(1)]})
    _deepcopy({"a": [1, (2.0, None)], "b": {3}, "c": datetime.date(2024, 1, 2)})
    if not validation:
        return
    import jsonschema
    import referencing.jsonschema  # noqa: F401

    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"format": "date", "pattern": "^x"}},
        "$defs": {"A": {"type": "string", "enum": ["x"], "minLength": 1}},
        "required": ["a"],
    }
    for draft in (jsonschema.Draft202012Validator, jsonschema.Draft7Validator, jsonschema.Draft4Validator):
        SCHEMAS.errors_of(SCHEMAS.safe_validator(schema, draft, check=True), {"a": 1, "b": 2})
    SCHEMAS.validation_errors({"a": "y"}, {**schema, "$ref": "http://unused.invalid/x"})
    SCHEMAS.validation_errors({}, {"type": "nope"})


def _namespace_inode(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""


def _drop_privileges(uid: Any) -> str:
    """As root, become the uid/gid the parent allocated to this worker (it owns no file; no live worker shares it)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return f"unprivileged (uid {os.getuid() if hasattr(os, 'getuid') else '?'})"
    if not isinstance(uid, int) or uid <= 0:
        raise SystemExit("sandbox worker started as root without a uid to drop to")
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError as exc:
        return f"root: could not drop privileges: {exc}"
    if os.getuid() == 0 or os.geteuid() == 0:  # pragma: no cover - setuid either works or raises
        return "root: could not drop privileges"
    return f"dropped from root to uid/gid {uid}"


def _prctl(option: int, *args: Any) -> int:
    import ctypes  # imported by `_warm_up`, before the privilege drop (the interpreter's files may be root's)

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.restype = ctypes.c_int
    return int(libc.prctl(option, *args))


def _load_seccomp(program_hex: str) -> str:
    """Load the worker filter the parent compiled (raw BPF from libseccomp); it stacks on the wall filter."""
    import ctypes

    program = bytes.fromhex(program_hex)
    if not program or len(program) % 8:
        raise SystemExit("sandbox worker: malformed seccomp program")

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_char_p))
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SystemExit(f"sandbox worker: no_new_privs refused (errno {ctypes.get_errno()})")
    if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SystemExit(f"sandbox worker: seccomp filter refused (errno {ctypes.get_errno()})")
    return "worker filter loaded"


def _close_gc() -> None:
    """`gc.set_debug(DEBUG_SAVEALL)` would keep every collected cycle (frames of finished calls among them) in
    `gc.garbage` for whoever reaches the gc module."""
    import gc

    def refused(*args: Any, **kwargs: Any) -> None:
        raise PermissionError("sandbox: gc debugging is not allowed")

    gc.set_debug(0)
    gc.garbage.clear()
    gc.set_debug = refused  # type: ignore[assignment]


def _harden(settings: dict[str, Any]) -> dict[str, Any]:
    """The second layer; returns what it applied (the parent puts it in the env manifest)."""
    _warm_up(bool(settings.get("validation", True)))
    facts = {"net_ns": _namespace_inode("net"), "pid_ns": _namespace_inode("pid"), "mnt_ns": _namespace_inode("mnt")}
    limits = Limits(float(settings["cpu_seconds"]), int(settings["memory_mb"]), int(settings["cpu_cap"]))
    layers = settings.get("layers") or {}  # every layer is on unless the parent's tests or bench turn one off
    drop = layers.get("drop_privileges", True)
    facts["privileges"] = _drop_privileges(settings.get("uid")) if drop else "not dropped (layer off)"
    facts["own_namespaces"] = settings.get("namespaces_of_its_own", "")
    if facts["own_namespaces"] and settings.get("uid") == os.getuid():  # switched before its namespaces
        facts["privileges"] = f"dropped from root to uid/gid {settings['uid']}"
    facts["uid"] = os.getuid() if hasattr(os, "getuid") else -1
    facts["rlimits_hard_equal_soft"] = Limits.hard_equals_soft()
    facts["non_dumpable"] = sys.platform.startswith("linux") and _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    program = settings.get("seccomp")
    facts["seccomp"] = _load_seccomp(program) if isinstance(program, str) and program else "none"
    _close_gc()
    facts["audit_hook"] = bool(layers.get("audit_hook", True))
    if facts["audit_hook"]:
        sys.addaudithook(_audit_hook())
    facts["limits"] = limits
    return facts


def _init_process() -> None:
    """As PID 1 of a new PID namespace, fork the real worker and mirror its end.

    The kernel ignores default-action signals (SIGXCPU of the CPU limit) sent to a namespace's init, so the worker
    must not be PID 1; when this init exits, the kernel kills everything left in the namespace.
    """
    child = os.fork()
    if child == 0:
        return
    os.closerange(0, 2)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _serve(settings: dict[str, Any]) -> None:
    """Harden, greet the parent, then serve requests until stdin closes.

    The protocol streams are private duplicates of fds 0 and 1; fds 0 and 1 themselves point at /dev/null.
    """
    reader = os.fdopen(os.dup(0), "rb")
    writer = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    sys.stdout = sys.stderr
    facts = _harden(settings)
    sandbox = Sandbox(
        facts.pop("limits"),
        static_check=bool(settings.get("static_check", True)),
        validation=bool(settings.get("validation", True)),
    )
    writer.write((json.dumps({"hello": facts}) + "\n").encode("utf-8"))
    writer.flush()
    current: list[Any] = [None]
    ask = _asker(reader, writer, current)
    while line := reader.readline():
        try:
            request = json.loads(line)
        except ValueError as exc:
            request = {"op": "bad", "error": str(exc)}
        current[0] = request.get("id") if isinstance(request, dict) else None
        writer.write(_respond(request, sandbox, ask))
        writer.flush()


def _zygote(control_fd: int) -> None:
    """Warm once, then fork one fresh worker per request (`gustforge.sandbox.zygote`). Runs no untrusted code.

    Messages are JSON packets on a SOCK_SEQPACKET socket: `spawn` (with the worker's stdin, stdout and stderr fds
    attached) forks a worker in its own session and answers its pid; `status` answers its exit code (negative
    for a signal, null while running); `kill` SIGKILLs its process group.
    """
    import socket

    _warm_up(True)
    control = socket.socket(fileno=control_fd)
    control.send(b'{"ready": true}')
    codes: dict[int, int] = {}
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 16, 3)
        except OSError:
            return
        if not data:
            return
        message = json.loads(data)
        op, pid = message.get("op"), int(message.get("pid", 0))
        reply: dict[str, Any] = {}
        if op == "spawn" and len(fds) == 3:
            reply["pid"] = _fork_worker(control, fds, message["settings"])
        elif op == "status":
            _reap(codes)
            reply["code"] = codes.get(pid)
        elif op == "kill" and pid > 1:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for fd in fds:
            os.close(fd)
        control.send(json.dumps(reply).encode())


def _reap(codes: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        codes[pid] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS = 0x10000000, 0x40000000, 0x08000000, 0x04000000


def _own_namespaces(uid: Any) -> str:
    """A forked worker leaves the zygote's user, network, IPC and UTS namespaces for new ones of its own (it keeps
    the zygote's read-only mount namespace and PID namespace). As root it first switches to its parent-allocated
    uid, then maps only that uid into its user namespace, so it holds no privilege over anything outside it."""
    import ctypes

    if os.geteuid() == 0:
        if not isinstance(uid, int) or uid <= 0:
            raise SystemExit("sandbox worker forked as root without a uid to drop to")
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    outer_uid, outer_gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # the uid switch made /proc/self root's; `_harden` clears it again
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0:
        raise SystemExit(f"sandbox worker: unshare refused (errno {ctypes.get_errno()})")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{outer_uid} {outer_uid} 1"),
                       ("gid_map", f"{outer_gid} {outer_gid} 1")):  # fmt: skip
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    return "user, network, IPC, UTS"


def _fork_worker(control: Any, fds: list[int], settings: dict[str, Any]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        control.close()
        os.setsid()  # its own process group: the whole group is killed on a fault
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for name in ("socket", "_socket", "selectors"):  # a new import of these is refused by the audit hook
            sys.modules.pop(name, None)
        if settings.get("own_namespaces"):
            settings = {**settings, "namespaces_of_its_own": _own_namespaces(settings.get("uid"))}
        _serve(settings)
        code = 0
    finally:
        os._exit(code)


def main() -> None:
    """Entry point: a worker (`settings` in argv[1]) or, with `"zygote_fd"` in the settings, a zygote."""
    settings = json.loads(sys.argv[1])
    if os.getpid() == 1:
        _init_process()
    if "zygote_fd" in settings:
        _zygote(int(settings["zygote_fd"]))
        return
    _serve(settings)


if __name__ == "__main__":
    main()
