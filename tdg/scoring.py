"""Pairwise dependency evidence and its calibrated probability (the offline TDG inferer's model).

For an ordered tool pair (A, B) `pair_evidence` computes:
- ``key_name``: the best name relation (`tdg.fields.name_relation`) between a *key* parameter of B and a response
  field of A (ID-like, foreign key or entity-typed; `tdg.fields.is_key_name`), types compatible. Only these
  mappings become parameter edges, so ``get_order.quantity -> update_order.quantity`` never does;
- ``other_name``: the same for non-key, non-generic names (``distance`` -> ``distance``);
- ``field_sim``: the highest embedding cosine between a parameter of B (name words + description) and a
  type-compatible response field of A (path words + description);
- ``mention_sim``: the highest cosine between a parameter description of B and A's name + description
  ("can be extracted from the Search Airport API");
- ``tool_sim``: cosine of the two tools' name + description;
- ``any_sim``: the same ignoring declared types (a number is often passed on as text);
- ``margin``: ``field_sim(A, B) - field_sim(B, A)`` (which way the value flows);
- ``best_source`` / ``best_sink``: A is the tool whose output best fits B's parameters (``any_sim + mention_sim``)
  among all tools of the set, and B the best consumer of A's output;
- ``sink``: B takes a generic value (``text``, ``message``, ``data``, ``number``, ``amount``, ...) and A returns
  something;
- ``verb_order``: A and B work on one entity and A's verb comes first (create < read < update < delete);
- ``provider``: A reads or creates (its output is a record worth passing on);
- ``echo``: a mutation echoing a record back to an earlier verb of the same entity (``cancel_order -> get_order``).
- ``gap_in`` / ``gap_out``: how far A's fit to B (``any_sim + mention_sim``) falls short of B's best source / A's
  best consumer in the set (0 for the best; graded where ``best_source`` / ``best_sink`` are 0/1);
- ``field_gap``: ``field_sim`` minus the best ``field_sim`` of any tool of the set into B;
- ``n_tools``: the size of the tool set (the share of pairs that are edges falls with it).

`Calibration.probability` maps them to P(edge) with gradient-boosted trees (log loss). The shipped models
(``tdg/calibration/<embedder>.json``, one per embedder) and their edge thresholds were fitted by
`bench/tdg.py --devset --fit` on the ``dev`` split of `tdg.devset` only (threshold from out-of-fold predictions);
the ``heldout`` split is reported, never fitted. Evaluating a model needs no scikit-learn, fitting one does.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import Field

from data.models import StrictModel, ToolKind, ToolSchema
from gustforge.errors import ConfigError
from tdg.embedding import Embedder, LexicalEmbedder
from tdg.fields import (
    GENERIC_NAMES,
    FieldRef,
    entity_of,
    is_key_name,
    name_relation,
    name_tokens,
    param_specs,
    response_fields,
    singular,
    types_compatible,
)

__all__ = ["FEATURES", "KIND_RANK", "PairEvidence", "Tree", "Calibration", "calibration_path", "load_calibration",
           "SIMILARITY_FEATURES", "VERBS", "model_features", "pair_evidence", "tool_entity"]  # fmt: skip

FEATURES = ("key_name", "other_name", "field_sim", "any_sim", "mention_sim", "tool_sim", "margin", "best_source",
            "best_sink", "sink", "verb_order", "provider", "echo", "gap_in", "gap_out", "field_gap",
            "n_tools")  # fmt: skip
SIMILARITY_FEATURES = ("field_sim", "any_sim", "mention_sim", "tool_sim", "margin", "best_source", "best_sink",
                       "gap_in", "gap_out", "field_gap")  # fmt: skip


def model_features(embedder: str) -> tuple[str, ...]:
    """The features the model of `embedder` uses: `FEATURES`, plus for a semantic embedder the lexical
    embedder's similarity features (chosen by nested cross-validation on dev: they raised precision and recall)."""
    return FEATURES if embedder == "lexical" else FEATURES + tuple(f"lexical_{f}" for f in SIMILARITY_FEATURES)


# Parameter words of a consumer that accepts any value of its type (send_sms.message, encrypt_data.data).
_SINK_WORDS = frozenset("text message data content number num value input body string amount total price".split())
KIND_RANK = {ToolKind.CREATE: 0, ToolKind.READ: 1, ToolKind.UPDATE: 2, ToolKind.ACTION: 2, ToolKind.DELETE: 3}
_MIN_KEY_RELATION = 0.6
VERBS = frozenset(
    "get list search find fetch read show view query lookup check create add new make register insert post book "
    "update set edit modify change patch put rename assign move delete remove cancel drop clear archive".split()
)


def tool_entity(tool: ToolSchema) -> str | None:
    """The entity a tool works on: its declared DB collection, else the first non-verb token of its name."""
    if tool.entity:
        return singular(tool.entity)
    tokens = [t for t in name_tokens(tool.name) if t not in VERBS and t not in GENERIC_NAMES]
    return singular(tokens[0]) if tokens else None


@dataclass(frozen=True)
class PairEvidence:
    """What speaks for B depending on A."""

    src: str
    dst: str
    features: dict[str, float]
    key_mappings: list[tuple[float, str, str]] = field(default_factory=list)  # (relation, A field path, B param)
    best_field: tuple[str, str, float] | None = None  # (A field path, B param, cosine)


class Tree(StrictModel):
    """One regression tree in array form (sklearn's ``tree_`` layout): node i is a leaf when ``left[i] == -1``."""

    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    value: list[float]

    def predict(self, x: Sequence[float]) -> float:
        node = 0
        while self.left[node] != -1:
            node = self.left[node] if x[self.feature[node]] <= self.threshold[node] else self.right[node]
        return self.value[node]


class Calibration(StrictModel):
    """Gradient-boosted trees P(edge | features) for one embedder, with the edge threshold chosen on dev.

    probability = sigmoid(init + learning_rate * sum(tree(x))), trained with log loss, so it is a probability
    (its Brier score on the held-out split is reported by `bench/tdg.py --devset --fit`).
    """

    embedder: str
    features: list[str]
    init: float
    learning_rate: float
    trees: list[Tree]
    threshold: float = Field(description="P(edge) an edge needs; chosen on out-of-fold dev predictions.")
    fitted_on: str = Field(default="", description="What the model was fitted on.")

    def probability(self, features: Mapping[str, float]) -> float:
        x = [float(features.get(name, 0.0)) for name in self.features]
        z = self.init + self.learning_rate * sum(tree.predict(x) for tree in self.trees)
        return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))


def calibration_path(embedder: str) -> Path:
    return Path(__file__).resolve().parent / "calibration" / f"{embedder}.json"


@functools.cache
def load_calibration(embedder: str) -> Calibration:
    """The shipped model for `embedder` (``tdg/calibration/<embedder>.json``, written by `bench/tdg.py --fit`).

    Raises:
        ConfigError: No model ships for this embedder.
    """
    path = calibration_path(embedder)
    if not path.is_file():
        raise ConfigError(f"no TDG edge calibration for embedder {embedder!r} at {path}")
    return Calibration.model_validate_json(path.read_text(encoding="utf-8"))


def _words(name: str) -> str:
    return " ".join(name_tokens(name))


def _param_text(name: str, schema: Mapping[str, object]) -> str:
    return f"{_words(name)}: {schema.get('description') or ''}".strip(": ")


def _field_text(f: FieldRef) -> str:
    head = f"{_words(f.parent)} {_words(f.leaf)}" if f.parent and f.parent != f.leaf else _words(f.leaf)
    return f"{head}: {f.description}".strip(": ")


def _tool_text(tool: ToolSchema) -> str:
    return f"{_words(tool.name)}: {tool.description}"[:400]


@dataclass
class _ToolView:
    tool: ToolSchema
    entity: str | None
    params: dict[str, tuple[dict, bool]]
    fields: list[FieldRef]
    param_vecs: np.ndarray
    desc_vecs: np.ndarray  # parameter descriptions (rows only for described parameters)
    field_vecs: np.ndarray
    tool_vec: np.ndarray


def _views(tools: Sequence[ToolSchema], embedder: Embedder) -> dict[str, _ToolView]:
    texts: list[str] = []
    layout = []
    for tool in tools:
        params = param_specs(tool.parameters)
        fields = response_fields(tool.response)
        described = [str(s.get("description")) for s, _ in params.values() if s.get("description")]
        spans = []
        for group in ([_param_text(n, s) for n, (s, _) in params.items()], described,
                      [_field_text(f) for f in fields], [_tool_text(tool)]):  # fmt: skip
            spans.append((len(texts), len(texts) + len(group)))
            texts += group
        layout.append((tool, params, fields, spans))
    vectors = embedder.embed(texts) if texts else np.zeros((0, 1))
    out = {}
    for tool, params, fields, spans in layout:
        p, d, f, t = (vectors[a:b] for a, b in spans)
        out[tool.name] = _ToolView(tool, tool_entity(tool), params, fields, p, d, f, t[0])
    return out


def _field_sim(a: _ToolView, b: _ToolView) -> tuple[float, float, tuple[str, str, float] | None]:
    """(best type-compatible cosine, best cosine ignoring types, where the first was found)."""
    if not a.fields or not b.params:
        return 0.0, 0.0, None
    sims = b.param_vecs @ a.field_vecs.T
    best, where = 0.0, None
    for i, (name, (schema, _)) in enumerate(b.params.items()):
        for j, f in enumerate(a.fields):
            if types_compatible(schema, f.type) and sims[i, j] > best:
                best, where = float(sims[i, j]), (f.path, name, round(float(sims[i, j]), 3))
    return best, max(float(sims.max()), 0.0), where


def _is_sink(view: _ToolView) -> bool:
    return any(set(name_tokens(p)) & _SINK_WORDS for p in view.params)


def _name_features(a: _ToolView, b: _ToolView, entities: frozenset[str]) -> tuple[float, float, list]:
    key_best, other_best, mappings = 0.0, 0.0, []
    for param, (schema, _) in sorted(b.params.items()):
        if b.tool.kind is ToolKind.CREATE and entity_of(param) == b.entity:
            continue  # the ID of the record being created is new, not copied from elsewhere
        if param.lower() in GENERIC_NAMES:
            continue
        scored = [(name_relation(param, f, dst_entity=b.entity), f) for f in a.fields
                  if types_compatible(schema, f.type)]  # fmt: skip
        scored = [(s, f) for s, f in scored if s > 0 and f.leaf.lower() not in GENERIC_NAMES]
        if not scored:
            continue
        score, f = min(scored, key=lambda sf: (-sf[0], sf[1].path))
        if is_key_name(param, entities) or is_key_name(f.leaf, entities):
            key_best = max(key_best, score)
            if score >= _MIN_KEY_RELATION:
                mappings.append((score, f.path, param))
        else:
            other_best = max(other_best, score)
    return key_best, other_best, mappings


def _similarity_features(
    views: Mapping[str, _ToolView],
) -> tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], tuple[str, str, float] | None]]:
    """The embedding-based features (`SIMILARITY_FEATURES`) of every ordered pair of one embedder's views, and
    where each pair's best type-compatible field match was found."""
    sims = {(x.tool.name, y.tool.name): _field_sim(x, y) for x, y in itertools.permutations(views.values(), 2)}
    mentions = {(x.tool.name, y.tool.name): max(float((y.desc_vecs @ x.tool_vec).max()), 0.0) if len(y.desc_vecs)
                else 0.0 for x, y in itertools.permutations(views.values(), 2)}  # fmt: skip
    fit = {pair: sims[pair][1] + mentions[pair] for pair in sims}
    best_in = {b: max((fit[(a, b)] for a in views if a != b), default=0.0) for b in views}
    best_out = {a: max((fit[(a, b)] for b in views if a != b), default=0.0) for a in views}
    best_field_in = {b: max((sims[(a, b)][0] for a in views if a != b), default=0.0) for b in views}
    out = {}
    for (a, b), (field_sim, any_sim, _) in sims.items():
        out[(a, b)] = {
            "field_sim": field_sim,
            "any_sim": any_sim,
            "mention_sim": mentions[(a, b)],
            "tool_sim": float(views[a].tool_vec @ views[b].tool_vec),
            "margin": any_sim - sims[(b, a)][1],
            "best_source": float(fit[(a, b)] >= best_in[b] > 0),
            "best_sink": float(fit[(a, b)] >= best_out[a] > 0),
            "gap_in": fit[(a, b)] - best_in[b],
            "gap_out": fit[(a, b)] - best_out[a],
            "field_gap": field_sim - best_field_in[b],
        }
    return out, {pair: where for pair, (*_, where) in sims.items()}


def pair_evidence(tools: Sequence[ToolSchema], embedder: Embedder) -> list[PairEvidence]:
    """Evidence for every ordered pair of distinct tools (see the module docstring). With a non-lexical embedder
    the lexical embedder's similarity features are added as ``lexical_<name>`` (both views of the same texts)."""
    views = _views(tools, embedder)
    entities = frozenset(e for v in views.values() if (e := v.entity))
    similarity, where = _similarity_features(views)
    lexical = similarity if embedder.name == "lexical" else _similarity_features(_views(tools, LexicalEmbedder()))[0]
    out = []
    for a, b in itertools.permutations(views.values(), 2):
        pair = (a.tool.name, b.tool.name)
        key_best, other_best, mappings = _name_features(a, b, entities)
        same = a.entity is not None and a.entity == b.entity
        rank_a, rank_b = KIND_RANK[a.tool.kind], KIND_RANK[b.tool.kind]
        features = {
            "key_name": key_best,
            "other_name": other_best,
            **similarity[pair],
            "sink": float(_is_sink(b) and bool(a.fields)),
            "verb_order": float(same and rank_a < rank_b),
            "provider": float(a.tool.kind in (ToolKind.READ, ToolKind.CREATE)),
            "echo": float(same and rank_a > rank_b),
            "n_tools": float(len(views)),
            **{f"lexical_{name}": value for name, value in lexical[pair].items()},
        }
        out.append(PairEvidence(a.tool.name, b.tool.name, features, mappings, where[pair]))
    return out
