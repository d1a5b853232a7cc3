"""TARA per-turn binary reward (ToolVerse §3.3): r_t = 1 iff the agent's calls at turn t satisfy the turn rule
against the golden calls of turn t.

Turn rules (registry `TURN_RULES`, reward option `turn_rule`):

* ``exact`` (default): the agent's calls of the turn are a one-to-one match of the golden calls — every golden
  call matched to a *distinct* agent call and no agent call left over. An extra, repeated or unrequested call in
  the turn makes r_t = 0, so "gold + every other tool" and "every gold call twice" no longer tie gold.
* ``subset`` (the paper's rule): every golden call matched to a distinct agent call; extra agent calls allowed.

A golden call G matches an agent call A when the names are equal and every golden argument is present in A with an
equal value (nested dicts recursively, lists element-wise, scalars with HierR's loose equality); arguments the gold
leaves out (defaults) may be given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gustforge.registry import Registry
from trainer.rewards.hierr import loose_eq
from trainer.rewards.parse import Call

__all__ = [
    "DEFAULT_TURN_RULE",
    "TURN_RULES",
    "TurnRule",
    "value_subset",
    "call_subset",
    "turn_matches",
    "turn_exact",
    "tara_turn_rewards",
]

TurnRule = Callable[[Sequence[Call], Sequence[Call]], bool]


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
    """The paper's rule: every golden call matches a distinct agent call (bipartite matching; turns are small)."""
    if len(pred) < len(gold):
        return False
    edges = [[j for j, p in enumerate(pred) if call_subset(g, p)] for g in gold]
    if any(not e for e in edges):
        return False
    owner = [-1] * len(pred)
    return all(_augment(g, edges, owner, [False] * len(pred)) for g in range(len(gold)))


def turn_exact(gold: Sequence[Call], pred: Sequence[Call]) -> bool:
    """GUST's rule: a one-to-one match of the golden calls with nothing left over (no extra or repeated call)."""
    return len(pred) == len(gold) and turn_matches(gold, pred)


TURN_RULES: Registry[TurnRule] = Registry("turn_rule")
TURN_RULES.add("exact", turn_exact)
TURN_RULES.add("subset", turn_matches)
DEFAULT_TURN_RULE = "exact"


def tara_turn_rewards(
    gold_turns: Sequence[Sequence[Call]],
    agent_turns: Sequence[Sequence[Call]],
    rule: str = DEFAULT_TURN_RULE,
) -> list[float]:
    """Binary per-turn rewards, one per golden turn.

    Args:
        gold_turns: Golden calls per turn (GoldenTrace stages).
        agent_turns: The agent's calls per generation turn (turn t = t-th generation).
        rule: A `TURN_RULES` name ("exact" default, "subset" = the paper's).

    Returns:
        r_t for t = 0..T-1; a missing agent turn gives 0.0.
    """
    match = TURN_RULES.get(rule)
    rewards: list[float] = []
    for t, gold in enumerate(gold_turns):
        pred = agent_turns[t] if t < len(agent_turns) else ()
        rewards.append(1.0 if t < len(agent_turns) and match(gold, pred) else 0.0)
    return rewards
