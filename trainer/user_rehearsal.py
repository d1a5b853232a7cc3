"""CPU rehearsal of the simulated-user loop through verl's own agent-loop machinery (for `gust train --rehearse`).

In verl's order (what `AgentLoopWorker` does): the agent-loop registry file of simulated-user mode is loaded into
verl's `_agent_loop_registry`, tools come from `trainer/configs/tools.yaml` through `load_all_tools`, and every row's
loop is built with `hydra.utils.instantiate` by the row's `agent_name` and run with the row's fields (`raw_prompt`,
`tools_kwargs`, `extra_info`, `interaction_kwargs`). The policy is a scripted agent behind verl's server-manager
interface (token ids in, token ids out; a locally built byte-level tokenizer with a ChatML template, nothing
downloaded): it asks the offline simulated user for each stated value, takes the values from the answers, replays
the gold calls and reports. The reward is `trainer.compute_score` on the loop's output, laid out on tokens as the V1
trainer does (`AgentLoopOutput.as_dict`).

Checks per row (all must hold): the configured class was instantiated, the user answered with the values, the
final DB hash equals the gold one, user turns are masked out (response_mask 0), TARA turn rewards are all 1 and sit
on the agent's environment-facing runs, and no reward lands on a conversational run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
from omegaconf import OmegaConf, open_dict
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.tools.tool_registry import load_all_tools
from verl.workers.rollout.replica import TokenOutput

from data.verl_rows import read_verl_rows
from gusteval.replay import GoldReplayPolicy
from gusteval.runner import tasks_from_verl_rows, verl_env_root
from trainer.compute_score import compute_score
from trainer.golden import mask_runs
from trainer.reward_manager import run_ends
from trainer.rewards import decode_turn_rewards
from trainer.rewards.score import FINAL_HASH_KEY, LOOP_CLASS_KEY, TURN_CALLS_KEY
from trainer.user_agent_loop import USER_LOOPS_FILE, USER_TURNS_KEY, agent_turn_mask

__all__ = [
    "CHATML_TEMPLATE",
    "tiny_chatml_tokenizer",
    "ScriptedServerManager",
    "register_user_loops",
    "rehearse_user_loop",
    "gold_replay_rates",
]

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
CHATML_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{%- endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m.role == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for tc in (m.tool_calls or []) %}"
    '{{ \'\\n<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \''
    " + (tc.function.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
_TURN = re.compile(r"<\|im_start\|>(system|user|assistant)\n(.*?)(?:<\|im_end\|>|\Z)", re.S)


def tiny_chatml_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (no merges) with a Qwen-style ChatML template, built locally."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    core = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(sorted(alphabet))}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"])  # fmt: skip
    tok.chat_template = CHATML_TEMPLATE
    return tok


class ScriptedServerManager:
    """verl's server-manager interface (token ids) in front of a `GoldReplayPolicy` (messages → text)."""

    def __init__(self, policy: GoldReplayPolicy, tokenizer: PreTrainedTokenizerFast) -> None:
        self.policy = policy
        self.tokenizer = tokenizer

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **_: Any) -> TokenOutput:
        prompt = self.tokenizer.decode(prompt_ids)
        messages = [{"role": r, "content": c.strip("\n")} for r, c in _TURN.findall(prompt) if c.strip()]
        content = self.policy.respond(messages)
        ids = self.tokenizer.encode(content, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, stop_reason="completed")


def _config(adv_estimator: str) -> Any:
    return OmegaConf.create({
        "algorithm": {"adv_estimator": adv_estimator},
        "actor_rollout_ref": {"rollout": {
            "prompt_length": 16384, "response_length": 16384, "full_determinism": False,
            "multi_turn": {"max_user_turns": 40, "max_assistant_turns": 30, "max_parallel_calls": 8,
                           "max_tool_response_length": 4096, "tool_response_truncate_side": "middle",
                           "format": "hermes"},
        }},
        "data": {"apply_chat_template_kwargs": {}, "mm_processor_kwargs": {}},
    })  # fmt: skip


def _check_row(row: Mapping[str, Any], out: Any, tokenizer: PreTrainedTokenizerFast, target: str) -> dict[str, Any]:
    gt = row["reward_model"]["ground_truth"]
    extra = {**row["extra_info"], **out.extra_fields}
    solution = tokenizer.decode(out.response_ids, skip_special_tokens=True)
    score = compute_score("gust", solution, gt, extra)
    out.reward_score = float(score["score"])
    out.extra_fields["reward_extra_info"] = score
    laid_out = out.as_dict()
    mask = list(out.response_mask)
    runs = mask_runs(mask)
    user_runs = json.loads(out.extra_fields[USER_TURNS_KEY])
    generated = tokenizer.decode([t for t, m in zip(out.response_ids, mask, strict=True) if m == 1])
    masked_text = tokenizer.decode([t for t, m in zip(out.response_ids, mask, strict=True) if m == 0])
    reward_at = set(torch_nonzero(laid_out["rm_scores"]))
    agent_ends = set(run_ends(agent_turn_mask(mask, user_runs)))
    user_ends = {runs[i][1] - 1 for i in user_runs if i < len(runs)}
    turn_rewards = decode_turn_rewards(score["turn_rewards"])
    cls_name = str(out.extra_fields.get(LOOP_CLASS_KEY))
    checks = {
        "configured_class": cls_name == target,
        "asked_the_user": len(user_runs) >= 1,
        "user_turns_masked": bool(_answers(out))
        and all(a in masked_text and a not in generated for a in _answers(out)),
        "final_state_matches": out.extra_fields[FINAL_HASH_KEY] == gt["expected_final_db_hash"],
        "turn_rewards_all_1": bool(turn_rewards) and all(r == 1.0 for r in turn_rewards),
        "rewards_on_agent_turns_only": bool(reward_at) and reward_at <= agent_ends and not reward_at & user_ends,
    }
    return {
        "task_id": row["extra_info"]["task_id"], "loop_class": cls_name, "user_messages": _answers(out),
        "generations": len(runs),
        "user_turns": len(user_runs), "agent_turns_scored": len(json.loads(out.extra_fields[TURN_CALLS_KEY])),
        "user_reasons": json.loads(out.extra_fields["gust_user_reasons"]), "turn_rewards": turn_rewards,
        "state_match": score["state_match"], "checks": checks, "ok": all(checks.values()),
    }  # fmt: skip


def torch_nonzero(row: Any) -> list[int]:
    return [int(i) for i in row.nonzero().flatten().tolist()]


def _answers(out: Any) -> list[str]:
    return list(json.loads(out.extra_fields.get("gust_user_messages") or "[]"))


def register_user_loops() -> None:
    """What `AgentLoopWorker.__init__` does with `agent_loop_config_path`: the registry file's entries win."""
    for entry in OmegaConf.load(USER_LOOPS_FILE):
        _agent_loop_registry[entry.name] = entry


def rehearse_user_loop(data: Path, *, limit: int = 2, adv_estimator: str = "tara", agent_name: str | None = None,
                       register: bool = True, config: Any = None) -> dict[str, Any]:  # fmt: skip
    """Run `limit` GUST rows of a verl parquet through simulated-user mode on CPU and check the invariants.

    Args:
        data: verl RL parquet from `gust build` (rows with `interaction_kwargs`, absolute env dirs).
        limit: Rows to rehearse.
        adv_estimator: Decides the reward layout (`tara` puts turn rewards on turn ends).
        agent_name: Route every row to this registered name (default: the row's `agent_name`).
        register: Load the registry file first (False when the caller did, in verl's order, before any import of
            our modules).
        config: The composed training config (`gust train --rehearse --user-sim` passes it: its turn caps, its
            ``gust_hermes`` parser, its user cap); default: a minimal config with generous caps and verl's stock
            ``hermes`` parser (unit tests of the loop alone).

    Returns:
        {"ok": all rows passed, "rows": per-row report with the checks}.
    """
    rows = [r for r in read_verl_rows(Path(data)) if r.get("data_source") == "gust"][:limit]
    env_root = verl_env_root(Path(data))
    policy = GoldReplayPolicy.from_tasks(tasks_from_verl_rows(rows, env_root))
    tokenizer = tiny_chatml_tokenizer()
    if register:
        register_user_loops()
    tools = load_all_tools(tool_config_path=str(CONFIG_DIR / "tools.yaml"), function_tool_path=None)
    config = (
        _config(adv_estimator) if config is None else OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    )
    with open_dict(config):
        config.gust = {**(config.get("gust") or {}), "env_root": str(env_root)}  # relative env dirs: recorded root
    manager = ScriptedServerManager(policy, tokenizer)
    configured = {str(e.name): str(e["_target_"]) for e in OmegaConf.load(USER_LOOPS_FILE)}  # what verl must build
    reports = []
    for row in rows:
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry[agent_name or row["agent_name"]], trainer_config=DictConfigWrap(config=config),
            server_manager=manager, tokenizer=tokenizer, processor=None, hf_model_type="qwen2", dataset_cls=None,
            data_config=DictConfigWrap(config.data), tools=ToolListWrap(tools),
        )  # fmt: skip
        out = loop.loop.run_until_complete(loop.run(
            {"temperature": 1.0}, raw_prompt=row["prompt"], tools_kwargs=row["extra_info"]["tools_kwargs"],
            extra_info=row["extra_info"], interaction_kwargs=row["extra_info"].get("interaction_kwargs") or {},
            index=row["extra_info"]["index"],
        ))  # fmt: skip
        name = agent_name or row["agent_name"]
        reports.append(_check_row(row, out, tokenizer, configured.get(name, f"<{name} not in {USER_LOOPS_FILE.name}>")))
    caps = config.actor_rollout_ref.rollout.multi_turn
    return {"ok": bool(reports) and all(r["ok"] for r in reports), "rows": reports,
            "adv_estimator": str(config.algorithm.adv_estimator), "parser": str(caps.format),
            "caps": {"max_user_turns": caps.get("max_user_turns"),
                     "max_assistant_turns": caps.get("max_assistant_turns"),
                     "max_user_messages": (config.get("gust") or {}).get("max_user_messages")}}  # fmt: skip


if __name__ == "__main__":  # pragma: no cover - manual use: python -m trainer.user_rehearsal OUT/verl/train.parquet
    import sys

    print(json.dumps(rehearse_user_loop(Path(sys.argv[1])), indent=2))


def gold_replay_rates(data: Path, algos: Sequence[str], *, overrides: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Per shipped config (simulated-user mode, offline user): the share of the rows of ``data`` whose gold-replay
    agent (asks for each stated value, replays the gold calls) ends in the gold final DB state, under that config's
    own caps and parser. Issue 24's bar: ≥ 95 % of a sample build's tasks under every shipped config.

    Returns:
        ``{algo: {"rows", "finished", "rate", "failed": [task ids], "caps": ...}}``.
    """
    from trainer.launch import DataPlan, compose_config
    from trainer.user_agent_loop import user_sim_overrides

    out: dict[str, dict[str, Any]] = {}
    rows = len([r for r in read_verl_rows(Path(data)) if r.get("data_source") == "gust"])
    for algo in algos:
        plan = DataPlan(Path(data), Path(data), False, verl_env_root(Path(data)))
        cfg = compose_config(algo, plan=plan, overrides=[*user_sim_overrides("offline"), *overrides])
        report = rehearse_user_loop(Path(data), limit=rows, config=cfg)
        failed = [r["task_id"] for r in report["rows"] if not r["checks"]["final_state_matches"]]
        out[algo] = {"rows": rows, "finished": rows - len(failed), "rate": (rows - len(failed)) / max(rows, 1),
                     "failed": failed, "caps": report["caps"]}  # fmt: skip
    return out
