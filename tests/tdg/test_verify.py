"""Verification: LangGraph replay, solvability, turn-level scoring, teacher Pass@k against a real HTTP endpoint."""

from __future__ import annotations

import json

import pytest

from data.models import TaskText, ToolCall
from gustforge.llm import LLMClient, LLMSettings
from tdg.taskgen import make_task_record, write_task
from tdg.verify import (
    check_solvable,
    dict_subset,
    diversity_order,
    replay_trace,
    run_teacher,
    score_attempt,
    verify_tasks,
)
from tdg.verify_config import TeacherConfig, VerifyConfig
from tests.fakes.openai_server import FakeHTTPError, FakeOpenAIServer
from tests.tdg._bank_env import CREDIT_PLAN, PARALLEL_PLAN, bank_env, build_trace

GOOD_CREDIT = [  # the golden trace of CREDIT_PLAN, one assistant turn per stage
    {"tool_calls": [{"name": "find_user", "arguments": {"name": "Ann Lee"}}]},
    {"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]},
    {"tool_calls": [{"name": "add_balance", "arguments": {"account_id": "acc-7", "amount": 5}}]},
    {"content": "Done: Ann's account now holds 15."},
]
WRONG_PARALLEL = [  # right reads in one turn, wrong amount in the credit
    {
        "tool_calls": [
            {"name": "get_user", "arguments": {"user_id": "u2"}},
            {"name": "get_balance", "arguments": {"account_id": "acc-9"}},
        ]
    },
    {"tool_calls": [{"name": "add_balance", "arguments": {"account_id": "acc-9", "amount": 3}}]},
    {"content": "Done."},
]


@pytest.fixture(scope="module")
def env():
    return bank_env()


@pytest.fixture(scope="module")
def records(env):
    client = LLMClient(LLMSettings())
    out = []
    for trace_id, plan in (("credit", CREDIT_PLAN), ("parallel", PARALLEL_PLAN)):
        trace = build_trace(env, plan, trace_id=trace_id)
        text = write_task(trace, env, incoming_edges=trace.edges_used, client=client, seed=0)
        out.append(make_task_record(trace, text, env, seed=0))
    return out


def _teacher(server: FakeOpenAIServer, **kw) -> TeacherConfig:
    return TeacherConfig(base_url=server.base_url, backoff_base_s=0.0, **{"k": 3, "model": "fake-model", **kw})


def _agent_turn(request: dict) -> int:
    """How many times the agent already answered after the task's last user message."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return sum(m["role"] == "assistant" for m in messages[last_user + 1 :])


def _responder_by_task(scripts: dict[str, list[dict]]):
    """Pick the script by a word of the last user message, the turn by the assistant messages so far."""

    def respond(request: dict) -> dict:
        messages = request["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        text = " ".join(str(m.get("content") or "") for m in messages[: last_user + 1] if m["role"] != "system")
        script = next(s for key, s in scripts.items() if key in text)
        turn = sum(m["role"] == "assistant" for m in messages[last_user + 1 :])  # the agent's turns so far
        return script[turn]

    return respond


class TestReplay:
    def test_good_trace_replays(self, env, records):
        for record in records:
            result = replay_trace(record.trace, env)
            assert result.ok and result.stages_run == len(record.trace.stages)

    def test_tampered_output_is_caught(self, env, records):
        trace = records[0].trace
        last = trace.stages[-1]
        call = last.calls[0].model_copy(update={"arguments": {"account_id": "acc-7", "amount": 6}})
        tampered = trace.model_copy(update={"stages": (*trace.stages[:-1], last.model_copy(update={"calls": (call,)}))})
        result = replay_trace(tampered, env)
        assert not result.ok and result.stages_run == 3
        assert any("add_balance output" in m for m in result.mismatches)
        assert any("db hash after" in m for m in result.mismatches)

    def test_tampered_initial_hash_stops_before_any_stage(self, env, records):
        tampered = records[0].trace.model_copy(update={"initial_db_hash": "0" * 64})
        result = replay_trace(tampered, env)
        assert not result.ok and result.stages_run == 0 and "initial db hash" in result.mismatches[0]


class TestSolvability:
    def test_missing_value_is_reported(self, records):
        record = records[0]
        text = TaskText(user_query="Please credit my account with 5.")
        result = check_solvable(record.trace, text)
        assert not result.ok and result.missing == ("0/find_user.name='Ann Lee'",)

    def test_dialogue_counts_and_matching_is_normalized(self, records):
        text = TaskText(user_query="Credit 5 please.", dialogue_history=({"role": "user", "content": "I am ANN  lee"},))
        assert check_solvable(records[0].trace, text).ok

    def test_whole_word_match_only(self, records):
        assert not check_solvable(records[0].trace, TaskText(user_query="Ann Leeds wants 50")).ok

    def test_value_from_an_earlier_output_counts(self, env):
        # account_id acc-7 is stated (not a dependency) but appears in get_user's output, one stage earlier
        plan = [
            [("get_user", {"user_id": "u1"}, {}, ("user_id",))],
            [("get_balance", {"account_id": "acc-7"}, {}, ("account_id",))],
        ]
        trace = build_trace(env, plan, trace_id="earlier")
        assert check_solvable(trace, TaskText(user_query="What is the balance of user u1?")).ok
        assert not check_solvable(trace, TaskText(user_query="What is the balance of user u2?")).ok


    def test_every_argument_has_a_provenance(self, records):
        result = check_solvable(records[0].trace, TaskText(user_query='Find "Ann Lee" and credit her account with 5.'))
        assert result.ok and result.provenance == (
            "0/find_user.name <- text", "1/get_user.user_id <- find_user.user_id",
            "2/add_balance.account_id <- get_user.user.account_id", "2/add_balance.amount <- text",
        )  # fmt: skip

    def test_a_dependency_value_no_earlier_output_holds_is_unresolved(self, env):
        plan = [[("get_user", {"user_id": "u1"}, {}, ("user_id",))],
                [("get_balance", {"account_id": "acc-9"}, {"account_id": "get_user.user.account_id"}, ())]]  # fmt: skip
        trace = build_trace(env, plan, trace_id="forged")
        result = check_solvable(trace, TaskText(user_query="What is the balance of user u1?"))
        assert not result.ok and result.missing == ("1/get_balance.account_id='acc-9' (no earlier output holds it)",)

    def test_a_value_stated_twice_must_say_which_call_it_is_for(self, env):
        plan = [[("get_user", {"user_id": "u1"}, {}, ("user_id",)), ("get_balance", {"account_id": "acc-9"}, {}, ())],
                [("add_balance", {"account_id": "acc-7", "amount": 2}, {}, ())]]  # fmt: skip
        trace = build_trace(env, plan, trace_id="twice")
        vague = TaskText(user_query="For user u1, accounts acc-9 and acc-7, amount 2.")
        tied = TaskText(user_query="Look up user u1. What is the balance of account acc-9? Add 2 to the balance of "
                                   "account acc-7.")  # fmt: skip
        assert [m.split(" (")[0] for m in check_solvable(trace, vague).missing] == [
            "0/get_balance.account_id='acc-9'", "1/add_balance.account_id='acc-7'"
        ]
        assert check_solvable(trace, tied).ok


class TestScoring:
    def test_dict_subset(self):
        assert dict_subset({"a": 1}, {"a": 1, "b": 2})
        assert not dict_subset({"a": 1, "b": 2}, {"a": 1})
        assert dict_subset({"x": {"y": [1, 2]}}, {"x": {"y": [1, 2], "z": 0}})
        assert not dict_subset({"x": [1, 2]}, {"x": [1, 2, 3]})
        assert not dict_subset({"flag": False}, {"flag": 0})

    def test_turn_rewards_and_trace_score(self, records):
        trace = records[1].trace  # stage 0: two parallel reads; stage 1: credit
        reads = [
            ToolCall(name="get_balance", arguments={"account_id": "acc-9"}),
            ToolCall(name="get_user", arguments={"user_id": "u2", "verbose": True}),
        ]
        credit = [ToolCall(name="add_balance", arguments={"account_id": "acc-9", "amount": 2})]
        perfect = score_attempt(trace, [reads, credit], trace.final_db_hash)
        assert perfect.turn_rewards == (1.0, 1.0) and perfect.trace_score == 1.0
        late = score_attempt(trace, [reads[:1], reads[1:], credit], trace.final_db_hash)
        assert late.turn_rewards == (0.0, 0.0) and late.matched_calls == 1 and late.trace_score == 2 / 4
        wrong_db = score_attempt(trace, [reads, credit], "f" * 64)
        assert wrong_db.trace_score == 3 / 4 and not wrong_db.db_match

    def test_extra_calls_cost_the_turn_and_answers_are_required(self, records):
        trace = records[1].trace
        reads = [
            ToolCall(name="get_balance", arguments={"account_id": "acc-9"}),
            ToolCall(name="get_user", arguments={"user_id": "u2"}),
        ]
        credit = [ToolCall(name="add_balance", arguments={"account_id": "acc-9", "amount": 2})]
        spam = score_attempt(trace, [[*reads, reads[0]], credit], trace.final_db_hash)
        assert spam.turn_rewards == (0.0, 1.0)  # the paper's subset rule gave this turn 1.0
        facts = ("acc-9", "2")
        told = score_attempt(trace, [reads, credit], trace.final_db_hash, final_reply="Added 2 to ACC-9.",
                             expected_answer=facts)  # fmt: skip
        assert told.answer_checked and told.answer_match and told.trace_score == 1.0
        mute = score_attempt(trace, [reads, credit], trace.final_db_hash, final_reply="Done.", expected_answer=facts)
        assert not mute.answer_match and mute.trace_score == 4 / 5
        idle = score_attempt(trace, [], trace.initial_db_hash, final_reply="Done.", expected_answer=facts)
        assert idle.trace_score == 0.0
        # a differing hash judged the same state modulo creation order (the teacher replays both on a miss)
        reordered = score_attempt(trace, [reads, credit], "f" * 64, same_state=True)
        assert reordered.db_match and reordered.trace_score == 1.0


class TestTeacher:
    def test_one_task_passes_one_fails(self, env, records):
        scripts = {"Ann": GOOD_CREDIT, "u2": WRONG_PARALLEL}
        with FakeOpenAIServer(_responder_by_task(scripts)) as server:
            outcome = verify_tasks(records, {"bank": env}, VerifyConfig(teacher=_teacher(server)))
            requests = list(server.requests)
        assert [r.trace.trace_id for r in outcome.kept] == ["credit"]
        kept = outcome.kept[0]
        assert kept.teacher_status == "passed" and kept.pass_at_k == 1.0 and kept.replay_ok and kept.solvable
        assert [(q.item_id, q.reason) for q in outcome.dropped] == [(records[1].task_id, "teacher_failed")]
        assert outcome.report.balanced and outcome.report.dropped == {"teacher_failed": 1}
        # 3 attempts x 4 requests (credit) + 3 x 3 (parallel); every request offered the env's exact schemas
        assert len(requests) == 3 * 4 + 3 * 3
        offered = {t["function"]["name"]: t["function"]["parameters"] for t in requests[0]["tools"]}
        assert offered == {s.name: s.parameters for s in env.schemas}

    def test_pass_at_k_is_the_fraction_of_perfect_attempts(self, env, records):
        wrong = [
            *GOOD_CREDIT[:2],
            {"tool_calls": [{"name": "add_balance", "arguments": {"account_id": "acc-7", "amount": 50}}]},
            GOOD_CREDIT[3],
        ]

        def respond(request: dict) -> dict:
            messages = request["messages"]
            last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
            turn = sum(m["role"] == "assistant" for m in messages[last_user + 1 :])
            return (GOOD_CREDIT if request["seed"] % 4 == 0 else wrong)[turn]

        with FakeOpenAIServer(respond, model="listed-model") as server:
            result = run_teacher(records[0], env, _teacher(server, k=4, model=None))
            assert {r["model"] for r in server.requests} == {"listed-model"}  # taken from GET /v1/models
            assert sorted({r["seed"] for r in server.requests}) == [0, 1, 2, 3]  # one request seed per attempt
        # 1 of n=4 attempts solved: solve rate 1/4; unbiased pass@4 over 4 attempts = 1
        assert result.status == "passed" and result.solve_rate == 0.25 and result.pass_at_k == 1.0
        assert records[0].text.expected_answer  # the writer gives every task answer facts
        # 2 of 3 calls, DB differs, the facts stated: (2 + 0 + 1) / (3 + 1 + 1)
        assert [a.trace_score for a in result.attempts] == [1.0, 0.6, 0.6, 0.6]
        assert result.attempts[1].turn_rewards == (1.0, 1.0, 0.0)

    def test_not_run_without_endpoint(self, env, records):
        outcome = verify_tasks(records, {"bank": env})
        assert len(outcome.kept) == 2 and outcome.dropped == ()
        assert all(r.teacher_status == "not_run" and r.pass_at_k is None for r in outcome.kept)
        assert outcome.report.produced == 2 and outcome.report.balanced

    def test_failing_endpoint_is_teacher_error(self, env, records):
        with FakeOpenAIServer(fail_rate=1.0, fail_statuses=(503,)) as server:
            cfg = VerifyConfig(teacher=_teacher(server, max_retries=2, k=1))
            outcome = verify_tasks(records[:1], {"bank": env}, cfg)
            assert len(server.requests) == 3  # first try + 2 retries, then the task is given up
        assert outcome.kept == () and [q.reason for q in outcome.dropped] == ["teacher_error"]
        assert "503" in outcome.dropped[0].detail and "after 2 retries" in outcome.dropped[0].detail
        assert outcome.report.dropped == {"teacher_error": 1}

    def test_client_error_is_not_retried(self, env, records):
        def respond(request: dict) -> dict:
            raise FakeHTTPError(400, "bad request")

        with FakeOpenAIServer(respond) as server:
            result = run_teacher(records[0], env, _teacher(server, max_retries=3))
            assert len(server.requests) == 1
        assert result.status == "teacher_error" and result.pass_at_k is None and "400" in result.error

    def test_agent_mistakes_become_error_observations(self, env, records):
        script = [
            {
                "tool_calls": [
                    {"name": "nope", "arguments": {}},
                    {"name": "add_balance", "arguments": {"account_id": "acc-7", "amount": "five"}},
                ]
            },
            *GOOD_CREDIT,
        ]

        def respond(request: dict) -> dict:
            return script[_agent_turn(request)]

        with FakeOpenAIServer(respond) as server:
            result = run_teacher(records[0], env, _teacher(server, k=1))
            observations = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
        assert "nope is not a valid tool" in observations[0]
        assert json.loads(observations[1])["message"].startswith("invalid arguments")
        # the golden calls came one turn late: no turn reward, but the DB ends right
        assert result.status == "failed" and result.attempts[0].turn_rewards == (0.0, 0.0, 0.0)
        assert result.attempts[0].db_match

    def test_transient_error_is_retried_then_passes(self, env, records):
        failed: list[int] = []

        def respond(request: dict) -> dict:
            if not failed:
                failed.append(1)
                raise FakeHTTPError(429, "slow down")
            turn = _agent_turn(request)
            return GOOD_CREDIT[turn]

        with FakeOpenAIServer(respond) as server:
            result = run_teacher(records[0], env, _teacher(server, k=1))
            assert server.statuses[0] == 429 and len(server.requests) == 5
        assert result.status == "passed" and result.pass_at_k == 1.0


class TestSelection:
    def test_cap_prefers_distinct_tool_sets(self, env):
        client = LLMClient(LLMSettings())
        plans = {
            "credit": CREDIT_PLAN,
            "credit2": [
                CREDIT_PLAN[0],
                CREDIT_PLAN[1],
                [
                    (
                        "add_balance",
                        {"account_id": "acc-7", "amount": 2},
                        {"account_id": "get_user.user.account_id"},
                        ("amount",),
                    )
                ],
            ],
            "parallel": PARALLEL_PLAN,
        }
        records = []
        for trace_id, plan in plans.items():
            trace = build_trace(env, plan, trace_id=trace_id)
            records.append(
                make_task_record(trace, write_task(trace, env, incoming_edges=(), client=client, seed=0), env, seed=0)
            )
        order = [r.trace.trace_id for r in diversity_order(records)]
        assert "parallel" in order[:2] and order[2].startswith("credit")  # the repeated tool set goes last
        # the quality ranking puts the single-stage "parallel" task (no dependency used) after the chained ones
        outcome = verify_tasks([*records, records[0]], {"bank": env}, VerifyConfig(max_tasks_per_env=2))
        assert {r.trace.trace_id for r in outcome.kept} == {"credit", "credit2"}
        assert sorted(q.reason for q in outcome.dropped) == ["duplicate", "env_cap"]
        assert outcome.report.inputs == 4 and outcome.report.balanced

    def test_missing_env_and_unsolvable_are_quarantined(self, env, records):
        mute = records[1].model_copy(update={"task_id": "mute", "text": TaskText(user_query="do the thing")})
        lost = records[0].model_copy(update={"task_id": "lost", "env_id": "gone"})
        outcome = verify_tasks([mute, lost], {"bank": env})
        assert sorted((q.item_id, q.reason) for q in outcome.dropped) == [
            ("lost", "env_missing"),
            ("mute", "unsolvable"),
        ]
        assert "u2" in next(q.detail for q in outcome.dropped if q.reason == "unsolvable")
        assert outcome.report.balanced and outcome.report.produced == 0


def test_verified_records_export_and_read_back(tmp_path, env, records):
    from data.gust import read_gust, write_gust

    outcome = verify_tasks(records, {"bank": env})
    folder = write_gust(
        outcome.kept, tmp_path / "gust", seed=0, filters_run={"replay": True, "teacher_pass_at_k": False}
    )
    assert read_gust(folder) == list(outcome.kept)


def test_pass_at_k_is_the_unbiased_estimator():
    from tdg.verify import pass_at_k

    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(8, 2, 4) == pytest.approx(1 - 15 / 70)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 1) == pytest.approx(1 / 8)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_the_cap_fills_with_tasks_the_quality_stage_keeps(env, records):
    from tdg.quality import QualityConfig
    from tdg.verify import diversity_order, quality_tier

    schemas = {s.name: s for s in env.schemas}
    leaked = records[0].model_copy(update={"task_id": "zz-leaky", "text": records[0].text.model_copy(
        update={"user_query": records[0].text.user_query + " Use find_user first."})})  # fmt: skip
    assert quality_tier(leaked, schemas, QualityConfig()) == 2
    assert quality_tier(records[0], schemas, QualityConfig()) < 2
    ordered = diversity_order([leaked, *records], lambda r: quality_tier(r, schemas, QualityConfig()))
    assert ordered[-1].task_id == "zz-leaky"
    capped = verify_tasks([leaked, records[0]], {"bank": env}, VerifyConfig(max_tasks_per_env=1))
    assert [r.task_id for r in capped.kept] == [records[0].task_id]


TICKETS_SOURCE = """
import uuid


def open_ticket(db, title):
    ticket_id = str(uuid.uuid4())[:8]
    db.setdefault("tickets", {})[ticket_id] = {"title": title}
    return {"status": "success", "message": "opened", "ticket_id": ticket_id}
"""


class TestSessionPerToolStep:
    """The teacher holds a sandbox session only during a tool step; state between steps stays exact."""

    def _env(self):
        from data.models import ToolKind, ToolSchema
        from envgen.runtime import Environment

        schema = ToolSchema(name="open_ticket", raw_name="open_ticket", description="Open a ticket.",
                            parameters={"type": "object", "properties": {"title": {"type": "string"}},
                                        "required": ["title"]},
                            response={"type": "object"}, kind=ToolKind.CREATE)  # fmt: skip
        return Environment.from_parts("tickets", [schema], {"tickets": {}}, TICKETS_SOURCE)

    def test_steps_on_shared_sessions_equal_one_continuous_session(self):
        from tdg.verify import _AttemptEnv, _SessionCache

        env = self._env()
        with env.session(seed=3) as session:
            continuous = [session.call("open_ticket", {"title": t}) for t in ("a", "b")]
            continuous_hash = session.db_hash()
        cache = _SessionCache(None, seed=3, limit=1)  # one session serves both attempts, step by step
        try:
            first, other = _AttemptEnv(env, cache), _AttemptEnv(env, cache)
            outputs = []
            for title in ("a", "b"):
                with first.step():
                    outputs.append(first.call("open_ticket", {"title": title}))
                with other.step():  # another attempt on the same session in between
                    other.call("open_ticket", {"title": "x" + title})
            assert outputs == continuous  # seeded uuid4 continues across steps: the second id is not the first
            assert outputs[0]["ticket_id"] != outputs[1]["ticket_id"]
            assert first.db_hash() == continuous_hash
            assert other.db_hash() != continuous_hash
        finally:
            cache.close()

    def test_attempts_of_all_tasks_share_the_llm_slots(self, env, records):
        def respond(request: dict) -> dict:
            return GOOD_CREDIT[min(_agent_turn(request), 3)]

        with FakeOpenAIServer(respond, delay_s=0.2) as server:
            teacher = _teacher(server, k=4, max_concurrency=4)
            outcome = verify_tasks(records, {"bank": env}, VerifyConfig(teacher=teacher))
            # 2 tasks x 4 attempts in flight together, never more requests than max_concurrency
            assert server.max_in_flight == 4
        assert outcome.report.balanced and [r.trace.trace_id for r in outcome.kept] == ["credit"]


def test_after_new_tools_a_write_flow_comes_before_a_recombined_lookup():
    """The per-env cap fills with tasks that cover new tools first, then with state-changing ones (another record for
    a write flow) before read-only recombinations of tools already covered."""
    from types import SimpleNamespace

    def task(task_id: str, *calls: tuple[str, bool]) -> SimpleNamespace:
        stage = SimpleNamespace(calls=[SimpleNamespace(name=n, db_changed=w) for n, w in calls])
        return SimpleNamespace(task_id=task_id, trace=SimpleNamespace(stages=[stage]))

    book = task("a-book", ("search", False), ("get", False), ("book", True))
    lookup = task("b-lookup", ("search", False), ("get", False))
    again = task("c-book-other-record", ("search", False), ("get", False), ("book", True))
    cancel = task("d-cancel", ("get", False), ("cancel", True))
    order = [r.task_id for r in diversity_order([lookup, again, book, cancel])]  # type: ignore[arg-type]
    assert order[:2] == ["a-book", "d-cancel"]  # new tools first, most first
    assert order[2:] == ["c-book-other-record", "b-lookup"]
