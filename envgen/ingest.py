"""Ingest raw tool definitions from five public layouts into `Toolset`s, quarantining what cannot be used.

Formats (auto-detected per file, or forced with `fmt`):
    toucan_row      HF Toucan-1.5M rows (string columns holding JSON; tools in `metadata.mcp_servers[]`,
                    falling back to `available_tools` / `tools` as OpenAI tool lists); one toolset per server.
    toucan_server   Toucan `mcp_servers/*.json` files and the compacted jsonl (`tools[].input_schema`).
    openai_tools    A JSON list of OpenAI function tools, or `{"tools": [...]}`.
    mcp_tools_list  MCP `tools/list` dumps (`inputSchema`), incl. the LiveMCPBench per-server layout.
    toolbench       ToolBench / StableToolBench queries (`api_list` with required/optional parameter lists).

Every record ends as a `Toolset` or as a `QuarantineRecord` with a specific reason code; nothing is dropped.
"""

from __future__ import annotations

import codecs
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.models import Provenance, QuarantineRecord, RawTool, SourceFormat, StageReport, StrictModel, Toolset
from envgen.config import EnvGenConfig
from envgen.limits import IngestLimits
from gustforge.errors import InputError
from gustforge.hashing import canonical_json, sha256_text, short_hash
from gustforge.registry import Registry
from gustforge.schemas import nonlocal_refs

__all__ = [
    "IngestResult",
    "read_toolsets",
    "detect_format",
    "resolve_refs",
    "reason_of",
    "decode_bytes",
    "json_depth",
    "json_nodes",
    "TOOLBENCH_TYPES",
]

logger = logging.getLogger(__name__)

STAGE = "ingest"
TOOLBENCH_TYPES = {
    "string": "string", "str": "string", "enum": "string", "date": "string", "time_zone": "string",
    "number": "number", "float": "number", "double": "number", "integer": "integer", "int": "integer",
    "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array", "object": "object",
    "dict": "object", "geopoint": "string", "file": "string", "credentials": "string",
}  # fmt: skip


class IngestResult(StrictModel):
    """What `read_toolsets` produced: toolsets, quarantined records, and the stage accounting."""

    toolsets: tuple[Toolset, ...]
    quarantine: tuple[QuarantineRecord, ...]
    report: StageReport


@dataclass(frozen=True)
class _Record:
    """One raw record: its parsed value (or parse error), raw text and where it came from."""

    path: str
    record_id: str
    text: str
    value: Any = None
    error: str | None = None


@dataclass(frozen=True)
class _Candidate:
    name: str
    description: str
    tools: list[Any]
    provenance: Provenance


_Parser = Callable[[_Record, Provenance], list[_Candidate]]
_PARSERS: Registry[_Parser] = Registry("ingest parser")


# --------------------------------------------------------------------------------------------- detection


def detect_format(value: Any) -> SourceFormat | None:
    """The source format of one parsed record, or None when it matches none.

    Args:
        value: a parsed JSON value (one jsonl line or one whole .json file).

    Returns:
        The detected `SourceFormat`, or None.
    """
    if isinstance(value, list):
        items = [v for v in value if isinstance(v, dict)]
        if items and all("inputSchema" in v for v in items):
            return SourceFormat.MCP_TOOLS_LIST
        if items and all("function" in v or "parameters" in v or "name" in v for v in items):
            return SourceFormat.OPENAI_TOOLS
        return None
    if not isinstance(value, dict):
        return None
    return _detect_dict(value)


def _detect_dict(value: dict[str, Any]) -> SourceFormat | None:
    tools = value.get("tools")
    if "api_list" in value:
        return SourceFormat.TOOLBENCH
    if "messages" in value or "available_tools" in value or "question" in value or isinstance(tools, str):
        return SourceFormat.TOUCAN_ROW
    metadata = value.get("metadata")
    if isinstance(metadata, dict) and "remote_server_response" in metadata:
        return SourceFormat.TOUCAN_SERVER
    if "server_name" in value and isinstance(tools, list):
        return SourceFormat.TOUCAN_SERVER
    if isinstance(tools, dict):
        return SourceFormat.MCP_TOOLS_LIST
    if isinstance(value.get("result"), dict) and isinstance(value["result"].get("tools"), list):
        return SourceFormat.MCP_TOOLS_LIST
    if isinstance(tools, list):
        if tools and all(isinstance(t, dict) and "inputSchema" in t for t in tools):
            return SourceFormat.MCP_TOOLS_LIST
        return SourceFormat.OPENAI_TOOLS
    return None


# --------------------------------------------------------------------------------------------- reading files


def _iter_files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.name.startswith("."):
                continue
            if child.is_file() or (child.is_symlink() and not child.exists()):  # a dangling link: unreadable_file
                yield child
    elif path.is_file():
        yield path
    else:
        raise InputError(f"no such file or folder: {path}")


# UTF-32 before UTF-16: the UTF-32-LE mark starts with the UTF-16-LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_FALLBACK_ENCODINGS = ("utf-8", "cp1252", "latin-1")  # latin-1 decodes any byte string


def sniff_encoding(head: bytes) -> str | None:
    """The encoding named by a byte-order mark at the start of a file, or None."""
    return next((encoding for bom, encoding in _BOMS if head.startswith(bom)), None)


def decode_bytes(raw: bytes) -> str:
    """Text of raw input bytes: BOM-marked UTF-8/16/32, else UTF-8, else Windows-1252, else Latin-1."""
    encoding = sniff_encoding(raw[:4])
    if encoding is not None:
        return raw.decode(encoding, errors="replace")
    for candidate in _FALLBACK_ENCODINGS:
        try:
            return raw.decode(candidate)
        except UnicodeDecodeError:
            continue
    raise AssertionError("latin-1 decodes every byte string")  # pragma: no cover


def _parse(path: Path, record_id: str, text: str, limits: IngestLimits) -> _Record:
    """One record from its text; every way the text can be unusable becomes an error code, never an exception."""
    if len(text) > limits.max_record_chars:
        error = f"record_too_large: {len(text)} chars > max_record_chars={limits.max_record_chars}"
        return _Record(str(path), record_id, text[:1000], error=error)
    try:
        return _Record(str(path), record_id, text, json.loads(text))
    except json.JSONDecodeError as exc:
        return _Record(
            str(path), record_id, text, error=f"malformed_json: {exc.msg} (line {exc.lineno} col {exc.colno})"
        )
    except RecursionError:
        return _Record(str(path), record_id, text, error="record_too_deep: nesting exceeds the JSON parser's limit")


def _text_lines(path: Path) -> Iterator[str]:
    with path.open("rb") as handle:
        encoding = sniff_encoding(handle.read(4))
    if encoding is not None and encoding != "utf-8-sig":  # UTF-16/32: bytes cannot be split on b"\n"
        with path.open(encoding=encoding, errors="replace") as handle:
            yield from handle
        return
    with path.open("rb") as handle:
        for number, raw in enumerate(handle):
            yield decode_bytes(raw[3:] if number == 0 and encoding else raw)


def _jsonl_records(path: Path, limits: IngestLimits) -> Iterator[_Record]:
    for number, line in enumerate(_text_lines(path), start=1):
        if line.strip():
            yield _parse(path, f"line:{number}", line.rstrip("\r\n"), limits)


def _json_records(path: Path, fmt: SourceFormat | None, limits: IngestLimits) -> Iterator[_Record]:
    record = _parse(path, "file", decode_bytes(path.read_bytes()), limits)
    value = record.value
    if record.error is None and isinstance(value, list) and _is_record_list(value, fmt):
        for index, item in enumerate(value):
            try:
                text = canonical_json(item)
            except (RecursionError, ValueError):
                yield _Record(str(path), f"item:{index}", "", error="record_too_deep: cannot serialize the item")
                continue
            yield _Record(str(path), f"item:{index}", text, item)
    else:
        yield record


def _is_record_list(value: list[Any], fmt: SourceFormat | None) -> bool:
    """A .json list is a list of records unless it is itself one tool list."""
    if fmt is not None:
        return fmt not in (SourceFormat.OPENAI_TOOLS, SourceFormat.MCP_TOOLS_LIST) or not all(
            isinstance(v, dict) and ("function" in v or "inputSchema" in v or "parameters" in v) for v in value
        )
    return bool(value) and all(isinstance(v, dict) and _detect_dict(v) is not None for v in value)


def _parquet_records(file: Path, limits: IngestLimits) -> Iterator[_Record]:
    from envgen.parquet_input import iter_parquet_rows

    for record_id, text, _value, error in iter_parquet_rows(file):
        if error is not None:
            yield _Record(str(file), record_id, text, error=f"unreadable_file: {error}")
        else:  # re-parsed so a row meets the same depth/size limits as a JSON line
            yield _parse(file, record_id, text, limits)


def _file_records(file: Path, fmt: SourceFormat | None, limits: IngestLimits) -> Iterator[_Record]:
    suffix = file.suffix.lower()
    if suffix == ".parquet":  # streamed in record batches (Toucan-1.5M ships as parquet), so no file-size cap
        yield from _parquet_records(file, limits)
        return
    if suffix not in (".json", ".jsonl"):  # counted and quarantined, never skipped silently
        error = (f"unsupported_file: unsupported file type {file.suffix or '(none)'!r}: "
                 "expected .json, .jsonl or .parquet")
        yield _Record(path=str(file), record_id="file", text=file.name, error=error)
        return
    size = file.stat().st_size
    if size > limits.max_file_bytes:
        error = f"file_too_large: {size} bytes > max_file_bytes={limits.max_file_bytes}"
        yield _Record(path=str(file), record_id="file", text=file.name, error=error)
        return
    empty = True
    for record in _jsonl_records(file, limits) if suffix == ".jsonl" else _json_records(file, fmt, limits):
        empty = False
        yield record
    if empty:  # a file with no record is still an input: it is accounted for, not skipped
        yield _Record(path=str(file), record_id="file", text=file.name, error="empty_file: no records in the file")


def _records(path: Path, fmt: SourceFormat | None, limits: IngestLimits) -> Iterator[_Record]:
    for file in _iter_files(path):
        emitted = 0
        try:
            for record in _file_records(file, fmt, limits):
                emitted += 1
                yield record
        except OSError as exc:  # unreadable file (permissions, vanished, I/O error): one record for the rest of it
            where = "file" if emitted == 0 else f"after:{emitted}"
            yield _Record(str(file), where, file.name, error=f"unreadable_file: {type(exc).__name__}: {exc}")


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0), computed without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def json_nodes(value: Any) -> int:
    """Number of values (objects, lists and scalars) inside a JSON value, computed without recursion."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


# --------------------------------------------------------------------------------------------- format parsers


def _loads_maybe(value: Any) -> Any:
    """Toucan rows keep JSON in string columns."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise InputError(f"malformed_json: string column is not JSON: {value[:60]!r}") from None
        except RecursionError:
            raise InputError("record_too_deep: a string column nests beyond the JSON parser's limit") from None
    return value


def _sub(prov: Provenance, suffix: str) -> Provenance:
    return prov.model_copy(update={"record_id": f"{prov.record_id}{suffix}"})


def _openai_tool(item: Any) -> dict[str, Any]:
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        item = item["function"]
    if not isinstance(item, dict):
        raise InputError(f"malformed_tool: expected an object, got {type(item).__name__}")
    params = item.get("parameters", item.get("input_schema", item.get("inputSchema")))
    return {"name": item.get("name"), "description": item.get("description"), "parameters": params}


def _mcp_tool(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InputError(f"malformed_tool: expected an object, got {type(item).__name__}")
    params = item.get("inputSchema", item.get("input_schema", item.get("parameters")))
    return {
        "name": item.get("name"),
        "description": item.get("description"),
        "parameters": params,
        "output_schema": item.get("outputSchema"),
    }


@_PARSERS.register(SourceFormat.OPENAI_TOOLS)
def _parse_openai(record: _Record, prov: Provenance) -> list[_Candidate]:
    value = record.value
    name = Path(record.path).stem
    description = ""
    if isinstance(value, dict):
        name = str(value.get("name") or name)
        description = str(value.get("description") or "")
        value = value.get("tools")
    if not isinstance(value, list):
        raise InputError("unrecognized_record: no tool list")
    return [_Candidate(name, description, [_openai_tool(t) for t in value], prov)]


@_PARSERS.register(SourceFormat.MCP_TOOLS_LIST)
def _parse_mcp(record: _Record, prov: Provenance) -> list[_Candidate]:
    value = record.value
    if isinstance(value, list):
        return [_Candidate(Path(record.path).stem, "", [_mcp_tool(t) for t in value], prov)]
    if not isinstance(value, dict):
        raise InputError("unrecognized_record: not an object")
    if isinstance(value.get("result"), dict):
        value = {**value, "tools": value["result"].get("tools")}
    tools = value.get("tools")
    name = str(value.get("name") or Path(record.path).stem)
    description = str(value.get("description") or "")
    if isinstance(tools, list):
        return [_Candidate(name, description, [_mcp_tool(t) for t in tools], prov)]
    if not isinstance(tools, dict) or not tools:
        raise InputError("unrecognized_record: no tools")
    out = []
    for key in sorted(tools):
        server = tools[key] if isinstance(tools[key], dict) else {}
        server_tools = server.get("tools")
        if not isinstance(server_tools, list):
            raise InputError(f"unrecognized_record: server {key!r} has no tool list")
        label = name if len(tools) == 1 else f"{name}/{key}"
        out.append(_Candidate(label, description, [_mcp_tool(t) for t in server_tools], _sub(prov, f"#{key}")))
    return out


def _server_candidate(server: dict[str, Any], prov: Provenance) -> _Candidate:
    response = server.get("remote_server_response")
    tools = response.get("tools") if isinstance(response, dict) else server.get("tools")
    if not isinstance(tools, list):
        raise InputError("unrecognized_record: server has no remote tool list")
    crawled = server.get("server_info_crawled")
    overview = server.get("overview") or (crawled.get("overview") if isinstance(crawled, dict) else "") or ""
    name = str(server.get("server_name") or server.get("name") or prov.record_id)
    return _Candidate(name, str(overview), [_mcp_tool(t) for t in tools], prov)


@_PARSERS.register(SourceFormat.TOUCAN_SERVER)
def _parse_toucan_server(record: _Record, prov: Provenance) -> list[_Candidate]:
    value = record.value
    if not isinstance(value, dict):
        raise InputError("unrecognized_record: not an object")
    if isinstance(value.get("metadata"), dict):
        value = value["metadata"]
    return [_server_candidate(value, prov)]


@_PARSERS.register(SourceFormat.TOUCAN_ROW)
def _parse_toucan_row(record: _Record, prov: Provenance) -> list[_Candidate]:
    row = record.value
    if not isinstance(row, dict):
        raise InputError("unrecognized_record: not an object")
    if row.get("uuid"):
        prov = prov.model_copy(update={"record_id": f"{prov.record_id}:{row['uuid']}"})
    metadata = _loads_maybe(row.get("metadata")) or {}
    servers = metadata.get("mcp_servers") if isinstance(metadata, dict) else None
    if isinstance(servers, list) and servers:
        if not all(isinstance(s, dict) for s in servers):
            raise InputError(f"malformed_server: metadata.mcp_servers holds non-objects: {servers!r:.200}")
        return [_server_candidate(s, _sub(prov, f"#server{i}")) for i, s in enumerate(servers)]
    for column in ("available_tools", "tools"):
        tools = _loads_maybe(row.get(column))
        if isinstance(tools, list):
            name = str(row.get("subset_name") or Path(record.path).stem)
            return [_Candidate(f"{name}-{row.get('uuid', prov.record_id)}", "", [_openai_tool(t) for t in tools], prov)]
    raise InputError("unrecognized_record: row has no mcp_servers, available_tools or tools")


def _toolbench_params(api: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for group, is_required in (("required_parameters", True), ("optional_parameters", False)):
        for param in api.get(group) or []:
            if not isinstance(param, dict) or not param.get("name"):
                raise InputError(f"missing_param_name: {api.get('api_name')!r}")
            raw_type = str(param.get("type") or "string").lower()
            base = raw_type.split("(")[0].strip()  # "DATE (YYYY-MM-DD)"
            prop: dict[str, Any] = {"type": TOOLBENCH_TYPES.get(base, raw_type)}
            if base == "date":
                prop["format"] = "date"
            if param.get("description"):
                prop["description"] = str(param["description"])
            properties[str(param["name"])] = prop
            if is_required:
                required.append(str(param["name"]))
    return {"type": "object", "properties": properties, "required": required}


@_PARSERS.register(SourceFormat.TOOLBENCH)
def _parse_toolbench(record: _Record, prov: Provenance) -> list[_Candidate]:
    value = record.value
    apis = value.get("api_list") if isinstance(value, dict) else None
    if not isinstance(apis, list):
        raise InputError("unrecognized_record: no api_list")
    if not all(isinstance(a, dict) for a in apis):
        raise InputError(f"malformed_tool: api_list holds non-objects: {apis!r:.200}")
    api_names = [str(a.get("api_name") or "") for a in apis]
    qualify = len(set(api_names)) != len(api_names)
    tools = []
    for api, api_name in zip(apis, api_names, strict=True):
        name = f"{api.get('tool_name', '')} {api_name}" if qualify and api_name else api_name
        tools.append({"name": name, "description": api.get("api_description"), "parameters": _toolbench_params(api)})
    categories = sorted({str(a.get("category_name") or "") for a in apis} - {""})
    query_id = value.get("query_id", prov.record_id)
    label = f"{'-'.join(categories) or 'toolbench'}-q{query_id}"
    return [_Candidate(label, str(value.get("query") or ""), tools, prov)]


# --------------------------------------------------------------------------------------------- tool checks


def _pointer(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise InputError(f"unresolvable_ref: {ref}")
    return node


def resolve_refs(schema: dict[str, Any], *, max_nodes: int | None = None) -> dict[str, Any]:
    """Inline every local `$ref` (`#/definitions/..`, `#/$defs/..`, any JSON pointer) of a schema.

    Args:
        schema: a JSON schema whose refs point inside itself.
        max_nodes: stop with `schema_too_large` once the inlined schema would hold more values than this
            (refs used many times can grow a small schema exponentially).

    Returns:
        An equivalent schema without `$ref`, `definitions` or `$defs` at its root.

    Raises:
        InputError: `ref_cycle: ...` for a recursive schema, `unresolvable_ref: ...` for a remote or dangling ref,
            `schema_too_large: ...` past `max_nodes`.

    Example:
        >>> resolve_refs({"properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}})
        {'properties': {'a': {'type': 'string'}}}
    """

    budget = [max_nodes]

    def walk(node: Any, stack: tuple[str, ...]) -> Any:
        if budget[0] is not None:
            budget[0] -= 1
            if budget[0] < 0:
                raise InputError(f"schema_too_large: more than {max_nodes} values once $refs are inlined")
        if isinstance(node, list):
            return [walk(item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if ref is None:
            return {key: walk(value, stack) for key, value in node.items()}
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise InputError(f"unresolvable_ref: {ref!r} is not a local reference")
        if ref in stack:
            raise InputError(f"ref_cycle: {' -> '.join((*stack, ref))}")
        resolved = walk(_pointer(schema, ref), (*stack, ref))
        siblings = {key: walk(value, stack) for key, value in node.items() if key != "$ref"}
        return {**resolved, **siblings} if isinstance(resolved, dict) else resolved

    body = {key: value for key, value in schema.items() if key not in ("definitions", "$defs")}
    return walk(body, ())


def _check_size(params: dict[str, Any], limits: IngestLimits) -> None:
    depth = json_depth(params)
    if depth > limits.max_schema_depth:
        raise InputError(
            f"schema_too_deep: parameters nest {depth} levels > max_schema_depth={limits.max_schema_depth}"
        )
    nodes = json_nodes(params)
    if nodes > limits.max_schema_nodes:
        raise InputError(
            f"schema_too_large: parameters hold {nodes} values > max_schema_nodes={limits.max_schema_nodes}"
        )


def _check_parameters(params: Any, limits: IngestLimits) -> dict[str, Any]:
    if params is None:
        return {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise InputError(f"non_object_parameters: parameters is a {type(params).__name__}")
    if params.get("type", "object") != "object":
        raise InputError(f"non_object_parameters: type is {params.get('type')!r}")
    if not isinstance(params.get("properties", {}), dict):
        raise InputError("non_object_parameters: properties is not an object")
    _check_size(params, limits)
    if "$ref" in canonical_json(params):
        params = resolve_refs(params, max_nodes=limits.max_schema_nodes)
        _check_size(params, limits)
    chars = len(canonical_json(params))
    if chars > limits.max_schema_chars:
        raise InputError(
            f"schema_too_large: parameters schema has {chars} chars > max_schema_chars={limits.max_schema_chars}"
        )
    params = {k: v for k, v in params.items() if k != "$schema"}
    return {"type": "object", **params}


def _clip(text: str, cfg: EnvGenConfig, what: str) -> str:
    if len(text) > cfg.hard_description_chars:
        raise InputError(f"description_too_long: {what} has {len(text)} chars > {cfg.hard_description_chars}")
    if len(text) > cfg.max_description_chars:
        return text[: cfg.max_description_chars].rstrip() + " [truncated]"
    return text


def _raw_tool(item: dict[str, Any], cfg: EnvGenConfig) -> RawTool:
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"missing_tool_name: tool name is {name!r:.100}")
    if len(name) > cfg.limits.max_tool_name_chars:
        raise InputError(
            f"tool_name_too_long: {len(name)} chars > max_tool_name_chars={cfg.limits.max_tool_name_chars}"
        )
    description = item.get("description")
    description = description if isinstance(description, str) else ("" if description is None else str(description))
    output = item.get("output_schema")
    refs = nonlocal_refs([item.get("parameters"), output])  # never retrieved: refused here, before any use
    if refs:
        raise InputError(f"nonlocal_ref: tool {name!r} references {refs[0]}")
    return RawTool(
        name=name.strip(),
        description=_clip(description.strip(), cfg, f"tool {name!r}"),
        parameters=_check_parameters(item.get("parameters"), cfg.limits),
        output_schema=output if isinstance(output, dict) else None,
    )


def _toolset(candidate: _Candidate, cfg: EnvGenConfig) -> Toolset:
    if len(candidate.tools) > cfg.limits.max_tools_per_record:
        limit = cfg.limits.max_tools_per_record
        raise InputError(f"too_many_tools: {len(candidate.tools)} listed > max_tools_per_record={limit}")
    tools = [_raw_tool(t, cfg) for t in candidate.tools]
    if not tools:
        raise InputError("no_tools: the record lists no tools")
    tools, notes = _dedupe(tools)
    if len(tools) < cfg.min_tools:
        after = f" after dropping repeated listings of {', '.join(sorted(notes))}" if notes else ""
        raise InputError(f"too_few_tools: {len(tools)} < min_tools={cfg.min_tools}{after}")
    if len(tools) > cfg.max_tools:
        raise InputError(f"too_many_tools: {len(tools)} > max_tools={cfg.max_tools}")
    key = sorted((t.model_dump(mode="json") for t in tools), key=lambda t: t["name"])
    canonical_json([candidate.name, candidate.description, key]).encode("utf-8")  # UnicodeEncodeError: lone surrogate
    return Toolset(
        toolset_id=short_hash(key, 16),
        name=candidate.name.strip() or "toolset",
        description=_clip(candidate.description.strip(), cfg, "toolset"),
        tools=tuple(tools),
        provenance=candidate.provenance,
        notes=notes,
    )


def _dedupe(tools: list[RawTool]) -> tuple[list[RawTool], dict[str, str]]:
    """One tool per name: a repeated listing is dropped (the first kept) and noted, never a reason to reject the
    toolset; the rejection `duplicate_tool_names` stays for a toolset whose names collapse below two tools."""
    kept: dict[str, RawTool] = {}
    counts: dict[str, int] = {}
    for tool in tools:
        counts[tool.name] = counts.get(tool.name, 0) + 1
        kept.setdefault(tool.name, tool)
    notes = {}
    for name, count in counts.items():
        if count > 1:
            same = all(t == kept[name] for t in tools if t.name == name)
            how = "identical" if same else "differing; the first kept"
            notes[name] = f"listed {count} times by the source ({how}): duplicates dropped at ingest"
    if notes and len(kept) < 2:
        raise InputError(f"duplicate_tool_names: {', '.join(sorted(notes))} (no second distinct tool left)")
    return list(kept.values()), notes


# --------------------------------------------------------------------------------------------- driver


def reason_of(exc: Exception | str) -> tuple[str, str]:
    """Split a `code: detail` error message into (reason code, detail)."""
    code, _, detail = str(exc).partition(": ")
    return code.strip(), detail


def _quarantine(prov: Provenance, exc: Exception | str, *, suffix: str = "") -> QuarantineRecord:
    code, detail = reason_of(exc)
    item = f"{Path(prov.path).name}#{prov.record_id}{suffix}"
    return QuarantineRecord(item_id=item, stage=STAGE, reason=code, detail=detail, provenance=prov)


def unexpected_reason(exc: BaseException) -> str:
    """The quarantine message of an error no specific check anticipated (the record goes, the run goes on)."""
    if isinstance(exc, RecursionError):
        return "record_too_deep: nesting exceeds Python's recursion limit"
    if isinstance(exc, UnicodeError):
        return f"invalid_unicode: {exc}"
    return f"invalid_record: {type(exc).__name__}: {str(exc)[:300]}"


def _record_problem(record: _Record, limits: IngestLimits) -> str | None:
    """Why a parsed record must not reach a parser, or None."""
    if record.error is not None:
        return record.error
    depth = json_depth(record.value)
    if depth > limits.max_record_depth:
        return f"record_too_deep: nests {depth} levels > max_record_depth={limits.max_record_depth}"
    try:
        canonical_json(record.value).encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates ("\\ud800") would crash every later file write
        return f"invalid_unicode: unpaired surrogate at {exc.start}"
    return None


def _candidates(
    record: _Record, fmt: SourceFormat | None, limits: IngestLimits
) -> tuple[list[_Candidate], list[QuarantineRecord]]:
    """Parse one record into candidates; a record that cannot be parsed becomes one quarantine record."""
    detected = fmt or (detect_format(record.value) if record.error is None else None)
    prov = Provenance(
        source_format=detected or SourceFormat.OPENAI_TOOLS,
        path=record.path,
        record_id=record.record_id,
        raw_sha256=sha256_text(record.text),
    )
    problem = _record_problem(record, limits)
    if problem is not None:
        return [], [_quarantine(prov, problem)]
    if detected is None:
        return [], [_quarantine(prov, InputError("unrecognized_record: no known tool layout"))]
    try:
        return _PARSERS.get(detected)(record, prov), []
    except InputError as exc:
        return [], [_quarantine(prov, exc)]
    except Exception as exc:  # total reader: a parser surprised by hostile input drops this record only
        return [], [_quarantine(prov, unexpected_reason(exc))]


def read_toolsets(path: Path, *, fmt: SourceFormat | None = None, cfg: EnvGenConfig | None = None) -> IngestResult:
    """Read every toolset under `path` (a .json/.jsonl file or a folder, recursively).

    Args:
        path: input file or folder.
        fmt: force one source format instead of detecting it per record.
        cfg: size filter and description limits (defaults to `EnvGenConfig()`).

    Returns:
        An `IngestResult` whose report balances: every candidate toolset (or unparsable record) is either a
        toolset or a quarantine record (`malformed_json`, `duplicate_of:<id>`, `too_few_tools`, ...).

    Raises:
        InputError: when `path` does not exist.
    """
    cfg = cfg or EnvGenConfig()
    toolsets: list[Toolset] = []
    quarantine: list[QuarantineRecord] = []
    seen: dict[str, str] = {}
    inputs = 0
    for record in _records(Path(path), fmt, cfg.limits):
        candidates, rejected = _candidates(record, fmt, cfg.limits)
        inputs += len(candidates) + len(rejected)
        quarantine.extend(rejected)
        for candidate in candidates:
            try:
                toolset = _toolset(candidate, cfg)
            except InputError as exc:
                quarantine.append(_quarantine(candidate.provenance, exc))
                continue
            except Exception as exc:  # total reader: see `unexpected_reason`
                quarantine.append(_quarantine(candidate.provenance, unexpected_reason(exc)))
                continue
            if toolset.toolset_id in seen:
                reason = f"duplicate_of:{toolset.toolset_id}"
                quarantine.append(
                    _quarantine(candidate.provenance, f"{reason}: same tools as {seen[toolset.toolset_id]}")
                )
                continue
            seen[toolset.toolset_id] = f"{Path(candidate.provenance.path).name}#{candidate.provenance.record_id}"
            toolsets.append(toolset)
    return IngestResult(
        toolsets=tuple(toolsets), quarantine=tuple(quarantine), report=_report(inputs, toolsets, quarantine)
    )


def _report(inputs: int, toolsets: list[Toolset], quarantine: list[QuarantineRecord]) -> StageReport:
    dropped: dict[str, int] = {}
    for record in quarantine:
        code = record.reason.split(":", 1)[0]
        dropped[code] = dropped.get(code, 0) + 1
    report = StageReport(stage=STAGE, inputs=inputs, produced=len(toolsets), dropped=dropped)
    logger.info("ingest: %d inputs, %d toolsets, dropped %s", inputs, len(toolsets), dropped)
    return report
