"""The sandbox policy: what untrusted code may import, name and touch. Standard library only.

This module is imported by the parent (through `gustforge.sandbox.check`) and loaded by path inside the worker
process (`gustforge.sandbox.child`), which must stay free of third-party and project imports. It therefore raises
nothing project-specific: `find_violations` returns messages and callers decide which exception to raise.

The static check is the first wall; the worker adds restricted builtins, a guarded importer and read-only module
proxies (`MODULE_EXPORTS`), then rlimits and a wall timeout.
"""

from __future__ import annotations

import ast
import gc
import math
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

# CPython 3.11's ast.parse is not thread-safe (gh-106905: "AST constructor recursion depth mismatch"): the
# check races with any other thread of the process that builds an AST (envgen's build threads, and libraries
# such as griffe under Prefect). We serialize our own parses and retry the rare spurious SystemError.
_PARSE_LOCK = threading.Lock()
_PARSE_ATTEMPTS = 5


def _parse(source: str) -> ast.Module:
    for attempt in range(_PARSE_ATTEMPTS):
        try:
            with _PARSE_LOCK, _no_gc():
                return ast.parse(source, filename="<gust-policy-check>", mode="exec")
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _PARSE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic GC while the parser allocates its (acyclic) tree: the collections its thousands of nodes
    would trigger found nothing to free and took about half the parse time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


__all__ = [
    "ALLOWED_MODULES",
    "MODULE_EXPORTS",
    "FORBIDDEN_NAMES",
    "FORBIDDEN_ATTRIBUTES",
    "MAX_SOURCE_CHARS",
    "checked_tree",
    "find_violations",
]

MAX_SOURCE_CHARS = 1_000_000

# Each allowed module exposes ONLY these attributes (no submodules, no module-typed attributes, nothing that
# mutates shared classes or runs processes). `random` and `uuid4` are rebound per load to a seeded generator.
MODULE_EXPORTS: dict[str, frozenset[str]] = {
    "math": frozenset(name for name in dir(math) if not name.startswith("_")),
    "json": frozenset({"dumps", "loads", "JSONDecodeError"}),
    "re": frozenset(
        {
            "compile",
            "search",
            "match",
            "fullmatch",
            "findall",
            "finditer",
            "sub",
            "subn",
            "split",
            "escape",
            "error",
            "Pattern",
            "Match",
            "IGNORECASE",
            "I",
            "MULTILINE",
            "M",
            "DOTALL",
            "S",
            "VERBOSE",
            "X",
            "ASCII",
            "A",
            "UNICODE",
            "U",
        }
    ),
    "copy": frozenset({"copy", "deepcopy"}),
    "datetime": frozenset({"date", "datetime", "time", "timedelta", "timezone", "MINYEAR", "MAXYEAR"}),
    "random": frozenset(
        {
            "random",
            "randint",
            "randrange",
            "choice",
            "choices",
            "sample",
            "shuffle",
            "uniform",
            "gauss",
            "getrandbits",
            "Random",
        }
    ),
    "string": frozenset(
        {
            "ascii_letters",
            "ascii_lowercase",
            "ascii_uppercase",
            "digits",
            "hexdigits",
            "octdigits",
            "punctuation",
            "printable",
            "whitespace",
            "capwords",
        }
    ),
    "itertools": frozenset(
        {
            "accumulate",
            "chain",
            "combinations",
            "combinations_with_replacement",
            "compress",
            "count",
            "cycle",
            "dropwhile",
            "filterfalse",
            "groupby",
            "islice",
            "pairwise",
            "permutations",
            "product",
            "repeat",
            "starmap",
            "takewhile",
            "tee",
            "zip_longest",
        }
    ),
    "functools": frozenset({"reduce", "partial", "lru_cache", "cache", "cmp_to_key", "cached_property"}),
    "collections": frozenset({"Counter", "OrderedDict", "defaultdict", "deque", "namedtuple", "ChainMap"}),
    "statistics": frozenset(
        {
            "mean",
            "fmean",
            "geometric_mean",
            "harmonic_mean",
            "median",
            "median_low",
            "median_high",
            "mode",
            "multimode",
            "pstdev",
            "pvariance",
            "stdev",
            "variance",
            "quantiles",
            "StatisticsError",
        }
    ),
    "uuid": frozenset(
        {"UUID", "uuid3", "uuid4", "uuid5", "NAMESPACE_DNS", "NAMESPACE_URL", "NAMESPACE_OID", "NAMESPACE_X500"}
    ),
    "hashlib": frozenset(
        {"md5", "sha1", "sha224", "sha256", "sha384", "sha512", "blake2b", "blake2s", "sha3_256", "sha3_512"}
    ),
}
ALLOWED_MODULES: frozenset[str] = frozenset(MODULE_EXPORTS)

FORBIDDEN_NAMES: frozenset[str] = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "memoryview",
        "type",
        "super",
        "dir",
    }
)

# Non-underscore attributes that reach frames, code objects or the string formatter (a known attribute walk:
# '{0.__class__}'.format(x) resolves dunders inside the string, out of reach of the AST check).
FORBIDDEN_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "format",
        "format_map",
        "vformat",
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "ag_frame",
        "ag_code",
        "ag_await",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "tb_frame",
        "tb_next",
        "mro",
        # ABCMeta.register (e.g. `collections.ChainMap.register(list)`) changes isinstance() for the whole process.
        "register",
        "with_traceback",
    }
)
# Attribute families of frames, code objects, generators, coroutines and tracebacks (f_back, co_consts, gi_frame...).
_FORBIDDEN_ATTRIBUTE_PREFIXES = ("f_", "co_", "gi_", "cr_", "ag_", "tb_")

_FORBIDDEN_NODES: dict[type[ast.AST], str] = {
    ast.AsyncFunctionDef: "async functions",
    ast.Await: "await",
    ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
    ast.Global: "global statements",
    ast.Nonlocal: "nonlocal statements",
}


def find_violations(source: str) -> list[str]:
    """Every policy violation in `source`, each as "line N: what" (empty when the source is allowed).

    Args:
        source: Python source of an untrusted module.

    Returns:
        Messages in source order; a syntax error is reported as a single message.

    Example:
        >>> find_violations("import os")[0][:40]
        "line 1: import of module 'os' is not all"
    """
    return checked_tree(source)[1]


def checked_tree(source: str) -> tuple[ast.Module | None, list[str]]:
    """`(tree, violations)`: the parsed module (None when it does not parse) and `find_violations(source)`.

    The worker compiles the very tree it checked instead of parsing the text a second time.
    """
    if len(source) > MAX_SOURCE_CHARS:
        return None, [f"line 1: source is {len(source)} characters, more than the limit {MAX_SOURCE_CHARS}"]
    try:
        tree = _parse(source)
    except SyntaxError as exc:
        return None, [f"line {exc.lineno or 0}: syntax error: {exc.msg}"]
    except (RecursionError, MemoryError, ValueError) as exc:
        return None, [f"line 0: source cannot be parsed: {type(exc).__name__}"]
    found: list[tuple[int, str]] = []
    for node in _walk(tree):
        if type(node) not in _CHECKED_NODES:  # `_node_violations` finds nothing in any other node type
            continue
        messages = _node_violations(node)
        if messages:
            line = int(getattr(node, "lineno", 0))
            found.extend((line, f"line {line}: {message}") for message in messages)
    return tree, [message for _, message in sorted(found, key=lambda item: item[0])]


def _walk(tree: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` (same nodes, same breadth-first order) without its per-node generators."""
    todo = deque([tree])
    ast_type, list_type = ast.AST, list
    while todo:
        node = todo.popleft()
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast_type):
                todo.append(value)
            elif type(value) is list_type:
                todo.extend(item for item in value if isinstance(item, ast_type))
        yield node


# Every node type `_node_violations` can report on; the parser builds exact node types (no subclasses).
_CHECKED_NODES: frozenset[type[ast.AST]] = frozenset(
    {
        *_FORBIDDEN_NODES,
        ast.Import,
        ast.ImportFrom,
        ast.Attribute,
        ast.ClassDef,
        ast.MatchClass,
        ast.Name,
        ast.arg,
        ast.FunctionDef,
        ast.keyword,
        ast.ExceptHandler,
        ast.MatchAs,
        ast.MatchStar,
        ast.MatchMapping,
    }
)


def _node_violations(node: ast.AST) -> list[str]:
    label = _FORBIDDEN_NODES.get(type(node))
    if label is not None:
        return [f"{label} are not allowed"]
    if isinstance(node, ast.Import):
        return [m for alias in node.names for m in _import_violations(alias.name, None)] + _alias_names(node)
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return ["relative imports are not allowed"]
        names = [alias.name for alias in node.names]
        return [m for name in names for m in _import_violations(node.module or "", name)] + _alias_names(node)
    if isinstance(node, ast.Attribute):
        return _attribute_violations(node)
    if isinstance(node, ast.ClassDef) and node.keywords:
        return [f"class {node.name!r}: keywords (metaclass) are not allowed"]
    if isinstance(node, ast.MatchClass):  # `case C(attr=x)` reads `subject.attr`: the same rules as `x.attr`
        found = [f"{m} (in a class pattern)" for a in node.kwd_attrs for m in _attribute_name_violations(a)]
        return found + _positional_pattern_violations(node)
    return [_name_message(name) for name in _identifiers(node) if _bad_name(name)]


# Builtins whose single positional class pattern matches the subject itself (`case int(n)`); any other positional
# sub-pattern reads the attributes a class names in `__match_args__`, which the check cannot see.
SELF_MATCHING_CLASSES = frozenset(
    {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"}
)


def _positional_pattern_violations(node: ast.MatchClass) -> list[str]:
    if not node.patterns:
        return []
    if isinstance(node.cls, ast.Name) and node.cls.id in SELF_MATCHING_CLASSES and len(node.patterns) == 1:
        return []
    return ["positional sub-patterns in a class pattern are not allowed (they read attributes named by "
            "__match_args__; use keyword sub-patterns)"]  # fmt: skip


def _import_violations(module: str, name: str | None) -> list[str]:
    allowed = ", ".join(sorted(ALLOWED_MODULES))
    if module not in MODULE_EXPORTS:
        return [f"import of module {module!r} is not allowed (allowed: {allowed})"]
    if name == "*":
        return [f"'from {module} import *' is not allowed"]
    if name is not None and name not in MODULE_EXPORTS[module]:
        return [f"'{name}' is not available from module {module!r} in the sandbox"]
    return []


def _alias_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [_name_message(a.asname) for a in node.names if a.asname is not None and _bad_name(a.asname)]


def _attribute_name_violations(attr: str) -> list[str]:
    if attr.startswith("_"):
        return [f"access to underscore attribute {attr!r} is not allowed"]
    if attr in FORBIDDEN_ATTRIBUTES or attr.startswith(_FORBIDDEN_ATTRIBUTE_PREFIXES):
        return [f"access to attribute {attr!r} is not allowed"]
    return []


def _attribute_violations(node: ast.Attribute) -> list[str]:
    found = _attribute_name_violations(node.attr)
    if isinstance(node.ctx, ast.Store | ast.Del):
        found.append(f"assigning or deleting attribute {node.attr!r} is not allowed")
    return found


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.keyword) and node.arg is not None:
        return [node.arg]
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name is not None:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest is not None:
        return [node.rest]
    return []


def _bad_name(name: str) -> bool:
    # Single-underscore names are allowed: a module's own helpers (`_helper`) can only reach what the module
    # defined itself. Dunder names reach interpreter machinery (`__builtins__`, `__import__`, `__loader__`).
    return name.startswith("__") or name in FORBIDDEN_NAMES


def _name_message(name: str) -> str:
    if name.startswith("__"):
        return f"dunder name {name!r} is not allowed"
    return f"name {name!r} is not allowed"
