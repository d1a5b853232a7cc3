"""compute_score: the reward-components contract on GUST rows (HierR + judge + TARA + state) and SLCA preview rows."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.trainer.gust_task import GOLD_STAGES, TINY_ENV, make_task, rollout
from trainer.compute_score import compute_score, compute_score_async, config_from_kwargs
from trainer.convert import gust_row, load_env_schemas, toucan_row
from trainer.rewards import COMPONENT_KEYS, decode_turn_rewards
from trainer.rewards.score import FINAL_HASH_KEY, TURN_CALLS_KEY

FINAL = "Order ORD-1001 is now processing and ORD-1003 was cancelled as you asked, all done."


@pytest.fixture(scope="module")
def gust_gt():
    task = make_task()
    row = gust_row(task, load_env_schemas(TINY_ENV), env_dir=str(TINY_ENV), index=0)
    return row.reward_model.ground_truth.model_dump(mode="json")


@pytest.fixture(scope="module")
def previews(corpora_dir):
    path = corpora_dir / "toucan" / "toucan_toolcall_rl.preview.jsonl"
    return [json.loads(line) for line in path.open()]


def _check_contract(out):
    assert tuple(out) == COMPONENT_KEYS
    assert out["score"] == pytest.approx(out["r_tool"] + out["r_sum"] + out["r_goal"])
    json.dumps(out)  # JSON-able


def test_perfect_gust_rollout(gust_gt):
    out = compute_score("gust", rollout(GOLD_STAGES, FINAL), gust_gt, {}, state_mode="replay")
    _check_contract(out)
    assert out["r_tool"] == pytest.approx(1.0)
    assert (out["r_succ"], out["r_action"], out["acc"]) == (1.0, 1.0, out["score"])
    assert (out["omission"], out["judge"], out["state_checked"], out["state_match"]) == (0, "heuristic", 1, 1.0)
    assert decode_turn_rewards(out["turn_rewards"]) == [1.0, 1.0]
    assert (out["turn_count"], out["agent_turns"], out["gold_call_count"], out["pred_call_count"]) == (2, 3, 3, 3)


def test_wrong_second_turn(gust_gt):
    turns = [GOLD_STAGES[0], [GOLD_STAGES[1][0], ("cancel_order", {"order_id": "ORD-1002"})]]
    out = compute_score("gust", rollout(turns, FINAL), gust_gt, {}, state_mode="replay")
    assert decode_turn_rewards(out["turn_rewards"]) == [1.0, 0.0]
    assert (out["r_succ"], out["r_action"]) == (0.0, pytest.approx(2 / 3))
    assert out["state_match"] == 0.0
    # S_name = 1 (same names), S_key = 1, S_val = (1 + 1 + 0) / 3, S_par = 1, S_fmt = 1
    assert out["r_tool"] == pytest.approx(0.10 + 0.25 + 0.15 + 0.20 * 2 / 3 + 0.30)


def test_omission_guard(gust_gt):
    out = compute_score("gust", "I think order ORD-1001 is fine, no need to check anything.", gust_gt, {},
                        state_mode="replay")
    _check_contract(out)
    assert (out["score"], out["r_tool"], out["r_sum"], out["omission"]) == (-0.5, 0.0, -0.5, 1)
    assert out["judge"] == "none" and out["s_name"] == 0.0
    assert decode_turn_rewards(out["turn_rewards"]) == [0.0, 0.0]
    assert (out["state_checked"], out["state_match"]) == (1, 0.0)


def test_think_only_calls_trigger_the_guard(gust_gt):
    sol = "<think>" + rollout(GOLD_STAGES, "") + "</think>" + FINAL
    assert compute_score("gust", sol, gust_gt, {})["omission"] == 1


def test_agent_loop_record_is_preferred(gust_gt):
    recorded = json.dumps([[{"name": n, "arguments": a} for n, a in stage] for stage in GOLD_STAGES] + [[]])
    out = compute_score("gust", "garbled text <tool_call>", gust_gt, {TURN_CALLS_KEY: recorded}, state_mode="replay")
    assert decode_turn_rewards(out["turn_rewards"]) == [1.0, 1.0]
    assert out["agent_turns"] == 3 and out["state_match"] == 1.0


def test_hierr_scores_the_executed_calls_only(gust_gt):
    """Calls the loop never ran (beyond max_parallel_calls, after a turn cap) earn nothing; parse errors still cost."""
    text = rollout(GOLD_STAGES, FINAL)
    executed = [[{"name": n, "arguments": a} for n, a in GOLD_STAGES[0]],
                [{"name": n, "arguments": a} for n, a in GOLD_STAGES[1][:1]], []]  # cap 1: cancel_order never ran
    out = compute_score("gust", text, gust_gt, {TURN_CALLS_KEY: json.dumps(executed)})
    full = compute_score("gust", text, gust_gt, {TURN_CALLS_KEY: json.dumps(executed[:1] + [
        [{"name": n, "arguments": a} for n, a in GOLD_STAGES[1]], []])})  # fmt: skip
    assert full["r_tool"] == pytest.approx(1.0) and out["s_fmt"] == 1.0
    assert out["s_name"] == pytest.approx(2 * 2 / (2 + 3)) and out["r_action"] == pytest.approx(2 / 3)
    assert out["r_tool"] < full["r_tool"] and out["r_succ"] == 0.0
    assert (out["pred_call_count"], out["text_call_count"]) == (2, 3)  # scored vs read in the text
    broken = compute_score("gust", text + "<tool_call>{oops</tool_call>", gust_gt,
                           {TURN_CALLS_KEY: json.dumps(executed[:1] + full_turns(GOLD_STAGES)[1:])})  # fmt: skip
    assert broken["s_fmt"] == pytest.approx(3 / 4)


def full_turns(stages):
    return [[{"name": n, "arguments": a} for n, a in stage] for stage in stages] + [[]]


def test_judge_sees_the_recorded_final_reply_not_the_users_words(gust_gt):
    """The judge input is the agent's last SCORED reply (the loop's record) and the tool outputs, never the user."""
    from trainer.rewards.score import FINAL_REPLY_KEY, Scorer

    closing = FINAL + " Is there anything else I can help you with?"
    chatty = rollout(GOLD_STAGES, "Which order did you mean?") + "\nuser\nThe order id is ORD-1001, thanks a lot." \
        + "\nassistant\n" + closing  # fmt: skip
    scorer = Scorer()
    try:
        seen = scorer._prepare(chatty, gust_gt, {}).judge_input  # text only: the user's words leak in
        recorded = scorer._prepare(chatty, gust_gt, {FINAL_REPLY_KEY: closing}).judge_input
    finally:
        scorer.close()
    assert "thanks a lot" in seen.final_response
    assert recorded.final_response == closing and "thanks a lot" not in str(recorded)
    assert len(recorded.tool_responses) == 3


def test_rollout_hash_mode(gust_gt):
    info = {FINAL_HASH_KEY: gust_gt["expected_final_db_hash"]}
    out = compute_score("gust", "no calls at all in this long reply", gust_gt, info, state_mode="rollout")
    assert (out["state_checked"], out["state_match"]) == (1, 1.0)
    off = compute_score("gust", "no calls", gust_gt, info, state_mode="off")
    assert off["state_checked"] == 0
    assert compute_score("gust", "no calls", gust_gt, info)["state_checked"] == 1  # on ("rollout") by default


def test_preview_rows(previews):
    direct = "Here is a complete DPIA checklist and a data-flow template you can reuse directly."
    results = []
    for row in previews:
        gt = row["reward_model"]["ground_truth"]
        out = compute_score(row["data_source"], direct, gt, row["extra_info"])
        _check_contract(out)
        results.append(out)
        if gt["gold_tool_calls"]:
            assert out["omission"] == 1 and out["score"] == -0.5
        else:
            # irrelevant row answered directly: R_tool = 0.90, R_sum = 0 (no tool response), no TARA, no state
            assert out["r_tool"] == pytest.approx(0.90) and out["r_sum"] == 0.0 and out["no_tool_response"] == 1
        assert out["turn_rewards"] == "[]" and out["state_checked"] == 0
    # verl builds one numpy column per key from all samples: every column must be 1-D
    for key in COMPONENT_KEYS:
        assert np.array([r[key] for r in results]).shape == (len(results),)


def test_converted_toucan_row_scores_like_the_raw_row(previews):
    row = previews[3]
    converted = toucan_row(row, 0).reward_model.ground_truth.model_dump(mode="json")
    gt = row["reward_model"]["ground_truth"]
    name = gt["gold_tool_calls"][0]
    sol = f'<tool_call>{{"name": "{name}", "arguments": {{"query": "card"}}}}</tool_call>' + \
        "\nuser\n<tool_response>\nCard component: a container.\n</tool_response>\nassistant\nUse the Card component."
    assert compute_score("toucan_toolcall", sol, converted) == compute_score("toucan_toolcall", sol, gt)


def test_bad_ground_truth_keeps_the_key_set():
    for gt in (None, "x", {"allowed_tools": []}):
        out = compute_score("gust", "text", gt)
        assert tuple(out) == COMPONENT_KEYS and out["score"] == 0.0 and out["error_type"] != "none"


def test_llm_judge_through_kwargs(gust_gt):
    reply = "<response_quality><reasoning>r</reasoning><rating>excellent</rating></response_quality>"
    with FakeOpenAIServer(lambda req: {"content": reply}) as server:
        kwargs = {"judge": "llm", "judge_base_url": server.base_url, "judge_model": "j",
                  "judge_api_key_env": "GUST_TEST_NO_KEY", "state_mode": "off"}
        out = compute_score("gust", rollout(GOLD_STAGES, FINAL), gust_gt, {}, **kwargs)
        out_async = asyncio.run(compute_score_async("gust", rollout(GOLD_STAGES, FINAL), gust_gt, {}, **kwargs))
        prompt = server.requests[0]["messages"][0]["content"]
    assert out["judge"] == "llm" and out["r_sum"] == 1.0 and out["r_goal"] == 1.0
    assert out["score"] == pytest.approx(3.0)  # R_tool 1 + R_sum 1 + R_goal 1 (exact turns; state off, no facts)
    assert out_async == out
    assert gust_gt["question_content"] in prompt and "<tool_call>" not in prompt.split("## User Question")[1]


def test_config_from_kwargs():
    cfg = config_from_kwargs({"w_par": 0.5, "w_summary": 2, "judge_model": "m", "reward_router_address": None})
    assert cfg.weights.par == 0.5 and cfg.w_summary == 2.0 and cfg.judge_options == {"model": "m"}
    with pytest.raises(ValueError):
        config_from_kwargs({"state_mode": "sometimes"})


def test_score_batch_equals_per_row(gust_gt):
    from trainer.rewards.score import RewardConfig, Scorer

    items = [(rollout(GOLD_STAGES, FINAL), gust_gt, {}), ("no calls in this reply at all", gust_gt, {}),
             (rollout(GOLD_STAGES[:1], FINAL), gust_gt, {}), (rollout(GOLD_STAGES, FINAL), gust_gt, {})]
    scorer = Scorer(RewardConfig(state_mode="replay"))
    try:
        assert scorer.score_batch(items) == [compute_score("gust", s, gt, i, state_mode="replay") for s, gt, i in items]
        assert sum(len(free) for free in scorer.pool._free.values()) == 1  # one pooled session served every replay
    finally:
        scorer.close()
    assert scorer.pool._free == {}


def test_rewards_and_conversion_import_without_torch_or_verl():
    import subprocess
    import sys

    code = ("import sys, trainer.compute_score, trainer.convert, trainer.rewards.score; "
            "print(any(m.split('.')[0] in ('torch', 'verl') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _with_facts(gt, facts):
    return {**gt, "expected_answer": list(facts)}


def test_goal_term_pays_for_exact_turns_state_and_answer(gust_gt):
    """score = R_tool + R_sum + R_goal; R_goal = mean(exact turns, state match, answer facts) on GUST rows."""
    gt = _with_facts(gust_gt, ["ORD-1001", "processing"])
    gold = compute_score("gust", rollout(GOLD_STAGES, FINAL), gt, {}, state_mode="replay")
    assert (gold["answer_checked"], gold["answer_match"], gold["r_goal"]) == (1, 1.0, 1.0)
    mute = compute_score("gust", rollout(GOLD_STAGES, "All done."), gt, {}, state_mode="replay")
    assert mute["answer_match"] == 0.0 and mute["r_goal"] == pytest.approx(2 / 3) and mute["score"] < gold["score"]
    spam = [list(s) + [("list_orders", {})] for s in GOLD_STAGES]
    extra = compute_score("gust", rollout(spam, FINAL), gt, {}, state_mode="replay")
    assert decode_turn_rewards(extra["turn_rewards"]) == [0.0] * len(GOLD_STAGES) and extra["state_match"] == 1.0
    assert extra["score"] < gold["score"]
    paper = compute_score("gust", rollout(spam, FINAL), gt, {}, state_mode="replay", turn_rule="subset")
    assert decode_turn_rewards(paper["turn_rewards"]) == [1.0] * len(GOLD_STAGES)


def test_idle_agent_scores_below_gold_on_every_signal(gust_gt):
    gt = _with_facts(gust_gt, ["ORD-1001"])
    idle = compute_score("gust", "I have done everything: ORD-1001 is processing.", gt, {})
    gold = compute_score("gust", rollout(GOLD_STAGES, FINAL), gt, {})
    assert idle["omission"] == 1 and idle["score"] == -0.5 < gold["score"]
    assert decode_turn_rewards(idle["turn_rewards"]) == [0.0] * len(GOLD_STAGES)


def test_toucan_rows_have_no_goal_term(previews):
    row = next(r for r in previews if r["reward_model"]["ground_truth"]["gold_tool_calls"])
    out = compute_score(row["data_source"], "text", row["reward_model"]["ground_truth"], row["extra_info"])
    assert out["r_goal"] == 0.0 and out["answer_checked"] == 0
