"""`gusteval` end to end on the tiny environment: real sandbox sessions, a real HTTP agent endpoint on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.io import read_jsonl
from gusteval.metrics import aggregate_trials, pass_hat_k
from gusteval.replay import GoldReplayPolicy, ReplayServer, load_policy
from gusteval.report import run_gust_eval
from gusteval.runner import GustEvalConfig, load_eval_tasks
from gustforge.llm import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer
from tests.gusteval._tasks import dependent_task, tiny_records, write_export


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> tuple[Path, Path]:
    return write_export(tmp_path_factory.mktemp("gust-out"), [*tiny_records(), dependent_task()])


def _settings(url: str, out: Path) -> LLMSettings:
    return LLMSettings(backend="openai", base_url=url, max_concurrency=4, cache_path=out / "llm-cache.sqlite")


def _cfg(**kw) -> GustEvalConfig:
    return GustEvalConfig(**{"trials": 3, "max_turns": 12, "concurrency": 3, "bootstrap_samples": 200, **kw})


def test_pass_hat_k_follows_tau2():
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(3, 4, 4) == 0.0
    assert pass_hat_k(3, 4, 1) == 0.75 and pass_hat_k(3, 4, 2) == pytest.approx(3 / 6)
    assert pass_hat_k(0, 4, 1) == 0.0 and pass_hat_k(2, 2, 3) == 0.0


def test_gold_replay_scores_pass_k_1_and_is_resumable(export, tmp_path):
    gust_dir, _ = export
    with ReplayServer(load_policy(gust_dir)) as server:
        summary = run_gust_eval(gust_dir, tmp_path, model=_settings(server.base_url, tmp_path), cfg=_cfg())
        requests = server.requests
        again = run_gust_eval(gust_dir, tmp_path, model=_settings(server.base_url, tmp_path), cfg=_cfg())
        assert server.requests == requests  # every trial came from trials.jsonl: no request at all
    assert summary.tasks == 3 and summary.incomplete_tasks == 0 and summary.model == "gold-replay"
    assert {k: m.mean for k, m in summary.pass_k.items()} == {1: 1.0, 2: 1.0, 3: 1.0}
    assert summary.metrics["name_f1"].mean == 1.0 and summary.metrics["arg_match"].mean == 1.0
    assert summary.metrics["user_turns"].mean >= 1 and summary.end_reasons == {"user_stop": 9}
    assert again == summary
    trials = list(read_jsonl(tmp_path / "trials.jsonl"))
    assert len(trials) == 9 and all(t["success"] for t in trials)
    first = next(t for t in trials if t["task_id"] == "task-dep")["transcript"]
    assert "C-1" not in first[0]["content"] and "C-1" in first[2]["content"]  # given only when asked
    for name in ("results.json", "report.md", "pass_k.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "| 3 | 1.0000 |" in (tmp_path / "report.md").read_text()


def test_verl_rows_give_the_same_result(export, tmp_path):
    gust_dir, verl_file = export
    assert [t.scenario for t in load_eval_tasks(verl_file)] == [t.scenario for t in load_eval_tasks(gust_dir)]
    with ReplayServer(load_policy(gust_dir)) as server:
        summary = run_gust_eval(verl_file, tmp_path, model=_settings(server.base_url, tmp_path), cfg=_cfg(trials=2))
    assert summary.pass_k[2].mean == 1.0


def test_skipping_a_step_scores_0(export, tmp_path):
    gust_dir, _ = export
    policy = load_policy(gust_dir, skip_step=True)
    assert set(policy.skipped_tasks()) == {"task-1", "task-2", "task-dep"}
    with ReplayServer(policy) as server:
        summary = run_gust_eval(gust_dir, tmp_path, model=_settings(server.base_url, tmp_path), cfg=_cfg())
    assert all(m.mean == 0.0 for m in summary.pass_k.values())
    assert summary.failures == {"missing_calls": 6, "no_tool_call": 3}  # task-2 has a single stage


def _policy_server(respond) -> FakeOpenAIServer:
    return FakeOpenAIServer(lambda req: {"content": respond(req["messages"])})


def test_stopping_early_or_corrupting_the_state_scores_0(export, tmp_path):
    gust_dir, _ = export
    gold = load_policy(gust_dir)

    def stops_early(messages):  # the gold, but it claims success instead of making the last stage
        reply = gold.respond(messages)
        following = gold.respond([*messages, {"role": "assistant", "content": reply}])
        return "All done!" if "<tool_call>" in reply and following.startswith("All done") else reply

    def corrupts(messages):  # the gold, plus a write nobody asked for
        reply = gold.respond(messages)
        if reply.startswith("All done"):
            extra = json.dumps({"name": "cancel_order", "arguments": {"order_id": "ORD-1001"}})
            if not any(extra in str(m.get("content")) for m in messages):
                return f"<tool_call>\n{extra}\n</tool_call>"
        return reply

    for name, respond in (("early", stops_early), ("corrupt", corrupts)):
        with _policy_server(respond) as server:
            out = tmp_path / name
            summary = run_gust_eval(gust_dir, out, model=_settings(server.base_url, out),
                                    cfg=_cfg(trials=2, limit=2))  # fmt: skip
        assert summary.pass_k[1].mean == 0.0, name
        assert sum(summary.failures.values()) == 4, name


def test_lost_trials_are_reported_and_retried(export, tmp_path):
    gust_dir, _ = export
    with FakeOpenAIServer(fail_rate=1.0, fail_statuses=(400,)) as server:
        summary = run_gust_eval(gust_dir, tmp_path, model=_settings(server.base_url, tmp_path), cfg=_cfg(trials=1))
    assert summary.tasks == 0 and summary.incomplete_tasks == 3 and summary.lost_trials == 3
    assert len(list(read_jsonl(tmp_path / "failures.jsonl"))) == 3
    assert not (tmp_path / "trials.jsonl").exists()


def test_aggregate_counts_incomplete_tasks():
    from gusteval.runner import TrialResult

    def trial(task, k, ok):
        return TrialResult(task_id=task, env_id="e", trial=k, success=ok, final_db_hash="h", expected_final_hash="h",
                           state_changing=True, end_reason="user_stop", failure="" if ok else "missing_calls",
                           name_f1=1.0, arg_match=1.0, generations=3, user_turns=1, tool_calls=2, tool_errors=0,
                           prompt_tokens=10, completion_tokens=5)  # fmt: skip

    results = [trial("a", 0, True), trial("a", 1, True), trial("b", 0, True), trial("b", 1, False), trial("c", 0, True)]
    summary = aggregate_trials(results, trials=2, model="m", user="offline", expected_tasks=3, bootstrap_samples=50)
    assert summary.tasks == 2 and summary.incomplete_tasks == 1
    assert summary.pass_k[1].mean == 0.75 and summary.pass_k[2].mean == 0.5
    assert summary.failures == {"missing_calls": 1}


def test_policy_from_verl_rows_matches_records(export):
    gust_dir, verl_file = export
    from_rows = GoldReplayPolicy.from_tasks(load_eval_tasks(verl_file))
    from_records = load_policy(gust_dir)
    for task in ("task-1", "task-2", "task-dep"):
        assert from_rows.stages(task) == from_records.stages(task)


def test_llm_user_in_the_loop_and_bounded_concurrency(export, tmp_path):
    """The user is a model behind a second local endpoint (scripted to answer like the offline rules)."""
    from gusteval.user_sim import AGENT_GREETING, OfflineUserSimulator

    gust_dir, _ = export
    scenarios = {t.scenario.goal: t.scenario for t in load_eval_tasks(gust_dir)}

    def user_model(request):
        messages = request["messages"]
        scenario = next(s for goal, s in scenarios.items() if f"# Your goal\n{goal}\n" in messages[0]["content"])
        if messages[-1]["content"] == AGENT_GREETING:
            return {"content": scenario.opening()}
        return {"content": OfflineUserSimulator(scenario).respond(messages[-1]["content"]).content}

    gold = load_policy(gust_dir)
    with FakeOpenAIServer(user_model, model="user-model") as users, \
            FakeOpenAIServer(lambda req: {"content": gold.respond(req["messages"])}, delay_s=0.05) as agent:
        summary = run_gust_eval(gust_dir, tmp_path, model=_settings(agent.base_url, tmp_path),
                                cfg=_cfg(trials=2, user="llm", concurrency=2),
                                user_model=_settings(users.base_url, tmp_path / "u"))  # fmt: skip
        assert agent.max_in_flight <= 2
        user_requests = users.requests
    assert summary.user == "llm" and summary.pass_k[2].mean == 1.0
    assert summary.user_reasons.get("llm_stop") == 6
    assert all(r["messages"][0]["role"] == "system" and "###STOP###" in r["messages"][0]["content"]
               for r in user_requests)


def test_an_exported_dataset_finds_its_own_environments(export, tmp_path):
    """Issue 25: `gust eval gust --data EXPORT` (what `gust export` uploads) uses the export's own `envs/`."""
    from data.gust import REPO_PLACEHOLDER
    from data.hub import publish

    gust_dir, _ = export
    exported = tmp_path / "published"
    publish(gust_dir, REPO_PLACEHOLDER, private=False, dry_run_dir=exported)
    assert not (exported.parent / "envs").exists()  # nothing beside it to fall back on
    tasks = load_eval_tasks(exported)
    assert tasks and {Path(t.env_dir).parent for t in tasks} == {exported / "envs"}


def _with_answer(record, facts):
    return record.model_copy(update={"text": record.text.model_copy(update={"expected_answer": tuple(facts)})})


def test_idle_agent_fails_every_task_and_answers_are_required(tmp_path):
    """Read-only tasks keep the DB as it was: the final-state check alone let an idle agent pass them."""
    from tests.trainer.gust_task import make_task

    read_only = _with_answer(make_task([[("get_order", {"order_id": "ORD-1001"})]], task_id="task-read"),
                             ["ORD-1001", "C-1"])  # fmt: skip
    records = [_with_answer(r, ["ORD-1003"]) for r in tiny_records()] + [read_only]
    gust_dir, verl_file = write_export(tmp_path / "export", records)
    assert [t.expected_answer for t in load_eval_tasks(verl_file)] == [t.expected_answer for t in
                                                                       load_eval_tasks(gust_dir)]  # fmt: skip
    with _policy_server(lambda messages: "I have taken care of everything.") as server:
        out = tmp_path / "idle"
        idle = run_gust_eval(gust_dir, out, model=_settings(server.base_url, out), cfg=_cfg(trials=1))
    assert idle.tasks == 3 and idle.pass_k[1].mean == 0.0 and idle.failures == {"no_tool_call": 3}
    gold = load_policy(gust_dir)
    with ReplayServer(gold) as server:
        out = tmp_path / "gold"
        summary = run_gust_eval(gust_dir, out, model=_settings(server.base_url, out), cfg=_cfg(trials=1))
    assert summary.pass_k[1].mean == 1.0 and summary.metrics["answer_match"].mean == 1.0

    def mute(messages):  # the gold calls, but the final reply does not say what it found
        return gold.respond(messages).split(" What I found")[0]

    with _policy_server(mute) as server:
        out = tmp_path / "mute"
        muted = run_gust_eval(gust_dir, out, model=_settings(server.base_url, out), cfg=_cfg(trials=1))
    assert muted.pass_k[1].mean == 0.0 and muted.failures == {"missing_answer": 3}
