"""``gust train --algo A --rehearse``: a CPU pre-flight of one training step through verl's real classes, in verl's
order, before any GPU hour is spent.

What runs (verl 0.9.1 classes unless noted):
 1. the composed training config of ``A`` (`trainer.launch.compose_config`, validated like a launch) with the model
    path pointing at a tiny RANDOMLY INITIALISED causal LM (Qwen2 architecture, 2 layers) and a byte-level BPE
    tokenizer trained locally with ``tokenizers`` plus a Hermes chat template that renders tools, tool calls and
    tool responses like the training prompts — nothing is downloaded;
 2. the rows through verl's ``RLHFDataset`` (``get_dataset_class``);
 3. an ``AgentLoopWorker`` built from that config: it loads our tools YAML and our agent-loop YAML exactly as at
    worker start-up; every trajectory goes through ``AgentLoopWorker._run_agent_loop`` (registry lookup +
    ``hydra.utils.instantiate`` per trajectory) → ``GustToolAgentLoop.run`` (verl's ``ToolAgentLoop`` state
    machine, our ``gust_hermes`` parser, the SGLS tool on the row's environment) → ``_compute_score`` through a
    ``RewardLoopWorker`` (``NaiveRewardManager`` + ``trainer.compute_score``) → ``AgentLoopOutput.as_dict()``
    (``rm_scores``), i.e. what the V1 ``AgentLoopWorkerTQ`` does, minus the TransferQueue put;
 4. ``compute_advantage_for_multi_trajectories`` (the V1 trainer's call) on a ``DataProto``;
 5. verl's policy loss (``get_policy_loss_fn``) on the tiny model's log-probs, one backward pass.

The policy is SCRIPTED (a stand-in for vLLM behind verl's server-manager interface): for every row it replays the
gold trajectory and perturbed ones — wrong argument, missing call, extra call, JSON-list block, string arguments,
``"parameters"`` key, no call — as one group (``rollout.n`` = number of variants). The report (printed and JSON)
has, per algorithm: the agent-loop class instantiated per trajectory, calls executed by our parser vs verl's stock
``hermes`` parser vs counted by the reward, the reward components, the share of tool / summary tokens with a
non-zero advantage, the isolation check (perturb only R_sum: tool-token advantages must be bit-identical under
``slca``/``slca_tara``), and gradient diagnostics (gradient norm; cosine between the gradients of the tool-segment
and summary-segment losses, SLCA-GRPO App. B). Any failed invariant makes ``passed`` false (exit 1 in the CLI).

Simulated-user mode (``user_sim=True``, ``gust train --rehearse --user-sim``): steps 1-5 run with the mode's
config (`trainer.user_agent_loop.user_sim_overrides`, offline simulator: the worker loads
``gust_user_agent_loops.yaml``, so every trajectory above goes through ``GustUserAgentLoop``), and then
`trainer.user_rehearsal.rehearse_user_loop` runs a scripted agent that ASKS the offline user for each stated value,
receives it and completes the task; its per-row checks (configured class, user turns interleaved and masked out of
the loss, final DB = gold, turn rewards all 1, rewards on the agent's turns only) become ``user_loop_*`` checks of
the report. Without it the report says ``user_loop: not run``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from gustforge.errors import ConfigError
from trainer.launch import compose_config, plan_data, validate_training_config
from trainer.reward_manager import UNSCORED_RUNS_KEY, layout_for_config, mask_runs, place_rewards
from trainer.rewards import COMPONENT_KEYS
from trainer.rewards.score import LOOP_CLASS_KEY, PARSED_CALLS_KEY, TURN_CALLS_KEY
from trainer.rows import AGENT_NAME

__all__ = [
    "VARIANTS",
    "HERMES_CHAT_TEMPLATE",
    "build_tiny_model",
    "script_for",
    "ScriptedPolicy",
    "rehearse",
    "format_report",
]

VARIANTS: tuple[str, ...] = (
    "gold",
    "wrong_argument",
    "missing_call",
    "extra_call",
    "list_block",
    "string_arguments",
    "parameters_key",
    "no_call",
    "think_call",
    "beyond_parallel",
)
CLOSING_QUESTION = "Is there anything else I can help you with?"  # every scripted final reply ends on one (issue 24)
ISOLATED_ALGOS = ("slca", "slca_tara")  # tool-token advantages must not depend on R_sum
TOOL_SIGNAL_ALGOS = ("slca", "toolpo", "slca_tara", "tara", "grpo")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Qwen2.5-style Hermes template: tools in the system turn, assistant tool_calls as <tool_call> JSON blocks, tool
# messages as <tool_response> blocks inside a user turn (the layout the reward parser and split_agent_turns expect).
HERMES_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{ '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{ '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{%- endfor %}"
    "{{ '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{%- endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m.role == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for tc in (m.tool_calls or []) %}"
    "{{ '\\n<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": '"
    " + (tc.function.arguments if tc.function.arguments is string else (tc.function.arguments | tojson))"
    " + '}\\n</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


# ----------------------------------------------------------------------------------------------- tiny model
def _train_tokenizer(corpus: Sequence[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )  # fmt: skip
    core.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )  # fmt: skip
    tokenizer.chat_template = HERMES_CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(out_dir: Path, corpus: Sequence[str], *, vocab_size: int = 1024, seed: int = 0) -> Path:
    """Train the tokenizer on ``corpus`` and save it with a randomly initialised tiny Qwen2 into ``out_dir``.

    Args:
        out_dir: Target folder (an HF model dir: config, safetensors, tokenizer files).
        corpus: Texts to learn the BPE merges from (the rows' prompts and the scripted replies).
        vocab_size: BPE vocabulary size (special tokens included).
        seed: Weight-initialisation seed.

    Returns:
        ``out_dir``.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    tokenizer = _train_tokenizer(corpus, vocab_size)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=65536,
        bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


# ----------------------------------------------------------------------------------------------- scripted policy
def _block(obj: Any) -> str:
    return "<tool_call>\n" + json.dumps(obj, ensure_ascii=False) + "\n</tool_call>"


def _call(name: str, arguments: Any, key: str = "arguments") -> dict[str, Any]:
    return {"name": name, key: arguments}


def _wrong(arguments: Mapping[str, Any]) -> dict[str, Any]:
    if not arguments:
        return {"unexpected": "WRONG"}
    first = next(iter(arguments))
    return {**arguments, first: f"WRONG-{arguments[first]}"}


def script_for(variant: str, gold_steps: Sequence[Sequence[Mapping[str, Any]]], final: str,
               parallel_cap: int = 20) -> list[str]:  # fmt: skip
    """The assistant turns of one scripted trajectory.

    Args:
        variant: One of ``VARIANTS``. ``think_call``: the gold, plus a wrong call written inside ``<think>`` in the
            first turn (neither executed nor counted); ``beyond_parallel``: the gold, with copies of the first call
            appended to the first turn up to ``parallel_cap + 1`` calls (the last one is never executed, so it must
            earn nothing).
        gold_steps: The row's gold calls per step (``{"name", "arguments"}``).
        final: The final (summary) reply.
        parallel_cap: ``multi_turn.max_parallel_calls`` of the config.

    Returns:
        One text per generation; each call in its own ``<tool_call>`` block (as the system prompt asks) unless the
        variant says otherwise.
    """
    steps = [[dict(c) for c in step] for step in gold_steps]
    if variant == "no_call" or not steps:
        return [final]
    first = steps[0][0]
    turns: list[str]
    if variant == "wrong_argument":
        steps[0][0] = {**first, "arguments": _wrong(first["arguments"])}
    elif variant == "missing_call":
        steps[-1] = steps[-1][:-1]
        steps = [s for s in steps if s]
    elif variant == "extra_call":
        steps[0] = [*steps[0], dict(first)]
    elif variant == "beyond_parallel":
        steps[0] = [*steps[0], *[dict(first)] * max(parallel_cap + 1 - len(steps[0]), 0)]
    if variant == "list_block":
        head = _block([_call(c["name"], c["arguments"]) for c in steps[0]])
        turns = [head] + ["".join(_block(c) for c in step) for step in steps[1:]]
    elif variant == "string_arguments":
        head = _block(_call(first["name"], json.dumps(first["arguments"])))
        turns = [head + "".join(_block(c) for c in steps[0][1:])] + ["".join(_block(c) for c in s) for s in steps[1:]]
    elif variant == "parameters_key":
        head = _block(_call(first["name"], first["arguments"], key="parameters"))
        turns = [head + "".join(_block(c) for c in steps[0][1:])] + ["".join(_block(c) for c in s) for s in steps[1:]]
    else:
        turns = ["".join(_block(c) for c in step) for step in steps]
    if variant == "think_call":
        turns[0] = "<think>" + _block({**first, "arguments": _wrong(first["arguments"])}) + "</think>" + turns[0]
    return [*turns, final]


class ScriptedPolicy:
    """verl's server-manager interface (``generate`` on token ids) answering from a script, turn by turn.

    The driver sets ``script`` before each trajectory (trajectories run one after another, so the script and the
    generate calls belong to the same trajectory). Every reply ends with the EOS token, as vLLM's would.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.script: list[str] = []
        self.generations: list[list[int]] = []

    def start(self, script: list[str]) -> None:
        self.script, self.generations = list(script), []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        turn = len(self.generations)
        text = self.script[min(turn, len(self.script) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.generations.append(ids)
        return TokenOutput(token_ids=ids, stop_reason="completed")


class _LocalRewardHandle:
    """Stands in for the Ray actor handle of a ``RewardLoopWorker``: ``handle.compute_score.remote(data)`` is
    awaited by ``AgentLoopWorker._compute_score``; here it awaits the worker's coroutine in-process."""

    def __init__(self, worker: Any) -> None:
        self.compute_score = self
        self._worker = worker

    def remote(self, data: Any) -> Any:
        return self._worker.compute_score(data)


def _worker_class(store: Any) -> type:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    put = AgentLoopWorkerTQ.__ray_metadata__.modified_class._agent_loop_postprocess  # the Ray actor's method

    class RehearsalWorker(AgentLoopWorker):
        """verl's ``AgentLoopWorker`` with the V1 ``AgentLoopWorkerTQ`` post-processing (score through the reward
        worker, ``output.as_dict()`` → ``rm_scores``, put into TransferQueue — here the in-process `LocalTQ`); returns
        the stored sample so the report reads what the trainer will read."""

        async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> dict[str, Any]:
            final = (output if isinstance(output, list) else [output])[-1]
            await put(self, output, validate, **kwargs)
            return {"output": final, "fields": store.store[("train", f"{kwargs['uid']}_{kwargs['session_id']}_0")]}

    return RehearsalWorker


def _trainer(cfg: DictConfig) -> Any:
    """The ``gust_sync`` trainer object for its hooks only (no workers: they need GPUs)."""
    from trainer.v1_trainer import GustTrainerSync

    trainer = object.__new__(GustTrainerSync)
    trainer.config = cfg
    return trainer


def _advantages(cfg: DictConfig, store: Any, keys: list[str], rm_scores: torch.Tensor | None = None) -> torch.Tensor:
    """Advantages from ``GustTrainerSync._compute_advantage`` (verl's V1 method inside our turn-record wrapper) on the
    stored batch; ``rm_scores`` (padded rows) replaces the stored rewards for this call only."""
    saved = [store.store[("train", k)]["rm_scores"] for k in keys]
    if rm_scores is not None:
        for key, row, old in zip(keys, rm_scores, saved, strict=True):
            store.store[("train", key)]["rm_scores"] = row[: old.numel()].clone()
    try:
        _trainer(cfg)._compute_advantage(store.meta(keys), {})
    finally:
        for key, old in zip(keys, saved, strict=True):
            store.store[("train", key)]["rm_scores"] = old
    return _pad([store.store[("train", k)]["advantages"] for k in keys], torch.float32)


# ----------------------------------------------------------------------------------------------- the run
def _final_text(row: Mapping[str, Any]) -> str:
    question = str(row["reward_model"]["ground_truth"].get("question_content") or "the request")
    return (f"All done. I handled your request ({question}) and checked every result the tools returned. "
            f"{CLOSING_QUESTION}")


def _corpus(rows: Sequence[Mapping[str, Any]], tokenizer_free_texts: Sequence[str]) -> list[str]:
    texts = [m["content"] for row in rows for m in row["prompt"]]
    return texts + list(tokenizer_free_texts) + ["<tool_response>\n</tool_response>\nuser\nassistant\n"]


def _read_rows(path: Path, max_rows: int | None) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    return rows[:max_rows] if max_rows else rows


def _overrides(n: int) -> list[str]:
    return [
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "data.max_prompt_length=16384",
        "data.max_response_length=8192",
        "actor_rollout_ref.rollout.prompt_length=16384",
        "actor_rollout_ref.rollout.response_length=8192",
    ]


def _segments(mask: torch.Tensor, record: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(tool, summary) token masks of a padded (B, T) response mask: summary = last SCORED run, tool = earlier
    scored runs (``record``: the conversational runs per row, `trainer.estimators.TurnRecord`)."""
    from trainer.estimators import TurnRecord, scored_runs

    runs = scored_runs(mask, record or TurnRecord(conversational=((),) * mask.shape[0]))
    summary = runs.mask & (runs.run_id == (runs.n_runs - 1).unsqueeze(1))
    return runs.mask & ~summary, summary


def _pad(rows: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    width = max(int(r.numel()) for r in rows)
    out = torch.zeros(len(rows), width, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r.to(dtype)
    return out


_ATTENTION_BUDGET_BYTES = 2 * 2**30  # CPU attention scores of one gradient step: batch x heads x width^2 x 4 bytes
_MAX_GRADIENT_ROWS = 16


def _affordable_rows(fields: Sequence[Mapping[str, Any]], heads: int) -> list[int]:
    """Indices of the trajectories one CPU gradient step can hold: shortest first, while the padded batch's
    attention scores stay within `_ATTENTION_BUDGET_BYTES` (a build's real rows are thousands of tokens long;
    all of them in one step asked for 12 GB and more)."""
    order = sorted(range(len(fields)), key=lambda i: int(fields[i]["prompts"].numel() + fields[i]["responses"].numel()))
    chosen: list[int] = []
    for index in order[:_MAX_GRADIENT_ROWS]:
        trial = [*chosen, index]
        width = max(int(fields[i]["prompts"].numel()) for i in trial) + max(
            int(fields[i]["responses"].numel()) for i in trial)
        if len(trial) * heads * width * width * 4 > _ATTENTION_BUDGET_BYTES:
            break
        chosen.append(index)
    return sorted(chosen)


def _gradients(model_dir: Path, fields: Sequence[Mapping[str, Any]], adv: torch.Tensor, cfg: DictConfig,
               device: str) -> dict[str, Any]:  # fmt: skip
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import FSDPActorConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device)
    chosen = _affordable_rows(fields, int(model.config.num_attention_heads))
    if not chosen:
        shortest = min(int(f["prompts"].numel() + f["responses"].numel()) for f in fields)
        return {"device": device, "rows": 0, "of_rows": len(fields),
                "not_run": f"the shortest trajectory has {shortest} tokens: its attention alone exceeds "
                           f"{_ATTENTION_BUDGET_BYTES / 2**30:.0f} GiB on CPU"}  # fmt: skip
    of_rows = len(fields)
    fields, adv = [fields[i] for i in chosen], adv[chosen]
    prompts = [f["prompts"] for f in fields]
    responses = [f["responses"] for f in fields]
    width_p = max(p.numel() for p in prompts)
    width_r = max(int(r.numel()) for r in responses)
    adv = adv[:, :width_r]
    ids = torch.zeros(len(fields), width_p + width_r, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        ids[i, width_p - p.numel() : width_p] = p
        ids[i, width_p : width_p + r.numel()] = r
        attn[i, width_p - p.numel() : width_p + r.numel()] = 1
    ids, attn = ids.to(device), attn.to(device)
    mask = _pad([f["response_mask"] for f in fields], torch.float32)
    mask = torch.nn.functional.pad(mask, (0, width_r - mask.shape[1])).to(device)
    position = (attn.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position).logits[:, width_p - 1 : -1].float()
    log_prob = torch.log_softmax(logits, -1).gather(-1, ids[:, width_p:].unsqueeze(-1)).squeeze(-1)
    actor = cfg.actor_rollout_ref.actor
    actor_cfg = FSDPActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1,
                                rollout_n=int(cfg.actor_rollout_ref.rollout.n), clip_ratio=float(actor.clip_ratio),
                                clip_ratio_c=float(actor.clip_ratio_c))  # fmt: skip
    loss_fn = get_policy_loss_fn(str(actor.policy_loss.loss_mode))
    advantages = adv.to(device).float()
    from trainer.estimators import TurnRecord

    record = TurnRecord.from_extra_fields(f["extra_fields"] for f in fields)
    tool, summary = (m.to(device).float() for m in _segments(mask.cpu().long(), record))
    params = [p for p in model.parameters() if p.requires_grad]

    def grad(segment: torch.Tensor) -> torch.Tensor | None:
        if segment.sum() == 0:
            return None
        loss, _ = loss_fn(old_log_prob=log_prob.detach(), log_prob=log_prob, advantages=advantages,
                          response_mask=segment, loss_agg_mode=str(actor.loss_agg_mode), config=actor_cfg)  # fmt: skip
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        flat = [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params, strict=True)]
        return torch.cat(flat)

    total_loss, _ = loss_fn(old_log_prob=log_prob.detach(), log_prob=log_prob, advantages=advantages,
                            response_mask=mask, loss_agg_mode=str(actor.loss_agg_mode), config=actor_cfg)  # fmt: skip
    g_tool, g_sum = grad(tool), grad(summary)
    total_loss.backward()
    norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params if p.grad is not None))
    cosine = None
    if g_tool is not None and g_sum is not None and g_tool.norm() > 0 and g_sum.norm() > 0:
        cosine = float(torch.nn.functional.cosine_similarity(g_tool, g_sum, dim=0))
    return {
        "device": device,
        "rows": len(fields),  # trajectories in the gradient step (the shortest that fit the memory budget)
        "of_rows": of_rows,
        "loss": float(total_loss.detach()),
        "grad_norm": norm,
        "tool_grad_norm": float(g_tool.norm()) if g_tool is not None else 0.0,
        "summary_grad_norm": float(g_sum.norm()) if g_sum is not None else 0.0,
        "cosine_tool_summary": cosine,
        "parameters": sum(p.numel() for p in params),
    }


def _check(checks: list[dict[str, Any]], name: str, passed: bool, detail: str) -> None:
    checks.append({"name": name, "passed": bool(passed), "detail": detail})


async def _run_trajectories(cfg: DictConfig, rows: list[dict[str, Any]], policy: ScriptedPolicy, store: Any,
                            variants: Sequence[str] = VARIANTS, prefix: str = "row") -> list[dict]:  # fmt: skip
    from verl.experimental.agent_loop.agent_loop import get_dataset_class
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    reward_worker = RewardLoopWorker(cfg)
    worker = _worker_class(store)(cfg, policy, reward_loop_worker_handles=[_LocalRewardHandle(reward_worker)])
    dataset_cls = get_dataset_class(cfg.data)
    dataset = dataset_cls(data_files=[str(p) for p in _files(cfg.data.train_files)], tokenizer=worker.tokenizer,
                          config=cfg.data, processor=None)  # fmt: skip
    hermes = ToolParser.get_tool_parser("hermes", worker.tokenizer)
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
    results = []
    for index in range(min(len(dataset), len(rows))):
        item = dataset[index]
        uid = f"{prefix}{index}"
        kwargs = {k: v for k, v in item.items() if not isinstance(v, torch.Tensor)}
        agent_name = str(kwargs.pop("agent_name", AGENT_NAME))
        gold = json.loads(kwargs["reward_model"]["ground_truth"]["gold_tool_calls"])
        for session, variant in enumerate(variants):
            policy.start(script_for(variant, gold, _final_text(kwargs), _parallel_cap(cfg)))
            trajectory = {"step": 0, "sample_index": index, "rollout_n": session, "validate": False}
            started = time.perf_counter()
            done = await worker._run_agent_loop(sampling, trajectory, agent_name=agent_name, trace=False,
                                                uid=uid, session_id=session, global_steps=1, **kwargs)  # fmt: skip
            hermes_calls = [len(calls) for calls in await _stock_counts(hermes, policy.generations)]
            turn_level = bool(kwargs["reward_model"]["ground_truth"].get("turn_level"))
            results.append({"uid": uid, "session": session, "variant": variant, "row": index, "gold": gold,
                            "turn_level": turn_level and bool(gold),
                            "hermes_calls": sum(hermes_calls), "seconds": time.perf_counter() - started, **done})
    return results


def _parallel_cap(cfg: DictConfig) -> int:
    return int(cfg.actor_rollout_ref.rollout.multi_turn.max_parallel_calls or 20)


def _files(item: Any) -> list[str]:
    return [str(n) for n in (item if OmegaConf.is_list(item) else [item])]


async def _stock_counts(parser: Any, generations: list[list[int]]) -> list[list[Any]]:
    """What verl's stock parser would execute of each generation (its expected decode errors silenced)."""
    import logging

    from verl.experimental.agent_loop import tool_parser

    level = tool_parser.logger.level
    tool_parser.logger.setLevel(logging.CRITICAL)
    try:
        return [(await parser.extract_tool_calls(ids))[1] for ids in generations]
    finally:
        tool_parser.logger.setLevel(level)


def rehearse(
    algo: str,
    *,
    data: str | Path | None = None,
    out_dir: str | Path,
    max_rows: int | None = None,
    overrides: Sequence[str] = (),
    device: str | None = None,
    user_sim: bool = False,
) -> dict[str, Any]:
    """Run the pre-flight for ``algo`` and write ``out_dir/rehearsal_<algo>.json``.

    Args:
        algo: One of `trainer.launch.ALGOS`.
        data: verl parquet (default: the bundled sample); the rehearsal uses the training side of the held-out
            split, as a launch would.
        out_dir: Folder for the tiny model, the split and the JSON report.
        max_rows: Use at most this many training rows (groups of ``len(VARIANTS)`` trajectories each).
        overrides: Extra Hydra overrides.
        device: "cpu" or "cuda" for the backward pass (default: cuda when available).
        user_sim: Rehearse simulated-user mode (offline simulator) and add the user-loop checks.

    Returns:
        The report dict (``passed``, ``checks``, per-trajectory data, advantages, isolation, gradients).

    Raises:
        ConfigError: The config or the data is refused (the same checks a launch makes).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    plan = plan_data(data, run_dir=out / "data")
    if plan.train_rows is None:
        raise ConfigError(f"--data {plan.train} does not exist")
    from trainer.user_agent_loop import require_user_scenarios, user_sim_overrides  # lazy: verl imports it first

    if user_sim:
        require_user_scenarios(plan.train)
    rows = _read_rows(plan.train, max_rows)
    if max_rows:
        from trainer.convert import read_rows, write_rows

        subset = read_rows(plan.train)[:max_rows]
        write_rows(out / "data" / "rehearse.parquet", subset, env_root=plan.env_root)
        plan = type(plan)(out / "data" / "rehearse.parquet", plan.val, True, plan.env_root, len(subset), plan.val_rows)
    scripts = [s for row in rows for v in VARIANTS for s in script_for(
        v, json.loads(row["reward_model"]["ground_truth"]["gold_tool_calls"]), _final_text(row), 2)]  # fmt: skip
    model_dir = build_tiny_model(out / "tiny_model", _corpus(rows, scripts))
    mode = user_sim_overrides("offline") if user_sim else []
    cfg = compose_config(algo, model=str(model_dir), plan=plan,
                         overrides=[*_overrides(len(VARIANTS)), *mode, *overrides])  # fmt: skip
    validation = validate_training_config(cfg)
    layout = layout_for_config(cfg)
    target = configured_loop(cfg)

    started = time.perf_counter()
    from transformers import AutoTokenizer

    policy = ScriptedPolicy(AutoTokenizer.from_pretrained(model_dir))
    from trainer.local_tq import use_local_tq

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    with use_local_tq() as store:
        try:
            trajectories = loop.run_until_complete(_run_trajectories(cfg, rows, policy, store))
            rollout_s = time.perf_counter() - started
            caps = loop.run_until_complete(_cap_probe(cfg, rows, policy, store))
        finally:
            loop.close()
            asyncio.set_event_loop(None)
        user_loop = _user_loop(plan.train, cfg, max_rows) if user_sim else None
        return _report(algo, cfg, layout, target, trajectories, model_dir, device, out, validation, rollout_s,
                       user_loop, store, caps)  # fmt: skip


def configured_loop(cfg: DictConfig) -> str:
    """The ``_target_`` the config's agent-loop registry file gives the rows' name (what verl must instantiate)."""
    path = str(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    entries = [e for e in OmegaConf.load(path) if str(e.name) == AGENT_NAME]
    if not entries:
        raise ConfigError(f"{path} registers no {AGENT_NAME!r} (the name every row carries)")
    return str(entries[-1]["_target_"])


def _user_loop(data: Path, cfg: DictConfig, max_rows: int | None) -> dict[str, Any]:
    """The simulated-user rehearsal (`trainer.user_rehearsal`) on the training rows, with this config's layout."""
    from trainer.user_rehearsal import rehearse_user_loop

    started = time.perf_counter()
    result = rehearse_user_loop(data, limit=max_rows or 3, config=cfg)  # the composed config: caps, parser
    return {**result, "simulator": "offline", "seconds": time.perf_counter() - started}


def _user_loop_checks(checks: list[dict[str, Any]], user_loop: Mapping[str, Any]) -> None:
    rows = user_loop["rows"]
    _check(checks, "user_loop_rows", bool(rows), f"{len(rows)} rows rehearsed with the offline simulated user")
    for name in (rows[0]["checks"] if rows else {}):
        failed = [r["task_id"] for r in rows if not r["checks"][name]]
        _check(checks, f"user_loop_{name}", not failed, f"{len(rows) - len(failed)}/{len(rows)} rows"
               + (f"; failed: {failed[:5]}" if failed else ""))  # fmt: skip


def _user_loop_summary(user_loop: Mapping[str, Any] | None) -> dict[str, Any]:
    if user_loop is None:
        return {"run": False, "reason": "not run: fixed-prompt mode (add --user-sim to rehearse simulated-user mode)"}
    rows = user_loop["rows"]
    return {
        "run": True, "ok": bool(user_loop["ok"]), "simulator": user_loop["simulator"], "rows": rows,
        "adv_estimator": user_loop["adv_estimator"], "seconds": user_loop["seconds"],
        "parser": user_loop.get("parser"), "caps": user_loop.get("caps"),
        "user_turns": sum(r["user_turns"] for r in rows),
        "agent_turns_scored": sum(r["agent_turns_scored"] for r in rows),
    }  # fmt: skip


def _report(algo: str, cfg: DictConfig, layout: str, target: str, trajectories: list[dict], model_dir: Path,
            device: str, out: Path, validation: Any, rollout_s: float,
            user_loop: Mapping[str, Any] | None = None, store: Any = None,
            caps: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    checks: list[dict[str, Any]] = []
    fields = [t["fields"] for t in trajectories]
    infos = [f["extra_fields"]["reward_extra_info"] for f in fields]
    extras = [f["extra_fields"] for f in fields]

    classes = Counter(str(e.get(LOOP_CLASS_KEY)) for e in extras)
    _check(checks, "agent_loop_class", set(classes) == {target},
           f"{dict(classes)} instantiated over {len(fields)} trajectories; configured: {target}")  # fmt: skip

    per_traj = []
    for t, extra, info in zip(trajectories, extras, infos, strict=True):
        executed = sum(len(turn) for turn in json.loads(extra[TURN_CALLS_KEY]))
        parsed = sum(json.loads(extra[PARSED_CALLS_KEY]))
        per_traj.append({
            "row": t["row"], "variant": t["variant"], "executed_calls": executed, "gust_hermes_parsed": parsed,
            "stock_hermes_parsed": t["hermes_calls"], "reward_counted": int(info["pred_call_count"]),
            "reward_text_counted": int(info["text_call_count"]),
            "turns": int(info["agent_turns"]), **{k: info[k] for k in (
                "score", "r_tool", "r_sum", "r_succ", "r_action", "s_par", "omission", "turn_rewards", "error_type")},
        })  # fmt: skip
    mismatch = [p for p in per_traj if p["gust_hermes_parsed"] != p["reward_text_counted"]]
    _check(checks, "rollout_parses_what_reward_reads", not mismatch, f"{len(mismatch)} trajectories: the rollout's "
           "parser and the reward's text parser disagree" + (f": {mismatch[:3]}" if mismatch else ""))  # fmt: skip
    unscored = [p for p in per_traj if p["executed_calls"] != p["reward_counted"]]
    _check(checks, "reward_scores_the_executed_calls", not unscored, f"{len(unscored)} trajectories: HierR scored "
           "other calls than the rollout executed" + (f": {unscored[:3]}" if unscored else ""))  # fmt: skip
    capped = [p for p in per_traj if p["variant"] == "beyond_parallel"]
    _check(checks, "calls_beyond_max_parallel_not_executed", all(
        p["executed_calls"] < p["gust_hermes_parsed"] for p in capped),
        f"{len(capped)} trajectories write max_parallel_calls + 1 calls in one turn; the last one never runs")
    hermes_gap = [p["variant"] for p in per_traj if p["stock_hermes_parsed"] != p["reward_counted"]]
    bad_keys = [i for i, info in enumerate(infos) if tuple(info) != COMPONENT_KEYS]
    internal = [p for p in per_traj if p["error_type"] == "internal_error"]
    _check(checks, "reward_contract", not bad_keys and not internal,
           f"key set wrong for {bad_keys}, internal errors {len(internal)}")  # fmt: skip

    mask = _pad([f["response_mask"] for f in fields], torch.long)
    rm_scores = _pad([f["rm_scores"] for f in fields], torch.float32)
    expected = _pad([place_rewards(mask_runs(f["response_mask"], json.loads(e.get(UNSCORED_RUNS_KEY) or "[]")), info,
                                   layout=layout) for f, e, info in zip(fields, extras, infos, strict=True)],
                    torch.float32)  # fmt: skip
    _check(checks, "reward_layout", torch.equal(rm_scores, expected),
           f"rm_scores from AgentLoopOutput.as_dict follow layout {layout!r}")  # fmt: skip
    gold = [p for p in per_traj if p["variant"] == "gold"]
    _check(checks, "gold_trajectory_scores_best", all(
        p["score"] >= max(q["score"] for q in per_traj if q["row"] == p["row"]) - 1e-9 for p in gold),
        "the gold replay has the highest true score of its group")  # fmt: skip

    keys = [f"{t['uid']}_{t['session']}_0" for t in trajectories]
    from trainer.estimators import TurnRecord

    record = TurnRecord.from_extra_fields(extras)  # the loop's record, as the gust_sync trainer reads it
    adv = _advantages(cfg, store, keys)
    tool, summary = _segments(mask, record)
    share = {
        "tool_tokens": int(tool.sum()), "summary_tokens": int(summary.sum()),
        "tool_nonzero_share": float(((adv != 0) & tool).sum() / max(int(tool.sum()), 1)),
        "summary_nonzero_share": float(((adv != 0) & summary).sum() / max(int(summary.sum()), 1)),
    }  # fmt: skip
    _check(checks, "tool_tokens_get_advantage", share["tool_nonzero_share"] > 0,
           f"{share['tool_nonzero_share']:.3f} of {share['tool_tokens']} tool tokens have a non-zero advantage")
    _check(checks, "no_advantage_off_mask", bool(torch.all(adv[mask == 0] == 0)), "observation/padding tokens get 0")

    golden = _golden_checks(checks, cfg, layout, trajectories, rm_scores, store, keys)
    isolation = _isolation(cfg, trajectories, store, keys, adv, tool, summary)
    hook = _metrics_hook_check(checks, cfg, trajectories, store, keys)
    if caps is not None:
        _check(checks, "turn_caps_fit_gold", caps["gold_finished"], caps["detail"])
    if algo in ISOLATED_ALGOS:
        _check(checks, "isolation", isolation["tool_unchanged"] and isolation["summary_changed"],
               "perturbing only R_sum leaves every tool-token advantage bit-identical and moves summary tokens")
    gradients = _gradients(model_dir, fields, adv, cfg, device)
    if "not_run" in gradients:  # never a pass: the step was not taken
        _check(checks, "backward", False, f"not run: {gradients['not_run']} (try --rehearse-rows)")
    else:
        _check(checks, "backward", math.isfinite(gradients["loss"]) and gradients["grad_norm"] > 0
               and math.isfinite(gradients["grad_norm"]), f"loss {gradients['loss']:.6f}, grad norm "
               f"{gradients['grad_norm']:.6f} on the {gradients['rows']} shortest of {gradients['of_rows']} "
               "trajectories")  # fmt: skip
    if user_loop is not None:
        _user_loop_checks(checks, user_loop)

    report = {
        "algo": algo, "passed": all(c["passed"] for c in checks), "checks": checks,
        "reward_layout": layout, "agent_loop_classes": dict(classes), "configured_agent_loop": target,
        "parser": {"format": str(cfg.actor_rollout_ref.rollout.multi_turn.format),
                   "stock_hermes_disagrees_with_reward_on": sorted(set(hermes_gap))},
        "trajectories": per_traj, "advantage": share, "isolation": isolation, "gradients": gradients,
        "golden": golden, "gust_sync_metrics": hook, "turn_caps": caps,
        "judge": str(cfg.reward.custom_reward_function.reward_kwargs.judge),
        "validation_files": _files(cfg.data.val_files), "rollout_seconds": rollout_s,
        "verl_validate_config": "passed" if validation else "not run",
        "mode": "simulated_user" if user_loop is not None else "fixed_prompt",
        "user_loop": _user_loop_summary(user_loop),
        "policy": "scripted replay of gold and perturbed trajectories (not a model)",
        "model": "tiny randomly initialised Qwen2 (2 layers, hidden 32) with a locally trained BPE tokenizer",
    }  # fmt: skip
    path = out / f"rehearsal_{algo}.json"
    path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    report["report_path"] = str(path)
    return report


PROBE_KNOBS = {"lambda_tool": 0.5, "lambda_sum": 2.0, "tara_lambda": 0.7, "tara_gamma": 0.8, "toolpo_lambda": 0.6}
_GOLDEN_ATOL = 1e-4  # float32 rewards on tokens vs float64 expected values


def _golden_params(cfg: DictConfig) -> Any:
    from trainer.golden import GoldenParams

    knobs = {k: OmegaConf.select(cfg, f"algorithm.gust.{k}", default=None) for k in GoldenParams.__dataclass_fields__}
    return GoldenParams(**{k: float(v) for k, v in knobs.items() if v is not None})


def _with_knobs(cfg: DictConfig, knobs: Mapping[str, float]) -> DictConfig:
    probe = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    with open_dict(probe):
        for key, value in knobs.items():
            OmegaConf.update(probe, f"algorithm.gust.{key}", value, force_add=True)
    return probe


def _golden_checks(checks: list[dict[str, Any]], cfg: DictConfig, layout: str, trajectories: list[dict],
                   rm_scores: torch.Tensor, store: Any, keys: list[str]) -> dict[str, Any]:  # fmt: skip
    """Compare turn rewards, reward placement and advantages with `trainer.golden`'s independent values, under the
    config's knobs and under `PROBE_KNOBS` (λ ≠ 1 exposes λ applied before normalisation)."""
    from trainer.golden import Trajectory, expected_advantages, expected_rewards, expected_s_par, expected_turn_rewards
    from trainer.rewards import decode_turn_rewards

    step_unit = str(cfg.reward.custom_reward_function.reward_kwargs.get("par_unit", "step")) == "step"
    trajs, turn_bad, place_bad, par_bad = [], [], [], []
    for i, t in enumerate(trajectories):
        fields = t["fields"]
        extra = fields["extra_fields"]
        info = extra["reward_extra_info"]
        executed = json.loads(extra[TURN_CALLS_KEY])
        traj = Trajectory(uid=t["uid"], mask=[int(m) for m in fields["response_mask"].tolist()], info=info,
                          conversational=json.loads(extra.get(UNSCORED_RUNS_KEY) or "[]"), executed=executed)
        trajs.append(traj)
        expected_turns = expected_turn_rewards(t["gold"], executed) if t["turn_level"] else []
        if decode_turn_rewards(info["turn_rewards"]) != expected_turns:
            turn_bad.append((t["variant"], decode_turn_rewards(info["turn_rewards"]), expected_turns))
        if step_unit and not int(info["omission"]) and float(info["s_par"]) != expected_s_par(t["gold"], executed):
            par_bad.append((t["variant"], float(info["s_par"])))
        want = expected_rewards(traj, layout, expected_turns)
        row = rm_scores[i, : len(traj.mask)].tolist()
        got = {k: v for k, v in enumerate(row) if v != 0}
        if set(got) - set(want) or any(abs(row[k] - v) > 1e-6 for k, v in want.items()):
            place_bad.append((t["variant"], got, want))
    _check(checks, "golden_turn_rewards", not turn_bad, f"{len(trajs) - len(turn_bad)}/{len(trajs)} trajectories' "
           "turn rewards = gold step matched one to one by the executed calls of scored turn t"
           + (f"; differ: {turn_bad[:3]}" if turn_bad
                                                                           else ""))  # fmt: skip
    _check(checks, "golden_s_par", not par_bad, ("S_par = [first executed step has as many calls as the first gold "
           "step]" if step_unit else "not run: par_unit=block (the reference code's rule) has no golden value")
           + (f"; differ: {par_bad[:3]}" if par_bad else ""))  # fmt: skip
    _check(checks, "golden_reward_placement", not place_bad, f"rm_scores at the independently expected positions "
           f"(layout {layout!r})" + (f"; differ: {place_bad[:2]}" if place_bad else ""))  # fmt: skip
    algo = str(cfg.algorithm.adv_estimator)
    if not cfg.algorithm.get("norm_adv_by_std_in_grpo", True) or OmegaConf.select(
            cfg, "algorithm.gust.tara_absent_turns", default="zero") != "zero":  # fmt: skip
        return {"run": False, "reason": "not run: golden values cover the default normalisation only"}
    placed = [expected_rewards(tr, layout, expected_turn_rewards(t["gold"], tr.executed) if t["turn_level"] else [])
              for tr, t in zip(trajs, trajectories, strict=True)]
    worst: dict[str, float] = {}
    for name, probe in (("config", cfg), ("probe", _with_knobs(cfg, PROBE_KNOBS))):
        adv = _advantages(probe, store, keys)
        want = expected_advantages(trajs, algo, placed, _golden_params(probe))
        worst[name] = max((abs(float(adv[i, k]) - w) for i, row in enumerate(want) for k, w in enumerate(row)),
                          default=0.0)  # fmt: skip
    _check(checks, "golden_advantages", max(worst.values()) <= _GOLDEN_ATOL,
           f"max |verl advantage - expected| {worst} (config knobs and probe {PROBE_KNOBS})")  # fmt: skip
    return {"run": True, "max_abs_diff": worst, "probe_knobs": PROBE_KNOBS}


def _isolation(cfg: DictConfig, trajectories: list[dict], store: Any, keys: list[str], adv: torch.Tensor,
               tool: torch.Tensor, summary: torch.Tensor) -> dict[str, Any]:  # fmt: skip
    """Re-run as_dict and the advantage with R_sum (and the score) of one trajectory per group shifted."""
    rows = []
    seen: set[str] = set()
    for t in trajectories:
        output = t["output"].model_copy(deep=True)
        output._reward_layout = t["output"]._reward_layout
        info = dict(output.extra_fields["reward_extra_info"])
        if t["uid"] not in seen and not info["omission"]:
            seen.add(t["uid"])
            info["r_sum"] = float(info["r_sum"]) + 0.37
            info["score"] = info["acc"] = float(info["score"]) + 0.37
            output.reward_score = info["score"]
        output.extra_fields["reward_extra_info"] = info
        rows.append(output.as_dict()["rm_scores"])
    perturbed = _advantages(cfg, store, keys, _pad(rows, torch.float32))
    return {
        "perturbed_trajectories": len(seen),
        "tool_unchanged": bool(torch.equal(perturbed[tool], adv[tool])),
        "summary_changed": bool(not torch.equal(perturbed[summary], adv[summary])),
        "max_tool_change": float((perturbed - adv)[tool].abs().max()) if tool.any() else 0.0,
    }


def _tightest_caps(cfg: DictConfig, steps: Sequence[int]) -> tuple[int, int]:
    """The smallest (max_user_turns, max_assistant_turns) the launch's data check accepts for these gold lengths."""
    from trainer.launch import _check_turn_caps

    def accepted(user: int, assistant: int) -> bool:
        try:
            _check_turn_caps(_with_caps(cfg, user, assistant), "rehearsal rows", steps)
        except ConfigError:
            return False
        return True

    big = max(steps, default=1) + 10
    user = next((c for c in range(1, big + 1) if accepted(c, big)), big)
    assistant = next((c for c in range(1, big + 1) if accepted(big, c)), big)
    return user, assistant


def _with_caps(cfg: DictConfig, user: int, assistant: int) -> DictConfig:
    capped = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    capped.actor_rollout_ref.rollout.multi_turn.max_user_turns = user
    capped.actor_rollout_ref.rollout.multi_turn.max_assistant_turns = assistant
    return capped


async def _cap_probe(cfg: DictConfig, rows: list[dict[str, Any]], policy: ScriptedPolicy, store: Any) -> dict:
    """Replay the gold of every row under the TIGHTEST turn caps the launch's data check accepts: the check must never
    accept caps under which the gold cannot finish (an off-by-one there truncates the last gold turn)."""
    from trainer.rewards import decode_turn_rewards

    steps = [len(json.loads(r["reward_model"]["ground_truth"]["gold_tool_calls"])) for r in rows]
    user, assistant = _tightest_caps(cfg, steps)
    done = await _run_trajectories(_with_caps(cfg, user, assistant), rows, policy, store, ("gold",), prefix="caps")
    short = []
    for t in done:
        info = t["fields"]["extra_fields"]["reward_extra_info"]
        executed = sum(len(turn) for turn in json.loads(t["fields"]["extra_fields"][TURN_CALLS_KEY]))
        full = executed == sum(len(step) for step in t["gold"]) and all(
            r == 1.0 for r in decode_turn_rewards(info["turn_rewards"]))
        if not full:
            short.append(t["row"])
    return {"max_user_turns": user, "max_assistant_turns": assistant, "gold_finished": not short,
            "detail": f"tightest caps the data check accepts: max_user_turns={user}, max_assistant_turns={assistant} "
                      f"(gold steps {steps}); gold replays cut short: {short}"}  # fmt: skip


def _metrics_hook_check(checks: list[dict[str, Any]], cfg: DictConfig, trajectories: list[dict], store: Any,
                        keys: list[str]) -> dict[str, float]:  # fmt: skip
    """``GustTrainerSync.gust_metrics`` on the stored batch plus two padding copies of its worst trajectory (what
    verl's upsampling adds): the means must be over the real trajectories only (expected values computed here)."""
    infos = [t["fields"]["extra_fields"]["reward_extra_info"] for t in trajectories]
    worst = min(range(len(keys)), key=lambda i: float(infos[i]["score"]))
    pads = [f"gust-padding-{i}" for i in range(2)]
    for pad in pads:
        store.copy_as_padding(keys[worst], pad)
    metrics = _trainer(cfg).gust_metrics(store.meta([*keys, *pads]))
    expected = float(np.mean([float(i["score"]) for i in infos]))
    got = metrics.get("gust/score/mean")
    _check(checks, "gust_sync_metrics", got is not None and abs(got - expected) < 1e-9,
           f"gust/score/mean {got} over the real trajectories = {expected:.6f} (2 padding rows added)")
    return metrics


def format_report(report: Mapping[str, Any]) -> str:
    """A short human-readable summary of a rehearsal report."""
    lines = [f"rehearsal {report['algo']}: {'PASSED' if report['passed'] else 'FAILED'} "
             f"(layout {report['reward_layout']}, parser {report['parser']['format']}, judge {report['judge']})"]
    lines.append(f"  agent loop per trajectory: {report['agent_loop_classes']}")
    lines.append("  variant            executed gust_hermes stock_hermes reward  score  r_tool r_sum  r_succ r_act")
    for p in report["trajectories"]:
        lines.append(f"  {p['variant']:18s} {p['executed_calls']:8d} {p['gust_hermes_parsed']:11d} "
                     f"{p['stock_hermes_parsed']:12d} {p['reward_counted']:6d} {p['score']:6.3f} {p['r_tool']:6.3f} "
                     f"{p['r_sum']:6.3f} {p['r_succ']:6.1f} {p['r_action']:5.2f}")  # fmt: skip
    a, iso, g = report["advantage"], report["isolation"], report["gradients"]
    lines.append(f"  non-zero advantage: tool {a['tool_nonzero_share']:.3f} of {a['tool_tokens']} tokens, "
                 f"summary {a['summary_nonzero_share']:.3f} of {a['summary_tokens']}")
    lines.append(f"  isolation (R_sum only): tool advantages unchanged={iso['tool_unchanged']} "
                 f"(max change {iso['max_tool_change']:.3g}), summary changed={iso['summary_changed']}")
    if "not_run" in g:
        lines.append(f"  backward on {g['device']}: NOT RUN — {g['not_run']}")
    else:
        cos = "n/a" if g["cosine_tool_summary"] is None else f"{g['cosine_tool_summary']:.4f}"
        lines.append(f"  backward on {g['device']} ({g['rows']} shortest of {g['of_rows']} trajectories): loss "
                     f"{g['loss']:.6f}, grad norm {g['grad_norm']:.6f}, cos(tool grad, summary grad) {cos}")
    user = report["user_loop"]
    if user["run"]:
        lines.append(f"  simulated-user loop ({user['simulator']} user, {len(user['rows'])} rows, "
                     f"{user['seconds']:.1f}s): {user['user_turns']} user turns interleaved, "
                     f"{user['agent_turns_scored']} agent turns scored")
        for r in user["rows"]:
            lines.append(f"    {r['task_id']}: user turns {r['user_turns']}, turn rewards {r['turn_rewards']}, "
                         f"user said {r['user_messages']}")
    else:
        lines.append(f"  simulated-user loop: {user['reason']}")
    for c in report["checks"]:
        lines.append(f"  [{'ok' if c['passed'] else 'FAIL'}] {c['name']}: {c['detail']}")
    return "\n".join(lines)
