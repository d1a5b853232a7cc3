"""Development ground truth for TDG inference: tool sets with *observed* data flow from public traces.

Sources (τ²-bench and BFCL are deliberately absent: they are reserved for independent evaluation):
- **NESTFUL** (Apache-2.0, read from the installed `nestful-wrapper` package, never copied): executable, Glaive and
  SGD sequences plus the ComplexFuncBench part. An argument ``"$var1.skyId$"`` of a call references the output of
  the earlier call labelled ``var1``: an observed edge from that call's tool to this call's tool.
- **Toucan** SFT/RL preview rows under ``../shared/corpora/toucan/``: a scalar value returned by one call and passed
  verbatim to a later call is an observed edge between the two tools.

One item is the set of distinct tools one sample calls (samples with the same tool set are merged). Its gold edges
are the edges observed *anywhere in the same source* between two of its tools; every other ordered pair of its
tools counts as a negative. The gold is therefore a lower bound: a real dependency that no sample exercised counts
against precision.

Each item lands in the ``dev`` or ``heldout`` split by a hash of its id (`split_of`), so tuning on ``dev`` and
reporting ``heldout`` is reproducible without storing anything.
"""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from data.models import StrictModel, ToolSchema
from envgen.entities import infer_entity, infer_kind
from envgen.naming import snake_case, unique_name
from envgen.refactor import finalize_tools, normalize_parameters
from gustforge.errors import InputError
from gustforge.hashing import content_hash

__all__ = [
    "NESTFUL_SOURCES",
    "DevItem",
    "DevSet",
    "split_of",
    "nestful_tool",
    "load_nestful",
    "load_toucan",
    "load_devset",
    "score_edges",
    "bootstrap_interval",
]

NESTFUL_SOURCES = ("nestful_executable", "nestful_glaive", "nestful_sgd", "nestful_complexfuncbench")
_REF = re.compile(r"\$(var\d+)(?:\.([^$]*))?\$")
_TYPES = {"float": "number", "int": "integer", "str": "string", "list": "array", "dict": "object", "bool": "boolean",
          "double": "number", "long": "integer"}  # fmt: skip
_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
_STATUS = {"status": {"type": "string", "enum": ["success", "error"]}, "message": {"type": "string"}}


class DevItem(StrictModel):
    """One tool set with its observed data-flow edges."""

    item_id: str
    source: str
    tools: list[ToolSchema]
    gold: list[tuple[str, str]] = Field(description="Observed edges (src, dst) between tools of this item.")
    samples: int = Field(description="How many samples of the source call exactly this tool set.")
    split: Literal["dev", "heldout"]


class DevSet(StrictModel):
    items: list[DevItem]
    skipped: dict[str, int] = Field(default_factory=dict, description="Samples not used, by reason.")


def split_of(item_id: str, *, heldout_share: float = 0.5) -> Literal["dev", "heldout"]:
    """``heldout`` for a fixed, hash-chosen share of item ids."""
    return "heldout" if int(content_hash(["tdg-devset", item_id])[:8], 16) / 0xFFFFFFFF < heldout_share else "dev"


# ----------------------------------------------------------------------------------------------- NESTFUL
def _json_schema(spec: Any, depth: int = 0) -> dict[str, Any]:
    """A NESTFUL parameter/output spec (``type`` may be ``float``/``list``; nested ``properties``/``items``)."""
    if not isinstance(spec, Mapping) or depth > 8:
        return {}
    out: dict[str, Any] = {}
    kind = spec.get("type")
    if isinstance(kind, str) and kind:
        kind = _TYPES.get(kind.lower(), kind.lower())
        if kind in _JSON_TYPES:
            out["type"] = kind
    if spec.get("description"):
        out["description"] = str(spec["description"])[:300]
    props = spec.get("properties")
    if isinstance(props, Mapping) and props:
        out.setdefault("type", "object")
        out["properties"] = {str(k): _json_schema(v, depth + 1) for k, v in props.items()}
    items = spec.get("items")
    if isinstance(items, Mapping):
        out.setdefault("type", "array")
        out["items"] = _json_schema(items, depth + 1)
    return out


def nestful_tool(spec: Mapping[str, Any], name: str) -> ToolSchema:
    """A NESTFUL API spec as a `ToolSchema`: its query parameters and its real output parameters."""
    params = spec.get("query_parameters") or {}
    properties = {str(p): _json_schema(s) for p, s in params.items()}
    required = sorted(str(p) for p, s in params.items() if isinstance(s, Mapping) and s.get("required") is True)
    parameters = {"type": "object", "properties": properties, **({"required": required} if required else {})}
    outputs = {str(k): _json_schema(v) for k, v in (spec.get("output_parameters") or {}).items()}
    response = {"type": "object", "properties": {**_STATUS, **outputs}, "required": ["status", "message"]}
    kind = infer_kind(name)
    return ToolSchema(name=name, raw_name=str(spec["name"]), description=str(spec.get("description") or ""),
                      parameters=parameters, response=response, kind=kind,
                      entity=infer_entity(name, parameters, kind))  # fmt: skip


def _nestful_raw(source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    try:
        from nestful.data_handlers import DataType, read_raw_data
    except ImportError as exc:
        raise InputError("NESTFUL is not installed: pip install nestful-wrapper (the `bench` extra)") from exc
    part = source.removeprefix("nestful_")
    executable = part == "executable"
    name = None if executable else part
    return read_raw_data(DataType.DATA, executable, name), read_raw_data(DataType.SPEC, executable, name)


def _references(arguments: Any) -> set[str]:
    return {m.group(1) for m in _REF.finditer(json.dumps(arguments, ensure_ascii=False))}


def _items(source: str, sequences: Sequence[tuple[list[str], set[tuple[str, str]]]],
           tools: Mapping[str, ToolSchema], heldout_share: float) -> list[DevItem]:  # fmt: skip
    """Merge samples by tool set; gold = edges observed anywhere in the source between the set's tools."""
    observed = {edge for _, edges in sequences for edge in edges}
    counts: dict[tuple[str, ...], int] = defaultdict(int)
    for names, _ in sequences:
        key = tuple(sorted(set(names)))
        if len(key) >= 2:
            counts[key] += 1
    out = []
    for key, n in sorted(counts.items()):
        item_id = f"{source}:{content_hash(list(key))[:12]}"
        members = set(key)
        gold = sorted((a, b) for a, b in observed if a in members and b in members)
        out.append(DevItem(item_id=item_id, source=source, tools=[tools[k] for k in key], gold=gold, samples=n,
                           split=split_of(item_id, heldout_share=heldout_share)))  # fmt: skip
    return out


def load_nestful(source: str, *, heldout_share: float = 0.5, skipped: dict[str, int] | None = None) -> list[DevItem]:
    """Dev items of one NESTFUL part (see `NESTFUL_SOURCES`)."""
    if source not in NESTFUL_SOURCES:
        raise InputError(f"unknown NESTFUL source {source!r}; expected one of {NESTFUL_SOURCES}")
    skipped = skipped if skipped is not None else {}
    data, specs = _nestful_raw(source)
    taken: set[str] = set()
    tools: dict[str, ToolSchema] = {}
    for spec in specs:
        if spec.get("name") and spec["name"] not in tools:
            name = unique_name(snake_case(str(spec["name"]), fallback="tool"), taken)
            taken.add(name)
            tools[spec["name"]] = nestful_tool(spec, name)
    sequences = []
    for sample in data:
        calls = [c for c in sample.get("output") or [] if c.get("name") != "var_result"]
        if any(c.get("name") not in tools for c in calls):
            skipped["tool_without_spec"] = skipped.get("tool_without_spec", 0) + 1
            continue
        label_tool = {c.get("label"): tools[c["name"]].name for c in calls if c.get("label")}
        edges = set()
        for call in calls:
            for ref in _references(call.get("arguments")):
                src = label_tool.get(ref)
                if src is not None and src != tools[call["name"]].name:
                    edges.add((src, tools[call["name"]].name))
        sequences.append(([tools[c["name"]].name for c in calls], edges))
    by_name = {t.name: t for t in tools.values()}
    return _items(source, sequences, by_name, heldout_share)


# ----------------------------------------------------------------------------------------------- Toucan
def _atoms(value: Any) -> set[str]:
    """Scalar leaves worth tracing (not booleans, not 0/1, strings of 2+ characters), as canonical text."""
    out: set[str] = set()
    if isinstance(value, Mapping):
        for v in value.values():
            out |= _atoms(v)
    elif isinstance(value, list):
        for v in value:
            out |= _atoms(v)
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int | float):
        if value not in (0, 1):
            out.add(repr(float(value)))
    elif isinstance(value, str):
        text = value.strip()
        if len(text) >= 2:
            out.add(text)
    return out


def _response_atoms(text: str) -> set[str]:
    try:
        return _atoms(json.loads(text))
    except (json.JSONDecodeError, TypeError):
        return _atoms(text)


def _toucan_calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool name, arguments, response text) in call order; parallel calls pair with responses in order."""
    calls: list[tuple[str, dict[str, Any]]] = []
    responses: list[str] = []
    for message in messages:
        if message.get("role") == "tool_call":
            call = ast.literal_eval(message["content"]) if isinstance(message["content"], str) else message["content"]
            args = call.get("arguments") or {}
            calls.append((call["name"], json.loads(args) if isinstance(args, str) else args))
        elif message.get("role") == "tool_response":
            responses.append(str(message.get("content") or ""))
    return [(name, args, responses[i] if i < len(responses) else "") for i, (name, args) in enumerate(calls)]


def _toucan_tools(raw_tools: list[dict[str, Any]]) -> dict[str, ToolSchema]:
    """Raw OpenAI tools of a row -> refactored tools (offline refactorer: planned response schemas)."""
    drafts, taken = {}, set()
    for item in raw_tools:
        fn = item.get("function") or item
        name = unique_name(snake_case(fn["name"], fallback="tool"), taken)
        taken.add(name)
        params, _ = normalize_parameters(fn.get("parameters") or {}, tool=name, max_params=None)
        kind = infer_kind(name)
        drafts[fn["name"]] = ToolSchema(name=name, raw_name=fn["name"], description=str(fn.get("description") or ""),
                                        parameters=params, response={"type": "object"}, kind=kind,
                                        entity=infer_entity(name, params, kind))  # fmt: skip
    final = finalize_tools(list(drafts.values()))
    return dict(zip(drafts, final, strict=True))


def load_toucan(corpus_dir: Path, *, heldout_share: float = 0.5,
                skipped: dict[str, int] | None = None) -> list[DevItem]:  # fmt: skip
    """Dev items from the Toucan SFT preview rows (one source, ``toucan``)."""
    skipped = skipped if skipped is not None else {}
    path = Path(corpus_dir) / "toucan_toolcall_sft.preview.jsonl"
    if not path.is_file():
        raise InputError(f"Toucan SFT preview not found: {path}")
    sequences, tools_all = [], {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        tools = _toucan_tools(json.loads(row["tools"]))
        calls = [c for c in _toucan_calls(json.loads(row["messages"])) if c[0] in tools]
        edges = set()
        for j, (dst, args, _) in enumerate(calls):
            wanted = _atoms(args)
            for src, _, response in calls[:j]:
                if src != dst and wanted & _response_atoms(response):
                    edges.add((tools[src].name, tools[dst].name))
        names = [tools[c[0]].name for c in calls]
        if len(set(names)) < 2:
            skipped["toucan_fewer_than_two_tools"] = skipped.get("toucan_fewer_than_two_tools", 0) + 1
            continue
        for t in tools.values():
            tools_all.setdefault(t.name, t)
        sequences.append((names, edges))
    return _items("toucan", sequences, tools_all, heldout_share)


def load_devset(sources: Iterable[str] = (*NESTFUL_SOURCES, "toucan"), *, corpus_dir: Path | None = None,
                heldout_share: float = 0.5) -> DevSet:  # fmt: skip
    """Every dev item of the named sources (``toucan`` needs `corpus_dir`, the ``toucan`` corpus folder)."""
    skipped: dict[str, int] = {}
    items: list[DevItem] = []
    for source in sources:
        if source == "toucan":
            if corpus_dir is None:
                raise InputError("the toucan source needs corpus_dir")
            items += load_toucan(corpus_dir, heldout_share=heldout_share, skipped=skipped)
        else:
            items += load_nestful(source, heldout_share=heldout_share, skipped=skipped)
    return DevSet(items=items, skipped=skipped)


def score_edges(predicted: Mapping[str, Iterable[tuple[str, str]]], items: Sequence[DevItem]) -> dict[str, Any]:
    """Micro precision/recall over all items' ordered tool pairs.

    Args:
        predicted: item id -> predicted edges (src, dst); pairs outside the item's tools are ignored.
        items: The items scored.

    Returns:
        ``{"items", "gold", "predicted", "true_positive", "precision", "recall", "f1"}``.
    """
    tp = n_pred = n_gold = 0
    for item in items:
        names = {t.name for t in item.tools}
        pred = {(a, b) for a, b in predicted.get(item.item_id, ()) if a in names and b in names and a != b}
        gold = set(item.gold)
        tp, n_pred, n_gold = tp + len(pred & gold), n_pred + len(pred), n_gold + len(gold)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"items": len(items), "gold": n_gold, "predicted": n_pred, "true_positive": tp,
            "precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}  # fmt: skip


def bootstrap_interval(predicted: Mapping[str, Iterable[tuple[str, str]]], items: Sequence[DevItem], *,
                       rounds: int = 1000, seed: int = 0) -> dict[str, list[float]]:  # fmt: skip
    """95 % percentile intervals of micro precision and recall, resampling items with replacement.

    Returns:
        ``{"precision": [low, high], "recall": [low, high]}``.
    """
    import random

    rng = random.Random(seed)
    counts = []
    for item in items:
        names = {t.name for t in item.tools}
        pred = {(a, b) for a, b in predicted.get(item.item_id, ()) if a in names and b in names and a != b}
        gold = set(item.gold)
        counts.append((len(pred & gold), len(pred), len(gold)))
    precisions, recalls = [], []
    for _ in range(rounds):
        sample = [counts[rng.randrange(len(counts))] for _ in counts]
        tp, n_pred, n_gold = (sum(c[i] for c in sample) for i in range(3))
        precisions.append(tp / n_pred if n_pred else 0.0)
        recalls.append(tp / n_gold if n_gold else 0.0)

    def interval(values: list[float]) -> list[float]:
        ordered = sorted(values)
        return [round(ordered[int(0.025 * rounds)], 3), round(ordered[int(0.975 * rounds) - 1], 3)]

    return {"precision": interval(precisions), "recall": interval(recalls)}
