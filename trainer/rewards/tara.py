"""TARA per-turn binary reward (ToolVerse §3.3): r_t = 1 iff the golden calls of turn t are a dict-subset of the
agent's calls at turn t.

A golden call G is a dict-subset of an agent call A when the names are equal and every golden argument is present
in A with an equal value (nested dicts recursively, lists element-wise, scalars with HierR's loose equality). Turn t
needs every golden call of the turn matched to a *distinct* agent call of the same turn; extra agent calls are
allowed (the definition is a subset, not an equality).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.rewards.hierr import loose_eq
from trainer.rewards.parse import Call

__all__ = ["value_subset", "call_subset", "turn_matches", "tara_turn_rewards"]


def value_subset(gold: Any, pred: Any) -> bool:
    """Gold value ⊆ predicted value: dict keys recursively, lists element-wise (same length), scalars loosely."""
    if isinstance(gold, dict):
        return isinstance(pred, dict) and all(k in pred and value_subset(v, pred[k]) for k, v in gold.items())
    if isinstance(gold, list):
        return isinstance(pred, list) and len(gold) == len(pred) and all(map(value_subset, gold, pred))
    return loose_eq(pred, gold)


def call_subset(gold: Call, pred: Call) -> bool:
    """The golden call is a dict-subset of the agent call."""
    return gold.name == pred.name and value_subset(gold.arguments, pred.arguments)


def _augment(g: int, edges: list[list[int]], owner: list[int], seen: list[bool]) -> bool:
    for p in edges[g]:
        if seen[p]:
            continue
        seen[p] = True
        if owner[p] < 0 or _augment(owner[p], edges, owner, seen):
            owner[p] = g
            return True
    return False


def turn_matches(gold: Sequence[Call], pred: Sequence[Call]) -> bool:
    """Every golden call matches a distinct agent call (bipartite matching; turns are small)."""
    if len(pred) < len(gold):
        return False
    edges = [[j for j, p in enumerate(pred) if call_subset(g, p)] for g in gold]
    if any(not e for e in edges):
        return False
    owner = [-1] * len(pred)
    return all(_augment(g, edges, owner, [False] * len(pred)) for g in range(len(gold)))


def tara_turn_rewards(gold_turns: Sequence[Sequence[Call]], agent_turns: Sequence[Sequence[Call]]) -> list[float]:
    """Binary per-turn rewards, one per golden turn.

    Args:
        gold_turns: Golden calls per turn (GoldenTrace stages).
        agent_turns: The agent's calls per generation turn (turn t = t-th generation).

    Returns:
        r_t for t = 0..T-1; a missing agent turn gives 0.0.
    """
    rewards: list[float] = []
    for t, gold in enumerate(gold_turns):
        pred = agent_turns[t] if t < len(agent_turns) else ()
        rewards.append(1.0 if t < len(agent_turns) and turn_matches(gold, pred) else 0.0)
    return rewards
