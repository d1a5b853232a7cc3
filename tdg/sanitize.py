"""TDG sanitization (ToolVerse App. B.2): turn an inferred dependency graph into an executable DAG.

Steps, in order:
1. **Non-executable edges** are dropped: an edge whose evidence names fields that the two tools' schemas do not
   have (a parameter edge must carry parseable ``<src>.response.<path> -> <dst>.<param>`` evidence; a semantic edge
   is checked only when its evidence has that form). Graphs whose nodes carry no schemas skip this check.
2. **Self-loops** are dropped (a tool cannot be its own prerequisite).
3. **Cycles**: a topological traversal from the zero in-degree roots (`nx.topological_generations`) unlocks
   what it can; the nodes it cannot reach are on or behind a cycle. One cycle among them is found
   (`nx.find_cycle` from the sorted stuck nodes, so the choice is deterministic) and its lowest-priority edge is
   removed; repeat until the traversal reaches every node. Priority, lowest (removed) first:
   a. semantic before parameter (parameter edges are grounded in schemas and executable arguments);
   b. lower confidence first; a missing confidence counts as 1.0 (no stated doubt), so among unscored edges of one
      type the next rule decides;
   c. the edge whose removal unlocks the most nodes (newly reached by the traversal) first;
   d. lexicographically smallest (src, dst) first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import networkx as nx

from data.graphs import EdgeType, RemovedEdge, sorted_graph
from gustforge.errors import TDGCycleError
from tdg.fields import evidence_is_executable, parse_evidence

__all__ = ["SanitizeResult", "sanitize_to_dag", "unlocked_nodes", "edge_priority"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SanitizeResult:
    dag: nx.DiGraph
    removed: list[RemovedEdge]


def unlocked_nodes(g: nx.DiGraph) -> set[str]:
    """Nodes a topological traversal from the roots reaches (all of them iff `g` is a DAG)."""
    reached: set[str] = set()
    try:
        for generation in nx.topological_generations(g):
            reached.update(generation)
    except nx.NetworkXUnfeasible:
        pass  # the rest is on or behind a cycle
    return reached


def _edge_type(data: dict[str, Any]) -> EdgeType:
    return EdgeType(data.get("type") or EdgeType.SEMANTIC)


def _removed(u: str, v: str, data: dict[str, Any], reason: str, detail: str = "") -> RemovedEdge:
    return RemovedEdge(src=u, dst=v, type=_edge_type(data), confidence=data.get("confidence"), reason=reason,
                       detail=detail)  # fmt: skip


def _executable(g: nx.DiGraph, u: str, v: str, data: dict[str, Any]) -> tuple[bool, str]:
    src, dst = g.nodes[u], g.nodes[v]
    if "response" not in src or "parameters" not in dst:
        return True, ""  # nothing to check against
    evidence = str(data.get("evidence") or "")
    if _edge_type(data) is EdgeType.SEMANTIC and not parse_evidence(evidence):
        return True, ""
    return evidence_is_executable(evidence, u, v, src["response"], dst["parameters"])


def edge_priority(g: nx.DiGraph, u: str, v: str, reached: set[str]) -> tuple[int, float, int, str, str]:
    """Sort key of an edge on a cycle; the minimum is removed (see the module docstring)."""
    data = g.edges[u, v]
    type_rank = 1 if _edge_type(data) is EdgeType.PARAMETER else 0
    confidence = data.get("confidence")
    gained = len(unlocked_nodes(nx.restricted_view(g, [], [(u, v)]))) - len(reached)
    return (type_rank, 1.0 if confidence is None else float(confidence), -gained, u, v)


def _drop_unexecutable(g: nx.DiGraph) -> list[RemovedEdge]:
    removed = []
    for u, v in sorted(g.edges):
        data = dict(g.edges[u, v])
        if u == v:
            removed.append(_removed(u, v, data, "self_loop"))
            g.remove_edge(u, v)
            continue
        ok, detail = _executable(g, u, v, data)
        if not ok:
            removed.append(_removed(u, v, data, "non_executable", detail))
            g.remove_edge(u, v)
    return removed


def _break_cycles(g: nx.DiGraph) -> list[RemovedEdge]:
    removed = []
    for _ in range(g.number_of_edges() + 1):
        reached = unlocked_nodes(g)
        stuck = sorted(set(g.nodes) - reached)
        if not stuck:
            break
        cycle = [(e[0], e[1]) for e in nx.find_cycle(g.subgraph(stuck), source=stuck)]
        u, v = min(cycle, key=lambda e: edge_priority(g, e[0], e[1], reached))
        path = " -> ".join([c[0] for c in cycle] + [cycle[0][0]])
        removed.append(_removed(u, v, dict(g.edges[u, v]), "cycle", f"cycle {path}"))
        g.remove_edge(u, v)
    return removed


def sanitize_to_dag(g: nx.DiGraph) -> SanitizeResult:
    """Drop non-executable edges and self-loops, then break cycles by edge priority (App. B.2).

    Args:
        g: An inferred TDG (edge attributes ``type``, ``confidence``, ``evidence``; nodes may carry
            ``parameters`` / ``response`` schemas). Not modified.

    Returns:
        `SanitizeResult(dag, removed)`: a new DAG with the same nodes and graph attributes, and every removed edge
        with its reason (``non_executable``, ``self_loop`` or ``cycle``) in removal order.

    Raises:
        TDGCycleError: The result is still cyclic (cannot happen unless the graph changes concurrently).

    Example:
        >>> g = nx.DiGraph([("a", "b", {"type": "parameter"}), ("b", "a", {"type": "semantic"})])
        >>> [(r.src, r.dst, r.reason) for r in sanitize_to_dag(g).removed]
        [('b', 'a', 'cycle')]
    """
    dag = sorted_graph(g)
    removed = _drop_unexecutable(dag) + _break_cycles(dag)
    if not nx.is_directed_acyclic_graph(dag):
        raise TDGCycleError(f"graph still has a cycle after removing {len(removed)} edges: {nx.find_cycle(dag)}")
    if removed:
        logger.debug("sanitize: removed %d edges (%s)", len(removed), ", ".join(r.reason for r in removed))
    return SanitizeResult(dag=dag, removed=removed)
