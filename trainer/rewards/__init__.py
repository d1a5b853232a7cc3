"""Rewards for SLCA/TARA training: HierR process score, summary judge, omission guard, TARA per-turn, state match.

Pure Python (no torch / verl import) so the reward can run in any process, including tests and benches.

REWARD-COMPONENTS CONTRACT (read by `trainer/reward_manager.py` and the estimators; keep stable)
==============================================================================================
`trainer.compute_score.compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw)` returns a
flat dict. EVERY path (normal, omission guard, bad ground truth) returns EXACTLY the key set `COMPONENT_KEYS`, with
the same Python type per key, because verl builds one numpy column per key from all samples
(`np.array([info[key] ...])`): a ragged list would raise there, so per-turn values travel as a JSON *string*.

  key                 type   meaning
  ------------------  -----  -------------------------------------------------------------------------------
  score               float  R_tool + R_sum + R_goal (weights w_process=w_summary=w_goal=1 by default), the TRUE
                             score of the trajectory for every algorithm. Omission guard: -0.5. (The agent loop lays the
                             components out on tokens per algorithm, so verl's critic/score — the sum of the
                             laid-out rewards — is not comparable across algorithms; log this key instead.)
  acc                 float  = score. verl's validation makes `acc` its core variable when present, so
                             `val-core/<data_source>/acc/mean@N` is the true score for every algorithm.
  r_tool              float  HierR process score in [0, 1] = .10 S_fmt + .25 S_name + .15 S_key + .20 S_val
                             + .30 S_par. Omission guard: 0.0.
  r_sum               float  summary score in [0, 1] ((rating-1)/4 from the judge). Omission guard: -0.5
                             (an override, not a subtraction).
  r_goal              float  GUST rows (turn_level) only, else 0.0: the mean of the goal checks that apply —
                             turn_reward_mean (exact per-turn calls), state_match (when state_checked), answer_match
                             (when answer_checked). Extra, repeated, missing or reordered calls cost here.
  answer_checked      int    1 iff the row carries answer facts (`expected_answer`).
  answer_match        float  share of the answer facts the agent's final reply states (0.0 when not checked).
  omission            int    1 iff gold calls exist but the (think-stripped) response has no `<tool_call>`.
  r_succ              float  ToolPO outcome R_succ ∈ {0,1} by the reference rule (SLCA-GRPO App. C.4, Eq. 28).
  r_action            float  ToolPO local reward R_action = Σ strict matches / |gold calls| (App. C.4).
  s_fmt s_name s_key s_val s_par   float   HierR sub-scores (0.0 on the omission path). S_par compares the
                             agent's first *step* (turn) with the first gold step (`par_unit="block"`: the
                             reference code's first block).
  judge               str    judge backend that produced r_sum: "heuristic" | "llm" | "none" (short-circuit).
  judge_failed        int    1 if the LLM judge call failed (r_sum = 0.0).
  judge_parse_failed  int    1 if the judge reply had no parsable `<rating>` (r_sum = 0.0).
  no_tool_response    int    1 if the response holds no `<tool_response>` (r_sum = 0.0 by short-circuit).
  turn_rewards        str    JSON list[float] of TARA binary per-turn rewards r_t (rule `turn_rule`: "exact" by
                             default — no extra or repeated call in the turn; "subset" = the paper's), length
                             T = number of gold turns (GoldenTrace stages). "[]" when the row has no turn-level
                             gold (Toucan rows: flat names only). Decode with `decode_turn_rewards`.
  turn_count          int    T (= len(decoded turn_rewards)).
  turn_reward_mean    float  mean of turn_rewards (0.0 when T == 0).
  agent_turns         int    number of agent generation turns found in the response.
  state_checked       int    1 iff a state-equivalence check ran (GUST row with env + expected final DB hash).
  state_match         float  1.0 iff replaying the agent's calls on a fresh env gives the golden final DB hash;
                             0.0 otherwise (also when not checked: look at state_checked).
  gold_call_count     int    number of gold calls (all steps).
  pred_call_count     int    number of calls HierR/ToolPO scored: the EXECUTED calls when the agent loop recorded
                             them (`gust_turn_calls`), else the valid calls parsed from the text.
  text_call_count     int    number of valid calls the reward's parser reads in the think-stripped text (the
                             rehearsal compares it with what the rollout's parser executed).
  error_type          str    "none" | "invalid_ground_truth" | "missing_allowed_tools" | "state_replay_error" |
                             "internal_error" (a bug: logged with its traceback; all values 0).

TOKEN PLACEMENT (how the reward manager / estimator puts components on tokens)
  Let runs = the maximal runs of response_mask == 1 (the agent's generations, left to right).
  * r_sum      -> the summary segment = the LAST run.
  * r_tool     -> the process segment = the union of all EARLIER runs (absent when there is one run).
  * turn_rewards[t] (0-based) -> run t, for t < min(T, len(runs)). Runs with index >= T (e.g. the final
    answer after the last gold turn) carry no turn reward (treat as absent, not as 0). Missing agent turns
    (len(runs) < T) contribute r_t = 0 for those t at no token: they enter turn t's group statistics (ToolVerse
    App. B.4 averages over all K rollouts) but receive no advantage.
    Agent turn t in the text is the same generation: `parse.split_agent_turns(solution_str)[t]`.
  * omission == 1 -> the estimator zeroes the process scalar and uses score (-0.5) on the summary segment.
  * toolpo (paper rewards): r_succ on the summary segment, r_action on the tool segment (no omission override);
    toolpo_hierr (reference code): score on the summary segment, r_tool on the tool segment.
  * state_match (when state_checked == 1) and answer_match enter score through r_goal (GUST rows).

GROUND-TRUTH SHAPE (written by `trainer.convert`, see `trainer.rows.GroundTruth`)
  allowed_tools: list[str]; gold_tool_calls: JSON str of list[list[{"name","arguments"}]] (steps);
  args_known: bool; turn_level: bool (steps are real agent turns: GUST); tool_schemas: JSON str of OpenAI tools;
  question_content: str; subset_name: str; env_id: str (""), env_dir: str (""), expected_final_db_hash: str (""),
  expected_answer: list[str] ([]).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["COMPONENT_KEYS", "NO_CALL_PENALTY", "decode_turn_rewards"]

NO_CALL_PENALTY = -0.5

COMPONENT_KEYS: tuple[str, ...] = (
    "score",
    "acc",
    "r_tool",
    "r_sum",
    "r_succ",
    "r_action",
    "r_goal",
    "answer_checked",
    "answer_match",
    "omission",
    "s_fmt",
    "s_name",
    "s_key",
    "s_val",
    "s_par",
    "judge",
    "judge_failed",
    "judge_parse_failed",
    "no_tool_response",
    "turn_rewards",
    "turn_count",
    "turn_reward_mean",
    "agent_turns",
    "state_checked",
    "state_match",
    "gold_call_count",
    "pred_call_count",
    "text_call_count",
    "error_type",
)


def decode_turn_rewards(value: Any) -> list[float]:
    """Decode the `turn_rewards` component (JSON string, list or numpy array) into a list of floats.

    Args:
        value: What came back from the reward dict / non_tensor_batch for one sample.

    Returns:
        The per-turn binary rewards, possibly empty.
    """
    if value is None:
        return []
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    return [float(v) for v in list(value)]
