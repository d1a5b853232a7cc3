"""`GustToolAgentLoop`: the one agent loop every GUST Forge trajectory runs in (verl's `ToolAgentLoop`, extended).

Registration. The loop is registered ONLY by ``trainer/configs/gust_agent_loops.yaml``
(``actor_rollout_ref.rollout.agent.agent_loop_config_path``), under the name the rows carry
(``agent_name: gust_tool_agent``). There is deliberately no ``@register`` decorator in this package: verl's
``AgentLoopWorker`` loads the YAML once at start-up and then imports our module lazily at the first
``hydra.utils.instantiate``; a decorator would run at that import and overwrite the YAML entry for every later
trajectory of the worker (that silently dropped the reward layout before). ``tests/trainer/test_agent_loop.py``
instantiates the loop through verl's own worker, several trajectories in a row, for every agent-loop YAML we ship.

What it adds to `ToolAgentLoop` (everything else — generation, masks: generated tokens 1, observations 0 — is
verl's code, unchanged):
  * one SGLS environment instance per trajectory, created at the start from
    ``tools_kwargs["sgls"]["create_kwargs"]`` (``env_dir`` resolved against ``gust.env_root``, the root
    `trainer.convert` records in the parquet) and released at the end, also on errors; every emitted call (any
    name) goes to it with ``original_tool_name=<name>``;
  * the ``gust_hermes`` parser (`trainer.tool_parser`) gets the row's tool names, so the rollout executes exactly
    the calls the reward counts;
  * rewards laid out on tokens per ``algorithm.adv_estimator`` (`trainer.reward_manager.SegmentRewardMixin`) and
    the per-turn token cap ``gust.max_tokens_per_turn`` (`TurnTokenCapMixin`);
  * ``extra_fields`` (merged by verl into the reward's ``extra_info``): ``gust_turn_calls`` (executed calls per
    generation turn), ``gust_parsed_calls`` (parsed calls per turn), ``gust_final_db_hash`` and
    ``gust_agent_loop_class`` (the class verl instantiated: the rehearsal checks it per trajectory).

Extension point (e.g. a user-simulator turn, issue 13): subclass this class in a new module, override
`on_reply_without_tool_call`, and point the YAML entry's ``_target_`` at the subclass (keep ONE entry per name).
The hook runs when the assistant finished a generation with no tool call and no turn/length limit was hit; return
``AgentState.TERMINATED`` to end the episode (the default) or append a message to ``agent_data.messages``, merge it
into the token stream (``self.ct_merge_context_msg``, as verl does for tool responses), bump
``agent_data.user_turns`` and return ``AgentState.GENERATING`` to continue. Each further generation is a new run of
``response_mask == 1`` (a new entry of ``gust_turn_calls``), so the reward layouts treat it as one more turn.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.schemas import ToolResponse

from gustforge.errors import ConfigError
from trainer.convert import resolve_env_dir
from trainer.reward_manager import SegmentRewardMixin, TurnTokenCapMixin
from trainer.rewards.score import FINAL_HASH_KEY, FINAL_REPLY_KEY, LOOP_CLASS_KEY, PARSED_CALLS_KEY, TURN_CALLS_KEY
from trainer.rows import AGENT_NAME, SGLS_TOOL_NAME
from trainer.sgls import tool_index, truncate_observation
from trainer.tool_parser import GustHermesToolParser

__all__ = ["GustToolAgentLoop", "PARSED_CALLS_KEY", "LOOP_CLASS_KEY", "resolve_env_dir"]

logger = logging.getLogger(__name__)


class GustToolAgentLoop(SegmentRewardMixin, TurnTokenCapMixin, ToolAgentLoop):
    """Tool agent loop owning one environment session per trajectory (verl instantiates the loop per sample)."""

    def __init__(
        self, *args: Any, sgls_tool_name: str = SGLS_TOOL_NAME, inject_tool_schemas: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if sgls_tool_name not in self.tools:
            raise ConfigError(
                f"agent loop {AGENT_NAME!r} needs the verl tool {sgls_tool_name!r} "
                f"(multi_turn.tool_config_path); registered: {sorted(self.tools)}"
            )
        self.sgls_tool_name = sgls_tool_name
        if not inject_tool_schemas:
            self.tool_schemas = []
        self._instance_id: str | None = None
        self._turn_calls: list[list[dict[str, Any]]] = []
        self._parsed_calls: list[int] = []
        self._replies: list[str] = []  # decoded text of every generation (one per run of response_mask == 1)

    def _env_root(self) -> str | None:
        gust = self.config.get("gust") if hasattr(self.config, "get") else None
        return (gust or {}).get("env_root")

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        tool = self.tools[self.sgls_tool_name]
        tools_kwargs = kwargs.get("tools_kwargs") or {}
        create_kwargs = dict((tools_kwargs.get(self.sgls_tool_name) or {}).get("create_kwargs") or {})
        create_kwargs["env_dir"] = resolve_env_dir(str(create_kwargs.get("env_dir") or ""), self._env_root())
        if isinstance(self.tool_parser, GustHermesToolParser):
            self.tool_parser.allowed_tools = frozenset(tool_index(create_kwargs.get("tool_schemas") or "[]"))
        self._instance_id, _ = await tool.create(create_kwargs=create_kwargs)
        try:
            output = await super().run(sampling_params, **kwargs)
            extra = output.extra_fields
            extra[TURN_CALLS_KEY] = json.dumps(self._turn_calls, ensure_ascii=False)
            extra[PARSED_CALLS_KEY] = json.dumps(self._parsed_calls)
            extra[FINAL_HASH_KEY] = tool.db_hash(self._instance_id) or ""
            extra[LOOP_CLASS_KEY] = f"{type(self).__module__}.{type(self).__qualname__}"
            extra[FINAL_REPLY_KEY] = self.final_reply()
        finally:
            await tool.release(self._instance_id)
            self._instance_id = None
        return output

    def _limit_reached(self, agent_data: AgentData) -> bool:
        """The conditions under which verl ends the episode before parsing a generation."""
        return (
            len(agent_data.response_mask) >= self.response_length
            or bool(self.max_assistant_turns and agent_data.assistant_turns >= self.max_assistant_turns)
            or bool(self.max_user_turns and agent_data.user_turns >= self.max_user_turns)
        )

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        self._turn_calls.append([])  # one entry per generation = per run of response_mask == 1
        agent_data.tool_calls = []
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        self._parsed_calls.append(len(agent_data.tool_calls))
        self._replies.append(self.tokenizer.decode(agent_data.response_ids or [], skip_special_tokens=True))
        if state == AgentState.TERMINATED and not agent_data.tool_calls and not self._limit_reached(agent_data):
            return await self.on_reply_without_tool_call(agent_data, sampling_params)
        return state

    def conversational_runs(self) -> set[int]:
        """Generations that talked to a simulated user (none here; `trainer.user_agent_loop` overrides)."""
        return set()

    def final_reply(self) -> str:
        """Text of the last SCORED generation (the summary the judge rates; "" when there is none)."""
        skip = self.conversational_runs()
        scored = [text for i, text in enumerate(self._replies) if i not in skip]
        return scored[-1] if scored else ""

    async def on_reply_without_tool_call(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        """The assistant's last generation made no tool call (and no limit was hit): end the episode.

        Override in a subclass to continue the conversation (see the module doc); the last assistant message is
        ``agent_data.messages[-1]``.
        """
        return AgentState.TERMINATED

    async def _call_tool(
        self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: AgentData
    ) -> tuple[ToolResponse, float, dict]:
        name = tool_call.name
        try:
            args = json.loads(tool_call.arguments)
        except (json.JSONDecodeError, TypeError) as exc:
            return ToolResponse(text=f"Invalid JSON in arguments for '{name}': {exc}"), 0.0, {}
        if self._turn_calls:
            self._turn_calls[-1].append({"name": name, "arguments": args})
        tool = self.tools[self.sgls_tool_name]
        try:
            response, reward, info = await tool.execute(
                self._instance_id, args, original_tool_name=name, agent_data=agent_data
            )
        except Exception as exc:  # noqa: BLE001 - any tool failure becomes the observation, as in verl
            logger.warning("tool %r failed: %s", name, exc)
            return ToolResponse(text=f"Error executing tool '{name}': {exc}"), 0.0, {}
        text = truncate_observation(
            response.text or "", self.max_tool_response_length, self.tool_response_truncate_side
        )
        return ToolResponse(text=text), reward, info

