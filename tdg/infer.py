"""Tool dependency graph (TDG) inference (ToolVerse §3.2.1).

Nodes are the refactored tools; an edge A -> B means B depends on A, either because an output field of A provides
an argument of B (``parameter``) or because B only makes sense after A in the scenario (``semantic``). Edges carry
``type``, ``confidence`` (float or None) and ``evidence``; parameter evidence has the checkable form
``get_order.response.order.order_id -> cancel_order.order_id`` (see `tdg.fields`).

Two inferers live in `INFERERS`:
- ``deterministic`` (default): name/type matching of response leaves against parameters, with an entity/ID
  vocabulary (``order_id`` <-> ``orders[].id``), plus semantic edges along create -> read -> update -> delete
  between adjacent verb levels of one entity.
- ``llm``: the `tdg.prompts` judge on candidate pairs only (pairs with a name hint, a shared entity or shared
  name tokens), so its cost is O(useful pairs), not O(n^2).

`build_graphs` derives several graphs ("logical flows") from one inference run (`flow_specs`):
- ``full``: every inferred edge;
- ``data_flow``: parameter edges only (pure data flow, no imposed verb order);
- ``single_source:<j>``: parameter edges thinned to one provider per (tool, argument), the j-th best by
  confidence (so list_orders -> cancel_order and get_order -> cancel_order no longer both gate cancel_order):
  shallower graphs with more parallel branches and different paths per j;
- ``entity_focus:<entity>``: parameter edges plus the semantic edges of one focus entity only (entities ranked by
  semantic-edge count, ties by name, rotated by the seed), so each flow tells one business object's story.
Graphs with identical edge sets are deduplicated, so an environment may get fewer than `n_graphs` graphs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import networkx as nx

from data.graphs import EdgeType
from data.models import ToolKind, ToolSchema
from gustforge.errors import InputError
from gustforge.hashing import content_hash
from gustforge.llm import LLMClient, LLMSettings, run_role_async
from gustforge.registry import Registry
from tdg.fields import (
    GENERIC_NAMES,
    enrich_response,
    entity_of,
    format_evidence,
    match_score,
    name_tokens,
    param_specs,
    parse_evidence,
    record_shapes,
    response_fields,
    singular,
    types_compatible,
)
from tdg.prompts import make_judge_role, tool_json

__all__ = [
    "InferredEdge",
    "EdgeInferer",
    "INFERERS",
    "tool_entity",
    "candidate_pairs",
    "with_record_shapes",
    "infer_edges",
    "flow_specs",
    "select_flow",
    "to_graph",
    "infer_graph",
    "build_graphs",
]

logger = logging.getLogger(__name__)

# Verb order on one entity: create -> read -> update/action -> delete.
_KIND_RANK = {ToolKind.CREATE: 0, ToolKind.READ: 1, ToolKind.UPDATE: 2, ToolKind.ACTION: 2, ToolKind.DELETE: 3}
# How plausible a tool's output is as the *source* of another tool's argument.
_PROVIDER = {ToolKind.READ: 1.0, ToolKind.CREATE: 1.0, ToolKind.UPDATE: 0.8, ToolKind.ACTION: 0.8,
             ToolKind.DELETE: 0.6}  # fmt: skip
_OPTIONAL_FACTOR = 0.8
_MIN_PARAM_CONFIDENCE = 0.4
_SEMANTIC_CONFIDENCE = 0.5
_VERBS = frozenset(
    "get list search find fetch read show view query lookup check create add new make register insert post book "
    "update set edit modify change patch put rename assign move delete remove cancel drop clear archive".split()
)


@dataclass(frozen=True)
class InferredEdge:
    src: str
    dst: str
    type: EdgeType
    confidence: float | None
    evidence: str


class EdgeInferer(Protocol):
    """Infers candidate edges over one toolset; `client` is only used by LLM-backed inferers."""

    def __call__(self, tools: Sequence[ToolSchema], *, client: LLMClient | None) -> list[InferredEdge]: ...


INFERERS: Registry[EdgeInferer] = Registry("edge inferer")


def tool_entity(tool: ToolSchema) -> str | None:
    """The entity a tool works on: its declared DB collection, else the first non-verb token of its name."""
    if tool.entity:
        return singular(tool.entity)
    tokens = [t for t in name_tokens(tool.name) if t not in _VERBS and t not in GENERIC_NAMES]
    return singular(tokens[0]) if tokens else None


# --------------------------------------------------------------------------- pairwise rules
def _param_mappings(a: ToolSchema, b: ToolSchema) -> list[tuple[float, str, str]]:
    """(confidence, field path of a, parameter of b) for each parameter of b that a's response can fill."""
    fields = response_fields(a.response)
    b_entity = tool_entity(b)
    out = []
    for param, (schema, required) in sorted(param_specs(b.parameters).items()):
        if b.kind is ToolKind.CREATE and entity_of(param) == b_entity:
            continue  # the ID of the record being created is new, not copied from elsewhere
        scored = [(match_score(param, f, dst_entity=b_entity), f.path) for f in fields
                  if types_compatible(schema, f.type)]  # fmt: skip
        score, path = min(scored, key=lambda sp: (-sp[0], sp[1]), default=(0.0, ""))
        if score > 0:
            conf = score * (1.0 if required else _OPTIONAL_FACTOR) * _PROVIDER[a.kind]
            out.append((round(conf, 4), path, param))
    return out


def _against_verb_order(a: ToolSchema, b: ToolSchema) -> bool:
    """A mutation echoing a record back (cancel_order -> get_order) is not a dependency."""
    same = tool_entity(a) is not None and tool_entity(a) == tool_entity(b)
    return same and _KIND_RANK[a.kind] > _KIND_RANK[b.kind]


def _parameter_edge(a: ToolSchema, b: ToolSchema) -> InferredEdge | None:
    if a.name == b.name or _against_verb_order(a, b):
        return None
    mappings = [m for m in _param_mappings(a, b) if m[0] >= _MIN_PARAM_CONFIDENCE]
    if not mappings:
        return None
    evidence = "; ".join(format_evidence(a.name, path, b.name, param) for _, path, param in mappings)
    return InferredEdge(a.name, b.name, EdgeType.PARAMETER, max(m[0] for m in mappings), evidence)


def _semantic_evidence(entity: str, a: ToolSchema, b: ToolSchema) -> str:
    return f"semantic: on {entity}, {a.kind.value} ({a.name}) precedes {b.kind.value} ({b.name})"


def _semantic_edges(tools: Sequence[ToolSchema]) -> list[InferredEdge]:
    """Edges between adjacent present verb levels of each entity (create -> read -> update -> delete)."""
    groups: dict[str, list[ToolSchema]] = defaultdict(list)
    for tool in tools:
        entity = tool_entity(tool)
        if entity is not None:
            groups[entity].append(tool)
    edges = []
    for entity, members in sorted(groups.items()):
        levels = sorted({_KIND_RANK[t.kind] for t in members})
        for low, high in itertools.pairwise(levels):
            for a in (t for t in members if _KIND_RANK[t.kind] == low):
                for b in (t for t in members if _KIND_RANK[t.kind] == high):
                    evidence = _semantic_evidence(entity, a, b)
                    edges.append(InferredEdge(a.name, b.name, EdgeType.SEMANTIC, _SEMANTIC_CONFIDENCE, evidence))
    return edges


def _merge(edges: Sequence[InferredEdge]) -> list[InferredEdge]:
    """One edge per ordered pair; a parameter edge wins over a semantic one."""
    best: dict[tuple[str, str], InferredEdge] = {}
    for edge in edges:
        key = (edge.src, edge.dst)
        if key not in best or (best[key].type is EdgeType.SEMANTIC and edge.type is EdgeType.PARAMETER):
            best[key] = edge
    return [best[k] for k in sorted(best)]


@INFERERS.register("deterministic")
def deterministic_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None) -> list[InferredEdge]:
    """Schema-grounded parameter edges plus verb-order semantic edges; no LLM."""
    params = [e for a, b in itertools.permutations(tools, 2) if (e := _parameter_edge(a, b)) is not None]
    return _merge(params + _semantic_edges(tools))


# --------------------------------------------------------------------------- LLM judge
def _tool_view(tool: ToolSchema) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "kind": tool.kind.value,
        "entity": tool.entity,
        "parameters": tool.parameters,
        "response": tool.response,
    }


def _from_view(view: dict[str, Any]) -> ToolSchema:
    return ToolSchema(raw_name=view["name"], **view)


def _offline_judge(inputs: dict[str, Any]) -> dict[str, Any]:
    """Deterministic twin of the judge: the same pairwise rules as the deterministic inferer."""
    a, b = _from_view(json.loads(inputs["tool_a"])), _from_view(json.loads(inputs["tool_b"]))
    edge = _parameter_edge(a, b)
    if edge is not None:
        return {"edge": True, "type": "parameter", "confidence": edge.confidence, "evidence": edge.evidence}
    entity = tool_entity(a)
    if entity is not None and entity == tool_entity(b) and _KIND_RANK[a.kind] < _KIND_RANK[b.kind]:
        gap = _KIND_RANK[b.kind] - _KIND_RANK[a.kind]
        conf = _SEMANTIC_CONFIDENCE if gap == 1 else 0.3
        return {"edge": True, "type": "semantic", "confidence": conf, "evidence": _semantic_evidence(entity, a, b)}
    return {"edge": False, "type": "none", "confidence": 0.9, "evidence": ""}


_JUDGE = make_judge_role(_offline_judge)


def _significant_tokens(names: Sequence[str]) -> set[str]:
    return {t for n in names for t in name_tokens(n) if t not in GENERIC_NAMES and t != "id" and len(t) > 2}


def _hints(a: ToolSchema, b: ToolSchema) -> list[str]:
    return [format_evidence(a.name, path, b.name, param) for _, path, param in _param_mappings(a, b)]


def candidate_pairs(tools: Sequence[ToolSchema]) -> list[tuple[ToolSchema, ToolSchema, list[str]]]:
    """Ordered pairs worth asking the judge about: a name hint, a shared entity, or shared name tokens."""
    out = []
    for a, b in itertools.permutations(tools, 2):
        hints = _hints(a, b)
        same_entity = tool_entity(a) is not None and tool_entity(a) == tool_entity(b)
        out_tokens = _significant_tokens([f.leaf for f in response_fields(a.response)])
        shared = out_tokens & _significant_tokens(list(param_specs(b.parameters)))
        if hints or same_entity or shared:
            out.append((a, b, hints))
    return out


async def _judge_all(
    pairs: Sequence[tuple[ToolSchema, ToolSchema, list[str]]], client: LLMClient
) -> list[dict[str, Any]]:
    jobs = [
        run_role_async(
            _JUDGE,
            {"tool_a": tool_json(_tool_view(a)), "tool_b": tool_json(_tool_view(b)), "hints": "\n".join(h) or "(none)"},
            client,
        )
        for a, b, h in pairs
    ]
    return list(await asyncio.gather(*jobs))


@INFERERS.register("llm")
def llm_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None) -> list[InferredEdge]:
    """Ask the judge role about every candidate pair (concurrently, bounded by the client)."""
    pairs = candidate_pairs(tools)
    own = client is None
    client = client or LLMClient(LLMSettings())
    try:
        verdicts = asyncio.run(_judge_all(pairs, client))
    finally:
        if own:
            client.close()
    logger.debug("tdg judge: %d candidate pairs of %d", len(pairs), len(tools) * (len(tools) - 1))
    edges = [
        InferredEdge(a.name, b.name, EdgeType(v["type"]), float(v["confidence"]), v["evidence"])
        for (a, b, _), v in zip(pairs, verdicts, strict=True)
        if v["edge"] and v["type"] != "none"
    ]
    return _merge(edges)


# --------------------------------------------------------------------------- flows and graphs
def with_record_shapes(tools: Sequence[ToolSchema], db: Mapping[str, Any] | None) -> list[ToolSchema]:
    """Tools whose opaque record objects in responses are completed from the DB's record shapes."""
    shapes = record_shapes(db) if db else {}
    return [t.model_copy(update={"response": enrich_response(t.response, shapes)}) for t in tools]


def infer_edges(
    tools: Sequence[ToolSchema], *, inferer: str = "deterministic", client: LLMClient | None = None
) -> list[InferredEdge]:
    """All candidate edges over `tools` from the named inferer (sorted by (src, dst)).

    Raises:
        InputError: Two tools share a name.
        RegistryError: Unknown inferer.
    """
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InputError(f"duplicate tool names: {sorted({n for n in names if names.count(n) > 1})}")
    return INFERERS.get(inferer)(tools, client=client)


def _focus_entities(tools: Sequence[ToolSchema], edges: Sequence[InferredEdge], seed: int) -> list[str]:
    by_name = {t.name: t for t in tools}
    counts: dict[str, int] = defaultdict(int)
    for e in edges:
        if e.type is EdgeType.SEMANTIC:
            for entity in {tool_entity(by_name[e.src]), tool_entity(by_name[e.dst])} - {None}:
                counts[str(entity)] += 1
    ranked = sorted(counts, key=lambda ent: (-counts[ent], ent))
    if not ranked:
        return []
    start = random.Random(seed).randrange(len(ranked))
    return ranked[start:] + ranked[:start]


def _providers(edges: Sequence[InferredEdge]) -> dict[tuple[str, str], list[tuple[float, str]]]:
    """(dst, param) -> [(confidence, src)] of the parameter edges, best first."""
    out: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for e in edges:
        if e.type is EdgeType.PARAMETER:
            for ev in parse_evidence(e.evidence):
                out[(e.dst, ev.param)].append((e.confidence if e.confidence is not None else 1.0, e.src))
    return {k: sorted(set(v), key=lambda cs: (-cs[0], cs[1])) for k, v in sorted(out.items())}


def _single_source(edges: Sequence[InferredEdge], rank: int) -> list[InferredEdge]:
    """Parameter edges thinned to one provider per (tool, argument): the `rank`-th best (cyclically)."""
    keep = {(options[rank % len(options)][1], dst) for (dst, _), options in _providers(edges).items()}
    return [e for e in edges if e.type is EdgeType.PARAMETER and (e.src, e.dst) in keep]


def flow_specs(tools: Sequence[ToolSchema], edges: Sequence[InferredEdge], *, seed: int) -> list[str]:
    """The names of the logical flows available for these edges, in variant order.

    ``full``, ``data_flow``, ``single_source:0``, ``entity_focus:<entity>`` (one per entity with semantic
    edges, rotated by `seed`), then ``single_source:<j>`` for the further provider ranks.
    """
    depth = max((len(v) for v in _providers(edges).values()), default=1)
    focus = [f"entity_focus:{entity}" for entity in _focus_entities(tools, edges, seed)]
    return ["full", "data_flow", "single_source:0", *focus, *(f"single_source:{j}" for j in range(1, depth))]


def select_flow(
    tools: Sequence[ToolSchema], edges: Sequence[InferredEdge], *, flow_variant: int, seed: int
) -> tuple[str, list[InferredEdge]]:
    """The name and edges of logical flow number `flow_variant` (see `flow_specs` and the module docstring).

    Raises:
        InputError: `flow_variant` is out of range.
    """
    specs = flow_specs(tools, edges, seed=seed)
    if not 0 <= flow_variant < len(specs):
        raise InputError(f"flow_variant must be in [0, {len(specs)}), got {flow_variant}")
    flow = specs[flow_variant]
    kind, _, arg = flow.partition(":")
    if kind == "full":
        return flow, list(edges)
    params = [e for e in edges if e.type is EdgeType.PARAMETER]
    if kind == "data_flow":
        return flow, params
    if kind == "single_source":
        return flow, _single_source(edges, int(arg))
    by_name = {t.name: t for t in tools}
    semantic = [e for e in edges if e.type is EdgeType.SEMANTIC
                and arg in (tool_entity(by_name[e.src]), tool_entity(by_name[e.dst]))]  # fmt: skip
    return flow, sorted(params + semantic, key=lambda e: (e.src, e.dst))


def to_graph(tools: Sequence[ToolSchema], edges: Sequence[InferredEdge], **graph_attrs: Any) -> nx.DiGraph:
    """A DiGraph with one node per tool (attributes from its schema) and the given edges."""
    g = nx.DiGraph(**graph_attrs)
    for tool in sorted(tools, key=lambda t: t.name):
        g.add_node(tool.name, description=tool.description, parameters=tool.parameters, response=tool.response,
                   kind=tool.kind.value, entity=tool.entity)  # fmt: skip
    for e in sorted(edges, key=lambda e: (e.src, e.dst)):
        g.add_edge(e.src, e.dst, type=e.type.value, confidence=e.confidence, evidence=e.evidence)
    return g


def infer_graph(
    tools: Sequence[ToolSchema],
    *,
    inferer: str = "deterministic",
    flow_variant: int = 0,
    seed: int = 0,
    client: LLMClient | None = None,
    db: Mapping[str, Any] | None = None,
) -> nx.DiGraph:
    """Infer the TDG of one logical flow over `tools` (may contain cycles; see `tdg.sanitize`).

    Args:
        tools: The environment's refactored tools.
        inferer: Name in `INFERERS`.
        flow_variant: Index into `flow_specs` (0 full, 1 data_flow, 2 single_source:0, ...).
        seed: Rotates the order of focus entities.
        client: LLM client for the ``llm`` inferer (an offline client is made when None).
        db: The environment's initial DB; completes opaque record objects in responses (`with_record_shapes`).

    Returns:
        The graph; ``g.graph`` holds ``flow`` and ``inferer``. Node ``response`` attributes are the completed
        response schemas.
    """
    tools = with_record_shapes(tools, db)
    edges = infer_edges(tools, inferer=inferer, client=client)
    flow, chosen = select_flow(tools, edges, flow_variant=flow_variant, seed=seed)
    return to_graph(tools, chosen, flow=flow, flow_variant=flow_variant, inferer=inferer)


def _edge_signature(edges: Sequence[InferredEdge]) -> str:
    return content_hash(sorted([e.src, e.dst, e.type.value] for e in edges))


def build_graphs(
    env: Any,
    *,
    n_graphs: int = 3,
    inferer: str = "deterministic",
    seed: int = 0,
    client: LLMClient | None = None,
) -> list[nx.DiGraph]:
    """Up to `n_graphs` distinct TDGs (logical flows) for one environment, from one inference run.

    Args:
        env: An `envgen.runtime.Environment` (``env_id``, ``schemas``, ``initial_db``).
        n_graphs: How many distinct flows to return at most (paper: 3).
        inferer: Name in `INFERERS`.
        seed: Rotates the focus entities of flows >= 2.
        client: LLM client for the ``llm`` inferer.

    Returns:
        Graphs with ``graph_index`` 0..k-1 (k <= n_graphs), ``env_id``, ``flow``, ``flow_variant``, ``inferer``
        in ``g.graph``; identical edge sets appear once.
    """
    tools = with_record_shapes(list(env.schemas), env.initial_db)
    edges = infer_edges(tools, inferer=inferer, client=client)
    n_variants = len(flow_specs(tools, edges, seed=seed))
    graphs: list[nx.DiGraph] = []
    seen: set[str] = set()
    for variant in range(n_variants):
        flow, chosen = select_flow(tools, edges, flow_variant=variant, seed=seed)
        signature = _edge_signature(chosen)
        if signature in seen:
            continue
        seen.add(signature)
        graphs.append(to_graph(tools, chosen, env_id=env.env_id, graph_index=len(graphs), flow=flow,
                               flow_variant=variant, inferer=inferer))  # fmt: skip
        if len(graphs) == n_graphs:
            break
    return graphs
