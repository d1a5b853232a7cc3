"""A subclass of the agent loop using its extension point (as issue 13's user-simulator loop will). Imported only by
hydra when a test's agent-loop YAML names it."""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.tool_agent_loop import AgentState

from trainer.agent_loop import GustToolAgentLoop


class ReplyHookLoop(GustToolAgentLoop):
    """Records where `on_reply_without_tool_call` ran, then ends the episode like the base class."""

    async def on_reply_without_tool_call(self, agent_data: Any, sampling_params: dict) -> Any:
        agent_data.extra_fields["hook_last_message"] = agent_data.messages[-1]["content"]
        agent_data.extra_fields["hook_turn"] = agent_data.assistant_turns
        return AgentState.TERMINATED
