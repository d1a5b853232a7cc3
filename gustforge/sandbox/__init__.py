"""The sandbox: the only door through which generated (untrusted) code runs.

`check_source` is the static AST check; `SandboxWorker` runs a tools module in a separate, rlimited process and
speaks JSON over a pipe; `SandboxPool` keeps workers warm. `policy` holds the allow-lists.
"""

from gustforge.sandbox.check import check_source
from gustforge.sandbox.policy import ALLOWED_MODULES, MODULE_EXPORTS
from gustforge.sandbox.pool import SandboxPool
from gustforge.sandbox.worker import SandboxLimits, SandboxWorker
from gustforge.schemas import validation_errors

__all__ = [
    "ALLOWED_MODULES",
    "MODULE_EXPORTS",
    "SandboxLimits",
    "SandboxPool",
    "SandboxWorker",
    "check_source",
    "validation_errors",
]
