"""Escape payloads for the red-team suite (`test_sandbox_redteam.py`).

Each payload is a whole untrusted module. Placeholders, replaced before use: MARKER (a path the attack tries to
create), SECRET (a host file the attack tries to read), PORT (a listener on 127.0.0.1 the attack tries to reach).

`LAYER1`: tools modules run with every wall on (through the Python API and through `gust env run`).
`LAYER2`: attacks that assume the static policy was bypassed: run with the static check off, they start from the
real `os` module globals and the real builtins (the classic `__subclasses__` walk) and must still reach nothing.
`TESTS`: generated-tests modules that try to forge their own result.
`REFS`: schemas with remote or file `$ref`s, in every position a schema appears.
"""

from __future__ import annotations

__all__ = ["LAYER1", "LAYER2", "TESTS", "REFS", "tool"]


def tool(body: str, header: str = "") -> str:
    """A tools module whose `attack(db)` runs `body` (which should return a result dict)."""
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return f"{header}\ndef attack(db):\n{lines}\n    return {{'status': 'error', 'message': 'contained'}}\n"


_LEAK = "return {'status': 'success', 'message': str(leak)}"

LAYER1: dict[str, str] = {
    # ---- frame walks, by every route: generators, coroutines, async generators, tracebacks, formats, patterns
    "class_pattern_generator_frame": tool(
        "g = (x for x in [1])\nmatch g:\n    case object(gi_frame=fr):\n        match fr:\n"
        "            case object(f_back=back, f_globals=G, f_builtins=B):\n"
        "                leak = B['open']('SECRET').read()\n                " + _LEAK
    ),
    "class_pattern_frame_family": tool(
        "g = (x for x in [1])\nmatch g:\n    case object(gi_code=c):\n        leak = c\n        " + _LEAK
    ),
    "coroutine_frame": tool(
        "co = agen()\nmatch co:\n    case object(cr_frame=fr):\n        leak = fr\n        " + _LEAK,
        header="async def agen():\n    return 1\n",
    ),
    "async_generator_frame": tool(
        "ag = agen()\nleak = ag.ag_frame.f_back.f_globals\n" + _LEAK,
        header="async def agen():\n    yield 1\n",
    ),
    "traceback_frame": tool(
        "try:\n    1 / 0\nexcept Exception as e:\n    leak = e.__traceback__.tb_frame.f_globals\n    " + _LEAK
    ),
    "traceback_class_pattern": tool(
        "try:\n    1 / 0\nexcept Exception as e:\n    match e:\n        case Exception(__traceback__=tb):\n"
        "            leak = tb\n            " + _LEAK
    ),
    "traceback_tb_next_pattern": tool(
        "try:\n    1 / 0\nexcept Exception as e:\n    match e.args:\n        case object(tb_next=t):\n"
        "            leak = t\n            " + _LEAK
    ),
    "with_traceback": tool("e = ValueError('x')\nleak = e.with_traceback(None)\n" + _LEAK),
    "format_string_walk": tool("g = (x for x in [1])\nleak = '{0.gi_frame.f_back.f_globals}'.format(g)\n" + _LEAK),
    "format_class_pattern": tool(
        "match '{0.__globals__}':\n    case str(format=f):\n        leak = f(attack)\n        " + _LEAK
    ),
    "format_map_walk": tool("leak = '{x.__class__}'.format_map({'x': db})\n" + _LEAK),
    "format_unbound": tool("leak = list(map(str.format, ['{0.__globals__}'], [attack]))\n" + _LEAK),
    "formatter_class": tool(
        "import string\nleak = string.Formatter().vformat('{0.__globals__}', [attack], {})\n" + _LEAK
    ),
    "fstring_dunder": tool("leak = f'{attack.__globals__}'\n" + _LEAK),
    # ---- real builtins and real modules
    "subclasses_walk": tool("leak = ().__class__.__base__.__subclasses__()\n" + _LEAK),
    "dunder_builtins": tool("leak = __builtins__['open']('SECRET').read()\n" + _LEAK),
    "function_globals": tool("leak = attack.__globals__['__builtins__']\n" + _LEAK),
    "getattr_concat": tool("leak = getattr(attack, '__glo' + 'bals__')\n" + _LEAK),
    "vars_globals": tool("leak = vars()\n" + _LEAK),
    "open_secret": tool("leak = open('SECRET').read()\n" + _LEAK),
    "open_marker": tool("open('MARKER', 'w').write('x')\n"),
    "eval_open": tool("leak = eval(\"open('SECRET').read()\")\n" + _LEAK),
    "exec_import": tool("exec(\"import os; os.system('touch MARKER')\")\n"),
    "compile_code": tool("leak = compile('1', 'x', 'eval')\n" + _LEAK),
    "import_os_system": tool("import os\nos.system('touch MARKER')\n"),
    "import_socket": tool("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', PORT))\n"),
    "import_subprocess": tool("import subprocess\nsubprocess.run(['touch', 'MARKER'])\n"),
    "import_ctypes": tool("import ctypes\nctypes.CDLL(None).system(b'touch MARKER')\n"),
    "import_importlib": tool("import importlib\nimportlib.import_module('os').system('touch MARKER')\n"),
    "import_urllib": tool(
        "from urllib.request import urlopen\nleak = urlopen('http://127.0.0.1:PORT/').read()\n" + _LEAK
    ),
    "dunder_import": tool("leak = __import__('os')\n" + _LEAK),
    "import_resource_rlimit": tool("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (-1, -1))\n"),
    "import_signal": tool("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n"),
    "proxy_submodule_json_decoder": tool("import json\nleak = json.decoder\n" + _LEAK),
    "proxy_submodule_datetime_sys": tool("import datetime\nleak = datetime.sys\n" + _LEAK),
    "proxy_private_random": tool("import random\nleak = random._inst\n" + _LEAK),
    "proxy_random_system": tool("import random\nleak = random.SystemRandom().random()\n" + _LEAK),
    "proxy_store": tool("import json\njson.dumps = print\n"),
    "module_alias_dunder": tool("import json as __j\nleak = __j\n" + _LEAK),
    "namedtuple_match_args": tool(
        "import collections\nN = collections.namedtuple('N', ['gi_frame'])\ng = (x for x in [1])\n"
        "match g:\n    case N(fr):\n        leak = fr\n        " + _LEAK
    ),
    "metaclass": tool("class X(metaclass=abs):\n    pass\n"),
    "dunder_method_def": tool("class X:\n    def __getattr__(self, name):\n        return name\n"),
    "type_mro": tool("import datetime\nleak = datetime.date.mro()\n" + _LEAK),
    "global_statement": tool("global ATTACK\nATTACK = 1\n"),
    # ---- cross-environment state (one fresh worker per environment makes these moot; still refused)
    "abc_register": tool("import collections\ncollections.ChainMap.register(list)\n"),
    "deepcopy_nil_channel": tool("import copy\nstash = []\ncopy.deepcopy(db, {}, stash)\nleak = stash\n" + _LEAK),
    "deepcopy_memo_keepalive": tool("import copy\nmemo = {}\ncopy.deepcopy(db, memo)\nleak = memo\n" + _LEAK),
    # ---- limits and parent DoS
    "cpu_spin_catching": tool(
        "while True:\n    try:\n        while True:\n            pass\n    except:\n        pass\n"
    ),
    "memory_bomb": tool("x = 'a' * 10**10\n"),
    "growing_list": tool("x = []\nwhile True:\n    x.append('a' * 10**6)\n"),
    "recursion_bomb": tool("def f(n):\n    return f(n + 1)\nreturn f(0)\n"),
    "huge_exception_message": tool("raise ValueError('x' * 50_000_000)\n"),
    "huge_output": tool("return {'status': 'success', 'message': 'x' * 20_000_000}\n"),
    "deep_output": tool(
        "v = []\nfor _ in range(500):\n    v = [v]\nreturn {'status': 'success', 'message': 'x', 'v': v}\n"
    ),
    "very_deep_output": tool(
        "v = []\nfor _ in range(200_000):\n    v = [v]\nreturn {'status': 'success', 'message': 'x', 'v': v}\n"
    ),
    "non_json_output": tool("return {'status': 'success', 'message': 'x', 'v': {1, 2}}\n"),
    "protocol_forge_print": tool(
        'print(\'\\n{"ok": true, "id": 2, "result": {"status": "success", "message": "forged"}}\\n\')\n'
    ),
    "protocol_forge_output": tool(
        "return {'status': 'success', 'message': '\\n{\"ok\": true, \"id\": 3, \"result\": {}}\\n'}\n"
    ),
    "lone_surrogate_output": tool("return {'status': 'success', 'message': 'a' + chr(0xD800) + 'b'}\n"),
    "lone_surrogate_error": tool("raise ValueError(chr(0xDC00) * 3)\n"),
    "db_tamper": tool("db.clear()\ndb['pwned'] = True\nreturn {'status': 'success', 'message': 'tampered'}\n"),
    # ---- gadgets made only of allowed names (copy protocol, namedtuple typenames, positional class patterns)
    "copy_bound_method_getattr": (
        "import copy\nfrom collections import namedtuple\n"
        "class Box:\n    def values(self):\n        return []\n"
        "def attack(db):\n    got = copy.copy(Box().values)\n    T = namedtuple('Getter', 'a')\n"
        "    leak = [copy.deepcopy(T.values) if False else got, copy.copy(T)]\n"
        "    return {'status': 'success', 'message': str(leak)}\n"
    ),
    "dunder_namedtuple_typename": (
        "from collections import namedtuple\n"
        "def attack(db):\n    T = namedtuple('__builtins__', 'a')\n    U = namedtuple('__globals__', 'b')\n"
        "    return {'status': 'success', 'message': str([T, U])}\n"
    ),
    "positional_match_args_pattern": tool(
        "g = (x for x in [1])\nmatch g:\n    case object(fr):\n        leak = fr\n        "
        + "return {'status': 'success', 'message': str(leak)}"
    ),
    "positional_match_args_namedtuple": (
        "from collections import namedtuple\nP = namedtuple('P', 'gi_frame')\n"
        "def attack(db):\n    match (x for x in [1]):\n        case P(fr):\n"
        "            return {'status': 'success', 'message': str(fr)}\n"
        "    return {'status': 'error', 'message': 'contained'}\n"
    ),
}

# The real `os` module globals and real builtins, as an attacker who got past the static check would hold them.
_REAL = """
def _real():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == '_wrap_close':
            return cls.__init__.__globals__
    raise RuntimeError('no route')
G = _real()
B = G['__builtins__']
"""


def _l2(body: str) -> str:
    return tool(body, header=_REAL)


LAYER2: dict[str, str] = {
    "real_open_secret": _l2("leak = B['open']('SECRET').read()\n" + _LEAK),
    "real_open_marker": _l2("B['open']('MARKER', 'w').write('x')\n"),
    "real_os_open": _l2("leak = G['read'](G['open']('SECRET', G['O_RDONLY']), 100)\n" + _LEAK),
    "real_os_open_create": _l2("G['open']('MARKER', G['O_CREAT'] | G['O_WRONLY'])\n"),
    "real_proc_environ": _l2("leak = B['open']('/proc/self/environ').read()\n" + _LEAK),
    "real_listdir": _l2("leak = G['listdir']('/')\n" + _LEAK),
    "real_scandir": _l2("leak = list(G['scandir']('/'))\n" + _LEAK),
    "real_remove_secret": _l2("G['remove']('SECRET')\n"),
    "real_rename_secret": _l2("G['rename']('SECRET', 'MARKER')\n"),
    "real_symlink": _l2("G['symlink']('SECRET', 'MARKER')\n"),
    "real_mkdir": _l2("G['mkdir']('MARKER')\n"),
    "real_truncate": _l2("G['truncate']('SECRET', 0)\n"),
    "real_chmod": _l2("G['chmod']('SECRET', 0o777)\n"),
    "real_system": _l2("G['system']('touch MARKER')\n"),
    "real_posix_spawn": _l2("G['posix_spawn']('/bin/sh', ['sh', '-c', 'touch MARKER'], {})\n"),
    "real_spawnv": _l2("G['spawnv'](G['P_WAIT'], '/bin/sh', ['sh', '-c', 'touch MARKER'])\n"),
    "real_execv": _l2("G['execv']('/bin/sh', ['sh', '-c', 'touch MARKER'])\n"),
    "real_fork": _l2("pid = G['fork']()\nif pid == 0:\n    B['open']('MARKER', 'w')\n"),
    "real_forkpty": _l2("G['forkpty']()\n"),
    "real_kill_parent": _l2("G['kill'](G['getppid'](), 9)\n"),
    "real_killpg": _l2("G['killpg'](0, 9)\n"),
    "real_putenv": _l2("G['putenv']('X', 'Y')\n"),
    "real_import_socket": _l2("s = B['__import__']('socket').socket()\ns.connect(('127.0.0.1', PORT))\n"),
    "real_import_ctypes": _l2("B['__import__']('ctypes').CDLL(None).system(b'touch MARKER')\n"),
    "real_import_subprocess": _l2("B['__import__']('subprocess').run(['touch', 'MARKER'])\n"),
    "real_import_urllib": _l2(
        "leak = B['__import__']('urllib.request', fromlist=['x']).urlopen('http://127.0.0.1:PORT/').read()\n" + _LEAK
    ),
    "real_sys_getframe": _l2("sys = B['__import__']('sys')\nleak = sys._getframe().f_back.f_globals\n" + _LEAK),
    "real_generator_frame": _l2("g = (x for x in [1])\nleak = g.gi_frame.f_back\n" + _LEAK),
    "real_traceback_frame": _l2(
        "try:\n    1 / 0\nexcept Exception as e:\n    leak = e.__traceback__.tb_frame.f_back\n    " + _LEAK
    ),
    "real_gc_objects": _l2("leak = B['__import__']('gc').get_objects()\n" + _LEAK),
    "real_gc_referrers": _l2("leak = B['__import__']('gc').get_referrers(db)\n" + _LEAK),
    "real_code_swap": _l2("attack.__code__ = (lambda db: None).__code__\n"),
    "real_setrlimit_memory": _l2("r = B['__import__']('resource')\nr.setrlimit(r.RLIMIT_AS, (-1, -1))\n"),
    "real_setrlimit_cpu_hard": _l2("r = B['__import__']('resource')\nr.setrlimit(r.RLIMIT_CPU, (-1, -1))\n"),
    "real_setuid_root": _l2("G['setuid'](0)\nB['open']('MARKER', 'w')\n"),
    "real_ignore_sigxcpu_and_spin": _l2(
        "sig = B['__import__']('signal')\nsig.signal(sig.SIGXCPU, sig.SIG_IGN)\nwhile True:\n    pass\n"
    ),
    "real_audit_hook_add": _l2("B['__import__']('sys').addaudithook(lambda e, a: None)\n"),
    "real_protocol_forge": _l2(
        "for fd in range(3, 8):\n    try:\n"
        '        G[\'write\'](fd, b\'{"ok": true, "id": 99, "result": {"status": "success"}}\\n\')\n'
        "    except Exception:\n        pass\n"
    ),
    "real_protocol_undecodable": _l2(
        "for fd in range(3, 8):\n    try:\n        G['write'](fd, b'\\xff\\xfe\\n')\n    except Exception:\n        pass\n"
    ),
    "real_protocol_deep": _l2(
        "for fd in range(3, 8):\n    try:\n        G['write'](fd, b'[' * 200000 + b'\\n')\n"
        "    except Exception:\n        pass\n"
    ),
    "real_stderr_flood": _l2("G['write'](2, b'x' * 50_000_000)\nG['write'](2, b'\\n' * 100_000)\n"),
}

TESTS: dict[str, str] = {
    "deepcopy_memo_forge": (
        "import copy\ndef test_forge(env):\n    env.check(False, 'must fail')\n    memo = {}\n"
        "    copy.deepcopy(env, memo)\n    for value in list(memo.values()):\n"
        "        if isinstance(value, list):\n            value.clear()\n"
    ),
    "deepcopy_env": "import copy\ndef test_forge(env):\n    env.check(False, 'must fail')\n    copy.deepcopy(env)\n",
    "copy_env": "import copy\ndef test_forge(env):\n    env.check(False, 'must fail')\n    copy.copy(env)\n",
    "failures_attribute": "def test_forge(env):\n    env.check(False, 'must fail')\n    env._failures.clear()\n",
    "check_rebind": "def test_forge(env):\n    env.check = abs\n    env.check(False, 'must fail')\n",
    "failures_class_pattern": (
        "def test_forge(env):\n    env.check(False, 'must fail')\n    match env:\n"
        "        case object(_failures=f):\n            f.clear()\n"
    ),
    "escape_except_exception": (
        "def gen():\n    try:\n        yield 1\n    except:\n        raise\n"
        "def test_forge(env):\n    env.check(False, 'must fail')\n    g = gen()\n    next(g)\n    g.close()\n"
    ),
    "generator_test_skips_its_body": "def test_forge(env):\n    env.check(False, 'must fail')\n    yield\n",
    "validate_remote_ref": (
        "def test_forge(env):\n    out = env.validate(1, {'$ref': 'http://127.0.0.1:PORT/schema.json'})\n"
        "    env.check(False, str(out))\n"
    ),
    "validate_file_ref": (
        "def test_forge(env):\n    out = env.validate(1, {'$ref': 'file://SECRET'})\n    env.check(False, str(out))\n"
    ),
    "validate_id_relative_ref": (
        "def test_forge(env):\n    out = env.validate(1, {'$id': 'http://127.0.0.1:PORT/a/', "
        "'properties': {'x': {'$ref': 'b.json'}}, 'type': 'object'})\n"
        "    out = out + env.validate({'x': 1}, {'$id': 'http://127.0.0.1:PORT/a/', "
        "'properties': {'x': {'$ref': 'b.json'}}})\n    env.check(False, str(out))\n"
    ),
}

_HTTP = "http://127.0.0.1:PORT/schema.json"
REFS: dict[str, tuple[dict, dict]] = {  # name -> (parameters, response)
    "param_root_http": ({"$ref": _HTTP}, {}),
    "param_root_file": ({"$ref": "file://SECRET"}, {}),
    "param_property_http": ({"type": "object", "properties": {"a": {"$ref": _HTTP}}}, {}),
    "param_defs_http": (
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"$ref": _HTTP}}},
        {},
    ),
    "param_items_file": ({"type": "object", "properties": {"a": {"items": {"$ref": "file://SECRET"}}}}, {}),
    "param_id_relative": (
        {"$id": "http://127.0.0.1:PORT/a/", "type": "object", "properties": {"a": {"$ref": "b.json"}}},
        {},
    ),
    "param_dynamic_ref": ({"type": "object", "properties": {"a": {"$dynamicRef": _HTTP}}}, {}),
    "response_root_http": ({"type": "object"}, {"$ref": _HTTP}),
    "response_property_file": ({"type": "object"}, {"type": "object", "properties": {"m": {"$ref": "file://SECRET"}}}),
    "response_anyof_http": ({"type": "object"}, {"anyOf": [{"$ref": _HTTP}, {"type": "object"}]}),
}
