"""The agent loop in verl's own start-up order: verl's ``AgentLoopWorker`` built from our composed training config
(it loads our tools YAML and agent-loop YAML), then ``generate_sequences`` on a ``DataProto`` of several
trajectories, which instantiates the loop per trajectory through verl's registry and scores each one through a
``RewardLoopWorker`` (``NaiveRewardManager`` + ``trainer.compute_score``).

The policy is scripted behind verl's server-manager interface (token ids in, token ids out); the tokenizer and the
model config are built locally by `trainer.rehearse.build_tiny_model` (nothing is downloaded).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.workers.rollout.replica import TokenOutput

from tests.trainer.gust_task import TINY_ENV, make_task
from trainer.convert import gust_row, load_env_schemas, write_rows
from trainer.launch import CONFIG_DIR, DataPlan, compose_config
from trainer.rehearse import _LocalRewardHandle, build_tiny_model
from trainer.reward_manager import UNSCORED_RUNS_KEY
from trainer.rewards import decode_turn_rewards
from trainer.rewards.score import FINAL_HASH_KEY, LOOP_CLASS_KEY, TURN_CALLS_KEY
from trainer.rows import AGENT_NAME


def _call(name: str, args: dict[str, Any], key: str = "arguments") -> str:
    return "<tool_call>\n" + json.dumps({"name": name, key: args}) + "\n</tool_call>"


SCRIPTS = {
    # A: write, then read back (must see its own write) + cancel, then answer
    "A": [_call("update_order_status", {"order_id": "ORD-1001", "new_status": "processing"}),
          _call("get_order", {"order_id": "ORD-1001"}) + _call("cancel_order", {"order_id": "ORD-1003"}),
          "ORD-1001 is processing now and ORD-1003 is cancelled."],
    # B (runs beside A in the same worker): a fresh environment must show the initial status
    "B": [_call("get_order", {"order_id": "ORD-1001"}), "ORD-1001 is still pending."],
    # G: the gold trace of make_task() (turn 2 holds two calls)
    "G": [_call("get_order", {"order_id": "ORD-1001"}),
          _call("update_order_status", {"order_id": "ORD-1001", "new_status": "processing"})
          + _call("cancel_order", {"order_id": "ORD-1003"}),
          "ORD-1001 was pending and is processing now; ORD-1003 is cancelled."],
    # Q: asks the user for a value first (a reply without a call: the user's turn in simulated-user mode, the end of
    # the episode in fixed-prompt mode), then the gold calls
    "Q": ["Which order id should I look at?", _call("get_order", {"order_id": "ORD-1001"}), "ORD-1001 is pending."],
    # P: a JSON-list block and a "parameters" key (verl's stock hermes parser drops both)
    "P": ["<tool_call>\n" + json.dumps([{"name": "get_order", "arguments": {"order_id": "ORD-1001"}},
                                        {"name": "get_order", "arguments": {"order_id": "ORD-1002"}}]) + "\n</tool_call>",
          _call("cancel_order", {"order_id": "ORD-1003"}, key="parameters"), "Both orders looked up, one cancelled."],
}  # fmt: skip


class TaggedPolicy:
    """Scripted server manager: the trajectory's tag is in its system and user turns (simulated-user mode replaces
    the user turn), the turn is the number of assistant turns already in the prompt (trajectories of one batch run
    concurrently, as in verl)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **_: Any) -> Any:
        prompt = self.tokenizer.decode(prompt_ids)
        script = SCRIPTS[prompt.split("[traj ", 1)[1][0]]
        turn = prompt.count("<|im_start|>assistant") - 1
        ids = self.tokenizer.encode(script[min(turn, len(script) - 1)], add_special_tokens=False)
        return TokenOutput(token_ids=ids + [self.tokenizer.eos_token_id], stop_reason="completed")


def _rows(tags: str) -> list[dict[str, Any]]:
    rows = []
    for i, tag in enumerate(tags):
        task = make_task(task_id=f"task-{tag}-{i}")
        task = task.model_copy(update={"text": task.text.model_copy(update={"user_query": f"[traj {tag}] orders"})})
        row = gust_row(task, load_env_schemas(TINY_ENV), env_dir=str(TINY_ENV), index=i)
        system = row.prompt[0].model_copy(update={"content": f"[traj {tag}] {row.prompt[0].content}"})
        rows.append(row.model_copy(update={"prompt": (system, *row.prompt[1:])}))
    return rows


def agent_loop_yamls() -> list[Path]:
    """Every agent-loop registry file we ship (a YAML list of entries with a `_target_`)."""
    found = []
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        loaded = OmegaConf.load(path)
        if OmegaConf.is_list(loaded) and all("_target_" in entry for entry in loaded):
            found.append(path)
    return found


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = [m.content for row in _rows("ABGPQ") for m in row.prompt] + [t for s in SCRIPTS.values() for t in s]
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), corpus)


def _generate(algo: str, model_dir: Path, tmp: Path, tags: str, yaml: Path, overrides: tuple[str, ...] = ()) -> Any:
    """verl's order: worker start-up from the config, then generate_sequences on a DataProto batch."""
    data = write_rows(tmp / "train.parquet", _rows(tags))
    plan = DataPlan(data, data, False, None)
    cfg = compose_config(algo, model=str(model_dir), plan=plan, overrides=[
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={yaml}", "actor_rollout_ref.rollout.prompt_length=8192",
        "actor_rollout_ref.rollout.response_length=4096", *overrides])  # fmt: skip
    rows = [r.model_dump(mode="json") for r in _rows(tags)]
    batch = DataProto.from_dict(non_tensors={
        "raw_prompt": np.array([r["prompt"] for r in rows] + [[]], dtype=object)[:-1],
        "tools_kwargs": np.array([r["extra_info"]["tools_kwargs"] for r in rows], dtype=object),
        "extra_info": np.array([r["extra_info"] for r in rows], dtype=object),
        "reward_model": np.array([r["reward_model"] for r in rows], dtype=object),
        "data_source": np.array([r["data_source"] for r in rows], dtype=object),
        "agent_name": np.array([r["agent_name"] for r in rows], dtype=object),
        # what verl's RLHFDataset adds: extra_info.interaction_kwargs (the simulated user's scenario) or {}
        "interaction_kwargs": np.array([r["extra_info"].get("interaction_kwargs") or {} for r in rows], dtype=object),
        "index": np.arange(len(rows)),
    })  # fmt: skip
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        reward = RewardLoopWorker(cfg)
        worker = AgentLoopWorker(cfg, llm_client=None, reward_loop_worker_handles=[_LocalRewardHandle(reward)])
        worker.llm_client = TaggedPolicy(worker.tokenizer)
        out = loop.run_until_complete(worker.generate_sequences(batch))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    return out, rows, worker


PROBE_TAGS = "AQBQAQ"  # Q asks the user a question first
_PROBE = f"""
import json, sys
from pathlib import Path
from tests.trainer.test_agent_loop import _generate
lazy = "trainer.agent_loop" not in sys.modules
out, _, _ = _generate("slca", Path(sys.argv[1]), Path(sys.argv[2]), "{PROBE_TAGS}", Path(sys.argv[3]))
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry as registry
extra = out.non_tensor_batch
print(json.dumps({{"lazy": lazy, "classes": [str(c) for c in extra["{LOOP_CLASS_KEY}"]],
                  "registry": str(registry["{AGENT_NAME}"]["_target_"]),
                  "user_turns": [json.loads(u) for u in extra.get("{UNSCORED_RUNS_KEY}", [])],
                  "user_messages": [json.loads(u) for u in extra.get("gust_user_messages", [])],
                  "turn_calls": [[len(t) for t in json.loads(c)] for c in extra["{TURN_CALLS_KEY}"]]}}))
"""


@pytest.mark.parametrize("yaml", agent_loop_yamls(), ids=lambda p: p.name)
def test_configured_loop_class_is_instantiated_for_every_trajectory(model_dir: Path, tmp_path: Path,
                                                                    yaml: Path) -> None:  # fmt: skip
    """A fresh interpreter, as a Ray worker: our agent-loop module is imported lazily by the first instantiation
    (that import used to overwrite the YAML registration for every later trajectory)."""
    import subprocess
    import sys

    from hydra.utils import get_class

    from trainer.user_agent_loop import GustUserAgentLoop

    target = str(next(e for e in OmegaConf.load(yaml) if e.name == AGENT_NAME)["_target_"])
    done = subprocess.run([sys.executable, "-c", _PROBE, str(model_dir), str(tmp_path), str(yaml)],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["lazy"]  # the worker, not the test, imported the loop module
    assert probe["classes"] == [target] * 6
    assert probe["registry"] == target  # no import overwrote the YAML entry
    asks = [i for i, tag in enumerate(PROBE_TAGS) if tag == "Q"]
    if issubclass(get_class(target), GustUserAgentLoop):  # simulated-user mode: the question went to the user
        assert [probe["user_turns"][i] for i in asks] == [[0]] * len(asks)  # generation 0 talked to the user
        assert all("ORD-1001" in probe["user_messages"][i][0] for i in asks)
        assert all(probe["turn_calls"][i] == [1, 0] for i in asks)  # the user's run is not an agent turn
        assert all(probe["user_turns"][i] == [] for i in range(len(PROBE_TAGS)) if i not in asks)
    else:  # fixed-prompt mode: a reply without a call ends the episode
        assert all(probe["turn_calls"][i] == [0] for i in asks)


@pytest.fixture(scope="module")
def slca_batch(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    yaml = CONFIG_DIR / "gust_agent_loops.yaml"
    return _generate("slca", model_dir, tmp_path_factory.mktemp("slca"), "ABGP", yaml)


def _text(out: Any, i: int, worker: Any) -> str:
    ids = out.batch["responses"][i][out.batch["attention_mask"][i, out.batch["prompts"].shape[1]:].bool()]
    return worker.tokenizer.decode(ids)


def test_env_state_carries_within_and_not_across_trajectories(slca_batch: Any) -> None:
    out, _, worker = slca_batch
    a = [json.loads(x.split("</tool_response>")[0]) for x in _text(out, 0, worker).split("<tool_response>")[1:]]
    assert a[0]["status"] == "success" and a[1]["order"]["status"] == "processing"  # A reads its own write
    b = json.loads(_text(out, 1, worker).split("<tool_response>")[1].split("</tool_response>")[0])
    assert b["order"]["status"] == "pending"  # B, run beside A, gets its own fresh environment
    assert worker.tools[0]._instances == {}  # every trajectory released its environment


def test_generated_tokens_masked_one_observations_zero(slca_batch: Any) -> None:
    out, _, worker = slca_batch
    mask = out.batch["response_mask"][0].tolist()
    runs = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
    assert runs == 3
    masked = worker.tokenizer.decode(
        [t for t, m in zip(out.batch["responses"][0].tolist(), mask, strict=True) if m == 0 and t != 0])
    assert masked.count("<tool_response>") == 3 and "<tool_call>" not in masked


def test_rollout_executes_exactly_what_the_reward_counts(slca_batch: Any) -> None:
    out, _, _ = slca_batch
    for i in range(4):
        executed = sum(len(t) for t in json.loads(out.non_tensor_batch[TURN_CALLS_KEY][i]))
        assert executed == out.non_tensor_batch["pred_call_count"][i]
    p_turns = json.loads(out.non_tensor_batch[TURN_CALLS_KEY][3])
    assert [[c["name"] for c in t] for t in p_turns] == [["get_order", "get_order"], ["cancel_order"], []]


def test_reward_sees_the_loop_record_and_the_gold_state(slca_batch: Any) -> None:
    out, rows, _ = slca_batch
    g = 2
    assert decode_turn_rewards(out.non_tensor_batch["turn_rewards"][g]) == [1.0, 1.0]
    assert out.non_tensor_batch["r_tool"][g] == pytest.approx(1.0)
    assert out.non_tensor_batch[FINAL_HASH_KEY][g] == rows[g]["reward_model"]["ground_truth"]["expected_final_db_hash"]
    # the state check is on in training ("rollout": the loop's reported hash, no replay when it equals gold's)
    assert out.non_tensor_batch["state_checked"][g] == 1 and out.non_tensor_batch["state_match"][g] == 1.0


def test_tara_config_executes_multi_call_turns(model_dir: Path, tmp_path: Path) -> None:
    """verl's defaults (max_parallel_calls 1) made the gold's two-call turn unmatchable under tara."""
    out, _, _ = _generate("tara", model_dir, tmp_path, "G", CONFIG_DIR / "gust_agent_loops.yaml")
    assert decode_turn_rewards(out.non_tensor_batch["turn_rewards"][0]) == [1.0, 1.0]
    one_call, _, _ = _generate("tara", model_dir, tmp_path / "one", "G", CONFIG_DIR / "gust_agent_loops.yaml",
                               ("actor_rollout_ref.rollout.multi_turn.max_parallel_calls=1",))  # fmt: skip
    assert decode_turn_rewards(one_call.non_tensor_batch["turn_rewards"][0]) == [1.0, 0.0]


def test_reply_without_tool_call_hook_is_the_extension_point(model_dir: Path, tmp_path: Path) -> None:
    yaml = tmp_path / "loops.yaml"
    yaml.write_text(f"- name: {AGENT_NAME}\n  _target_: tests.trainer.hook_loop.ReplyHookLoop\n"
                    "  sgls_tool_name: sgls\n  inject_tool_schemas: false\n")  # fmt: skip
    out, _, _ = _generate("slca", model_dir, tmp_path, "AB", yaml)
    assert list(out.non_tensor_batch["hook_turn"]) == [3, 2]  # after the final (call-free) generation
    assert out.non_tensor_batch["hook_last_message"][1] == "ORD-1001 is still pending."
    limited, _, _ = _generate("slca", model_dir, tmp_path / "lim", "A", yaml,
                              ("actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1",))  # fmt: skip
    assert "hook_turn" not in limited.non_tensor_batch  # a turn limit is not "replied without a call"
