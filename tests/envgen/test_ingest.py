"""envgen.ingest: five input layouts, reason codes for every bad record, dedup, size filter, accounting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.models import SourceFormat
from envgen.config import EnvGenConfig
from envgen.ingest import detect_format, resolve_refs
from envgen.ingest import read_toolsets as _read_toolsets
from gustforge.errors import InputError
from gustforge.hashing import sha256_text

# Most cases here are about formats and reasons, not the size filter: the pre-paper window (2-40 tools, no
# parameter cap). The default *is* the paper's filter (see test_the_default_is_the_papers_filter).
_WIDE = {"min_tools": 2, "max_tools": 40, "max_params": None}


def _cfg(**overrides: object) -> EnvGenConfig:
    return EnvGenConfig(**{**_WIDE, **overrides})


def read_toolsets(path: Path, fmt: object = None, cfg: EnvGenConfig | None = None):  # noqa: ANN201
    return _read_toolsets(path, fmt=fmt, cfg=cfg or _cfg())


def test_the_default_is_the_papers_filter(tmp_path: Path) -> None:
    default = EnvGenConfig()
    assert (default.min_tools, default.max_tools, default.max_params) == (5, 20, 4)
    assert not default.paper_filter_overridden and _cfg().paper_filter_overridden
    four = _write(tmp_path / "t.json", [_tool(f"t{i}") for i in range(4)])
    assert [q.reason for q in _read_toolsets(four).quarantine] == ["too_few_tools"]


def _tool(name: str, **props: dict) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": props},
        },
    }


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


class TestSample:
    def test_bundled_sample_counts_and_reasons(self, samples_dir: Path) -> None:
        result = read_toolsets(samples_dir / "raw")
        reasons = sorted(q.reason.split(":")[0] for q in result.quarantine)
        assert reasons == [
            "duplicate_of",
            "malformed_json",
            "non_object_parameters",
            "ref_cycle",
            "too_few_tools",
        ]
        assert len(result.toolsets) == 13 and result.report.balanced and result.report.inputs == 18
        repaired = [t for t in result.toolsets if t.notes]  # the toolset listing one tool twice is kept, noted
        assert len(repaired) == 1 and len(repaired[0].tools) == 2
        assert all("duplicates dropped at ingest" in note for note in repaired[0].notes.values())
        assert all(4 <= len(t.tools) <= 8 for t in result.toolsets if not t.notes)

    def test_provenance_points_at_the_raw_line(self, samples_dir: Path) -> None:
        path = samples_dir / "raw" / "toucan_rows.jsonl"
        result = read_toolsets(path)
        lines = path.read_text().splitlines()
        first = next(t for t in result.toolsets if t.name == "Acme Shop")
        assert first.provenance.record_id.startswith("line:1:")
        assert first.provenance.raw_sha256 == sha256_text(lines[0])
        assert first.provenance.source_format is SourceFormat.TOUCAN_ROW

    def test_duplicate_names_its_original(self, samples_dir: Path) -> None:
        result = read_toolsets(samples_dir / "raw")
        dup = next(q for q in result.quarantine if q.reason.startswith("duplicate_of:"))
        shop = next(t for t in result.toolsets if t.name == "Acme Shop")
        assert dup.reason == f"duplicate_of:{shop.toolset_id}"

    def test_toolset_ids_are_stable(self, samples_dir: Path) -> None:
        first = [t.toolset_id for t in read_toolsets(samples_dir / "raw").toolsets]
        assert first == [t.toolset_id for t in read_toolsets(samples_dir / "raw").toolsets]


class TestFormats:
    def test_openai_list_and_object(self, tmp_path: Path) -> None:
        tools = [_tool("a", x={"type": "string"}), _tool("b")]
        _write(tmp_path / "plain.json", tools)
        _write(tmp_path / "wrapped.json", {"name": "Named", "tools": tools[::-1] + [_tool("c")]})
        result = read_toolsets(tmp_path)
        assert [t.name for t in result.toolsets] == ["plain", "Named"]  # files in sorted order
        assert {t.provenance.source_format for t in result.toolsets} == {SourceFormat.OPENAI_TOOLS}

    def test_mcp_tools_list(self, tmp_path: Path) -> None:
        tools = [{"name": "a", "inputSchema": {"type": "object"}}, {"name": "b", "inputSchema": {"type": "object"}}]
        _write(tmp_path / "dump.json", {"result": {"tools": tools}})
        (toolset,) = read_toolsets(tmp_path / "dump.json").toolsets
        assert toolset.provenance.source_format is SourceFormat.MCP_TOOLS_LIST and len(toolset.tools) == 2

    def test_toolbench_api_list(self, tmp_path: Path) -> None:
        api = {
            "category_name": "Data",
            "tool_name": "Words",
            "api_name": "Get Word",
            "api_description": "d",
            "required_parameters": [{"name": "length", "type": "NUMBER", "description": "", "default": "7"}],
            "optional_parameters": [{"name": "since", "type": "DATE (YYYY-MM-DD)", "description": ""}],
        }
        _write(tmp_path / "q.json", [{"query_id": 7, "query": "q", "api_list": [api, {**api, "api_name": "Other"}]}])
        (toolset,) = read_toolsets(tmp_path / "q.json").toolsets
        params = toolset.tools[0].parameters
        assert params["required"] == ["length"] and params["properties"]["length"]["type"] == "number"
        assert params["properties"]["since"] == {"type": "string", "format": "date"}
        assert toolset.name == "Data-q7"

    def test_toucan_raw_server_file(self, corpora_dir: Path) -> None:
        result = read_toolsets(corpora_dir / "toucan" / "raw_samples")
        assert result.report.inputs == 5 and result.report.balanced
        assert {t.provenance.source_format for t in result.toolsets} == {SourceFormat.TOUCAN_SERVER}

    def test_forced_format_mismatch_is_quarantined(self, tmp_path: Path) -> None:
        _write(tmp_path / "x.json", [_tool("a"), _tool("b")])
        result = read_toolsets(tmp_path / "x.json", fmt=SourceFormat.TOOLBENCH)  # a list of two non-queries
        assert [q.reason for q in result.quarantine] == ["unrecognized_record"] * 2 and result.report.balanced

    def test_detect_format(self) -> None:
        assert detect_format({"api_list": []}) is SourceFormat.TOOLBENCH
        assert detect_format({"server_name": "s", "tools": []}) is SourceFormat.TOUCAN_SERVER
        assert detect_format({"messages": "[]", "metadata": "{}"}) is SourceFormat.TOUCAN_ROW
        assert detect_format(42) is None

    def test_missing_path_raises(self, tmp_path: Path) -> None:
        with pytest.raises(InputError):
            read_toolsets(tmp_path / "nope.json")


class TestBadRecords:
    @pytest.mark.parametrize(
        ("tools", "reason"),
        [
            ([{"type": "function", "function": {"description": "no name"}}, _tool("b")], "missing_tool_name"),
            (
                [_tool("a"), {"type": "function", "function": {"name": "b", "parameters": "text"}}],
                "non_object_parameters",
            ),
            ([_tool("a"), _tool("a")], "duplicate_tool_names"),
            ([_tool("a")], "too_few_tools"),
            ([], "no_tools"),
            ([_tool("a"), _tool("b", p={"$ref": "http://example.com/s.json"})], "nonlocal_ref"),
            ([_tool("a"), 17], "malformed_tool"),
        ],
    )
    def test_reason_codes(self, tmp_path: Path, tools: list, reason: str) -> None:
        result = read_toolsets(_write(tmp_path / "t.json", {"tools": tools}))
        assert [q.reason for q in result.quarantine] == [reason] and not result.toolsets
        assert result.report.balanced and result.report.dropped == {reason: 1}

    def test_a_tool_listed_twice_is_kept_once_with_a_note(self, tmp_path: Path) -> None:
        result = read_toolsets(_write(tmp_path / "t.json", {"tools": [_tool("a"), _tool("b"), _tool("a")]}))
        assert not result.quarantine and len(result.toolsets) == 1
        toolset = result.toolsets[0]
        assert [t.name for t in toolset.tools] == ["a", "b"]
        assert toolset.notes == {"a": "listed 2 times by the source (identical): duplicates dropped at ingest"}

    def test_malformed_jsonl_line_does_not_stop_the_file(self, tmp_path: Path) -> None:
        good = json.dumps({"server_name": "S", "tools": [{"name": "a"}, {"name": "b"}]})
        (tmp_path / "s.jsonl").write_text(f"{good}\n{{oops\n\n")
        result = read_toolsets(tmp_path / "s.jsonl")
        assert len(result.toolsets) == 1 and [q.reason for q in result.quarantine] == ["malformed_json"]
        assert result.quarantine[0].item_id == "s.jsonl#line:2"

    def test_too_many_tools_and_paper_filter(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "t.json", [_tool(f"t{i}") for i in range(4)])
        assert read_toolsets(path).toolsets
        paper = _cfg(min_tools=5, max_tools=20)
        assert [q.reason for q in read_toolsets(path, cfg=paper).quarantine] == ["too_few_tools"]
        assert [q.reason for q in read_toolsets(path, cfg=_cfg(max_tools=3)).quarantine] == ["too_many_tools"]

    def test_long_descriptions_are_truncated_then_quarantined(self, tmp_path: Path) -> None:
        cfg = _cfg(max_description_chars=20, hard_description_chars=100)
        tool = {"name": "a", "description": "x" * 50, "parameters": {"type": "object"}}
        (toolset,) = read_toolsets(_write(tmp_path / "t.json", [tool, _tool("b")]), cfg=cfg).toolsets
        assert toolset.tools[0].description == "x" * 20 + " [truncated]"
        huge = {**tool, "description": "x" * 101}
        result = read_toolsets(_write(tmp_path / "t.json", [huge, _tool("b")]), cfg=cfg)
        assert [q.reason for q in result.quarantine] == ["description_too_long"]


class TestRefs:
    def test_inlines_defs_and_keeps_siblings(self) -> None:
        schema = {
            "type": "object",
            "properties": {"a": {"$ref": "#/definitions/A", "description": "own"}},
            "definitions": {"A": {"type": "string", "description": "shared"}},
        }
        assert resolve_refs(schema) == {"type": "object", "properties": {"a": {"type": "string", "description": "own"}}}

    def test_cycle(self) -> None:
        schema = {
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/N"}},
            "$defs": {"N": {"type": "object", "properties": {"kids": {"items": {"$ref": "#/$defs/N"}}}}},
        }
        with pytest.raises(InputError, match="ref_cycle"):
            resolve_refs(schema)

    def test_dangling(self) -> None:
        with pytest.raises(InputError, match="unresolvable_ref"):
            resolve_refs({"properties": {"a": {"$ref": "#/$defs/Missing"}}})


class TestOtherCorpora:
    def test_livemcpbench(self, corpora_dir: Path) -> None:
        result = read_toolsets(corpora_dir / "other" / "livemcpbench_tools.json")
        assert result.report.inputs == 70 and result.report.balanced
        assert len(result.toolsets) >= 50 and "ref_cycle" in result.report.dropped
        assert {t.provenance.source_format for t in result.toolsets} == {SourceFormat.MCP_TOOLS_LIST}

    def test_stabletoolbench(self, corpora_dir: Path) -> None:
        result = read_toolsets(corpora_dir / "other" / "stabletoolbench_G2_instruction.json")
        assert result.report.inputs == 106 and result.report.balanced and len(result.toolsets) >= 90
        assert set(result.report.dropped) <= {"duplicate_of", "too_few_tools"}


_names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_param = st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "NUMBER", "bool", "weird", None])})
_raw_tool = st.fixed_dictionaries(
    {"name": st.one_of(_names, st.none()), "description": st.one_of(st.text(max_size=30), st.none())},
    optional={
        "parameters": st.one_of(
            st.dictionaries(_names, _param, max_size=3).map(lambda p: {"type": "object", "properties": p}),
            st.just([]),
            st.just({"type": "array"}),
        )
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_raw_tool, max_size=5), min_size=1, max_size=4))
def test_any_input_is_produced_or_quarantined(tmp_path: Path, toolsets: list[list[dict]]) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"server_name": f"s{i}", "tools": t}) + "\n" for i, t in enumerate(toolsets)))
    result = read_toolsets(path, cfg=_cfg(min_tools=1))
    assert result.report.balanced and result.report.inputs == len(toolsets)
    assert all(q.reason for q in result.quarantine)
    for toolset in result.toolsets:
        names = [t.name for t in toolset.tools]
        assert len(set(names)) == len(names) and all(n.strip() for n in names)


def test_every_file_in_a_folder_is_counted(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "d", "parameters": {"type": "object"}}}
             for i in range(3)]  # fmt: skip
    (tmp_path / "good.JSON").write_text(json.dumps(tools))
    (tmp_path / "notes.yaml").write_text("tools: []\n")
    result = read_toolsets(tmp_path)
    assert result.report.inputs == 2 and result.report.balanced
    assert len(result.toolsets) == 1
    assert [q.reason for q in result.quarantine] == ["unsupported_file"]


def test_non_object_servers_and_apis_are_quarantined(tmp_path: Path) -> None:
    row = {"uuid": "u1", "question": "q", "metadata": json.dumps({"mcp_servers": ["oops", 3]})}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    api = {"tool_name": "T", "api_name": "a", "api_description": "", "required_parameters": [],
           "optional_parameters": []}  # fmt: skip
    (tmp_path / "tb.json").write_text(json.dumps({"query_id": 1, "api_list": [api, "junk"]}))
    result = read_toolsets(tmp_path)
    assert result.report.inputs == 2 and result.report.balanced and not result.toolsets
    assert sorted(q.reason for q in result.quarantine) == ["malformed_server", "malformed_tool"]
