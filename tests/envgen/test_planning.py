"""envgen.planning over a real OpenAI-compatible endpoint on 127.0.0.1: the model plans, the name-based plan hints.

The endpoint is `FakeOpenAIServer`; what it answers is scripted per test, the client and the role run for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from data.models import RawTool, RefactoredToolset, Toolset
from envgen.build import family_map, plan_reasons
from envgen.codegen import generate_tools_source
from envgen.config import EnvGenConfig
from envgen.database import synthesize_database
from envgen.entities import plan_environment
from envgen.planning import PLANNER_NOTE, PlanDecision, apply_decision, plan_toolset
from envgen.refactor import refactor_toolset
from gustforge.llm import LLMClient, LLMSettings
from gustforge.sandbox import SandboxLimits, SandboxWorker
from tests.envgen._envgen_samples import refactored, sample, sample_toolsets
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.twin_responder import TwinResponder

TEXT = {"type": "string"}
SETTINGS = LLMSettings(backend="openai", model="m", max_retries=0, max_repair_rounds=0)


def _tool(name: str, description: str, props: dict, required: tuple[str, ...] = ()) -> RawTool:
    return RawTool(name=name, description=description,
                   parameters={"type": "object", "properties": props, "required": list(required)})  # fmt: skip


# `set_profile` promises an update of a user, but no `profile_id` names the record: the name-based planner can
# only log the call. A model reading the description sees that `user_id` names the user whose bio changes.
PROFILES = Toolset(
    toolset_id="planning", name="Profiles", provenance=sample("Stockroom").provenance,
    tools=(
        _tool("set_profile", "Update the bio of a user's profile.", {"user_id": TEXT, "bio": TEXT},
              ("user_id", "bio")),
        _tool("get_user", "Get a user by id.", {"user_id": TEXT}, ("user_id",)),
        _tool("list_users", "List all users.", {"limit": {"type": "integer"}}),
        _tool("delete_user", "Delete a user.", {"user_id": TEXT}, ("user_id",)),
    ),
)  # fmt: skip


def _answer(tools: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda request: {"content": json.dumps({"tools": tools})}


@pytest.fixture(scope="module")
def profiles() -> RefactoredToolset:
    return refactor_toolset(PROFILES, EnvGenConfig())


@pytest.fixture()
def planned(profiles: RefactoredToolset) -> Iterator[tuple[PlanDecision, FakeOpenAIServer]]:
    answer = _answer([
        {"name": "set_profile", "behaviour": "update", "collection": "users",
         "why": "the description updates the user's bio, and user_id names the user"},
        {"name": "get_user", "behaviour": "read_one", "collection": "users", "why": "agrees"},
        {"name": "list_users", "behaviour": "delete", "collection": "users", "why": "wrong on purpose"},
        {"name": "teleport_user", "behaviour": "update", "collection": "users", "why": "no such tool"},
        {"name": "delete_user", "behaviour": "vaporize", "collection": "users", "why": "no such behaviour"},
        {"name": "set_profile", "behaviour": "read_one", "collection": "users", "why": "a second answer"},
    ])  # fmt: skip
    with (
        FakeOpenAIServer(answer) as server,
        LLMClient(SETTINGS.model_copy(update={"base_url": server.base_url})) as client,
    ):
        yield plan_toolset(profiles, client), server


def test_the_heuristic_only_logs_set_profile(profiles: RefactoredToolset) -> None:
    assert family_map(profiles)["set_profile"] == "log_only"  # the premise of the override tests


def test_the_model_overrules_the_name_based_guess_with_a_reason(
    profiles: RefactoredToolset, planned: tuple[PlanDecision, FakeOpenAIServer]
) -> None:
    decision, _ = planned
    assert list(decision.overrides) == ["set_profile"]  # get_user agreed with the guess: nothing to override
    override = decision.overrides["set_profile"]
    assert (override.behaviour, override.entity) == ("update", "users")
    assert "over the name-based guess 'log_only'" in override.reason and "user_id names the user" in override.reason
    applied = apply_decision(profiles, decision)
    plan = plan_environment(applied.tools, applied.log_only, applied.plan_overrides).tool("set_profile")
    assert (plan.template, plan.entity, plan.id_param, plan.field_params) == ("update", "users", "user_id", ("bio",))
    assert family_map(applied)["set_profile"] == "crud"
    assert plan_reasons(applied)["set_profile"] == f"behaviour: {override.reason}"
    assert "user" in applied.tools[0].response["properties"]  # the response follows the new behaviour


def test_choices_that_break_the_description_or_name_no_tool_are_refused(
    profiles: RefactoredToolset, planned: tuple[PlanDecision, FakeOpenAIServer]
) -> None:
    decision, _ = planned
    assert set(decision.rejected) == {"list_users", "teleport_user", "delete_user"}  # the repeat is ignored
    assert "'delete' breaks the description" in decision.rejected["list_users"]
    assert "unknown behaviour 'vaporize'" in decision.rejected["delete_user"]
    applied = apply_decision(profiles, decision)
    assert family_map(applied)["list_users"] == "search"
    assert "planner choice rejected" in applied.notes["list_users"]
    assert "teleport_user" in applied.notes[PLANNER_NOTE] and "teleport_user" not in applied.notes


def test_the_guess_is_a_hint_never_a_fact(planned: tuple[PlanDecision, FakeOpenAIServer]) -> None:
    _, server = planned
    system, user = (m["content"] for m in server.requests[0]["messages"])
    assert "may be wrong" in system and "overrule it" in system
    assert "- status_transition: " in user and "- log_only: " in user  # every behaviour with its meaning
    tools = {t["name"]: t for t in json.loads(user.split("\n\nTools:\n", 1)[1])}
    assert tools["set_profile"]["name_based_guess"] == {"behaviour": "log_only", "collection": None}
    assert tools["set_profile"]["description"] == "Update the bio of a user's profile."


def test_the_overridden_plan_is_the_one_every_module_builds(
    profiles: RefactoredToolset, planned: tuple[PlanDecision, FakeOpenAIServer]
) -> None:
    applied = apply_decision(profiles, planned[0])
    db = synthesize_database(applied, seed=0)
    user_id = next(iter(db["users"]))
    with SandboxWorker(SandboxLimits(cpu_seconds=2, memory_mb=256, wall_seconds=5)) as worker:
        worker.load(generate_tools_source(applied, db), db)
        out = worker.call("set_profile", {"user_id": user_id, "bio": "Climbs mountains."})
        after = worker.get_db()
    assert out["status"] == "success", out
    assert after["users"][user_id]["bio"] == "Climbs mountains."
    assert after["action_log"] == {}  # updated, not merely logged


@pytest.mark.parametrize(
    "server_kwargs, responder",
    [
        ({}, lambda request: {"content": "I would plan these tools as reads, mostly."}),
        ({}, lambda request: {"content": json.dumps({"plan": "update everything"})}),
        ({"fail_rate": 1.0, "fail_statuses": (500,)}, None),
    ],
    ids=["prose", "wrong-shape", "http-500"],
)
def test_a_failing_endpoint_keeps_the_name_based_plan_and_says_why(
    profiles: RefactoredToolset, server_kwargs: dict, responder: Any
) -> None:
    with (
        FakeOpenAIServer(responder, **server_kwargs) as server,
        LLMClient(SETTINGS.model_copy(update={"base_url": server.base_url})) as client,
    ):
        decision = plan_toolset(profiles, client)
    assert decision.overrides == {} and decision.fallback is not None
    assert decision.fallback.startswith("llm_plan_failed: name-based plan kept")
    applied = apply_decision(profiles, decision)
    assert family_map(applied) == family_map(profiles)
    assert applied.notes[PLANNER_NOTE] == decision.fallback


def test_an_endpoint_that_is_down_keeps_the_name_based_plan(profiles: RefactoredToolset) -> None:
    with FakeOpenAIServer() as server:
        url = server.base_url  # a port nobody listens on once the server stops
    with LLMClient(SETTINGS.model_copy(update={"base_url": url, "timeout_s": 5})) as client:
        decision = plan_toolset(profiles, client)
    assert decision.overrides == {} and "llm_plan_failed" in (decision.fallback or "")


def test_offline_or_no_client_is_the_heuristic_plan_unchanged(profiles: RefactoredToolset) -> None:
    with FakeOpenAIServer(_answer([])) as server:
        offline = LLMSettings(backend="offline", base_url=server.base_url, model="m")
        with LLMClient(offline) as client:
            decisions = [plan_toolset(profiles, client), plan_toolset(profiles, None)]
    assert server.requests == []
    for decision in decisions:
        assert decision == PlanDecision()
        assert apply_decision(profiles, decision) is profiles
    assert plan_environment(profiles.tools, profiles.log_only, profiles.plan_overrides) == plan_environment(
        profiles.tools, profiles.log_only
    )


def test_a_model_that_keeps_every_guess_overrides_nothing() -> None:
    """Over every bundled sample: echoing the hint is agreement, never a spurious override."""
    with (
        FakeOpenAIServer(TwinResponder()) as server,
        LLMClient(SETTINGS.model_copy(update={"base_url": server.base_url})) as client,
    ):
        for toolset in sample_toolsets():
            decision = plan_toolset(refactored(toolset.name), client)
            assert decision == PlanDecision(), toolset.name
