"""HierR process score R_tool (SLCA-GRPO App. A.4; reference `reward_fn.py` §6.3-§6.7).

R_tool = 0.10·S_fmt + 0.25·S_name + 0.15·S_key + 0.20·S_val + 0.30·S_par, each term in [0, 1]:
S_fmt  valid `<tool_call>` blocks / max(open tags, close tags);
S_name multiset F1 of predicted vs gold tool names (all turns);
S_key  greedy same-name argument-key Jaccard, averaged over gold calls that have arguments;
S_val  greedy loose value match (type coercion, case-insensitive strings) over the gold keys;
S_par  1 iff the agent's first *step* (the first generation turn that makes calls) holds as many valid calls as
       the first gold step (the paper's definition; the reference code counted the first `<tool_call>` *block*,
       which an agent following "one call per block" can only satisfy with one call — `par_unit="block"` keeps it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainer.rewards.parse import BlockParse, Call

__all__ = [
    "HierRWeights",
    "HierRScores",
    "loose_eq",
    "name_f1",
    "key_value_scores",
    "parallel_score",
    "hierr_score",
]

_BOOL_MAP = {"true": True, "false": False, "1": True, "0": False}


@dataclass(frozen=True, slots=True)
class HierRWeights:
    """Sub-score weights; the defaults are the paper's and sum to 1."""

    fmt: float = 0.10
    name: float = 0.25
    key: float = 0.15
    val: float = 0.20
    par: float = 0.30


@dataclass(frozen=True, slots=True)
class HierRScores:
    s_fmt: float
    s_name: float
    s_key: float
    s_val: float
    s_par: float
    r_tool: float


def loose_eq(a: Any, b: Any) -> bool:
    """Loose value equality: case/whitespace-insensitive strings, numeric and boolean coercion, JSON structures.

    Args:
        a: Predicted value.
        b: Gold value.

    Returns:
        True when the values match under the reference's coercion rules.
    """
    if a is None or b is None:
        return a is None and b is None
    sa, sb = str(a).strip().lower(), str(b).strip().lower()
    if sa == sb:
        return True
    try:
        if abs(float(sa) - float(sb)) < 1e-9:
            return True
    except (TypeError, ValueError, OverflowError):
        pass
    if sa in _BOOL_MAP and sb in _BOOL_MAP:
        return _BOOL_MAP[sa] == _BOOL_MAP[sb]
    if isinstance(a, (list, dict)) and isinstance(b, (list, dict)):
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
    return False


def name_f1(pred: Sequence[str], gold: Sequence[str]) -> float:
    """Multiset F1 of tool-name occurrences; 1.0 when both are empty, 0.0 when exactly one is."""
    if not pred and not gold:
        return 1.0
    if not pred or not gold:
        return 0.0
    overlap = sum((Counter(pred) & Counter(gold)).values())
    return 2.0 * overlap / (len(pred) + len(gold))


def _pair_scores(pred: dict[str, Any], gold: dict[str, Any]) -> tuple[float, float]:
    pk, gk = set(pred), set(gold)
    common = pk & gk
    key = len(common) / len(pk | gk) if pk else 0.0
    val = sum(1 for k in common if loose_eq(pred[k], gold[k])) / len(gk) if common else 0.0
    return key, val


def key_value_scores(pred_calls: Sequence[Call], gold_calls: Sequence[Call]) -> tuple[float, float]:
    """Greedy same-name argument matching (gold order decides; a pred is consumed only when it scores > 0).

    Args:
        pred_calls: Valid predicted calls (all turns).
        gold_calls: All gold calls (flattened steps).

    Returns:
        (S_key, S_val). Both 1.0 when no gold call has non-empty arguments (arguments unknown / not needed).
    """
    graded = [g for g in gold_calls if g.arguments]
    if not graded:
        return 1.0, 1.0
    if not pred_calls:
        return 0.0, 0.0
    used = [False] * len(pred_calls)
    key_sum = val_sum = 0.0
    for gold in graded:
        best, best_key, best_val, best_i = 0.0, 0.0, 0.0, -1
        for i, pred in enumerate(pred_calls):
            if used[i] or pred.name != gold.name:
                continue
            key, val = _pair_scores(pred.arguments, gold.arguments)
            if key + val > best:
                best, best_key, best_val, best_i = key + val, key, val, i
        if best_i >= 0:
            used[best_i] = True
        key_sum += best_key
        val_sum += best_val
    return key_sum / len(graded), val_sum / len(graded)


def parallel_score(steps: Sequence[Sequence[Call]], gold_steps: Sequence[Sequence[Call]]) -> float:
    """1.0 iff the first predicted step's call count equals the first gold step's call count (0 calls when absent).

    Args:
        steps: Predicted calls grouped by step (turns, or blocks for the reference variant); only the first counts.
        gold_steps: Gold calls as steps.
    """
    gold_first = len(gold_steps[0]) if gold_steps else 0
    pred_first = len(steps[0]) if steps else 0
    return 1.0 if gold_first == pred_first else 0.0


def hierr_score(
    parsed: BlockParse,
    gold_steps: Sequence[Sequence[Call]],
    weights: HierRWeights = HierRWeights(),
    first_step: Sequence[Call] | None = None,
) -> HierRScores:
    """R_tool for one response.

    Args:
        parsed: Block parse of the think-stripped response (`parse.extract_tool_calls`).
        gold_steps: Gold calls as steps (`parse.normalize_gold`).
        weights: Sub-score weights.
        first_step: The valid calls of the agent's first step (`parse.first_step_calls`); None = the reference
            code's rule (the first valid block).

    Returns:
        The five sub-scores and their weighted sum.
    """
    gold_flat = [call for step in gold_steps for call in step]
    s_fmt = parsed.valid_n / parsed.denom if parsed.denom else 0.0
    s_name = name_f1([c.name for c in parsed.calls], [c.name for c in gold_flat])
    s_key, s_val = key_value_scores(parsed.calls, gold_flat)
    s_par = parallel_score(parsed.blocks if first_step is None else [first_step], gold_steps)
    r_tool = weights.fmt * s_fmt + weights.name * s_name + weights.key * s_key + weights.val * s_val
    r_tool += weights.par * s_par
    return HierRScores(s_fmt, s_name, s_key, s_val, s_par, r_tool)
