"""envgen.refactor (+ naming, entities): names, types, caps, kinds, entities, responses; the LLM refactorer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

from data.models import Provenance, RawTool, SourceFormat, ToolKind, Toolset
from envgen.config import EnvGenConfig
from envgen.entities import infer_entity, infer_kind, plan_environment
from envgen.ingest import read_toolsets
from envgen.naming import pluralize, singularize, snake_case
from envgen.refactor import REFACTOR_ROLE, normalize_parameters, refactor_toolset
from gustforge.errors import RefactorError
from gustforge.llm import LLMClient, LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer

PROV = Provenance(source_format=SourceFormat.OPENAI_TOOLS, path="x.json", record_id="file", raw_sha256="0" * 64)
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def _toolset(*tools: RawTool, name: str = "Shop") -> Toolset:
    return Toolset(toolset_id="t1", name=name, tools=tools, provenance=PROV)


def _raw(name: str, props: dict | None = None, required: tuple[str, ...] = ()) -> RawTool:
    return RawTool(name=name, parameters={"type": "object", "properties": props or {}, "required": list(required)})


class TestNames:
    def test_snake_case_unique_and_mapped(self) -> None:
        out = refactor_toolset(
            _toolset(_raw("getOrder"), _raw("get-order"), _raw("Café Menü"), _raw("type")), EnvGenConfig()
        )
        assert [t.name for t in out.tools] == ["get_order", "get_order_2", "cafe_menu", "type_tool"]
        assert out.name_map == {
            "getOrder": "get_order",
            "get-order": "get_order_2",
            "Café Menü": "cafe_menu",
            "type": "type_tool",
        }

    def test_server_prefix_is_stripped(self) -> None:
        out = refactor_toolset(
            _toolset(_raw("sky-ways-get_flight"), _raw("sky-ways-list_flights"), name="Sky Ways"), EnvGenConfig()
        )
        assert [t.name for t in out.tools] == ["get_flight", "list_flights"]

    def test_naming_helpers(self) -> None:
        assert snake_case("") == "x" and snake_case("class") == "class_"
        assert [pluralize(singularize(w)) for w in ("boxes", "policies", "status", "orders")] == [
            "boxes",
            "policies",
            "statuses",
            "orders",
        ]


class TestParameters:
    def test_types_are_normalized(self) -> None:
        raw = {
            "properties": {
                "camelCase": {"type": ["null", "int"]},
                "choice": {"anyOf": [{"type": "null"}, {"type": "string", "enum": ["a", "b", 3]}]},
                "untyped": {"description": "  lots\n of   space "},
                "tags": {"type": "array"},
                "price": {"type": "float", "minimum": 0, "default": "bad"},
            },
            "required": ["camelCase", "ghost"],
        }
        schema, dropped = normalize_parameters(raw, tool="t")
        props = schema["properties"]
        assert props["camel_case"] == {"type": "integer"} and props["choice"] == {"type": "string", "enum": ["a", "b"]}
        assert props["untyped"] == {"type": "string", "description": "lots of space"}
        assert props["tags"] == {"type": "array", "items": {"type": "string"}}
        assert props["price"] == {"type": "number", "minimum": 0}
        assert schema["required"] == ["camel_case", "ghost"] and props["ghost"]["type"] == "string"
        assert dropped == []

    def test_unsupported_type(self) -> None:
        with pytest.raises(RefactorError, match="unsupported_type"):
            normalize_parameters({"properties": {"f": {"type": "file"}}}, tool="t")

    def test_cap_drops_optionals_with_a_note_and_never_required(self) -> None:
        props = {k: {"type": "string"} for k in "abcdef"}
        tool = _raw("get_order", props, required=("a", "b"))
        out = refactor_toolset(_toolset(tool, _raw("list_orders")), EnvGenConfig(max_params=4)).tools[0]
        assert list(out.parameters["properties"]) == ["a", "b", "c", "d"] and out.parameters["required"] == ["a", "b"]
        assert "dropped" not in out.description  # pipeline notes never reach the agent
        notes = refactor_toolset(_toolset(tool, _raw("list_orders")), EnvGenConfig(max_params=4)).notes
        assert notes == {"get_order": "optional parameters dropped by the refactorer (max_params=4): e, f"}
        with pytest.raises(RefactorError, match="too_many_required_params"):
            refactor_toolset(_toolset(_raw("x", props, required=tuple("abcde")), _raw("y")), EnvGenConfig(max_params=4))

    def test_one_tool_over_the_cap_is_dropped_with_a_note_not_the_toolset(self) -> None:
        props = {k: {"type": "string"} for k in "abcdef"}
        names = ["get_order", "list_orders", "add_order", "update_order", "delete_order"]
        tools = [_raw("x", props, required=tuple("abcde")), *(_raw(n) for n in names)]
        out = refactor_toolset(_toolset(*tools), EnvGenConfig(max_params=4))
        assert [t.name for t in out.tools] == names and "x" not in out.name_map
        assert out.notes["x"].startswith("tool dropped by the refactorer") and "5 > max_params=4" in out.notes["x"]


class TestKindsAndEntities:
    @pytest.mark.parametrize(
        ("name", "kind"),
        [
            ("get_order", ToolKind.READ),
            ("search_books", ToolKind.READ),
            ("book_appointment", ToolKind.CREATE),
            ("cancel_booking", ToolKind.UPDATE),
            ("remove_item", ToolKind.DELETE),
            ("send_email", ToolKind.ACTION),
            ("web_search_exa", ToolKind.READ),
        ],
    )
    def test_kind_from_verb(self, name: str, kind: ToolKind) -> None:
        assert infer_kind(name) is kind

    def test_entity(self) -> None:
        assert infer_entity("get_order_items", {"properties": {"order_id": {}}}, ToolKind.READ) == "items"
        assert infer_entity("send_reminder", {"properties": {"appointment_id": {}}}, ToolKind.ACTION) == "appointments"
        assert infer_entity("ping", {"properties": {}}, ToolKind.ACTION) is None

    def test_plan_links_foreign_keys_and_downgrades(self) -> None:
        tools = (
            _raw("get_customer", {"customer_id": {"type": "integer"}}, ("customer_id",)),
            _raw("create_order", {"customer_id": {"type": "integer"}, "total": {"type": "number"}}),
            _raw("update_settings", {"theme": {"type": "string"}}),
            _raw("add", {"a": {"type": "number"}}),
        )
        out = refactor_toolset(_toolset(*tools), EnvGenConfig())
        plan = plan_environment(out.tools)
        orders, customers = plan.entity("orders"), plan.entity("customers")
        assert orders is not None and orders.refs == {"customer_id": "customers"}
        assert customers is not None and customers.id_type == "integer"
        assert [t.kind for t in out.tools] == [ToolKind.READ, ToolKind.CREATE, ToolKind.ACTION, ToolKind.ACTION]

    def test_responses(self, samples_dir: Path) -> None:
        shop = next(t for t in read_toolsets(samples_dir / "raw").toolsets if t.name == "Acme Shop")
        tools = {t.name: t for t in refactor_toolset(shop, EnvGenConfig()).tools}
        for tool in tools.values():
            props = tool.response["properties"]
            assert props["status"] == {"type": "string", "enum": ["success", "error"]} and "message" in props
            assert tool.response["required"] == ["status", "message"]
            validator_for(tool.response).check_schema(tool.response)
        assert tools["get_order"].response["properties"]["order"]["required"] == ["order_id"]
        assert tools["list_products"].response["properties"]["products"]["type"] == "array"
        assert {"order", "order_id"} <= set(tools["create_order"].response["properties"])
        assert {"message_id", "message_record"} <= set(tools["send_order_confirmation"].response["properties"])


_schema = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "str", "int"])}),
    lambda inner: st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
    max_leaves=3,
)
_props = st.dictionaries(st.text(min_size=1, max_size=10), _schema, max_size=6)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.text(min_size=1, max_size=15), _props, st.data()), min_size=1, max_size=5),
    st.one_of(st.none(), st.integers(1, 4)),
)
def test_normalizer_properties(tools: list, cap: int | None) -> None:
    raws = []
    for name, props, data in tools:
        required = data.draw(st.lists(st.sampled_from(list(props)), unique=True) if props else st.just([]))
        raws.append(_raw(name, props, tuple(required)))
    names = [r.name for r in raws]
    if len(set(names)) != len(names):  # ingest quarantines duplicate raw names
        return
    try:
        out = refactor_toolset(_toolset(*raws), EnvGenConfig(max_params=cap))
    except RefactorError as exc:
        assert "too_many_required_params" in str(exc) and cap is not None
        assert any(len(r.parameters["required"]) > cap for r in raws)
        return
    new = [t.name for t in out.tools]
    assert len(set(new)) == len(new) and all(SNAKE.match(n) for n in new)
    over = {r.name for r in raws if cap is not None and len(r.parameters["required"]) > cap}
    assert set(out.name_map) == set(names) - over  # a few tools over the cap are dropped, with a note
    assert all(out.notes[t].startswith("tool dropped") for t in out.notes if t not in out.name_map.values())
    kept = [r for r in raws if r.name not in over]
    for raw, tool in zip(kept, out.tools, strict=True):
        validator_for(tool.parameters).check_schema(tool.parameters)
        assert len(tool.parameters["required"]) == len(raw.parameters["required"])
        assert cap is None or len(tool.parameters["properties"]) <= cap


class TestLLMRefactorer:
    def _shop(self, samples_dir: Path) -> Toolset:
        return next(t for t in read_toolsets(samples_dir / "raw").toolsets if t.name == "Acme Shop")

    def test_offline_role_agrees_with_offline_backend(self, samples_dir: Path) -> None:
        shop = self._shop(samples_dir)
        offline = refactor_toolset(shop, EnvGenConfig())
        with LLMClient(LLMSettings()) as client:
            via_role = refactor_toolset(shop, EnvGenConfig(backend="openai"), client=client)
        assert via_role.tools == offline.tools and via_role.name_map == offline.name_map

    def test_endpoint_reply_is_checked(self, samples_dir: Path) -> None:
        shop = self._shop(samples_dir)
        inputs = {
            "tools_definition": json.dumps([t.model_dump(mode="json") for t in shop.tools]),
            "max_params": 4,
            "toolset_name": shop.name,
        }
        good = REFACTOR_ROLE.offline(inputs)
        good["tools"][0]["function"]["name"] = "browse_catalogue"
        good["tools"][0]["function"]["parameters"]["properties"]["Category"] = {"type": "str"}  # re-normalized
        with (
            FakeOpenAIServer(lambda req: {"content": json.dumps(good)}) as server,
            LLMClient(LLMSettings(backend="openai", base_url=server.base_url, model="m", max_retries=0)) as client,
        ):
            out = refactor_toolset(shop, EnvGenConfig(backend="openai"), client=client)
            assert out.tools[0].name == "browse_catalogue" and out.name_map["list_products"] == "browse_catalogue"
            assert out.tools[0].parameters["properties"]["category_2"] == {"type": "string"}
            assert "JSON Tool Refactoring Assistant" in server.requests[0]["messages"][0]["content"]

    def test_endpoint_reply_missing_a_tool_is_rejected(self, samples_dir: Path) -> None:
        shop = self._shop(samples_dir)
        inputs = {"tools_definition": json.dumps([t.model_dump(mode="json") for t in shop.tools]), "max_params": 4}
        bad = REFACTOR_ROLE.offline(inputs)
        bad["tools"] = bad["tools"][1:]
        with (
            FakeOpenAIServer(lambda req: {"content": json.dumps(bad)}) as server,
            LLMClient(LLMSettings(backend="openai", base_url=server.base_url, model="m", max_retries=0)) as client,
        ):
            with pytest.raises(RefactorError, match="llm_tool_mismatch"):
                refactor_toolset(shop, EnvGenConfig(backend="openai"), client=client)
