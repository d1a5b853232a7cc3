"""Tool dependency graph (TDG) inference (ToolVerse §3.2.1).

Nodes are the refactored tools; an edge A -> B means B depends on A, either because an output field of A provides
an argument of B (``parameter``) or because B only makes sense after A in the scenario (``semantic``). Edges carry
``type``, ``confidence`` (float or None) and ``evidence``; parameter evidence has the checkable form
``get_order.response.order.order_id -> cancel_order.order_id`` (see `tdg.fields`), semantic evidence names its
rule and quotes what it rests on (``semantic[described_order]: ...``).

Inferers live in `INFERERS`, all on one contract (`EdgeInferer`; the deterministic one and the LLM judge are
capped by the same `DensityCap`):
- ``deterministic`` (default, no LLM): the evidence rules of `tdg.evidence` (a produced field that can fill the
  parameter by name, type, format and entity; a parameter description naming the source; a computed value into
  a generic slot; a description saying "call X first"; a record the other tool creates). A rule draws edges only
  when its precision on the development ground truth reaches the calibrated minimum (`tdg.evidence.load_rules`);
  an edge's confidence is its best rule's precision. Name similarity alone never draws an edge.
- ``calibrated``: the earlier boosted-tree model over name and embedding similarities (`tdg.scoring`), kept for
  comparison in `bench/tdg.py`; its semantic edges rest on similarity alone.
- ``name_match``: the naive baseline: A -> B whenever a response leaf of A has the name of a parameter of B.
- ``llm``: the `tdg.prompts` judge on candidate pairs only (any rule's evidence, admitted or not, or a shared
  entity), asynchronous with bounded concurrency; refuses an offline client. A semantic verdict without evidence
  is dropped.

`cap_density` keeps at most `DensityCap.max_providers` providers per (tool, argument) and
`DensityCap.max_edges_per_tool` x |tools| edges per environment, the most confident first.

`build_graphs` derives up to `n_graphs` logical flows from one inference run (`flow_specs`): ``full`` (every
edge), then ``goal:<tool>`` (the edges among one goal tool and everything it depends on, goals with the largest
dependency trees first, rotated by the seed) and ``entity:<entity>`` (the edges into one entity's tools and their
prerequisites). A flow is kept only when it shares at most `max_overlap` of its edges (Jaccard) with every flow
kept before it, so the graphs of one environment tell different stories; an environment may get fewer graphs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import networkx as nx
from pydantic import Field

from data.graphs import EdgeType
from data.models import StrictModel, ToolSchema
from gustforge.errors import ConfigError, InputError, LLMOutputError
from gustforge.llm import LLMClient, run_role_async
from gustforge.registry import Registry
from tdg.embedding import resolve_embedder
from tdg.evidence import Evidence, RuleCalibration, load_rules, toolset_evidence
from tdg.fields import (
    enrich_response,
    entity_of,
    format_evidence,
    name_relation,
    param_specs,
    parse_evidence,
    record_shapes,
    response_fields,
    singular,
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
    "rule_edges",
    "edges_from_evidence",
    "MAX_SEMANTIC_IN",
    "candidate_pairs",
    "with_record_shapes",
    "DensityCap",
    "cap_density",
    "infer_edges",
    "edge_overlap",
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


@INFERERS.register("calibrated")
def calibrated_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None,
                       embedder: str = "auto") -> list[InferredEdge]:  # fmt: skip
    """The earlier boosted-tree model (`scored_edges`) plus verb-order semantic edges; kept for comparison."""
    return _merge(scored_edges(tools, embedder=embedder) + verb_order_edges(tools))


def rule_edges(tools: Sequence[ToolSchema], *, rules: RuleCalibration | None = None) -> list[InferredEdge]:
    """One edge per ordered pair with evidence from an admitted rule (`tdg.evidence`), before any density cap."""
    return edges_from_evidence(toolset_evidence(tools), load_rules() if rules is None else rules)


def edges_from_evidence(evidence: Sequence[Evidence], rules: RuleCalibration) -> list[InferredEdge]:
    """One edge per ordered pair with evidence from a rule `rules` admits.

    A pair with parameter evidence becomes a parameter edge listing one mapping per argument (its most precise
    rule's); a pair with only semantic evidence a semantic edge quoting it. The confidence is the precision of the
    best admitted rule behind the edge.
    """
    by_pair: dict[tuple[str, str], list[Evidence]] = defaultdict(list)
    for ev in evidence:
        if rules.admitted(ev.rule):
            by_pair[(ev.src, ev.dst)].append(ev)
    edges = []
    for (src, dst), found in sorted(by_pair.items()):
        params = sorted((e for e in found if e.type is EdgeType.PARAMETER),
                        key=lambda e: (-rules.confidence(e.rule), e.param or "", e.path or ""))  # fmt: skip
        chosen = _one_per_param(params) if params else found
        kind = EdgeType.PARAMETER if params else EdgeType.SEMANTIC
        confidence = round(max(rules.confidence(e.rule) for e in chosen), 4)
        evidence_text = ("; " if params else " | ").join(sorted(e.text() for e in chosen))
        edges.append(InferredEdge(src, dst, kind, confidence, evidence_text))
    return edges


def _one_per_param(evidence: Sequence[Evidence]) -> list[Evidence]:
    """The first evidence of each parameter (the input is sorted best first)."""
    seen: dict[str | None, Evidence] = {}
    for ev in evidence:
        seen.setdefault(ev.param, ev)
    return list(seen.values())


@INFERERS.register("deterministic")
def deterministic_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None,
                          embedder: str = "auto") -> list[InferredEdge]:  # fmt: skip
    """Edges from the admitted evidence rules (`rule_edges`); no LLM, no embedder."""
    return rule_edges(tools)


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
    """Deterministic twin of the judge (the role requires one): the evidence rules on this one pair.

    `llm_inferer` refuses offline clients, so builds never use it; it keeps the role runnable in isolation.
    """
    a, b = _from_view(json.loads(inputs["tool_a"])), _from_view(json.loads(inputs["tool_b"]))
    for edge in rule_edges([a, b]):
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
    """Ordered pairs worth asking the judge about: a name hint, a shared entity, or evidence from any rule of
    `tdg.evidence`, admitted or not (so its cost is O(plausible pairs), not O(n^2))."""
    plausible = {(e.src, e.dst) for e in toolset_evidence(tools)}
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
        elif verdict["edge"] and verdict["type"] == "semantic" and not str(verdict["evidence"]).strip():
            dropped.append(DroppedPair(a.name, b.name, "semantic_without_evidence"))
        elif verdict["edge"] and verdict["type"] != "none":
            edges.append(InferredEdge(a.name, b.name, EdgeType(verdict["type"]), float(verdict["confidence"]),
                                      verdict["evidence"]))  # fmt: skip
    logger.debug("tdg judge: %d candidate pairs of %d", len(pairs), len(tools) * (len(tools) - 1))
    return _merge(edges), dropped


@INFERERS.register("llm")
def llm_inferer(tools: Sequence[ToolSchema], *, client: LLMClient | None = None,
                embedder: str = "auto") -> list[InferredEdge]:  # fmt: skip
    """`judge_pairs`. A graph is never built from a partial judgement: any unusable reply raises `LLMOutputError`
    (the tdg stage quarantines the environment as `malformed_judge_reply`, counted against its error budget, and
    the next build asks again; only valid replies are cached).

    Raises:
        LLMOutputError: at least one pair got a reply that could not be used.
    """
    edges, dropped = judge_pairs(tools, client)
    malformed = [pair for pair in dropped if pair.reason.startswith("malformed_judge_reply")]
    for pair in dropped:
        logger.warning("tdg judge: dropped %s -> %s (%s)", pair.src, pair.dst, pair.reason)
    if malformed:
        first = malformed[0]
        raise LLMOutputError(f"{len(malformed)} of the judge's replies could not be used (first: {first.src} -> "
                             f"{first.dst}: {first.reason[:200]})")  # fmt: skip
    return edges


# --------------------------------------------------------------------------- flows and graphs
def with_record_shapes(tools: Sequence[ToolSchema], db: Mapping[str, Any] | None) -> list[ToolSchema]:
    """Tools whose opaque record objects in responses are completed from the DB's record shapes."""
    shapes = record_shapes(db) if db else {}
    return [t.model_copy(update={"response": enrich_response(t.response, shapes)}) for t in tools]


class DensityCap(StrictModel):
    """How dense one environment's inferred graph may be (applied to the deterministic and the LLM inferer)."""

    max_providers: int = Field(default=2, ge=1, description="Most providers kept per (tool, argument).")
    max_edges_per_tool: float = Field(default=1.5, gt=0, description="Most edges per environment, per tool.")


def cap_density(edges: Sequence[InferredEdge], n_tools: int, cap: DensityCap) -> list[InferredEdge]:
    """`edges` thinned to `cap`: per (tool, argument) the `max_providers` most confident providers (a parameter
    edge left without a mapping is dropped), then the ``max_edges_per_tool * n_tools`` most confident edges
    (parameter before semantic at equal confidence). Sorted by (src, dst)."""
    ranked = sorted(edges, key=lambda e: (*_rank(e)[:2], not _home(e), *_rank(e)[2:]))
    per_param: dict[tuple[str, str], int] = defaultdict(int)
    kept = []
    for e in ranked:
        if e.type is EdgeType.PARAMETER:
            mappings = [ev for ev in parse_evidence(e.evidence) if per_param[(e.dst, ev.param)] < cap.max_providers]
            if not mappings:
                continue
            for ev in mappings:
                per_param[(e.dst, ev.param)] += 1
            text = "; ".join(format_evidence(ev.src, ev.path, ev.dst, ev.param) for ev in mappings)
            e = InferredEdge(e.src, e.dst, e.type, e.confidence, text)
        kept.append(e)
    limit = max(1, math.floor(cap.max_edges_per_tool * n_tools))
    return sorted(kept[:limit], key=lambda e: (e.src, e.dst))


def _home(e: InferredEdge) -> bool:
    """Whether a parameter edge's field sits in a record of the entity its argument names (``books[].book_id``
    for ``book_id``, not the foreign key ``loan.book_id``): the record's own tool is the natural provider."""
    for ev in parse_evidence(e.evidence):
        segments = [seg.replace("[]", "") for seg in ev.path.split(".")]
        parent = singular(segments[-2]) if len(segments) > 1 else None
        if parent is not None and parent == entity_of(ev.param):
            return True
    return False


def _rank(e: InferredEdge) -> tuple[float, int, str, str]:
    return (-(e.confidence if e.confidence is not None else 1.0), e.type is not EdgeType.PARAMETER, e.src, e.dst)


_CAPPED = frozenset({"deterministic", "llm"})


def infer_edges(
    tools: Sequence[ToolSchema],
    *,
    inferer: str = "deterministic",
    client: LLMClient | None = None,
    embedder: str = "auto",
    cap: DensityCap | None = None,
) -> list[InferredEdge]:
    """All edges over `tools` from the named inferer (sorted by (src, dst)); the deterministic and LLM inferers'
    edges are thinned by `cap` (default `DensityCap()`), the baseline and the earlier model's are not.

    Raises:
        InputError: Two tools share a name.
        RegistryError: Unknown inferer.
    """
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InputError(f"duplicate tool names: {sorted({n for n in names if names.count(n) > 1})}")
    edges = INFERERS.get(inferer)(tools, client=client, embedder=embedder)
    if inferer in _CAPPED:
        edges = cap_density(edges, len(tools), cap if cap is not None else DensityCap())
    return sorted(edges, key=lambda e: (e.src, e.dst))


# --------------------------------------------------------------------------- flows
EdgeSet = Sequence[InferredEdge] | set[tuple[str, str]]


def edge_overlap(a: EdgeSet, b: EdgeSet) -> float:
    """Jaccard overlap of two edge sets (0 when both are empty)."""
    sa, sb = _pairs(a), _pairs(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 0.0


def _pairs(edges: EdgeSet) -> set[tuple[str, str]]:
    return set(edges) if isinstance(edges, set) else {(e.src, e.dst) for e in edges}


def _closure(edges: Sequence[InferredEdge], targets: set[str]) -> list[InferredEdge]:
    """The edges among `targets` and everything they (transitively) depend on."""
    g = nx.DiGraph([(e.src, e.dst) for e in edges])
    keep = set(targets)
    for t in targets & set(g.nodes):
        keep |= nx.ancestors(g, t)
    return [e for e in edges if e.src in keep and e.dst in keep]


def flow_specs(tools: Sequence[ToolSchema], edges: Sequence[InferredEdge], *, seed: int) -> list[str]:
    """The names of the logical flows for these edges, in the order they are tried: ``full``, then one
    ``goal:<tool>`` per tool with prerequisites (largest dependency tree first, rotated by `seed`), then one
    ``entity:<entity>`` per entity whose tools have prerequisites (sorted, rotated by `seed`)."""
    goals = sorted({e.dst for e in edges}, key=lambda t: (-len(_closure(edges, {t})), t))
    by_name = {t.name: t for t in tools}
    entities = sorted({str(ent) for t in goals if (ent := tool_entity(by_name[t])) is not None})
    return ["full", *(f"goal:{g}" for g in _rotate(goals, seed)), *(f"entity:{e}" for e in _rotate(entities, seed))]


def _rotate(items: list[str], seed: int) -> list[str]:
    if not items:
        return []
    start = random.Random(seed).randrange(len(items))
    return items[start:] + items[:start]


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
    if kind == "goal":
        return flow, _closure(edges, {arg})
    members = {t.name for t in tools if tool_entity(t) == arg}
    return flow, _closure(edges, {e.dst for e in edges if e.dst in members})


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
    cap: DensityCap | None = None,
) -> nx.DiGraph:
    """Infer the TDG of one logical flow over `tools` (may contain cycles; see `tdg.sanitize`).

    Args:
        tools: The environment's refactored tools.
        inferer: Name in `INFERERS`.
        flow_variant: Index into `flow_specs` (0 full, then goal and entity flows).
        seed: Rotates the order of goal and entity flows.
        client: LLM client for the ``llm`` inferer.
        db: The environment's initial DB; completes opaque record objects in responses (`with_record_shapes`).
        embedder: Embedder of the ``calibrated`` inferer.
        cap: Density cap (default `DensityCap()`).

    Returns:
        The graph; ``g.graph`` holds ``flow`` and ``inferer``. Node ``response`` attributes are the completed
        response schemas.
    """
    tools = with_record_shapes(tools, db)
    edges = infer_edges(tools, inferer=inferer, client=client, embedder=embedder, cap=cap)
    flow, chosen = select_flow(tools, edges, flow_variant=flow_variant, seed=seed)
    return to_graph(tools, chosen, flow=flow, flow_variant=flow_variant, inferer=inferer,
                    embedder=_embedder_label(inferer, embedder))  # fmt: skip


def _embedder_label(inferer: str, embedder: str) -> str:
    """Which embedder the calibrated inferer ran with (``none`` for the others)."""
    return resolve_embedder(embedder).name if inferer == "calibrated" else "none"


def build_graphs(
    env: Any,
    *,
    n_graphs: int = 3,
    inferer: str = "deterministic",
    seed: int = 0,
    client: LLMClient | None = None,
    embedder: str = "auto",
    cap: DensityCap | None = None,
    max_overlap: float = 0.7,
) -> list[nx.DiGraph]:
    """Up to `n_graphs` distinct logical flows (TDGs) for one environment, from one inference run.

    Args:
        env: An `envgen.runtime.Environment` (``env_id``, ``schemas``, ``initial_db``).
        n_graphs: How many flows to return at most (paper: 3).
        inferer: Name in `INFERERS`.
        seed: Rotates the goal and entity flows.
        client: LLM client for the ``llm`` inferer.
        cap: Density cap (default `DensityCap()`).
        max_overlap: Most Jaccard overlap of a flow's edges with any flow kept before it.

    Returns:
        Graphs with ``graph_index`` 0..k-1 (k <= n_graphs), ``env_id``, ``flow``, ``flow_variant``, ``inferer``
        in ``g.graph``; the first is ``full``, each later one has edges, differs from every earlier one and
        overlaps each by at most `max_overlap`.
    """
    tools = with_record_shapes(list(env.schemas), env.initial_db)
    edges = infer_edges(tools, inferer=inferer, client=client, embedder=embedder, cap=cap)
    label = _embedder_label(inferer, embedder)
    kept: list[tuple[str, int, list[InferredEdge]]] = []
    for variant in range(len(flow_specs(tools, edges, seed=seed))):
        flow, chosen = select_flow(tools, edges, flow_variant=variant, seed=seed)
        if kept and (not chosen or any(edge_overlap(chosen, other) > max_overlap or _pairs(chosen) == _pairs(other)
                                       for *_, other in kept)):  # fmt: skip
            continue
        kept.append((flow, variant, chosen))
        if len(kept) == n_graphs:
            break
    return [to_graph(tools, chosen, env_id=env.env_id, graph_index=i, flow=flow, flow_variant=variant,
                     inferer=inferer, embedder=label) for i, (flow, variant, chosen) in enumerate(kept)]  # fmt: skip
