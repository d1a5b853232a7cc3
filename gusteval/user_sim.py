"""Simulated users: one interface, an offline deterministic simulator and an OpenAI-compatible LLM simulator.

A simulator plays the user of one `UserScenario` (goal, facts, pick criteria — nothing else). It sees only the
visible dialogue: the agent's text (tool-call blocks and reasoning removed) and its own earlier messages, never
tool observations. It ends the conversation with `STOP_MARKER` (τ²-bench's marker) when the goal is reached or the
agent gives up.

Offline rules (`OfflineUserSimulator`, the default; same input → same output):
  1. the agent asks about values the user holds (a fact's name or argument key appears in the message) → answer
     with exactly those facts;
  2. the agent proposes an action and asks for confirmation → refuse when it contradicts a held fact or names an
     action the goal does not contain, else confirm;
  3. the agent asks something else → the pick criterion whose subject it mentions, else "I don't know";
  4. the agent makes a statement (no question) → the conversation ends: "goal reached" after a report, "agent gave
     up" after a refusal/inability phrase;
  0. (checked first) the agent closes with an offer/closing question that asks nothing the user holds ("Anything else
     I can help with?") → the conversation ends ("closing_question"), as a real user whose goal is done would.
It can only ever say goal text, fact values that were asked about (or that the agent got wrong), pick criteria and
fixed phrases, so it cannot leak tool names or values it does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from data.models import StrictModel
from gusteval.scenario import Fact, UserScenario
from gustforge.errors import LLMError
from gustforge.registry import Registry
from tdg.taskgen import format_value

__all__ = [
    "STOP_MARKER",
    "AGENT_GREETING",
    "UserReply",
    "UserSimulator",
    "USER_SIMULATORS",
    "OfflineUserSimulator",
    "LLMUserSimulator",
    "make_user_simulator",
    "visible_text",
    "user_system_prompt",
]

STOP_MARKER = "###STOP###"
AGENT_GREETING = "Hi! How can I help you today?"
DONT_KNOW = "I'm sorry, I don't know that. Please look it up with the tools you have."
_HIDDEN = re.compile(r"<think>.*?</think>|<tool_call>.*?</tool_call>|<tool_call>.*\Z", re.S)
_QUESTION = re.compile(
    r"\?|\b(please (provide|give|tell|share|specify|confirm)|could you|can you|would you|let me know|"
    r"what is|what's|which|i need (the|your))\b"
)
_CONFIRM = re.compile(
    r"\b(shall i|should i|do you want me to|would you like me to|may i|is it ok|is it okay|okay to|ok to|"
    r"can i proceed|shall we|confirm)\b"
)
_GIVE_UP = re.compile(r"\b(i can't|i cannot|i am unable|i'm unable|unable to|not able to|i'm sorry, but|give up)\b")
_CLOSING = re.compile(
    r"\b(anything else|something else|any other (question|questions|request|requests|thing)|"
    r"further (help|assistance|questions)|help (you )?with (anything|something) (else|more)|"
    r"is there (anything|something)( more)?|what else can i)\b"
)
_ACTIONS = ("cancel", "delete", "remove", "refund", "close", "terminate", "deactivate", "transfer", "pay", "book",
            "create", "update", "change", "send", "email", "register", "assign", "approve", "reject",
            "return")  # fmt: skip


class UserReply(StrictModel):
    """The simulated user's next message."""

    content: str
    stop: bool = False
    reason: str = "answer"


class UserSimulator(Protocol):
    """One conversation's user. `conversation` is the visible dialogue, ending with the agent's message."""

    name: str

    async def opening(self) -> str: ...

    async def reply(self, conversation: Sequence[Mapping[str, str]]) -> UserReply: ...


def visible_text(agent_message: str) -> str:
    """What the user sees of an agent message: reasoning and tool-call blocks removed."""
    return _HIDDEN.sub(" ", agent_message or "").strip()


def _norm(text: str) -> str:
    return " " + re.sub(r"[\s_\-]+", " ", text.lower()) + " "


def _mentions(text: str, phrase: str) -> bool:
    phrase = _norm(phrase).strip()
    return bool(phrase) and re.search(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", text) is not None


def _terms(fact: Fact) -> list[str]:
    terms = [fact.name, fact.key]
    words = fact.name.split()
    if len(words) > 1 and words[-1] in {"id", "ids", "number", "code"} and len(words[0]) > 2:
        terms.append(" ".join(words[:-1]))  # "customer id" is also asked for as "which customer"
    return terms


def _value_text(value: Any) -> str:
    return _norm(str(value) if not isinstance(value, (dict, list)) else format_value(value)).strip()


class OfflineUserSimulator:
    """Deterministic rule-based user (see the module docstring)."""

    name = "offline"

    def __init__(self, scenario: UserScenario) -> None:
        self.scenario = scenario
        self._goal = _norm(scenario.goal + " " + " ".join(f.purpose for f in scenario.facts))

    async def opening(self) -> str:
        return self.scenario.opening()

    async def reply(self, conversation: Sequence[Mapping[str, str]]) -> UserReply:
        return self.respond(conversation[-1]["content"] if conversation else "")

    def respond(self, agent_message: str) -> UserReply:
        """The reply to one agent message (pure)."""
        text = _norm(visible_text(agent_message))
        asked = [f for f in self.scenario.facts if any(_mentions(text, t) for t in _terms(f))]
        is_question = _QUESTION.search(text) is not None
        if is_question and self._only_closing(text):
            return UserReply(content=f"No, that's all, thank you. {STOP_MARKER}", stop=True, reason="closing_question")
        if _CONFIRM.search(text) and not re.search(r"\b(which|what)\b", text):
            return self._confirm(text, asked)
        if is_question and asked:
            return UserReply(content=" ".join(f"The {f.name} is {format_value(f.value)}." for f in asked))
        if is_question:
            crit = [c for c in self.scenario.pick_criteria if _mentions(text, c.about)]
            if crit:
                return UserReply(content=" ".join(f"For the {c.about}, take {c.criterion}." for c in crit),
                                 reason="pick_criterion")  # fmt: skip
            return UserReply(content=DONT_KNOW, reason="dont_know")
        if _GIVE_UP.search(text):
            return UserReply(content=f"Okay, thanks anyway. {STOP_MARKER}", stop=True, reason="agent_gave_up")
        return UserReply(content=f"Great, thank you — that's all I needed. {STOP_MARKER}", stop=True,
                         reason="goal_reached")  # fmt: skip

    def _only_closing(self, text: str) -> bool:
        """Every question sentence is a closing offer that mentions no held fact and no pick criterion."""
        questions = [s for s in re.split(r"(?<=[.!?])\s+", text) if _QUESTION.search(s)]
        return bool(questions) and all(
            _CLOSING.search(q) and not any(_mentions(f" {q} ", t) for f in self.scenario.facts for t in _terms(f))
            and not any(_mentions(f" {q} ", c.about) for c in self.scenario.pick_criteria) for q in questions
        )

    def _confirm(self, text: str, mentioned: list[Fact]) -> UserReply:
        right_keys = {f.key for f in mentioned if _value_text(f.value) in text}
        wrong = [f for f in mentioned if f.key not in right_keys]  # no held value of that kind was proposed
        if wrong:
            fixes = " ".join(f"The {f.name} is {format_value(f.value)}." for f in wrong)
            return UserReply(content=f"No, that's not right. {fixes}", reason="refuse")
        foreign = [a for a in _ACTIONS if re.search(rf"\b{a}", text) and not re.search(rf"\b{a}", self._goal)]
        if foreign:
            return UserReply(content="No, please don't do that; it is not what I asked for.", reason="refuse")
        return UserReply(content="Yes, please go ahead.", reason="confirm")


def user_system_prompt(scenario: UserScenario) -> str:
    """The τ²-style instructions of the LLM user (persona, goal, known facts, reveal-when-asked, stop marker)."""
    facts = "\n".join(f"- {f.name}: {format_value(f.value)} (needed to {f.purpose})" for f in scenario.facts)
    picks = "\n".join(f"- {c.about}: {c.criterion}" for c in scenario.pick_criteria)
    return f"""You are a user talking to a customer-service AI agent. You are NOT the agent: never offer help, \
never act as an assistant. Write only the user's next message.

# Your goal
{scenario.goal}

# What you know (reveal a value only when the agent asks for it)
{facts or "- nothing beyond your goal"}

# How you choose when the agent offers several options
{picks or "- no preference"}

# Rules
- Start by stating your goal in your own words, without any of the values above.
- Give a value only when the agent asks for it; never volunteer all of them at once.
- If the agent asks for something not listed above, say you don't know. Never invent IDs, names, dates or numbers.
- You know nothing about the agent's tools, functions or systems; never mention them.
- If the agent proposes an action, agree only when it serves your goal; otherwise refuse.
- Keep every message short: one or two sentences, plain language.
- When your goal is done, or the agent says it cannot help, reply with a short closing and then {STOP_MARKER}."""


class LLMUserSimulator:
    """The user played by a model behind an OpenAI-compatible endpoint (`gustforge.llm.LLMClient`).

    The model sees the τ² prompt and the dialogue with roles flipped (the agent speaks as `user`); the conversation
    ends when its reply contains `STOP_MARKER`. `seed` is sent with every request, so the k trials of a task are k
    distinct samples (and cache entries).
    """

    name = "llm"

    def __init__(self, scenario: UserScenario, client: Any, *, seed: int = 0, temperature: float = 0.0,
                 max_tokens: int = 512) -> None:  # fmt: skip
        self.scenario = scenario
        self.client = client
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens

    async def _ask(self, dialogue: list[dict[str, str]]) -> str:
        messages = [{"role": "system", "content": user_system_prompt(self.scenario)}, *dialogue]
        result = await self.client.achat(messages, temperature=self.temperature, max_tokens=self.max_tokens,
                                         seed=self.seed)  # fmt: skip
        content = (result.content or "").strip()
        if not content:
            raise LLMError("the user simulator returned an empty message")
        return content

    async def opening(self) -> str:
        return (await self._ask([{"role": "user", "content": AGENT_GREETING}])).replace(STOP_MARKER, "").strip()

    async def reply(self, conversation: Sequence[Mapping[str, str]]) -> UserReply:
        dialogue = [{"role": "user", "content": AGENT_GREETING}]
        for message in conversation:
            own = message["role"] == "user"
            text = message["content"] if own else visible_text(message["content"])
            dialogue.append({"role": "assistant" if own else "user", "content": text or "(no message)"})
        content = await self._ask(dialogue)
        stop = STOP_MARKER in content
        return UserReply(content=content, stop=stop, reason="llm_stop" if stop else "llm")


SimulatorFactory = Callable[..., UserSimulator]
USER_SIMULATORS: Registry[SimulatorFactory] = Registry("user simulator")
USER_SIMULATORS.add("offline", lambda scenario, **_: OfflineUserSimulator(scenario))
USER_SIMULATORS.add("llm", lambda scenario, *, client, seed=0, temperature=0.0, **_: LLMUserSimulator(
    scenario, client, seed=seed, temperature=temperature))  # fmt: skip


def make_user_simulator(kind: str, scenario: UserScenario, **options: Any) -> UserSimulator:
    """A simulator from `USER_SIMULATORS` ("offline", or "llm" with `client=`, `seed=`, `temperature=`)."""
    return USER_SIMULATORS.get(kind)(scenario, **options)
