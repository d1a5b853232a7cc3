"""`GustToolAgentLoop`: verl's `ToolAgentLoop` with one SGLS tool instance (one environment) per trajectory.

Stock `ToolAgentLoop._call_tool` runs create → execute → release for EVERY call, so a stateful environment would be
rebuilt (and its DB reset) between two calls of the same trajectory, and it routes calls by tool name, so every
environment tool would need its own registered verl tool. This subclass:
  * creates the SGLS instance once at trajectory start from `tools_kwargs["sgls"]["create_kwargs"]` and releases
    it when the trajectory ends (also on errors);
  * routes every emitted call (any name) to that instance with `original_tool_name=<name>`;
  * does not inject verl's tool schemas into the chat template by default (the row's system prompt carries the
    catalogue, SLCA-style);
  * records the calls it executed per generation turn and the environment's final DB hash in `extra_fields`
    (`gust_turn_calls`, `gust_final_db_hash`), which verl merges into the reward's `extra_info`.
Everything else (generation, parsing, masks: generated tokens 1, observations 0) is verl's code, unchanged.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.schemas import ToolResponse

from gustforge.errors import ConfigError
from trainer.rewards.score import FINAL_HASH_KEY, TURN_CALLS_KEY
from trainer.rows import AGENT_NAME, SGLS_TOOL_NAME
from trainer.sgls import truncate_observation

__all__ = ["GustToolAgentLoop"]

logger = logging.getLogger(__name__)


@register(AGENT_NAME)
class GustToolAgentLoop(ToolAgentLoop):
    """Tool agent loop owning one environment session per trajectory (one instance of this class = one trajectory:
    verl instantiates the loop per sample)."""

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

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        tool = self.tools[self.sgls_tool_name]
        tools_kwargs = kwargs.get("tools_kwargs") or {}
        create_kwargs = (tools_kwargs.get(self.sgls_tool_name) or {}).get("create_kwargs") or {}
        self._instance_id, _ = await tool.create(create_kwargs=create_kwargs)
        try:
            output = await super().run(sampling_params, **kwargs)
            output.extra_fields[TURN_CALLS_KEY] = json.dumps(self._turn_calls, ensure_ascii=False)
            output.extra_fields[FINAL_HASH_KEY] = tool.db_hash(self._instance_id) or ""
        finally:
            await tool.release(self._instance_id)
            self._instance_id = None
        return output

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        self._turn_calls.append([])  # one entry per generation = per run of response_mask == 1
        return await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)

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
