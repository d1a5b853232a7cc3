"""Simulated-user training mode: our agent loop with a user turn (verl 0.9.1 ships no `interactions` package).

`GustUserAgentLoop` subclasses `trainer.agent_loop.GustToolAgentLoop` and changes one transition: when the agent
replies without a tool call, verl's loop would terminate; here the reply goes to the row's simulated user
(`gusteval.user_sim`, built from `extra_info.interaction_kwargs`, which verl's RLHFDataset passes through), and the
user's message is merged as the next user turn exactly like a tool observation (`ct_merge_context_msg`: inserted
context, response_mask 0, so user turns are masked out of the loss). The conversation opens with the user's goal
(the row's system prompt is kept; its fixed user turn, which states every value, is replaced), ends when the user
stops (goal reached / agent gave up / the agent's closing question) or at a turn or length limit.

LLM user failures (issue 24). The LLM user's client retries transient errors itself (``gust.user_llm.max_retries``,
``timeout_s``); `trainer.launch.launch` refuses to start when its endpoint does not answer (pre-flight). When a call
still fails mid-rollout, the FALLBACK POLICY ``gust.user_fallback`` decides: ``offline`` (default) hands the rest of
the dialogue to the deterministic offline user of the same scenario (it answers from the same held facts), ``end``
ends the episode there (the agent's last reply is scored as is). Either way the reason ``user_failed`` is recorded
(``gust_user_reasons``) and counted by the ``gust_sync`` trainer as ``gust/user_failed/rate``, next to
``gust/user_turns/mean`` and ``gust/user_stop_rate`` (a user that never writes its stop marker shows up there; the
user cap ends its dialogues).

Turn caps (issue 24): user turns and tool turns are counted SEPARATELY. verl's ``multi_turn.max_user_turns`` counts
tool-response rounds only (this loop no longer adds the simulated user's messages to it); the simulated user may
answer at most ``gust.max_user_messages`` messages (default `DEFAULT_MAX_USER_MESSAGES`; after that many answers
the episode ends), and verl's ``max_assistant_turns`` is raised by the same number, so questions to the user never
eat the generations the task's tool turns need. `trainer.launch.check_data` refuses rows whose scenario holds more
facts than the user cap.

Everything else is the base class's (issue 12): the user turn is its `on_reply_without_tool_call` hook, and the
reward layouts (`SegmentRewardMixin`) and the per-turn token cap (`TurnTokenCapMixin`) come with it. Turn-level
rewards stay on the agent's turns: generations answered by the user ("conversational" runs) are listed in
`extra_fields["gust_user_turns"]` (`trainer.reward_manager.UNSCORED_RUNS_KEY`: the layouts skip those runs, so they
get no reward token) and left out of `gust_turn_calls`, so TARA's turn t is the agent's t-th environment-facing
generation.

Registered for verl in ONE place, `trainer/configs/gust_user_agent_loops.yaml` (no decorator): the training mode
switch is that file as `actor_rollout_ref.rollout.agent.agent_loop_config_path` (`user_sim_overrides`, or
`gust train --user-sim`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState

from gusteval.scenario import scenario_from_kwargs
from gusteval.user_sim import UserReply, UserSimulator, make_user_simulator, visible_text
from gustforge.errors import ConfigError, InputError, LLMError
from trainer.agent_loop import GustToolAgentLoop
from trainer.reward_manager import UNSCORED_RUNS_KEY, mask_runs
from trainer.rewards.score import TURN_CALLS_KEY

__all__ = [
    "USER_AGENT_NAME",
    "USER_TURNS_KEY",
    "USER_LOOPS_FILE",
    "DEFAULT_MAX_USER_MESSAGES",
    "GustUserAgentLoop",
    "agent_turn_mask",
    "require_user_scenarios",
    "user_sim_overrides",
]

logger = logging.getLogger(__name__)

USER_AGENT_NAME = "gust_user_agent"
USER_FALLBACKS = ("offline", "end")  # gust.user_fallback: what a failed LLM user call leads to
USER_FAILED_REASON = "user_failed"
DEFAULT_MAX_USER_MESSAGES = 8  # simulated-user answers per episode (gust.max_user_messages)
USER_TURNS_KEY = UNSCORED_RUNS_KEY  # the reward layouts skip these runs (trainer.reward_manager)
USER_LOOPS_FILE = Path(__file__).resolve().parent / "configs" / "gust_user_agent_loops.yaml"


class GustUserAgentLoop(GustToolAgentLoop):
    """`GustToolAgentLoop` + the simulated user's turn (see the module docstring)."""

    def __init__(self, *args: Any, user_simulator: str = "offline", user_llm: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        gust = self.config.get("gust") or {}  # `gust.user_simulator` / `gust.user_llm` override the registry file
        self.user_simulator = str(gust.get("user_simulator") or user_simulator)
        self.user_llm = dict(gust.get("user_llm") or user_llm or {})
        self._user: UserSimulator | None = None
        self._scenario: Any = None
        self.user_fallback = str(gust.get("user_fallback") or "offline")
        if self.user_fallback not in USER_FALLBACKS:
            raise ConfigError(f"gust.user_fallback must be one of {USER_FALLBACKS}, got {self.user_fallback!r}")
        self._user_client: Any = None
        self._dialogue: list[dict[str, str]] = []
        self._user_turn_runs: list[int] = []
        self._user_reasons: list[str] = []
        self.max_user_messages = int(gust.get("max_user_messages") or DEFAULT_MAX_USER_MESSAGES)
        if self.max_assistant_turns:  # conversational generations do not use the task's generation budget
            self.max_assistant_turns += self.max_user_messages

    def _make_user(self, kwargs: dict[str, Any]) -> UserSimulator | None:
        try:
            scenario = scenario_from_kwargs(kwargs.get("interaction_kwargs"))
        except InputError as exc:
            logger.warning("no simulated user for this row (fixed prompt kept): %s", exc)
            return None
        self._scenario = scenario
        options: dict[str, Any] = {}
        if self.user_simulator == "llm":
            from gustforge.llm import LLMClient, LLMSettings

            self._user_client = LLMClient(LLMSettings(backend="openai", **self.user_llm))
            options = {"client": self._user_client, "temperature": self._user_client.settings.temperature,
                       "seed": int(kwargs.get("index") or 0)}  # fmt: skip
        return make_user_simulator(self.user_simulator, scenario, **options)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        self._user = self._make_user(kwargs)
        try:
            opening = await self._opening() if self._user is not None else None
            if opening is not None:
                system = [m for m in kwargs["raw_prompt"] if m["role"] == "system"]
                kwargs = {**kwargs, "raw_prompt": [*system, {"role": "user", "content": opening}]}
                self._dialogue = [{"role": "user", "content": opening}]
            output = await super().run(sampling_params, **kwargs)
        finally:
            if self._user_client is not None:
                self._user_client.close()
        turns = json.loads(output.extra_fields.get(TURN_CALLS_KEY) or "[]")
        skipped = set(self._user_turn_runs)
        output.extra_fields[TURN_CALLS_KEY] = json.dumps([t for i, t in enumerate(turns) if i not in skipped])
        output.extra_fields[USER_TURNS_KEY] = json.dumps(self._user_turn_runs)
        output.extra_fields["gust_user_reasons"] = json.dumps(self._user_reasons)
        output.extra_fields["gust_user_messages"] = json.dumps([m["content"] for m in self._dialogue[1:]
                                                                if m["role"] == "user"])  # fmt: skip
        return output

    def conversational_runs(self) -> set[int]:
        return set(self._user_turn_runs)

    def _fail_over(self, exc: Exception) -> bool:
        """Record the failure; switch to the offline user when the policy says so (False: end the episode)."""
        logger.warning("simulated user failed (%s policy): %s", self.user_fallback, exc)
        self._user_reasons.append(USER_FAILED_REASON)
        if self.user_fallback != "offline" or self._scenario is None:
            return False
        self._user = make_user_simulator("offline", self._scenario)
        return True

    async def _opening(self) -> str | None:
        """The user's first message; None when it failed and the policy is ``end`` (the row's fixed prompt is kept,
        without a user)."""
        assert self._user is not None
        try:
            return await self._user.opening()
        except LLMError as exc:
            if not self._fail_over(exc):
                self._user = None
                return None
            return await self._user.opening()

    async def _reply(self) -> UserReply:
        assert self._user is not None
        try:
            return await self._user.reply(self._dialogue)
        except LLMError as exc:
            if not self._fail_over(exc):
                return UserReply(content="", stop=True, reason="fallback_end")
            return await self._user.reply(self._dialogue)

    async def on_reply_without_tool_call(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        """The agent replied without a tool call (no limit hit): the simulated user's turn (issue 12's hook)."""
        if self._user is None:
            return AgentState.TERMINATED
        return await self._user_turn(agent_data)

    async def _user_turn(self, agent_data: AgentData) -> AgentState:
        """The agent's reply goes to the simulated user; a non-final reply becomes the next (masked) user turn."""
        self._dialogue.append({"role": "assistant", "content": visible_text(agent_data.messages[-1]["content"])})
        assert self._user is not None
        reply = await self._reply()
        self._user_reasons.append(reply.reason)
        if reply.stop:
            return AgentState.TERMINATED
        self._user_turn_runs.append(len(self._turn_calls) - 1)  # this generation talked to the user
        self._dialogue.append({"role": "user", "content": reply.content})
        previous = list(agent_data.messages)
        agent_data.messages.append({"role": "user", "content": reply.content})
        merged, mask, logprobs = await self.ct_merge_context_msg(
            previous, agent_data.messages, agent_data.prompt_ids, agent_data.response_mask,
            agent_data.response_logprobs or None, tools=getattr(agent_data, "_active_tool_schemas", self.tool_schemas),
        )  # fmt: skip
        if len(mask) >= self.response_length:
            return AgentState.TERMINATED
        agent_data.prompt_ids, agent_data.response_mask = merged.token_ids, mask
        if agent_data.response_logprobs:
            agent_data.response_logprobs = logprobs or []
        if len(self._user_turn_runs) >= self.max_user_messages:  # the user's own cap (not verl's tool-round cap)
            return AgentState.TERMINATED
        return AgentState.GENERATING


agent_turn_mask = mask_runs  # response_mask with the conversational runs zeroed (where no reward may land)


def user_sim_overrides(user: str = "offline") -> list[str]:
    """Hydra overrides that switch a composed training config (`trainer.launch.compose_config`) to simulated-user
    mode: the agent-loop registry file of this mode, and the simulator kind."""
    return [
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={USER_LOOPS_FILE}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={USER_AGENT_NAME}",
        f"++gust.user_simulator={user}",
    ]


def require_user_scenarios(data: str | Path) -> tuple[int, int]:
    """(rows with a simulated user's scenario, rows) of a verl parquet; refuse data where no row has one.

    Raises:
        ConfigError: No row carries ``extra_info.interaction_kwargs`` (simulated-user mode would silently train on
            fixed prompts).
    """
    import pyarrow.parquet as pq

    rows = pq.read_table(Path(data), columns=["extra_info"]).column("extra_info").to_pylist()
    with_user = sum(1 for extra in rows if (extra or {}).get("interaction_kwargs"))
    if not with_user:
        raise ConfigError(f"simulated-user mode needs rows with extra_info.interaction_kwargs (written by `gust "
                          f"build`); none of the {len(rows)} rows of {data} has one")  # fmt: skip
    return with_user, len(rows)
