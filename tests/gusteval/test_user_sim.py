"""Offline simulated user (rules, no leaks) and the LLM simulated user against a local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json

from gusteval.scenario import build_scenario
from gusteval.user_sim import STOP_MARKER, LLMUserSimulator, OfflineUserSimulator, make_user_simulator
from gustforge.llm import LLMClient, LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer
from tests.gusteval._tasks import dependent_task, schemas, tiny_records

TOOL_NAMES = ["get_order", "list_orders", "update_order_status", "cancel_order"]


def _user(record=None) -> OfflineUserSimulator:
    return OfflineUserSimulator(build_scenario(record or tiny_records()[0], schemas()))


def test_answers_a_question_about_a_held_fact_with_that_fact_only():
    reply = _user().respond("Sure. What is the new status you want?")
    assert reply.content == 'The new status is "processing".' and not reply.stop
    assert "ORD-" not in reply.content  # the other facts were not asked for


def test_says_it_does_not_know_what_it_does_not_hold():
    reply = _user(dependent_task()).respond("What is the shipping address on file?")
    assert reply.reason == "dont_know" and "ORD-1001" not in reply.content and "C-1" not in reply.content


def test_gives_the_pick_criterion_not_the_hidden_value():
    reply = _user(dependent_task()).respond("There are two orders for C-1. Which order should I cancel?")
    assert reply.reason == "pick_criterion" and '"pending"' in reply.content and "ORD-1001" not in reply.content


def test_confirms_goal_actions_and_refuses_others():
    user = _user()
    assert user.respond("Shall I cancel order ORD-1003 now?").reason == "confirm"
    assert user.respond("Should I delete customer C-2 as well?").reason == "refuse"
    wrong = user.respond("Shall I set the new status to shipped?")
    assert wrong.reason == "refuse" and '"processing"' in wrong.content


def test_ends_when_the_agent_reports_or_gives_up():
    user = _user()
    done = user.respond('<tool_call>{"name": "x"}</tool_call>All done: the order is cancelled.')
    assert done.stop and done.reason == "goal_reached" and STOP_MARKER in done.content
    gave_up = user.respond("I'm sorry, but I cannot do that.")
    assert gave_up.stop and gave_up.reason == "agent_gave_up"


def test_ends_on_a_closing_question_that_asks_nothing_it_holds():
    user = _user()
    for closing in ["Order ORD-1001 is processing and ORD-1003 is cancelled. Anything else I can help with?",
                    "Done! Is there anything else I can do for you?",
                    "All set. Would you like me to help with something else?"]:  # fmt: skip
        reply = user.respond(closing)
        assert reply.stop and reply.reason == "closing_question" and STOP_MARKER in reply.content, closing
    still_asked = user.respond("Anything else? Also, what is the new status you want?")  # asks a held fact
    assert not still_asked.stop and '"processing"' in still_asked.content


def test_never_leaks_unprompted_values_or_tool_names():
    probes = ["Hello!", "I will look it up.", "Done.", "Could you help me?", "What do you need?",
              "Which tool should I call: list_orders?", "Shall I proceed?", "Please tell me more."]
    descriptions = " ".join(s.description for s in schemas()).lower()
    for record in [*tiny_records(), dependent_task()]:
        user = _user(record)
        said = [asyncio.run(user.opening())] + [user.respond(p).content for p in probes]
        for text in said:
            assert not any(name in text for name in TOOL_NAMES), text
            for fact in user.scenario.facts:
                if str(fact.value).lower() not in descriptions:  # "processing" is also tool-description text
                    assert str(fact.value) not in text, (text, fact)  # no fact was asked for by name
        assert all("ORD-1001" not in t for t in said) or record.task_id != "task-dep"


def test_llm_user_prompt_roles_and_stop_marker():
    scenario = build_scenario(tiny_records()[0], schemas())
    replies = iter(["Hi, I need two orders sorted out.", 'It is "processing".', f"Thanks! {STOP_MARKER}"])
    with FakeOpenAIServer(lambda req: {"content": next(replies)}) as server:
        client = LLMClient(LLMSettings(backend="openai", base_url=server.base_url, model="user-model"))
        with client:
            user = make_user_simulator("llm", scenario, client=client, seed=3, temperature=0.0)
            assert isinstance(user, LLMUserSimulator)
            opening = client.run_sync(user.opening())
            dialogue = [{"role": "user", "content": opening},
                        {"role": "assistant", "content": 'What status? <tool_call>{"name": "get_order"}</tool_call>'}]
            answer = client.run_sync(user.reply(dialogue))
            dialogue += [{"role": "user", "content": answer.content}, {"role": "assistant", "content": "Done."}]
            final = client.run_sync(user.reply(dialogue))
        requests = server.requests
    assert opening.startswith("Hi") and not answer.stop and final.stop and final.reason == "llm_stop"
    system = requests[1]["messages"][0]["content"]
    assert scenario.goal in system and '"processing"' in system and STOP_MARKER in system
    roles = [m["role"] for m in requests[1]["messages"][1:]]
    assert roles == ["user", "assistant", "user"]  # agent speaks as `user` to the user model
    assert "get_order" not in json.dumps(requests[1]["messages"][1:])  # tool-call blocks are hidden
    assert all(r["seed"] == 3 for r in requests)
