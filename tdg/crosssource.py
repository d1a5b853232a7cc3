"""Cross-source estimates for the rule-based TDG inferer (issue 23): fit rule precisions on some sources of the
development ground truth (`tdg.devset`), score the inferer on a source it never saw.

The only fitted quantity is each rule's precision (`tdg.evidence.RuleCalibration`); a rule draws edges when that
precision reaches `MIN_RULE_PRECISION`, fixed in advance (the precision target itself: a rule below it can only
pull the inferer's precision down), never tuned per source. `leave_one_source_out` fits on every source but one
and predicts the one left out; the pooled predictions over all folds give the cross-source precision and recall,
with bootstrap intervals over items.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tdg.devset import DevItem, bootstrap_interval, score_edges
from tdg.evidence import PARAMETER_RULES, SEMANTIC_RULES, Evidence, RuleCalibration, toolset_evidence
from tdg.infer import DensityCap, cap_density, edges_from_evidence

__all__ = ["MIN_RULE_PRECISION", "item_evidence", "rule_counts", "fit_rules", "predict", "leave_one_source_out"]

MIN_RULE_PRECISION = 0.45


def item_evidence(items: Sequence[DevItem]) -> dict[str, list[Evidence]]:
    """Item id -> every rule's evidence over the item's tools (admitted or not)."""
    return {item.item_id: toolset_evidence(item.tools) for item in items}


def rule_counts(items: Sequence[DevItem], evidence: Mapping[str, Sequence[Evidence]]) -> dict[str, tuple[int, int]]:
    """Rule -> (gold pairs it fired on, ordered pairs it fired on) over `items`."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for item in items:
        gold = set(item.gold)
        fired: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for ev in evidence[item.item_id]:
            fired[ev.rule].add((ev.src, ev.dst))
        for rule, pairs in fired.items():
            counts[rule][0] += len(pairs & gold)
            counts[rule][1] += len(pairs)
    return {rule: (tp, n) for rule, (tp, n) in sorted(counts.items())}


def fit_rules(items: Sequence[DevItem], evidence: Mapping[str, Sequence[Evidence]], *,
              min_precision: float = MIN_RULE_PRECISION, fitted_on: str = "") -> RuleCalibration:  # fmt: skip
    """Each rule's precision on `items`, smoothed as (true + 1) / (fired + 2) (a rule never seen gets 0.5)."""
    counts = rule_counts(items, evidence)
    return RuleCalibration(precision={r: round((tp + 1) / (n + 2), 4) for r, (tp, n) in counts.items()},
                           fired={r: n for r, (_, n) in counts.items()}, min_precision=min_precision,
                           fitted_on=fitted_on)  # fmt: skip


def predict(item: DevItem, evidence: Sequence[Evidence], rules: RuleCalibration,
            cap: DensityCap | None = None) -> list[tuple[str, str]]:  # fmt: skip
    """The deterministic inferer's edges on one item under `rules` (density-capped like a build)."""
    edges = cap_density(edges_from_evidence(evidence, rules), len(item.tools), cap or DensityCap())
    return [(e.src, e.dst) for e in edges]


def leave_one_source_out(items: Sequence[DevItem], evidence: Mapping[str, Sequence[Evidence]], *,
                         groups: Mapping[str, str] | None = None, cap: DensityCap | None = None,
                         rounds: int = 1000) -> dict[str, Any]:  # fmt: skip
    """Fit on every group but one, predict the one left out; pooled and per-group scores.

    Args:
        items: The dev items.
        evidence: `item_evidence(items)`.
        groups: Source -> group (default: every source its own group).
        cap: Density cap of the predictions.
        rounds: Bootstrap resamples for the pooled intervals.

    Returns:
        ``{"pooled": {...score, ci95}, "per_group": {group: {...score, rules admitted}}}``.
    """
    group_of = {item.item_id: (groups or {}).get(item.source, item.source) for item in items}
    predicted: dict[str, list[tuple[str, str]]] = {}
    per_group: dict[str, Any] = {}
    for group in sorted(set(group_of.values())):
        train = [i for i in items if group_of[i.item_id] != group]
        test = [i for i in items if group_of[i.item_id] == group]
        rules = fit_rules(train, evidence)
        for item in test:
            predicted[item.item_id] = predict(item, evidence[item.item_id], rules, cap)
        admitted = sorted(r for r in (*PARAMETER_RULES, *SEMANTIC_RULES) if rules.admitted(r))
        per_group[group] = {**score_edges(predicted, test), "rules_admitted": admitted}
    pooled = {**score_edges(predicted, items), "ci95": bootstrap_interval(predicted, items, rounds=rounds)}
    return {"pooled": pooled, "per_group": per_group, "predicted": predicted}
