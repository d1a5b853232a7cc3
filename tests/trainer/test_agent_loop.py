"""GustToolAgentLoop driven through verl's real ToolAgentLoop.run() on CPU.

The policy is a scripted OpenAI-compatible fake (tests/fakes/openai_server.py) behind a small server-manager adapter
(verl's server manager speaks token ids: decode the prompt, ask the fake, encode its reply). The tokenizer is a
byte-level BPE built locally with a ChatML (Qwen-style) chat template, so nothing is downloaded. Tools and the agent
loop are loaded from the shipped trainer/configs/{tools,agent_loop}.yaml exactly as verl's AgentLoopWorker does.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import hydra
import pytest
from omegaconf import OmegaConf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.tools.tool_registry import load_all_tools
from verl.workers.rollout.replica import TokenOutput

from tests.fakes.openai_server import FakeOpenAIServer
from tests.trainer.gust_task import TINY_ENV, make_task
from trainer.compute_score import compute_score
from trainer.convert import gust_row, load_env_schemas
from trainer.rewards import decode_turn_rewards
from trainer.rewards.score import FINAL_HASH_KEY, TURN_CALLS_KEY
from trainer.rows import AGENT_NAME

REPO = Path(__file__).resolve().parents[2]
CHAT_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{%- endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m.role == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for tc in (m.tool_calls or []) %}"
    "{{ '\\n<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": '"
    " + (tc.function.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _tokenizer() -> PreTrainedTokenizerFast:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


SCRIPTS = {
    # trajectory A: write, then read back (must see its own write), then answer
    "A": [_call("update_order_status", {"order_id": "ORD-1001", "new_status": "processing"}),
          _call("get_order", {"order_id": "ORD-1001"}) + _call("cancel_order", {"order_id": "ORD-1003"}),
          "ORD-1001 is processing now and ORD-1003 is cancelled."],
    # trajectory B (after A, same worker tools): a fresh environment must show the initial status
    "B": [_call("get_order", {"order_id": "ORD-1001"}), "ORD-1001 is still pending."],
}


def _policy(request: dict[str, Any]) -> dict[str, Any]:
    prompt = request["messages"][0]["content"]
    script = SCRIPTS["A" if "[traj A]" in prompt else "B"]
    turn = prompt.count("<|im_start|>assistant") - 1
    return {"content": script[turn]}


class OpenAIServerManager:
    """verl server-manager interface (token ids) in front of an OpenAI-compatible chat endpoint."""

    def __init__(self, base_url: str, tokenizer: PreTrainedTokenizerFast) -> None:
        self.base_url = base_url
        self.tokenizer = tokenizer

    def _post(self, prompt: str) -> str:
        body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": prompt}]}).encode()
        req = urllib.request.Request(self.base_url + "/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["choices"][0]["message"]["content"]

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **_: Any) -> TokenOutput:
        prompt = self.tokenizer.decode(prompt_ids)
        content = await asyncio.to_thread(self._post, prompt)
        ids = self.tokenizer.encode(content, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, stop_reason="completed")


def _config() -> Any:
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {
            "prompt_length": 8192, "response_length": 4096, "full_determinism": False,
            "multi_turn": {"max_user_turns": 5, "max_assistant_turns": 6, "max_parallel_calls": 4,
                           "max_tool_response_length": 2048, "tool_response_truncate_side": "middle",
                           "format": "hermes"},
        }},
        "data": {"apply_chat_template_kwargs": {}, "mm_processor_kwargs": {}},
    })


def _row(tag: str) -> dict[str, Any]:
    task = make_task()
    text = task.text.model_copy(update={"user_query": f"[traj {tag}] handle the orders"})
    task = task.model_copy(update={"text": text})
    return gust_row(task, load_env_schemas(TINY_ENV), env_dir=str(TINY_ENV), index=0).model_dump(mode="json")


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


@pytest.fixture(scope="module")
def outputs():
    tokenizer = _tokenizer()
    for entry in OmegaConf.load(REPO / "trainer" / "configs" / "agent_loop.yaml"):
        _agent_loop_registry[entry.name] = entry
    tools = load_all_tools(tool_config_path=str(REPO / "trainer" / "configs" / "tools.yaml"), function_tool_path=None)
    config = _config()
    results = {}
    with FakeOpenAIServer(_policy) as server:
        manager = OpenAIServerManager(server.base_url, tokenizer)
        for tag in ("A", "B"):
            row = _row(tag)
            loop = hydra.utils.instantiate(
                config=_agent_loop_registry[AGENT_NAME], trainer_config=DictConfigWrap(config=config),
                server_manager=manager, tokenizer=tokenizer, processor=None, hf_model_type="qwen2",
                dataset_cls=None, data_config=DictConfigWrap(config.data), tools=ToolListWrap(tools),
            )
            out = loop.loop.run_until_complete(loop.run(
                {"temperature": 1.0}, raw_prompt=row["prompt"],
                tools_kwargs=row["extra_info"]["tools_kwargs"], extra_info=row["extra_info"],
            ))
            results[tag] = (out, row, tokenizer)
        results["tools"] = tools
    return results


def test_env_state_carries_within_a_trajectory(outputs):
    out, _, tok = outputs["A"]
    text = tok.decode(out.response_ids)
    observations = [json.loads(x.split("</tool_response>")[0].strip()) for x in text.split("<tool_response>")[1:]]
    assert observations[0]["status"] == "success"
    assert observations[1]["order"]["status"] == "processing"  # the read sees the trajectory's own write
    assert observations[2]["status"] == "success"


def test_env_state_does_not_leak_across_trajectories(outputs):
    out, _, tok = outputs["B"]
    text = tok.decode(out.response_ids)
    first = json.loads(text.split("<tool_response>")[1].split("</tool_response>")[0])
    assert first["order"]["status"] == "pending"
    assert outputs["tools"][0]._instances == {}  # every trajectory released its environment


def test_tool_response_tokens_are_masked(outputs):
    out, _, tok = outputs["A"]
    mask = list(out.response_mask)
    runs = _runs(mask)
    assert len(runs) == 3  # three generations
    generated = [tok.decode(out.response_ids[s:e]) for s, e in runs]
    for gen, script in zip(generated, SCRIPTS["A"], strict=True):
        assert gen.startswith(script)
    masked = tok.decode([t for t, m in zip(out.response_ids, mask, strict=True) if m == 0])
    assert masked.count("<tool_response>") == 3 and "<tool_call>" not in masked
    assert all("<tool_response>" not in g for g in generated)


def test_extra_fields_feed_the_reward(outputs):
    out, row, tok = outputs["A"]
    turns = json.loads(out.extra_fields[TURN_CALLS_KEY])
    assert [[c["name"] for c in t] for t in turns] == [["update_order_status"], ["get_order", "cancel_order"], []]
    gt = row["reward_model"]["ground_truth"]
    assert out.extra_fields[FINAL_HASH_KEY] == gt["expected_final_db_hash"]
    solution = tok.decode(out.response_ids, skip_special_tokens=True)
    from_text = compute_score("gust", solution, gt, dict(row["extra_info"]))
    from_loop = compute_score("gust", solution, gt, {**row["extra_info"], **out.extra_fields})
    # turn 1 of the gold is get_order; the agent wrote first, so TARA turn 1 fails, turn 2 holds the update
    assert decode_turn_rewards(from_loop["turn_rewards"]) == [0.0, 0.0]
    assert from_text["turn_rewards"] == from_loop["turn_rewards"] and from_text["agent_turns"] == 3
    assert from_loop["state_match"] == 1.0 and from_text["state_match"] == 1.0
    runs = _runs(list(out.response_mask))
    assert from_loop["agent_turns"] == len(runs)
