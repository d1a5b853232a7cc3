"""Tool dependency graph (TDG) inference (ToolVerse §3.2.1).

Nodes are the refactored tools; an edge A -> B means B depends on A, either because an output field of A provides
an argument of B (``parameter``) or because B only makes sense after A in the scenario (``semantic``). Edges carry
``type``, ``confidence`` (float or None) and ``evidence``; parameter evidence has the checkable form
``get_order.response.order.order_id -> cancel_order.order_id`` (see `tdg.fields`).

Three inferers live in `INFERERS`:
- ``deterministic`` (default, no LLM): every ordered pair gets a calibrated probability from names, types and text
  embeddings (`tdg.scoring`; MiniLM with the `embed` extra, else the labelled lexical fallback, `tdg.embedding`).
  Pairs at or above the model's threshold (chosen on dev) become edges: *parameter* edges only when a key field
  (ID-like, foreign key or entity-typed) of A is named like a parameter of B (so
  ``get_order.quantity -> update_order.quantity`` never is one), *semantic* edges otherwise. Plus semantic edges
  along create -> read -> update -> delete between adjacent verb levels of one entity (the scenario order of the
  generated environments).
- ``name_match``: the baseline: A -> B whenever a response leaf of A has the name of a parameter of B.
- ``llm``: the `tdg.prompts` judge on candidate pairs only (a name hint, a shared entity or a lexical probability
  at the threshold), asynchronous with bounded concurrency; refuses an offline client.

`build_graphs` derives several graphs ("logical flows") from one inference run (`flow_specs`):
- ``full``: every inferred edge;
- ``sampled:<k>``: a seeded draw from the calibrated edge probabilities (semantic edges kept with probability =
  confidence, one provider per argument drawn by confidence); the seed mixes the base seed, k and the toolset, so
  graphs differ within and across toolsets and DUS samples different tasks from them;
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
from data.models import ToolSchema
from gustforge.errors import ConfigError, InputError, LLMOutputError
from gustforge.hashing import content_hash
from gustforge.llm import LLMClient, run_role_async
from gustforge.registry import Registry
from tdg.embedding import resolve_embedder
from tdg.fields import (
    enrich_response,
    format_evidence,
    name_relation,
    param_specs,
    parse_evidence,
    record_shapes,
    response_fields,
    types_compatible,
)
from tdg.prompts import make_judge_role, tool_json
from tdg.scoring import KIND_RANK, PairEvidence, load_calibration, pair_evidence, tool_entity

__all__ = [
    "InferredEdge",
    "EdgeInferer",
    "INFERERS",
    "tool_entity",
    "scored_edges",
    "verb_order_edges",
    "MAX_SEMANTIC_IN",
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

_SEMANTIC_CONFIDENCE = 0.5
_JUDGE_CONCURRENCY = 8
MAX_SEMANTIC_IN = 3  # most incoming semantic edges per tool (see `scored_edges`)
_SAMPLED_FLOWS = 4  # seeded draws tried after the full graph (see `flow_specs`)


@dataclass(frozen=True)
class InferredEdge:
    src: str
    dst: str
    type: EdgeType
    confidence: float | None
    evidence: str


class EdgeInferer(Protocol):
    """Infers candidate edges over one toolset; `client` is only used by LLM-backed inferers, `embedder`
    (``auto`` / ``minilm`` / ``lexical``, see `tdg.embedding`) only by the calibrated one."""

    def __call__(
        self, tools: Sequence[ToolSchema], *, client: LLMClient | None, embedder: str
    ) -> list[InferredEdge]: ...


INFERERS: Registry[EdgeInferer] = Registry("edge inferer")


# --------------------------------------------------------------------------- pairwise rules
def _semantic_evidence(entity: str, a: ToolSchema, b: ToolSchema) -> str:
    return f"semantic: on {entity}, {a.kind.value} ({a.name}) precedes {b.kind.value} ({b.name})"


def verb_order_edges(tools: Sequence[ToolSchema]) -> list[InferredEdge]:
    """Edges between adjacent present verb levels of each entity (create -> read -> update -> delete)."""
    groups: dict[str, list[ToolSchema]] = defaultdict(list)
    for tool in tools:
        entity = tool_entity(tool)
        if entity is not None:
            groups[entity].append(tool)
    edges = []
    for entity, members in sorted(groups.items()):
        levels = sorted({KIND_RANK[t.kind] for t in members})
        for low, high in itertools.pairwise(levels):
            for a in (t for t in members if KIND_RANK[t.kind] == low):
                for b in (t for t in members if KIND_RANK[t.kind] == high):
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


def _semantic_note(ev: PairEvidence, p: float) -> str:
    where = ""
    if ev.best_field:
        path, param, cos = ev.best_field
        where = f"; closest fields {ev.src}.response.{path} ~ {ev.dst}.{param} (cos {cos})"
    return f"semantic: P(edge)={p:.2f} from names and descriptions{where}"


def scored_edges(tools: Sequence[ToolSchema], *, embedder: str = "auto", threshold: float | None = None,
                 max_semantic_in: int = MAX_SEMANTIC_IN) -> list[InferredEdge]:  # fmt: skip
    """Edges whose calibrated probability (`tdg.scoring`) reaches `threshold` (None: the model's own, chosen on
    the dev split).

    A pair with a key mapping (ID-like / foreign-key / entity-typed field of A named like a parameter of B) becomes
    a parameter edge whose evidence lists those mappings; any other pair above the threshold a semantic edge. The
    confidence is the calibrated probability. Each tool keeps at most `max_semantic_in` incoming semantic edges (the
    most probable): the model was calibrated on tool sets of 2-5 tools, where about one ordered pair in five is an
    edge; in a 25-tool environment that prior would make nearly every pair of tools sharing a ``filename`` an edge.
    """
    model = resolve_embedder(embedder)
    calibration = load_calibration(model.name)
    threshold = calibration.threshold if threshold is None else threshold
    edges = []
    for ev in pair_evidence(tools, model):
        p = calibration.probability(ev.features)
        if p < threshold or ev.features["echo"]:
            continue  # a mutation echoing a record back (cancel_order -> get_order) is not a dependency
        if ev.key_mappings:
            evidence = "; ".join(format_evidence(ev.src, path, ev.dst, param) for _, path, param in ev.key_mappings)
            edges.append(InferredEdge(ev.src, ev.dst, EdgeType.PARAMETER, round(p, 4), evidence))
        else:
            edges.append(InferredEdge(ev.src, ev.dst, EdgeType.SEMANTIC, round(p, 4), _semantic_note(ev, p)))
    semantic_in: dict[str, list[InferredEdge]] = defaultdict(list)
    for edge in edges:
        if edge.type is EdgeType.SEMANTIC:
            semantic_in[edge.dst].append(edge)
    dropped = {(e.src, e.dst) for incoming in semantic_in.values()
               for e in sorted(incoming, key=lambda e: (-(e.confidence or 0.0), e.src))[max_semantic_in:]}  # fmt: skip
    return [e for e in edges if (e.src, e.dst) not in dropped]


@INFERERS.register("deterministic")
def deterministic_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None,
                          embedder: str = "auto") -> list[InferredEdge]:  # fmt: skip
    """Calibrated key/semantic edges (`scored_edges`) plus verb-order semantic edges; no LLM."""
    return _merge(scored_edges(tools, embedder=embedder) + verb_order_edges(tools))


@INFERERS.register("name_match")
def name_match_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None,
                       embedder: str = "auto") -> list[InferredEdge]:  # fmt: skip
    """Baseline: A -> B whenever a response leaf of A has the name of a parameter of B (any name, no types)."""
    edges = []
    for a, b in itertools.permutations(tools, 2):
        params = {p.lower(): p for p in param_specs(b.parameters)}
        pairs = [(f.path, params[f.leaf.lower()]) for f in response_fields(a.response) if f.leaf.lower() in params]
        if pairs:
            evidence = "; ".join(format_evidence(a.name, path, b.name, param) for path, param in sorted(pairs))
            edges.append(InferredEdge(a.name, b.name, EdgeType.PARAMETER, None, evidence))
    return edges


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
    """Deterministic twin of the judge (the role requires one): the calibrated lexical model on this one pair.

    `llm_inferer` refuses offline clients, so builds never use it; it keeps the role runnable in isolation.
    """
    a, b = _from_view(json.loads(inputs["tool_a"])), _from_view(json.loads(inputs["tool_b"]))
    for edge in scored_edges([a, b], embedder="lexical"):
        if (edge.src, edge.dst) == (a.name, b.name):
            return {"edge": True, "type": edge.type.value, "confidence": edge.confidence, "evidence": edge.evidence}
    return {"edge": False, "type": "none", "confidence": 0.7, "evidence": ""}


_JUDGE = make_judge_role(_offline_judge)


def _hints(a: ToolSchema, b: ToolSchema) -> list[str]:
    """Name matches of A's response fields to B's parameters (types compatible), for the judge's prompt."""
    fields = response_fields(a.response)
    out = []
    for param, (schema, _) in sorted(param_specs(b.parameters).items()):
        scored = [(name_relation(param, f, dst_entity=tool_entity(b)), f.path) for f in fields
                  if types_compatible(schema, f.type)]  # fmt: skip
        score, path = min(scored, key=lambda sp: (-sp[0], sp[1]), default=(0.0, ""))
        if score > 0:
            out.append(format_evidence(a.name, path, b.name, param))
    return out


def candidate_pairs(tools: Sequence[ToolSchema]) -> list[tuple[ToolSchema, ToolSchema, list[str]]]:
    """Ordered pairs worth asking the judge about: a name hint, a shared entity, or a lexical edge probability of
    at least the edge threshold (so its cost is O(plausible pairs), not O(n^2))."""
    plausible = {(e.src, e.dst) for e in scored_edges(tools, embedder="lexical")}
    out = []
    for a, b in itertools.permutations(tools, 2):
        hints = _hints(a, b)
        same_entity = tool_entity(a) is not None and tool_entity(a) == tool_entity(b)
        if hints or same_entity or (a.name, b.name) in plausible:
            out.append((a, b, hints))
    return out


@dataclass(frozen=True)
class DroppedPair:
    """A candidate pair whose judge reply was unusable; the pair gets no edge, the environment is kept."""

    src: str
    dst: str
    reason: str


async def _judge_all(pairs: Sequence[tuple[ToolSchema, ToolSchema, list[str]]], client: LLMClient,
                     concurrency: int) -> list[dict[str, Any] | BaseException]:  # fmt: skip
    gate = asyncio.Semaphore(concurrency)

    async def one(a: ToolSchema, b: ToolSchema, hints: list[str]) -> dict[str, Any]:
        inputs = {"tool_a": tool_json(_tool_view(a)), "tool_b": tool_json(_tool_view(b)),
                  "hints": "\n".join(hints) or "(none)"}  # fmt: skip
        async with gate:
            return await run_role_async(_JUDGE, inputs, client)

    return list(await asyncio.gather(*(one(a, b, h) for a, b, h in pairs), return_exceptions=True))


def judge_pairs(tools: Sequence[ToolSchema], client: LLMClient | None, *,
                concurrency: int = _JUDGE_CONCURRENCY) -> tuple[list[InferredEdge], list[DroppedPair]]:  # fmt: skip
    """Ask the judge about every candidate pair, at most `concurrency` at a time.

    A malformed reply (`LLMOutputError`: no valid JSON after the repair rounds) drops that pair with a reason;
    any other failure (the endpoint is down) is raised, so an outage never passes as an edgeless graph.

    Raises:
        ConfigError: `client` is None or offline (the judge needs a model; use ``tdg.inferer=deterministic``).
        LLMError: The endpoint failed for good.
    """
    if client is None or client.settings.backend == "offline":
        raise ConfigError("tdg.inferer=llm needs an LLM endpoint (llm.backend=openai); the offline client has no "
                          "judge. Use tdg.inferer=deterministic for offline builds.")  # fmt: skip
    pairs = candidate_pairs(tools)
    verdicts = client.run_sync(_judge_all(pairs, client, max(1, concurrency)))
    edges, dropped = [], []
    for (a, b, _), verdict in zip(pairs, verdicts, strict=True):
        if isinstance(verdict, LLMOutputError):
            dropped.append(DroppedPair(a.name, b.name, f"malformed_judge_reply: {verdict}"))
        elif isinstance(verdict, BaseException):
            raise verdict
        elif verdict["edge"] and verdict["type"] != "none":
            edges.append(InferredEdge(a.name, b.name, EdgeType(verdict["type"]), float(verdict["confidence"]),
                                      verdict["evidence"]))  # fmt: skip
    logger.debug("tdg judge: %d candidate pairs of %d", len(pairs), len(tools) * (len(tools) - 1))
    return _merge(edges), dropped


@INFERERS.register("llm")
def llm_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None,
                embedder: str = "auto") -> list[InferredEdge]:  # fmt: skip
    """`judge_pairs`; pairs dropped for a malformed reply are logged with their reason."""
    edges, dropped = judge_pairs(tools, client)
    for pair in dropped:
        logger.warning("tdg judge: dropped %s -> %s (%s)", pair.src, pair.dst, pair.reason)
    return edges


# --------------------------------------------------------------------------- flows and graphs
def with_record_shapes(tools: Sequence[ToolSchema], db: Mapping[str, Any] | None) -> list[ToolSchema]:
    """Tools whose opaque record objects in responses are completed from the DB's record shapes."""
    shapes = record_shapes(db) if db else {}
    return [t.model_copy(update={"response": enrich_response(t.response, shapes)}) for t in tools]


def infer_edges(
    tools: Sequence[ToolSchema],
    *,
    inferer: str = "deterministic",
    client: LLMClient | None = None,
    embedder: str = "auto",
) -> list[InferredEdge]:
    """All candidate edges over `tools` from the named inferer (sorted by (src, dst)).

    Raises:
        InputError: Two tools share a name.
        RegistryError: Unknown inferer.
    """
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InputError(f"duplicate tool names: {sorted({n for n in names if names.count(n) > 1})}")
    return INFERERS.get(inferer)(tools, client=client, embedder=embedder)


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
    sampled = [f"sampled:{k}" for k in range(1, _SAMPLED_FLOWS + 1)]
    return ["full", *sampled, "data_flow", "single_source:0", *focus,
            *(f"single_source:{j}" for j in range(1, depth))]  # fmt: skip


def _sampled(tools: Sequence[ToolSchema], edges: Sequence[InferredEdge], *, seed: int, k: int) -> list[InferredEdge]:
    """One draw from the calibrated edge probabilities: each semantic edge kept with probability = its
    confidence, and one provider per (tool, argument) drawn in proportion to the providers' confidences.

    The draw's seed mixes `seed`, `k` and the toolset's tool names, so two toolsets never share a draw sequence.
    """
    rng = random.Random(content_hash(["tdg-sampled-flow", seed, k, sorted(t.name for t in tools)]))
    keep: set[tuple[str, str]] = set()
    for (dst, _param), options in _providers(edges).items():
        weights = [max(conf, 1e-3) for conf, _ in options]
        keep.add((rng.choices([src for _, src in options], weights=weights)[0], dst))
    chosen = []
    for e in edges:
        if e.type is EdgeType.PARAMETER:
            if any((e.src, ev.dst) in keep for ev in parse_evidence(e.evidence)):
                chosen.append(e)
        elif rng.random() < (1.0 if e.confidence is None else e.confidence):
            chosen.append(e)
    return chosen


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
    if kind == "sampled":
        return flow, _sampled(tools, edges, seed=seed, k=int(arg))
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
    embedder: str = "auto",
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
    edges = infer_edges(tools, inferer=inferer, client=client, embedder=embedder)
    flow, chosen = select_flow(tools, edges, flow_variant=flow_variant, seed=seed)
    return to_graph(tools, chosen, flow=flow, flow_variant=flow_variant, inferer=inferer,
                    embedder=_embedder_label(inferer, embedder))  # fmt: skip


def _embedder_label(inferer: str, embedder: str) -> str:
    """Which embedder the calibrated inferer ran with (``none`` for the others)."""
    return resolve_embedder(embedder).name if inferer == "deterministic" else "none"


def _edge_signature(edges: Sequence[InferredEdge]) -> str:
    return content_hash(sorted([e.src, e.dst, e.type.value] for e in edges))


def build_graphs(
    env: Any,
    *,
    n_graphs: int = 3,
    inferer: str = "deterministic",
    seed: int = 0,
    client: LLMClient | None = None,
    embedder: str = "auto",
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
    edges = infer_edges(tools, inferer=inferer, client=client, embedder=embedder)
    label = _embedder_label(inferer, embedder)
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
                               flow_variant=variant, inferer=inferer, embedder=label))  # fmt: skip
        if len(graphs) == n_graphs:
            break
    return graphs
