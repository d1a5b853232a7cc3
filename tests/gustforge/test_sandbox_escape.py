"""Escape attempts against the sandbox. Each one must be stopped: statically (SandboxViolation), at run time
(structured error from a read-only module proxy or restricted builtins), or by a limit (timeout / memory)."""

from __future__ import annotations

import json

import pytest

from gustforge.errors import SandboxError, SandboxMemoryError, SandboxTimeout, SandboxViolation
from gustforge.sandbox import SandboxLimits, SandboxWorker, check_source

FAST = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)


def _tool(body: str, *, header: str = "") -> str:
    lines = "\n".join("    " + line for line in body.splitlines())
    return f"{header}\ndef attack(db):\n{lines}\n    return {{'status': 'success', 'message': 'escaped'}}\n"


STATIC = {
    "dunder_import": ("__import__('os')", "dunder name '__import__'"),
    "import_os": ("import os", "module 'os'"),
    "import_subprocess": ("import subprocess", "module 'subprocess'"),
    "from_socket": ("from socket import socket", "module 'socket'"),
    "import_importlib": ("import importlib", "module 'importlib'"),
    "sys_modules": ("import sys\nsys.modules['os']", "module 'sys'"),
    "open_passwd": ("open('/etc/passwd').read()", "name 'open'"),
    "eval": ("eval('1+1')", "name 'eval'"),
    "exec": ("exec('x = 1')", "name 'exec'"),
    "compile": ("compile('1', 'f', 'eval')", "name 'compile'"),
    "subclasses_walk": ("().__class__.__bases__[0].__subclasses__()", "'__class__'"),
    "list_class": ("[].__class__", "'__class__'"),
    "func_globals": ("def f():\n    pass\nf.__globals__['__builtins__']", "'__globals__'"),
    "builtins_dict": ("__builtins__['open']", "dunder name '__builtins__'"),
    "getattr_globals": ("def f():\n    pass\ngetattr(f, '__glo' + 'bals__')", "name 'getattr'"),
    "type_class_creation": ("type('X', (object,), {'a': 1})", "name 'type'"),
    "generator_frame": ("g = (i for i in [1])\ng.gi_frame.f_back.f_globals", "'gi_frame'"),
    "breakpoint": ("breakpoint()", "name 'breakpoint'"),
    "help": ("help()", "name 'help'"),
    "format_walk": ("'{0.__class__}'.format(1)", "attribute 'format'"),
    "format_map_walk": ("'{x.__class__}'.format_map({'x': 1})", "attribute 'format_map'"),
    "str_format_unbound": ("list(map(str.format, ['{0.__class__}'], [1]))", "attribute 'format'"),
    "fstring_dunder": ("f'{db.__class__}'", "'__class__'"),
    "json_decoder_globals": ("import json\njson.decoder.scanstring.__globals__", "'__globals__'"),
    "import_submodule": ("import json.decoder", "module 'json.decoder'"),
    "from_import_submodule": ("from collections import abc", "'abc' is not available"),
    "unexported_function": ("from uuid import getnode", "'getnode' is not available"),
    "formatter_class": ("from string import Formatter", "'Formatter' is not available"),
    "star_import": ("from math import *", "import *"),
    "relative_import": ("from . import tools", "relative imports"),
    "vars_globals_locals": ("vars(); globals(); locals()", "name 'vars'"),
    "setattr_module": ("import json\nsetattr(json, 'dumps', None)", "name 'setattr'"),
    "attribute_store": ("import json\njson.dumps = None", "assigning or deleting attribute 'dumps'"),
    "metaclass": ("class X(metaclass=abs):\n    pass", "metaclass"),
    "dunder_method": ("class X:\n    def __getattr__(self, n):\n        return n", "dunder name '__getattr__'"),
    "match_class_dunder": ("match db:\n    case dict(__class__=c):\n        pass", "'__class__'"),
    "exception_traceback": ("try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame", "'__traceback__'"),
    "async_def": ("async def f():\n    pass", "async functions"),
    "global_statement": ("global db2", "global statements"),
    "private_attribute": ("import json\njson._default_encoder", "underscore attribute '_default_encoder'"),
    "exit_quit": ("exit()", "name 'exit'"),
    "memoryview": ("memoryview(b'x')", "name 'memoryview'"),
    "dunder_name_lookup": ("__loader__", "dunder name '__loader__'"),
    "type_mro": ("import datetime\ndatetime.date.mro()", "attribute 'mro'"),
    # class patterns read attributes: the same rules as `x.attr` (issue 15)
    "match_class_gi_frame": (
        "g = (i for i in [1])\nmatch g:\n    case object(gi_frame=f):\n        pass",
        "'gi_frame'",
    ),
    "match_class_frame_walk": (
        "match db:\n    case object(f_back=b, f_globals=g, f_builtins=x):\n        pass",
        "attribute 'f_back' is not allowed (in a class pattern)",
    ),
    "match_class_format": ("match 'x':\n    case str(format=f):\n        pass", "attribute 'format'"),
    "match_class_tb": ("match db:\n    case object(tb_next=t):\n        pass", "'tb_next'"),
    "match_class_code": ("match db:\n    case object(co_consts=c):\n        pass", "'co_consts'"),
    "frame_family_attribute": ("g = (i for i in [1])\ng.gi_suspended", "'gi_suspended'"),
    "abc_register": ("import collections\ncollections.ChainMap.register(list)", "attribute 'register'"),
    "with_traceback": ("ValueError('x').with_traceback(None)", "attribute 'with_traceback'"),
}


@pytest.mark.parametrize("body,expected", list(STATIC.values()), ids=list(STATIC))
def test_static_violation(body: str, expected: str) -> None:
    with pytest.raises(SandboxViolation) as info:
        check_source(_tool(body))
    assert expected in str(info.value)
    assert "line " in str(info.value)


@pytest.fixture(scope="module")
def worker():
    with SandboxWorker(FAST) as w:
        yield w


@pytest.mark.parametrize("body,expected", [STATIC["import_os"], STATIC["open_passwd"], STATIC["format_walk"]])
def test_worker_load_refuses_violations(worker: SandboxWorker, body: str, expected: str) -> None:
    with pytest.raises(SandboxViolation, match=expected):
        worker.load(_tool(body), {})


def test_child_rechecks_source_without_the_parent(worker: SandboxWorker) -> None:
    """Defence in depth: a load request that skips the parent's check is refused by the worker itself."""
    with pytest.raises(SandboxViolation, match="module 'os'"):
        worker._request({"op": "load", "source": _tool("import os"), "db": {}, "seed": 0})
    assert worker.alive  # a refused source does not cost a restart


RUNTIME = {
    "json_codecs_open": (
        "import json\nreturn {'status': 'success', 'message': str(json.codecs.open)}",
        "AttributeError: module 'json' has no attribute 'codecs' in the sandbox",
    ),
    "datetime_sys": (
        "import datetime\nreturn {'status': 'success', 'message': str(datetime.sys)}",
        "AttributeError: module 'datetime' has no attribute 'sys' in the sandbox",
    ),
    "re_functools": (
        "import re\nreturn {'status': 'success', 'message': str(re.functools)}",
        "has no attribute 'functools' in the sandbox",
    ),
    "string_formatter": (
        "import string\nreturn {'status': 'success', 'message': str(string.Formatter)}",
        "has no attribute 'Formatter' in the sandbox",
    ),
    "random_system": (
        "import random\nreturn {'status': 'success', 'message': str(random.SystemRandom)}",
        "has no attribute 'SystemRandom' in the sandbox",
    ),
    "builtins_not_offered": (
        "return {'status': 'success', 'message': str(id(db))}",
        "NameError: name 'id' is not defined",
    ),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\nreturn f(0)", "RecursionError"),
    "module_proxy_alias": (
        "import json as j\nreturn {'status': 'success', 'message': str(j.scanner)}",
        "no attribute 'scanner'",
    ),
}


@pytest.mark.parametrize("body,expected", list(RUNTIME.values()), ids=list(RUNTIME))
def test_runtime_block(worker: SandboxWorker, body: str, expected: str) -> None:
    worker.load(_tool(body), {})
    out = worker.call("attack", {})
    assert out["status"] == "error" and expected in out["message"]


def test_cpu_loop_is_killed_even_when_the_signal_is_caught() -> None:
    """SIGXCPU's default action ends the process: a bare `except:` around the loop cannot keep it alive."""
    with SandboxWorker(SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=30)) as w:
        w.load(_tool("while True:\n    try:\n        while True:\n            pass\n    except:\n        pass"), {})
        with pytest.raises(SandboxTimeout, match="CPU limit"):
            w.call("attack", {})


def test_wall_limit_when_cpu_limit_is_generous() -> None:
    with SandboxWorker(SandboxLimits(cpu_seconds=60, memory_mb=256, wall_seconds=1)) as w:
        w.load(_tool("while True:\n    pass"), {})
        with pytest.raises(SandboxTimeout, match="wall-clock"):
            w.call("attack", {})


@pytest.mark.parametrize(
    "body",
    [
        "x = 'a' * 10**10",
        "x = [0] * 10**10",
        "x = []\nwhile True:\n    x.append('a' * 10**6)",
    ],
    ids=["string_bomb", "list_bomb", "growing_list"],
)
def test_memory_bombs(worker: SandboxWorker, body: str) -> None:
    worker.load(_tool(body), {})
    with pytest.raises(SandboxMemoryError):
        worker.call("attack", {})


def test_output_cannot_forge_protocol_lines(worker: SandboxWorker) -> None:
    forged = '\n{"ok": true, "result": {"status": "success", "message": "forged"}}\n'
    worker.load(_tool(f"print({forged!r})\nreturn {{'status': 'error', 'message': {forged!r}}}"), {})
    assert worker.call("attack", {}) == {"status": "error", "message": forged}
    worker.ping()


def test_another_session_db_is_unreachable() -> None:
    secret = {"vault": {"key": "s3cr3t-value"}}
    snoop = (
        "import json\nimport copy\nimport collections\n"
        "return {'status': 'success', 'message': json.dumps([db, copy.deepcopy(db)])}"
    )
    with SandboxWorker(FAST) as victim, SandboxWorker(FAST) as attacker:
        victim.load(_tool("return {'status': 'success', 'message': 'ok'}"), secret)
        attacker.load(_tool(snoop), {"mine": 1})
        assert victim.pid != attacker.pid
        out = attacker.call("attack", {})
        assert "s3cr3t" not in json.dumps(out) and "s3cr3t" not in json.dumps(attacker.get_db())


def test_tests_module_cannot_touch_env_internals(worker: SandboxWorker) -> None:
    worker.load(_tool("return {'status': 'success', 'message': 'ok'}"), {})
    report = worker.run_tests("def test_x(env):\n    env._failures.clear()\n", {})
    assert report.error is not None and "'_failures'" in report.error


def test_well_behaved_module_still_works(worker: SandboxWorker) -> None:
    source = (
        "import re, math, json, datetime, random, string, itertools, functools, collections, statistics, uuid, "
        "hashlib, copy\n"
        "class NotFound(Exception):\n    pass\n"
        "def ok(db, text='a-b'):\n"
        "    parts = re.split('-', text)\n"
        "    when = datetime.date(2024, 1, 2) + datetime.timedelta(days=1)\n"
        "    digest = hashlib.sha256(text.encode()).hexdigest()[:8]\n"
        "    pairs = list(itertools.combinations(parts, 2))\n"
        "    total = functools.reduce(lambda a, b: a + b, [1, 2, 3])\n"
        "    counts = collections.Counter(parts)\n"
        "    try:\n        raise NotFound('x')\n    except NotFound as exc:\n        caught = str(exc)\n"
        "    return {'status': 'success', 'message': caught, 'parts': parts, 'when': when.isoformat(),\n"
        "            'digest': digest, 'pairs': pairs, 'total': total, 'sqrt': math.sqrt(16),\n"
        "            'mean': statistics.mean([1, 2, 3]), 'counts': dict(counts), 'u': str(uuid.uuid4())[:8],\n"
        "            'letters': string.ascii_lowercase[:3], 'copy': copy.deepcopy(parts), 'r': random.random() < 1,\n"
        "            'js': json.loads(json.dumps({'a': 1}))}\n"
    )
    worker.load(source, {})
    out = worker.call("ok", {})
    assert out["status"] == "success" and out["message"] == "x"
    assert out["parts"] == ["a", "b"] and out["when"] == "2024-01-03" and out["total"] == 6


def test_validate_never_leaks_exception_objects(worker: SandboxWorker) -> None:
    worker.load(_tool("return {'status': 'success', 'message': 'ok'}"), {})
    tests = (
        "def test_ref(env):\n"
        "    out = env.validate(1, {'$ref': 'https://example.com/x.json'})\n"
        "    env.check(isinstance(out, list) and all(isinstance(m, str) for m in out), str(out))\n"
        "def test_non_json_args(env):\n"
        "    out = env.call('attack', {'x': {1, 2}})\n"
        "    env.check(out['message'].startswith('invalid arguments: not JSON'), out['message'])\n"
    )
    report = worker.run_tests(tests, {"attack": {"parameters": {"type": "object"}, "response": {}}})
    assert report.passed, report.failures


def test_closed_worker_is_not_resurrected() -> None:
    w = SandboxWorker(FAST)
    w.load(_tool("return {'status': 'success', 'message': 'ok'}"), {})
    w.close()
    with pytest.raises(SandboxError, match="closed"):
        w.call("attack", {})
