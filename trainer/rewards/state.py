"""State-equivalence outcome reward for GUST rows: replay the agent's calls on a fresh copy of the environment and
compare the final DB hash with the golden trace's final hash. When the hashes differ and the gold calls are given, the
verdict compares the two final DBs modulo creation order (`data.state_canon.same_final_state`: ids the runs generated
are renamed by content), so two correct agents that order one turn's independent creates differently get the same
verdict.

Replays go through `envgen.runtime` (the sandbox); argument validation and tool errors behave exactly as during
the rollout, so an invalid call changes nothing in both places. Read-only detours do not change the hash, so an
agent that reaches the golden state by another route still matches.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.state_canon import same_final_state
from gustforge.errors import GustError
from trainer.rewards.parse import Call

__all__ = ["StateResult", "replay_final_hash", "state_equivalence", "load_environment"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StateResult:
    checked: bool
    match: bool
    final_hash: str = ""
    error: str = ""


def load_environment(env_dir: str | Path) -> Any:
    """`envgen.runtime.Environment.load(env_dir)` (imported lazily: the runtime pulls in the sandbox)."""
    from envgen.runtime import Environment

    return Environment.load(Path(env_dir))


def replay_final_hash(env: Any, calls: Sequence[Call], limits: Any = None) -> str:
    """Run the calls in order on a fresh session of `env` and return the final DB hash.

    Args:
        env: An `envgen.runtime.Environment`.
        calls: The agent's calls in execution order.
        limits: Optional `SandboxLimits`.

    Returns:
        `content_hash` of the DB after the last call.
    """
    with env.session(limits=limits) as session:
        for call in calls:
            session.call(call.name, dict(call.arguments))
        return session.db_hash()


def _replay_verdict(
    env: Any, calls: Sequence[Call], expected_hash: str, gold_calls: Sequence[Call] | None, limits: Any
) -> StateResult:
    with env.session(limits=limits) as session:
        for call in calls:
            session.call(call.name, dict(call.arguments))
        final = session.db_hash()
        if final == expected_hash or gold_calls is None:
            return StateResult(True, final == expected_hash, final)
        agent_db = session.db()
        session.reset()
        initial = session.db()
        for call in gold_calls:
            session.call(call.name, dict(call.arguments))
        return StateResult(True, same_final_state(agent_db, session.db(), initial), final)


def state_equivalence(
    env: Any,
    calls: Sequence[Call],
    expected_hash: str,
    limits: Any = None,
    gold_calls: Sequence[Call] | None = None,
) -> StateResult:
    """Compare the replayed final DB with the golden one; sandbox faults count as a mismatch (flagged).

    Args:
        env: An `envgen.runtime.Environment` (or anything whose `session()` yields a live session).
        calls: The agent's calls in execution order.
        expected_hash: `GoldenTrace.final_db_hash`.
        limits: Optional `SandboxLimits`.
        gold_calls: The gold calls in order; when given, a differing hash is re-checked modulo creation order
            (the gold is replayed on the same session after a reset).

    Returns:
        checked=True, match, the replayed hash, and an error text when the replay failed.
    """
    try:
        return _replay_verdict(env, calls, expected_hash, gold_calls, limits)
    except GustError as exc:
        logger.warning("state replay failed for env %s: %s", getattr(env, "env_id", "?"), exc)
        return StateResult(True, False, "", f"{type(exc).__name__}: {exc}")
