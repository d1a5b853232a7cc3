"""`check_source`: the static AST check every untrusted module passes before it reaches a worker."""

from __future__ import annotations

from functools import lru_cache

from gustforge.errors import SandboxViolation
from gustforge.sandbox.policy import find_violations

__all__ = ["check_source"]


def check_source(source: str) -> None:
    """Raise `SandboxViolation` if `source` breaks the sandbox policy (imports, names, attributes).

    Args:
        source: Python source of an untrusted tools or tests module.

    Raises:
        SandboxViolation: with every violation found, each as "line N: what".

    Example:
        >>> check_source("import json\\nx = json.dumps({})")
        >>> check_source("import os")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        gustforge.errors.SandboxViolation: line 1: import of module 'os' is not allowed (allowed: ...)
    """
    violations = _violations(source)
    if violations:
        raise SandboxViolation("; ".join(violations))


@lru_cache(maxsize=256)
def _violations(source: str) -> tuple[str, ...]:
    """`find_violations` is a pure function of the text: a module loaded again (per test run, mutant, tool step)
    is not parsed again."""
    return tuple(find_violations(source))
