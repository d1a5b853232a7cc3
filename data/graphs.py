"""Tool dependency graphs on disk: networkx node-link JSON plus the edges sanitization removed.

Layout: ``OUT/tdg/<env_id>/<k>.json``. Each file is ``nx.node_link_data(dag, edges="edges")`` with nodes and edges
sorted (so the bytes only depend on the graph's content) and one extra top-level key, ``removed``: the edges
`tdg.sanitize` dropped, each with its reason.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

import networkx as nx

from data.io import read_json, write_json
from data.models import StrictModel

__all__ = [
    "EdgeType",
    "RemovedEdge",
    "GraphFile",
    "graph_path",
    "sorted_graph",
    "write_graph",
    "read_graph",
    "read_graphs",
]


class EdgeType(StrEnum):
    """Why tool A precedes tool B in a TDG (ToolVerse App. B.2)."""

    PARAMETER = "parameter"  # an output field of A provides an argument of B
    SEMANTIC = "semantic"  # A logically precedes B in the scenario (e.g. create before delete)


class RemovedEdge(StrictModel):
    """An edge dropped while turning an inferred TDG into a DAG."""

    src: str
    dst: str
    type: EdgeType
    confidence: float | None = None
    reason: str  # short code: "cycle" | "non_executable" | "self_loop"
    detail: str = ""


class GraphFile(NamedTuple):
    dag: nx.DiGraph
    removed: list[RemovedEdge]


def graph_path(out_dir: Path, env_id: str, index: int) -> Path:
    """Where graph `index` of environment `env_id` lives under the output folder `out_dir`."""
    return Path(out_dir) / "tdg" / env_id / f"{index}.json"


def sorted_graph(g: nx.DiGraph) -> nx.DiGraph:
    """A copy of `g` with nodes and edges inserted in sorted order (stable serialization and traversal)."""
    out = nx.DiGraph()
    out.graph.update(g.graph)
    out.add_nodes_from((n, g.nodes[n]) for n in sorted(g.nodes))
    out.add_edges_from((u, v, g.edges[u, v]) for u, v in sorted(g.edges))
    return out


def write_graph(path: Path, dag: nx.DiGraph, removed: list[RemovedEdge]) -> Path:
    """Write `dag` as node-link JSON with the removed edges (atomically).

    Args:
        path: Target file, usually `graph_path(out_dir, env_id, k)`.
        dag: The graph; node and edge attributes must be JSON-serialisable.
        removed: Edges dropped by sanitization, written under the key ``removed``.

    Returns:
        The path written.
    """
    data: dict[str, Any] = nx.node_link_data(sorted_graph(dag), edges="edges")
    data["removed"] = [edge.model_dump(mode="json") for edge in removed]
    return write_json(path, data)


def read_graph(path: Path) -> GraphFile:
    """Read a file written by `write_graph`.

    Returns:
        `GraphFile(dag, removed)`.
    """
    data = read_json(path)
    removed = [RemovedEdge.model_validate(row) for row in data.pop("removed", [])]
    dag = nx.node_link_graph(data, directed=True, multigraph=False, edges="edges")
    return GraphFile(dag=dag, removed=removed)


def read_graphs(env_dir: Path) -> list[GraphFile]:
    """All graphs of one environment folder (``OUT/tdg/<env_id>/``), ordered by index."""
    paths = sorted(Path(env_dir).glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    return [read_graph(p) for p in paths if p.stem.isdigit()]
