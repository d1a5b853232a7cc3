"""``gust_hermes``: the rollout's tool-call parser, registered in verl's ``ToolParser`` registry (no patch).

verl's stock ``hermes`` parser and our reward disagreed on what a call is: ``hermes`` drops a JSON-list block, a
``"parameters"`` key and a block without ``"arguments"`` (so the episode ends there), while HierR scored those
blocks as valid. This parser executes exactly what the reward counts: it runs the reward's own block parser
(`trainer.rewards.parse.extract_tool_calls`) on the think-stripped generation, so

* a block is valid only if every object in it is a call with a non-empty string name, an allowed name (when the
  row's catalogue is known) and object arguments (``"arguments"``, else ``"parameters"``, else ``{}``);
* a JSON list in one block is several calls; an invalid block contributes no call (and is not executed);
* calls inside ``<think>…</think>`` are not executed (the reward strips them too).

The allowed names are per row, while verl passes only its registered tools (``sgls``) to the parser; the agent
loop therefore sets ``allowed_tools`` on its own parser instance (verl builds one parser per agent-loop instance,
i.e. per trajectory). Select it with ``actor_rollout_ref.rollout.multi_turn.format: gust_hermes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser

from trainer.rewards.parse import extract_tool_calls, remove_call_blocks, strip_think

__all__ = ["PARSER_NAME", "GustHermesToolParser", "parse_generation"]

PARSER_NAME = "gust_hermes"


def parse_generation(text: str, allowed_tools: Iterable[str] | None) -> tuple[str, list[FunctionCall]]:
    """The calls one generation makes, exactly as the reward counts them.

    Args:
        text: One decoded generation (one run of ``response_mask == 1``).
        allowed_tools: The row's tool names; ``None`` accepts any name.

    Returns:
        (the text without call blocks, the calls in order with JSON-object ``arguments`` strings).
    """
    stripped = strip_think(text)
    parsed = extract_tool_calls(stripped, list(allowed_tools) if allowed_tools is not None else None)
    calls = [FunctionCall(name=c.name, arguments=json.dumps(c.arguments, ensure_ascii=False)) for c in parsed.calls]
    return remove_call_blocks(stripped), calls


@ToolParser.register(PARSER_NAME)
class GustHermesToolParser(ToolParser):
    """Hermes ``<tool_call>`` blocks parsed by the reward's rules (see the module doc)."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.allowed_tools: frozenset[str] | None = None

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list[Any] | None = None
    ) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        return parse_generation(text, self.allowed_tools)
