"""Figures of an environment's dependency graphs and of the DUS skeletons sampled from them (issue 23).

- `edges_per_tool`: |E| / |V| of one graph (the density cap bounds it, `tdg.infer.DensityCap`);
- `flow_overlaps`: the Jaccard overlap of every pair of an environment's graphs (distinct logical flows share
  little);
- `stage_links`: for each stage after the first of a skeleton, whether its tools receive a value from an earlier
  stage, i.e. have a parameter edge (an argument filled by an earlier output) from a tool of an earlier stage.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import networkx as nx
from pydantic import Field

from data.models import Skeleton, StrictModel

__all__ = ["StageLinks", "edges_per_tool", "flow_overlaps", "stage_links"]


class StageLinks(StrictModel):
    """Stages after the first of some skeletons and how many of them receive values from earlier stages."""

    stages: int = Field(default=0, description="Stages after the first.")
    every_tool: int = Field(default=0, description="... in which every tool receives a value from an earlier one.")
    some_tool: int = Field(default=0, description="... in which at least one tool does.")

    def __add__(self, other: StageLinks) -> StageLinks:
        return StageLinks(stages=self.stages + other.stages, every_tool=self.every_tool + other.every_tool,
                          some_tool=self.some_tool + other.some_tool)  # fmt: skip


def edges_per_tool(g: nx.DiGraph) -> float:
    """|E| / |V| (0 for a graph without nodes)."""
    return g.number_of_edges() / g.number_of_nodes() if g.number_of_nodes() else 0.0


def flow_overlaps(graphs: Sequence[nx.DiGraph]) -> list[float]:
    """Jaccard overlap |Ei & Ej| / |Ei | Ej| of every pair of graphs (0 for two edgeless graphs)."""
    out = []
    for a, b in itertools.combinations(graphs, 2):
        ea, eb = set(a.edges), set(b.edges)
        out.append(len(ea & eb) / len(ea | eb) if ea | eb else 0.0)
    return out


def _receives(dag: nx.DiGraph, tool: str, earlier: set[str]) -> bool:
    return any(dag.edges[pred, tool].get("type") == "parameter" for pred in dag.predecessors(tool) if pred in earlier)


def stage_links(dag: nx.DiGraph, skeleton: Skeleton) -> StageLinks:
    """How many stages after the first of `skeleton` receive a value from an earlier stage (see the module doc)."""
    earlier: set[str] = set(skeleton.stages[0]) if skeleton.stages else set()
    links = StageLinks()
    for stage in skeleton.stages[1:]:
        received = [_receives(dag, tool, earlier) for tool in stage]
        links = links + StageLinks(stages=1, every_tool=int(all(received)), some_tool=int(any(received)))
        earlier |= set(stage)
    return links
