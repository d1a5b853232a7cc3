"""One exception hierarchy for the whole project.

`GustError` is the root. Errors an agent may legitimately cause (bad tool arguments) are `ToolError` and become
structured error observations; everything else is a fault of an input or of the pipeline and is quarantined with
its message by the stage that meets it.
"""

from __future__ import annotations

__all__ = [
    "GustError",
    "InputError",
    "SchemaError",
    "RefactorError",
    "CodegenError",
    "SandboxError",
    "SandboxViolation",
    "SandboxTimeout",
    "SandboxMemoryError",
    "ToolError",
    "LLMError",
    "TransientLLMError",
    "LLMOutputError",
    "LLMBudgetExceeded",
    "BudgetExceededError",
    "TDGCycleError",
    "ReconstructionError",
    "VerificationError",
    "RegistryError",
    "ConfigError",
    "RunLockedError",
    "UNAVAILABLE_REASON",
    "BAD_REPLY_REASONS",
]

# Quarantine reason of an item dropped because the LLM endpoint stayed unreachable after the client's retries.
# Such drops are not final: the build flow re-runs shards holding them (the LLM cache makes the rest free).
UNAVAILABLE_REASON = "llm_unavailable"
# Quarantine reasons of items dropped because the model's reply could not be used (no valid JSON after repair, a
# reply that does not match the toolset). They count against the stage's error budget; a stage-cache hit holding
# them is not served to a later build, so the next build asks again (the LLM cache never stores such a reply).
BAD_REPLY_REASONS = frozenset({
    "llm_refactor_failed", "llm_tool_mismatch", "llm_database_failed", "llm_codegen_failed", "writer_bad_output",
    "writer_llm_error", "malformed_judge_reply",
})  # fmt: skip


class GustError(Exception):
    """Root of every error GUST Forge raises on purpose."""


class InputError(GustError, ValueError):
    """A raw input (file, row, record) cannot be read or is not in a supported format."""


class SchemaError(GustError, ValueError):
    """A tool schema is invalid or cannot be normalized."""


class RefactorError(SchemaError):
    """The schema refactorer (offline or LLM) could not produce a valid refactored toolset."""


class CodegenError(GustError):
    """Tool code or test generation failed."""


class SandboxError(GustError):
    """Untrusted code failed inside the sandbox (crash, bad output, protocol error)."""


class SandboxViolation(SandboxError):
    """Untrusted code tried something the allow-list forbids (import, name, attribute)."""


class SandboxTimeout(SandboxError):
    """Untrusted code exceeded its CPU-time or wall-clock limit."""


class SandboxMemoryError(SandboxError):
    """Untrusted code exceeded its memory limit."""


class ToolError(GustError):
    """A tool call was rejected (bad arguments, unknown record); the agent sees this as an error observation."""


class LLMError(GustError):
    """An LLM call failed for good."""


class TransientLLMError(LLMError):
    """An LLM call failed in a way worth retrying (429, 5xx, timeout, connection reset)."""


class LLMBudgetExceeded(TransientLLMError):
    """`llm.max_total_tokens` is spent: no further request is sent; the items wait for the next build."""


class BudgetExceededError(GustError):
    """A stage dropped more of its inputs than its error budget allows, or a build fell short of `min_rows`."""


class LLMOutputError(LLMError, ValueError):
    """The LLM answered, but its output could not be parsed or validated, even after repair."""


class TDGCycleError(GustError):
    """A tool dependency graph still has a cycle where a DAG is required."""


class ReconstructionError(GustError):
    """A sampled skeleton cannot be instantiated into an executable golden trace."""


class VerificationError(GustError):
    """A task failed verification (replay mismatch, unsolvable)."""


class RegistryError(GustError, KeyError):
    """Unknown or duplicate registry name."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class ConfigError(GustError, ValueError):
    """A configuration file or override is invalid."""


class RunLockedError(GustError):
    """Another build or stage run holds the run folder's lock (`OUT/.gust.lock`)."""
