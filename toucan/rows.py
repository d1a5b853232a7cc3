"""Reading and repairing Toucan rows into `Dialogue`s.

Three layouts are accepted (see `SourceShape`): HF Toucan-1.5M rows, the SLCA SFT preview and the SLCA RL
preview. Bad input is repaired where the reading is unambiguous and recorded (`Dialogue.repairs`):
JSON columns encoded twice, Python-repr dicts instead of JSON, call arguments given as strings, a missing tool
list that the row's MCP metadata determines, a call name matching one tool by suffix, a missing uuid.
Anything else raises `RowRejected` with a `DropReason`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.io import iter_jsonl_lines, iter_parquet_rows
from data.models import RawTool
from gustforge.hashing import content_hash
from toucan.models import Dialogue, DropReason, GoldCall, RowRejected, SourceShape, Step, Turn

__all__ = ["RawRow", "iter_raw_rows", "parse_row", "decode_json", "quality_score"]

_CALL_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE_BLOCK_RE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
_TOOLS_BLOCK_RE = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_SFT_ROLES = frozenset({"tool_call", "tool_response"})


@dataclass(frozen=True, slots=True)
class RawRow:
    """One input row before parsing: its position, the decoded record, or why it could not be decoded."""

    index: int
    record: Mapping[str, Any] | None
    error: str = ""


@dataclass(slots=True)
class _Msg:
    role: str  # system | user | assistant | tool
    content: str = ""
    calls: list[GoldCall] = field(default_factory=list)


def iter_raw_rows(path: Path) -> Iterator[RawRow]:
    """Stream the rows of a `.parquet`, `.jsonl` or `.json` file (or of every such file in a folder); an
    undecodable line or document becomes an error row.

    Args:
        path: Input file or folder.

    Yields:
        One `RawRow` per row, in file order.
    """
    path = Path(path)
    if path.is_dir():  # every row file inside, in name order; row indices continue across files
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".parquet", ".jsonl", ".json"))
        offset = 0
        for file in files:
            count = 0
            for row in iter_raw_rows(file):
                count = row.index + 1
                yield RawRow(offset + row.index, row.record, row.error)
            offset += count
        return
    if path.suffix == ".parquet":
        for index, record in enumerate(iter_parquet_rows(path)):
            yield RawRow(index, record)
        return
    if path.suffix == ".json":  # one JSON document (often pretty-printed): a list of rows or one row
        try:
            value = json.loads(path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as exc:
            yield RawRow(0, None, f"file is not JSON: {exc}")
            return
        for index, record in enumerate(value if isinstance(value, list) else [value]):
            is_row = isinstance(record, dict)
            yield RawRow(index, record if is_row else None, "" if is_row else "not an object")
        return
    for index, line in enumerate(iter_jsonl_lines(path)):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield RawRow(index, None, f"line is not JSON: {exc}")
            continue
        yield RawRow(
            index,
            record if isinstance(record, dict) else None,
            "" if isinstance(record, dict) else "not an object",
        )


def decode_json(value: Any, what: str, repairs: list[str]) -> Any:
    """Decode a JSON column that may be native, a JSON string, a JSON string encoded twice, or a Python repr.

    Args:
        value: The column value.
        what: Column name, for messages and repair codes.
        repairs: Repair codes are appended here.

    Returns:
        The decoded value (`None` for a missing or blank column).

    Raises:
        RowRejected: BROKEN_JSON when no unambiguous reading exists.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError:
        decoded = _literal(text, what)
        repairs.append(f"{what}:python_repr")
        return decoded
    if isinstance(decoded, str) and decoded.strip()[:1] in ("[", "{"):
        repairs.append(f"{what}:double_encoded")
        return decode_json(decoded, what, repairs)
    return decoded


def _literal(text: str, what: str) -> Any:
    if text[:1] not in ("[", "{"):
        raise RowRejected(DropReason.BROKEN_JSON, f"{what} is not JSON")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise RowRejected(DropReason.BROKEN_JSON, f"{what}: {type(exc).__name__}") from None


def _arguments(value: Any, repairs: list[str], *, string_native: bool) -> dict[str, Any]:
    """Call arguments as an object. A string is decoded, and counted as a repair unless the layout stores
    arguments as strings by definition (OpenAI `function_call` / `tool_calls`)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = decode_json(value, "arguments", repairs)
        except RowRejected:
            raise RowRejected(DropReason.BAD_ARGUMENTS, "arguments are neither JSON nor a Python literal") from None
        repairs.extend([] if string_native else ["arguments:string"])
        if value is None:
            return {}
    if not isinstance(value, dict):
        raise RowRejected(DropReason.BAD_ARGUMENTS, f"arguments are a {type(value).__name__}, not an object")
    return value


def _text(content: Any) -> str:
    """Message content as text (Qwen-Agent may store a list of `{"text": ...}` parts)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


# ----------------------------------------------------------------------------------------------- tools


def _tool(item: Any) -> RawTool:
    if not isinstance(item, dict):
        raise RowRejected(DropReason.INVALID_TOOL_SCHEMA, "tool entry is not an object")
    spec = item.get("function") if isinstance(item.get("function"), dict) else item
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RowRejected(DropReason.INVALID_TOOL_SCHEMA, "tool without a name")
    params = spec.get("parameters", spec.get("input_schema", spec.get("inputSchema")))
    params = {"type": "object", "properties": {}} if params is None else params
    _check_parameters(name, params)
    return RawTool(name=name, description=str(spec.get("description") or ""), parameters=params)


def _check_parameters(name: str, params: Any) -> None:
    if not isinstance(params, dict):
        raise RowRejected(DropReason.INVALID_TOOL_SCHEMA, f"{name}: parameters is not an object")
    if params.get("type", "object") != "object":
        raise RowRejected(DropReason.INVALID_TOOL_SCHEMA, f"{name}: parameters type is {params.get('type')!r}")
    if not isinstance(params.get("properties", {}), dict):
        raise RowRejected(DropReason.INVALID_TOOL_SCHEMA, f"{name}: properties is not an object")
    required = params.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise RowRejected(DropReason.INVALID_TOOL_SCHEMA, f"{name}: required is not a list of names")


def _tool_list(value: Any, what: str, repairs: list[str]) -> tuple[RawTool, ...] | None:
    decoded = decode_json(value, what, repairs)
    if decoded is None or decoded == []:
        return None
    if isinstance(decoded, dict):
        decoded = [decoded]
    if not isinstance(decoded, list):
        raise RowRejected(DropReason.INVALID_TOOL_SCHEMA, f"{what} is not a list")
    tools: dict[str, RawTool] = {}
    for item in decoded:
        tool = _tool(item)
        if tool.name in tools:
            repairs.append("tools:duplicate_dropped")
            continue
        tools[tool.name] = tool
    return tuple(tools.values())


def _tools_from_metadata(metadata: Any) -> tuple[RawTool, ...] | None:
    """Toucan's converter naming: `<server name lowercased, spaces to dashes>-<tool>`, MCP input schema."""
    servers = metadata.get("mcp_servers") if isinstance(metadata, dict) else None
    if not isinstance(servers, list):
        return None
    tools: list[dict[str, Any]] = []
    for server in servers:
        if not isinstance(server, dict):
            continue
        prefix = str(server.get("server_name", "")).lower().replace(" ", "-")
        response = server.get("remote_server_response") or {}
        for tool in response.get("tools", []) if isinstance(response, dict) else []:
            if isinstance(tool, dict) and tool.get("name"):
                tools.append({**tool, "name": f"{prefix}-{tool['name']}"})
    return tuple(_tool(t) for t in tools) or None


def _tools_from_prompt(prompt: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    system = next((_text(m.get("content")) for m in prompt if m.get("role") == "system"), "")
    block = _TOOLS_BLOCK_RE.search(system)
    if block is None:
        return []
    try:
        return [json.loads(line) for line in block.group(1).splitlines() if line.strip()]
    except json.JSONDecodeError:
        raise RowRejected(DropReason.BROKEN_JSON, "tool list in the system prompt") from None


# ------------------------------------------------------------------------------------------- messages


def _toucan_messages(messages: list[Any], repairs: list[str]) -> list[_Msg]:
    out: list[_Msg] = []
    for m in messages:
        if not isinstance(m, dict):
            raise RowRejected(DropReason.BROKEN_JSON, "message is not an object")
        role = m.get("role")
        if role in ("function", "tool"):
            out.append(_Msg("tool", _text(m.get("content"))))
        elif role == "assistant":
            out.append(_Msg("assistant", _text(m.get("content")), _assistant_calls(m, repairs)))
        elif role in ("system", "user"):
            out.append(_Msg(str(role), _text(m.get("content"))))
        else:
            raise RowRejected(DropReason.UNPARSEABLE_ROW, f"unknown message role {role!r}")
    return out


def _call(obj: Any, repairs: list[str], *, string_native: bool = False) -> GoldCall:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        raise RowRejected(DropReason.BROKEN_JSON, "tool call without a name")
    raw = obj.get("arguments", obj.get("parameters"))
    return GoldCall(name=obj["name"], arguments=_arguments(raw, repairs, string_native=string_native))


def _assistant_calls(message: dict[str, Any], repairs: list[str]) -> list[GoldCall]:
    calls: list[GoldCall] = []
    if message.get("function_call"):
        function_call = decode_json(message["function_call"], "function_call", repairs)
        calls.append(_call(function_call, repairs, string_native=True))
    for item in message.get("tool_calls") or []:
        function = item.get("function", item) if isinstance(item, dict) else item
        calls.append(_call(function, repairs, string_native=True))
    return calls


def _sft_messages(messages: list[Any], repairs: list[str]) -> list[_Msg]:
    out: list[_Msg] = []
    for m in messages:
        if not isinstance(m, dict):
            raise RowRejected(DropReason.BROKEN_JSON, "message is not an object")
        role, content = m.get("role"), m.get("content")
        if role == "tool_call":
            out.append(_Msg("assistant", "", [_call(decode_json(content, "tool_call", repairs), repairs)]))
        elif role == "tool_response":
            out.append(_Msg("tool", _text(content)))
        elif role in ("system", "user", "assistant"):
            out.append(_Msg(str(role), _text(content)))
        else:
            raise RowRejected(DropReason.UNPARSEABLE_ROW, f"unknown message role {role!r}")
    return out


def _hermes_assistant(content: str, repairs: list[str]) -> _Msg:
    calls: list[GoldCall] = []
    for block in _CALL_BLOCK_RE.findall(content):
        payload = decode_json(block, "tool_call", repairs)
        for obj in payload if isinstance(payload, list) else [payload]:
            calls.append(_call(obj, repairs))
    return _Msg("assistant", _CALL_BLOCK_RE.sub("", content).strip(), calls)


def _rl_prompt_messages(prompt: list[Any], repairs: list[str]) -> list[_Msg]:
    out: list[_Msg] = []
    for m in prompt:
        role, content = m.get("role"), _text(m.get("content"))
        if role == "system":
            continue  # the tool prompt; the tools are read from the tool columns
        if role == "assistant":
            out.append(_hermes_assistant(content, repairs))
        elif role == "user" and "<tool_response>" in content:
            out.extend(_Msg("tool", r.strip()) for r in _RESPONSE_BLOCK_RE.findall(content))
        elif role == "user":
            out.append(_Msg("user", content))
        else:
            raise RowRejected(DropReason.UNPARSEABLE_ROW, f"unknown prompt role {role!r}")
    return out


# ------------------------------------------------------------------------------------------ grouping


@dataclass(slots=True)
class _TurnBuilder:
    user: str
    steps: list[Step] = field(default_factory=list)
    calls: list[GoldCall] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    preamble: str = ""
    texts: list[str] = field(default_factory=list)

    def close_step(self) -> None:
        if not self.calls:
            return
        if len(self.responses) != len(self.calls):
            detail = f"{len(self.calls)} calls but {len(self.responses)} responses"
            raise RowRejected(DropReason.INCOMPLETE_DIALOGUE, detail)
        self.steps.append(Step(calls=tuple(self.calls), responses=tuple(self.responses), preamble=self.preamble))
        self.calls, self.responses, self.preamble = [], [], ""

    def add_assistant(self, msg: _Msg) -> None:
        if msg.calls and self.calls and not self.responses:
            self.calls.extend(msg.calls)  # consecutive call messages: one parallel step
            return
        self.close_step()
        if msg.calls:
            self.preamble = "\n\n".join([*self.texts, msg.content.strip()]).strip()
            self.texts, self.calls = [], list(msg.calls)
        elif msg.content.strip():
            self.texts.append(msg.content.strip())

    def add_tool(self, msg: _Msg) -> None:
        if not self.calls or len(self.responses) >= len(self.calls):
            raise RowRejected(DropReason.INCOMPLETE_DIALOGUE, "tool response without a pending call")
        self.responses.append(msg.content)

    def build(self) -> Turn:
        self.close_step()
        answer = "\n\n".join(self.texts) if self.texts else None
        return Turn(user=self.user, steps=tuple(self.steps), answer=answer)


def _group_turns(messages: list[_Msg]) -> tuple[str, list[Turn]]:
    system: list[str] = []
    turns: list[Turn] = []
    current: _TurnBuilder | None = None
    for msg in messages:
        if msg.role == "system":
            system.append(msg.content)
        elif msg.role == "user":
            if current is not None:
                turns.append(current.build())
            current = _TurnBuilder(msg.content)
        elif current is None:
            raise RowRejected(DropReason.EMPTY_DIALOGUE, f"{msg.role} message before the first user message")
        elif msg.role == "assistant":
            current.add_assistant(msg)
        else:
            current.add_tool(msg)
    if current is not None:
        turns.append(current.build())
    if not turns or any(not t.user.strip() for t in turns):
        raise RowRejected(DropReason.EMPTY_DIALOGUE, "no user message" if not turns else "blank user message")
    return "\n\n".join(s for s in system if s.strip()), turns


# -------------------------------------------------------------------------------------------- shapes


def _shape(record: Mapping[str, Any], messages: Any) -> SourceShape:
    if "prompt" in record and "reward_model" in record:
        return SourceShape.RL_PREVIEW
    if isinstance(messages, list) and any(isinstance(m, dict) and m.get("role") in _SFT_ROLES for m in messages):
        return SourceShape.SFT_PREVIEW
    return SourceShape.TOUCAN


def _gold_steps(gold: Any, repairs: list[str]) -> list[Step]:
    """RL-preview gold: flat names (arguments unknown) → one step; nested call dicts → steps."""
    gold = decode_json(gold, "gold_tool_calls", repairs) or []
    if not isinstance(gold, list):
        raise RowRejected(DropReason.BROKEN_JSON, "gold_tool_calls is not a list")
    if gold and all(isinstance(step, list) for step in gold):
        return [Step(calls=tuple(_call(c, repairs) for c in step)) for step in gold if step]
    calls = [GoldCall(name=c) if isinstance(c, str) else _call(c, repairs) for c in gold]
    return [Step(calls=tuple(calls))] if calls else []


def _rl_preview(record: Mapping[str, Any], repairs: list[str]) -> dict[str, Any]:
    prompt = decode_json(record.get("prompt"), "prompt", repairs)
    reward = decode_json(record.get("reward_model"), "reward_model", repairs) or {}
    truth = decode_json(reward.get("ground_truth"), "ground_truth", repairs) or {}
    if not isinstance(prompt, list) or not isinstance(truth, dict):
        raise RowRejected(DropReason.BROKEN_JSON, "prompt or ground_truth")
    system, turns = _group_turns(_rl_prompt_messages(prompt, repairs))
    last = turns[-1].model_copy(update={"steps": tuple(_gold_steps(truth.get("gold_tool_calls"), repairs))})
    tools = _tool_list(record.get("tools"), "tools", repairs) or _tool_list(
        truth.get("tool_schemas"), "tool_schemas", repairs
    )
    if tools is None and (from_prompt := _tools_from_prompt(prompt)):
        repairs.append("tools:from_system_prompt")
        tools = _tool_list(from_prompt, "tools", repairs)
    return {
        "system": system,
        "turns": [*turns[:-1], last],
        "tools": tools,
        "subset_name": str(truth.get("subset_name") or ""),
        "question": str(truth.get("question_content") or last.user),
        "target_tools": tuple(str(t) for t in truth.get("allowed_tools") or ()),
    }


def _dialogue_fields(record: Mapping[str, Any], repairs: list[str]) -> tuple[SourceShape, dict[str, Any]]:
    if "prompt" in record and "reward_model" in record:
        return SourceShape.RL_PREVIEW, _rl_preview(record, repairs)
    messages = decode_json(record.get("messages"), "messages", repairs)
    if not isinstance(messages, list) or not messages:
        raise RowRejected(DropReason.EMPTY_DIALOGUE, "no messages")
    shape = _shape(record, messages)
    parse = _sft_messages if shape is SourceShape.SFT_PREVIEW else _toucan_messages
    system, turns = _group_turns(parse(messages, repairs))
    tools = _tool_list(record.get("available_tools"), "available_tools", repairs) or _tool_list(
        record.get("tools"), "tools", repairs
    )
    if tools is None:
        tools = _tools_from_metadata(decode_json(record.get("metadata"), "metadata", repairs))
        repairs.extend(["tools:from_metadata"] if tools else [])
    targets = record.get("target_tools") or ""
    return shape, {
        "system": system,
        "turns": turns,
        "tools": tools,
        "subset_name": str(record.get("subset_name") or ""),
        "question": str(record.get("question") or turns[0].user),
        "target_tools": tuple(t.strip() for t in str(targets).split(",") if t.strip()),
        "question_quality": _assessment(record, "question_quality_assessment", repairs),
        "response_quality": _assessment(record, "response_quality_assessment", repairs),
    }


def _assessment(record: Mapping[str, Any], column: str, repairs: list[str]) -> dict[str, Any] | None:
    value = decode_json(record.get(column), column, repairs)
    if value is not None and not isinstance(value, dict):
        raise RowRejected(DropReason.BROKEN_JSON, f"{column} is not an object")
    return value


def _resolve_names(turns: list[Turn], tools: Sequence[RawTool], repairs: list[str]) -> list[Turn]:
    """Rename a call whose name is no tool's but ends exactly one tool name (`<server>-<name>`)."""
    names = {t.name for t in tools}

    def resolve(call: GoldCall) -> GoldCall:
        if call.name in names:
            return call
        matches = [n for n in names if n.endswith(f"-{call.name}") or n.endswith(f"::{call.name}")]
        if len(matches) != 1:
            return call
        repairs.append("call:name_resolved")
        return call.model_copy(update={"name": matches[0]})

    def fix_step(step: Step) -> Step:
        return step.model_copy(update={"calls": tuple(resolve(c) for c in step.calls)})

    return [t.model_copy(update={"steps": tuple(fix_step(s) for s in t.steps)}) for t in turns]


def parse_row(raw: RawRow) -> Dialogue:
    """Parse and repair one row.

    Args:
        raw: The row as read by `iter_raw_rows`.

    Returns:
        The dialogue, with every repair applied listed in `repairs`.

    Raises:
        RowRejected: The row is unusable; `reason` says why.
    """
    if raw.record is None:
        raise RowRejected(DropReason.UNPARSEABLE_ROW, raw.error)
    repairs: list[str] = []
    shape, fields = _dialogue_fields(raw.record, repairs)
    if not fields["tools"]:
        raise RowRejected(DropReason.MISSING_TOOLS, "no tool list and no MCP metadata to rebuild it")
    turns = _resolve_names(fields.pop("turns"), fields["tools"], repairs)
    digest = content_hash(
        {"tools": [t.model_dump() for t in fields["tools"]], "turns": [t.model_dump() for t in turns]}
    )
    uuid = str(raw.record.get("uuid") or "")
    if not uuid:
        uuid = f"hash-{digest[:16]}"
        repairs.append("uuid:from_hash")
    return Dialogue(
        uuid=uuid,
        dialogue_hash=digest[:16],
        shape=shape,
        turns=tuple(turns),
        repairs=tuple(repairs),
        row_index=raw.index,
        **fields,
    )


def quality_score(assessment: Mapping[str, Any] | None, dimension: str) -> float | None:
    """A 1-5 score from a Toucan quality assessment.

    `{"dim": {"score": 4}}` and `{"dim": 4}` are both read; `overall_score`, when absent, is the mean of the
    dimension scores.

    Args:
        assessment: The decoded assessment column.
        dimension: Dimension name, or `overall_score`.

    Returns:
        The score, or None when the assessment does not rate that dimension.
    """
    if not assessment:
        return None
    value = assessment.get(dimension)
    if isinstance(value, dict):
        value = value.get("score")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if dimension != "overall_score":
        return None
    scores = [quality_score(assessment, k) for k, v in assessment.items() if isinstance(v, dict)]
    known = [s for s in scores if s is not None]
    return sum(known) / len(known) if known else None
