"""The sandbox worker process: runs untrusted tools/tests modules. Standard library only; never imported by the parent.

Started by `gustforge.sandbox.worker.SandboxWorker` as `python -s -P -B child.py <limits-json>`. It speaks JSON lines:
one request per line on stdin, one response per line on the (private copy of) stdout. Responses are
`{"ok": true, "result": ...}` or `{"ok": false, "fault": "violation" | "memory" | "error", "message": ...}`.

Walls inside this process: the policy check again (`policy.py`, loaded by path), restricted builtins, a guarded
importer that hands out read-only module proxies exposing only `policy.MODULE_EXPORTS`, rlimits (address space,
files, file size, processes, core) and a per-request CPU soft limit whose SIGXCPU kills the process uncatchably.
Everything here is process-local; the parent restarts the process after any fault.
"""

from __future__ import annotations

import copy
import datetime
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


def _load_policy() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gust_sandbox_policy", Path(__file__).with_name("policy.py"))
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships next to this one
        raise RuntimeError("sandbox policy module not found")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


POLICY = _load_policy()
_COLLECTIONS = {
    "Counter": Counter,
    "OrderedDict": OrderedDict,
    "defaultdict": defaultdict,
    "deque": deque,
    "namedtuple": namedtuple,
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


class ModuleProxy:
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
        "collections": _COLLECTIONS,
    }
    proxies = {}
    for name, exports in POLICY.MODULE_EXPORTS.items():
        source = overrides.get(name, {})
        module = _REAL_MODULES.get(name)
        attrs = {attr: source[attr] if attr in source else getattr(module, attr) for attr in sorted(exports)}
        proxies[name] = ModuleProxy(name, attrs)
    return proxies


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


def _compile(source: str, label: str) -> types.CodeType:
    violations = POLICY.find_violations(source)
    if violations:
        raise Fault("violation", f"{label}: " + "; ".join(violations))
    return compile(source, f"<{label}>", "exec", dont_inherit=True)


class Limits:
    """Per-request CPU soft limit: SIGXCPU's default action ends the process, which untrusted code cannot catch."""

    def __init__(self, cpu_seconds: float, memory_mb: int) -> None:
        self.cpu_seconds = cpu_seconds
        memory = memory_mb * 1024 * 1024
        for limit, value in (
            (resource.RLIMIT_AS, memory),
            (resource.RLIMIT_FSIZE, 0),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, 16),
            (resource.RLIMIT_NPROC, 0),
        ):
            try:
                resource.setrlimit(limit, (value, value))
            except (ValueError, OSError):
                if limit != resource.RLIMIT_NPROC:  # NPROC may be refused (and root ignores it); nothing else may
                    raise
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)

    def arm(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(math.ceil(usage.ru_utime + usage.ru_stime + self.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (max(soft, 1), resource.RLIM_INFINITY))

    def disarm(self) -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def _tool_error(exc: BaseException) -> dict[str, Any]:
    return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}


class Sandbox:
    """The live state of one worker: the tools module, its DB and (optionally) a tests module."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.tools_code: types.CodeType | None = None
        self.db_json = "{}"
        self.seed = 0
        self.db: dict[str, Any] = {}
        self.tools: dict[str, Any] = {}
        self.tests: dict[str, Any] = {}
        self.schemas: dict[str, Any] = {}

    def load(self, source: str, db: dict[str, Any], seed: int) -> list[str]:
        self.unload()
        self.tools_code = _compile(source, "tools")
        self.db_json, self.seed = json.dumps(db), seed
        self.reset()
        return list(self.tools)

    def unload(self) -> None:
        self.tools_code, self.db, self.tools, self.tests, self.schemas = None, {}, {}, {}, {}

    def reset(self) -> None:
        if self.tools_code is None:
            raise Fault("error", "no tools module is loaded")
        self.db = json.loads(self.db_json)
        namespace = self._exec(self.tools_code, "tools")
        self.tools = {name: value for name, value in namespace.items() if _is_public_function(name, value, "tools")}

    def set_db(self, db: dict[str, Any]) -> None:
        self.db = json.loads(json.dumps(db))

    def _exec(self, code: types.CodeType, module_name: str) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__builtins__": _builtins(_proxies(self.seed)), "__name__": module_name}
        self.limits.arm()
        try:
            exec(code, namespace)
        except MemoryError:
            raise
        except Exception as exc:
            raise Fault("error", f"{module_name} module failed at import: {type(exc).__name__}: {exc}") from None
        finally:
            self.limits.disarm()
        return namespace

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        function = self.tools.get(tool)
        if function is None:
            known = ", ".join(sorted(self.tools)) or "(none)"
            return {"status": "error", "message": f"unknown tool {tool!r}; available: {known}"}
        self.limits.arm()
        try:
            return _json_output(tool, function(self.db, **args))
        except MemoryError:
            raise
        except Exception as exc:
            return _tool_error(exc)
        finally:
            self.limits.disarm()

    def load_tests(self, source: str, schemas: dict[str, Any]) -> list[str]:
        code = _compile(source, "tests")
        self.schemas = json.loads(json.dumps(schemas))
        namespace = self._exec(code, "tests")
        self.tests = {
            name: value
            for name, value in namespace.items()
            if name.startswith("test_") and _is_public_function(name, value, "tests")
        }
        return list(self.tests)

    def run_test(self, name: str) -> dict[str, Any]:
        test = self.tests.get(name)
        if test is None:
            raise Fault("error", f"unknown test {name!r}")
        self.reset()
        env = TestEnv(self)
        self.limits.arm()
        try:
            test(env)
        except MemoryError:
            raise
        except Exception as exc:
            env._failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.limits.disarm()
        tool = _tool_for_test(name, list(self.schemas) or list(self.tools), env._called)
        return {"passed": not env._failures, "message": "; ".join(env._failures), "tool": tool}


def _is_public_function(name: str, value: Any, module_name: str) -> bool:
    return not name.startswith("_") and isinstance(value, types.FunctionType) and value.__module__ == module_name


def _json_output(tool: str, output: Any) -> dict[str, Any]:
    if not isinstance(output, dict):
        return {
            "status": "error",
            "message": f"ToolError: tool {tool!r} returned {type(output).__name__}, expected a dict",
        }
    try:
        return json.loads(json.dumps(output, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        return {"status": "error", "message": f"ToolError: tool {tool!r} returned a non-JSON output: {exc}"}


def _tool_for_test(test_name: str, tools: list[str], called: list[str]) -> str:
    stem = test_name[len("test_") :]
    matches = [tool for tool in tools if stem == tool or stem.startswith(tool + "_")]
    if matches:
        return max(matches, key=len)
    return called[0] if called else ""


class TestEnv:
    """The `env` handed to generated tests (contract: call, call_tool, db, reset, validate, schemas, check)."""

    __slots__ = ("_sandbox", "_failures", "_called", "schemas")

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self._failures: list[str] = []
        self._called: list[str] = []
        self.schemas = copy.deepcopy(sandbox.schemas)

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
        if tool in self._sandbox.tools and schema is not None:
            errors = self.validate(args, schema)
            if errors:
                return {"status": "error", "message": "invalid arguments: " + "; ".join(errors)}
        return self._sandbox.call(tool, args)

    def call_tool(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call the tool code directly (JSON arguments, no schema check): the tool itself must reject bad input."""
        self._called.append(str(tool))
        try:
            args = json.loads(json.dumps({} if args is None else args, allow_nan=False))
        except (TypeError, ValueError) as exc:
            return {"status": "error", "message": f"invalid arguments: not JSON: {exc}"}
        return self._sandbox.call(tool, args if isinstance(args, dict) else {})

    def db(self) -> dict[str, Any]:
        return copy.deepcopy(self._sandbox.db)

    def reset(self) -> None:
        self._sandbox.reset()

    def validate(self, instance: Any, schema: dict[str, Any]) -> list[str]:
        """jsonschema messages (empty = valid). Only strings come back: no third-party objects reach the test."""
        try:
            return POLICY.validation_errors(instance, schema)
        except MemoryError:
            raise
        except Exception as exc:  # unresolvable $ref, unknown type, ...: report, never leak the exception object
            return [f"validation failed: {type(exc).__name__}: {exc}"]

    def check(self, condition: Any, message: str = "check failed") -> None:
        if not condition:
            self._failures.append(str(message))


def _handle(sandbox: Sandbox, request: dict[str, Any]) -> Any:
    op = request.get("op")
    if op == "load":
        return sandbox.load(request["source"], request["db"], int(request.get("seed", 0)))
    if op == "call":
        return sandbox.call(request["tool"], request.get("args") or {})
    if op == "get_db":
        return sandbox.db
    if op == "set_db":
        return sandbox.set_db(request["db"])
    if op == "reset":
        return sandbox.reset()
    if op == "unload":
        return sandbox.unload()
    if op == "load_tests":
        return sandbox.load_tests(request["source"], request["schemas"])
    if op == "run_test":
        return sandbox.run_test(request["name"])
    if op == "ping":
        return "pong"
    raise Fault("error", f"unknown op {op!r}")


def _respond(request: dict[str, Any], sandbox: Sandbox) -> bytes:
    try:
        response: dict[str, Any] = {"ok": True, "result": _handle(sandbox, request)}
    except Fault as fault:
        response = {"ok": False, "fault": fault.kind, "message": str(fault)}
    except MemoryError:
        sandbox.db = {}
        response = {"ok": False, "fault": "memory", "message": "MemoryError: memory limit exceeded"}
    except RecursionError as exc:
        response = {"ok": False, "fault": "error", "message": f"RecursionError: {exc}"}
    try:
        return (json.dumps(response) + "\n").encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        return (json.dumps({"ok": False, "fault": "error", "message": f"unserialisable result: {exc}"}) + "\n").encode()


def main() -> None:
    """Serve requests until stdin closes. The protocol streams are private duplicates of fds 0 and 1."""
    settings = json.loads(sys.argv[1])
    reader = os.fdopen(os.dup(0), "rb")
    writer = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    sys.stdout = sys.stderr
    sandbox = Sandbox(Limits(float(settings["cpu_seconds"]), int(settings["memory_mb"])))
    for line in reader:
        try:
            request = json.loads(line)
        except ValueError as exc:
            request = {"op": "bad", "error": str(exc)}
        writer.write(_respond(request, sandbox))
        writer.flush()


if __name__ == "__main__":
    main()
