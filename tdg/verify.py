"""Execution-based task verification with LangGraph (ToolVerse §3.2.3, §4.2, App. B.3).

Three filters, in order of cost:
1. **replay** — a LangGraph `StateGraph` re-executes the golden trace stage by stage on a fresh environment
   session and checks every output and DB hash;
2. **solvability** — every stated argument value (every argument that is not a dependency argument) appears
   in the task text or in the output of a call of an earlier stage;
3. **teacher Pass@k** — a LangGraph tool-calling agent driven by `ChatOpenAI` on an OpenAI-compatible endpoint
   tries the task k times, each on a fresh session; an attempt is scored with the turn-level rule of §3.3
   (golden call ⊆dict agent call of the same turn). A task is kept when at least one attempt has trace score 1.
   With no endpoint configured the teacher is "not_run" and `pass_at_k` stays None.
Finally at most `max_tasks_per_env` tasks per environment are kept, preferring distinct tool sets.

This is the only library module that imports langgraph / langchain.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import operator
import os
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypedDict

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from pydantic import Field

from data.answers import answer_complete, normalize_facts
from data.models import GoldenTrace, QuarantineRecord, StageReport, StrictModel, TaskRecord, TaskText, ToolCall
from data.state_canon import same_final_state
from gustforge.errors import LLMError, SandboxError, ToolError
from gustforge.hashing import canonical_json
from gustforge.llm import is_transient
from tdg.quality import QualityConfig, analyze_task, failure_reasons
from tdg.reconstruct import changes_state
from tdg.taskgen import stated_arguments
from tdg.verify_config import TeacherConfig, VerifyConfig

if TYPE_CHECKING:
    from envgen.runtime import Environment, EnvSession
    from gustforge.sandbox import SandboxPool

__all__ = [
    "ReplayResult",
    "SolvabilityResult",
    "AttemptScore",
    "TeacherResult",
    "VerifyOutcome",
    "replay_trace",
    "check_solvable",
    "dict_subset",
    "score_attempt",
    "run_teacher",
    "pass_at_k",
    "verification_producer",
    "diversity_order",
    "quality_tier",
    "verify_tasks",
]

logger = logging.getLogger(__name__)

STAGE = "verify"


class ReplayResult(StrictModel):
    ok: bool
    stages_run: int
    mismatches: tuple[str, ...] = ()


class SolvabilityResult(StrictModel):
    ok: bool
    missing: tuple[str, ...] = Field(default=(), description="'stage/tool.arg=value' entries not found.")
    provenance: tuple[str, ...] = Field(
        default=(), description="'stage/tool.arg <- text | earlier output | <tool>.<path>' for every argument."
    )


class AttemptScore(StrictModel):
    """One teacher attempt scored against the golden trace."""

    turn_rewards: tuple[float, ...] = Field(
        description="r_t = 1 when turn t's calls are exactly golden stage t's, one to one (each golden call ⊆dict its "
        "agent call; no extra or repeated call)."
    )
    matched_calls: int
    total_calls: int
    db_match: bool = Field(description="Final DB hash equals the golden final hash.")
    answer_match: bool = Field(default=True, description="The final reply states every expected answer fact.")
    answer_checked: bool = Field(default=False, description="The task carries answer facts.")
    trace_score: float = Field(
        description="(matched_calls + db_match + answer_match [when checked]) / (total_calls + 1 + answer_checked); "
        "1 only when all hold."
    )
    error: str | None = Field(default=None, description="Environment fault that ended the attempt, if any.")


class TeacherResult(StrictModel):
    status: str = Field(description="not_run | passed | failed | teacher_error")
    pass_at_k: float | None = Field(default=None, description="Unbiased pass@k (k = cfg.pass_k) over the attempts.")
    solve_rate: float | None = Field(default=None, description="Solved attempts / attempts.")
    attempts: tuple[AttemptScore, ...] = ()
    error: str | None = None


class VerifyOutcome(StrictModel):
    """Kept records (verification fields filled), quarantined ones, and the balanced stage report."""

    kept: tuple[TaskRecord, ...]
    dropped: tuple[QuarantineRecord, ...]
    report: StageReport


# ------------------------------------------------------------------------------------------------ replay


class _ReplayState(TypedDict):
    stage: int
    mismatches: Annotated[list[str], operator.add]


def _outputs_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return canonical_json(a) == canonical_json(b)


def _replay_graph(trace: GoldenTrace, session: EnvSession) -> Any:
    """start → stage (loops over the stages) → finish; any mismatch ends the run."""

    def start(state: _ReplayState) -> dict[str, Any]:
        found = session.db_hash()
        bad = (
            [] if found == trace.initial_db_hash else [f"initial db hash {found[:12]} != {trace.initial_db_hash[:12]}"]
        )
        return {"mismatches": bad}

    def run_stage(state: _ReplayState) -> dict[str, Any]:
        index = state["stage"]
        stage = trace.stages[index]
        bad: list[str] = []
        if (before := session.db_hash()) != stage.db_hash_before:
            bad.append(f"stage {index}: db hash before {before[:12]} != {stage.db_hash_before[:12]}")
        for call in stage.calls:
            output = session.call(call.name, dict(call.arguments))
            if not _outputs_equal(output, call.output):
                bad.append(f"stage {index}: {call.name} output {canonical_json(output)[:160]} differs")
        if (after := session.db_hash()) != stage.db_hash_after:
            bad.append(f"stage {index}: db hash after {after[:12]} != {stage.db_hash_after[:12]}")
        return {"stage": index + 1, "mismatches": bad}

    def finish(state: _ReplayState) -> dict[str, Any]:
        found = session.db_hash()
        return {"mismatches": [] if found == trace.final_db_hash else [f"final db hash {found[:12]} differs"]}

    def route(state: _ReplayState) -> str:
        if state["mismatches"]:
            return END
        return "stage" if state["stage"] < len(trace.stages) else "finish"

    graph = StateGraph(_ReplayState)
    graph.add_node("start", start)
    graph.add_node("stage", run_stage)
    graph.add_node("finish", finish)
    graph.add_edge(START, "start")
    graph.add_conditional_edges("start", route, ["stage", "finish", END])
    graph.add_conditional_edges("stage", route, ["stage", "finish", END])
    graph.add_edge("finish", END)
    return graph.compile()


def replay_trace(
    trace: GoldenTrace, env: Environment, *, session_seed: int = 0, pool: SandboxPool | None = None
) -> ReplayResult:
    """Re-execute a golden trace on a fresh session of `env`; ok when every output and DB hash matches.

    Args:
        trace: The golden trace.
        env: Its environment.
        session_seed: Seed of the sandbox's random/uuid4 (must equal the one the trace was built with).
        pool: Warm sandbox workers to borrow from; default a new worker.

    Raises:
        SandboxError: The environment faulted (timeout, memory, violation) during the replay.
    """
    with env.session(pool=pool, seed=session_seed) as session:
        return _replay_in(trace, session)


def _replay_in(trace: GoldenTrace, session: EnvSession) -> ReplayResult:
    """Replay on a session in its initial state."""
    graph = _replay_graph(trace, session)
    state = graph.invoke({"stage": 0, "mismatches": []}, {"recursion_limit": len(trace.stages) + 8})
    mismatches = tuple(state["mismatches"])
    return ReplayResult(ok=not mismatches, stages_run=state["stage"], mismatches=mismatches)


# ------------------------------------------------------------------------------------------- solvability


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.casefold()).strip()


def _spellings(leaf: Any) -> list[str]:
    """Normalized ways a checkable leaf may be written; [] for leaves that cannot be string-matched."""
    if leaf is None or isinstance(leaf, bool):
        return []
    if isinstance(leaf, float) and math.isfinite(leaf) and leaf.is_integer():
        return [_norm(repr(leaf)), str(int(leaf))]
    return [s] if (s := _norm(str(leaf))) else []


def _in_text(spelling: str, text: str) -> bool:
    """Substring match that does not split words: "u1" is not found in "u12"."""
    left = r"(?<!\w)" if spelling[:1].isalnum() or spelling[:1] == "_" else ""
    right = r"(?!\w)" if spelling[-1:].isalnum() or spelling[-1:] == "_" else ""
    return re.search(left + re.escape(spelling) + right, text) is not None


def _stated_conflicts(trace: GoldenTrace) -> set[str]:
    """Argument names stated with two or more different values across the trace's calls (the text must say which
    value is for which call)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for stage in trace.stages:
        for call in stage.calls:
            for arg, value in stated_arguments(call).items():
                seen[arg].add(canonical_json(value))
    return {arg for arg, values in seen.items() if len(values) > 1}


def _names_call(call_name: str, sentence: str) -> bool:
    """The sentence names the call: a word of its name (not a stop word; a read verb by any read verb) occurs in it."""
    from tdg.textstats import name_words, names_any

    stop = {"a", "an", "the", "of", "to", "for", "by", "with", "from", "in", "on", "at", "and", "or", "set"}
    return names_any([w for w in name_words(call_name) if w not in stop and len(w) > 1], sentence)


def _resolve_stated(
    where: str, call_name: str, value: Any, corpus: str, said: Sequence[str], earlier: set[str], ambiguous: bool
) -> tuple[str, str | None]:
    """(provenance, problem) of one stated argument: from the text (in a sentence naming the call when the same
    argument takes other values elsewhere) or from an earlier output."""
    from_text = False
    for leaf in _leaves(value):
        spellings = _spellings(leaf)
        if not spellings:
            continue
        if any(_in_text(s, corpus) for s in spellings):
            from_text = True
            if ambiguous and not any(_in_text(sp, s) and _names_call(call_name, s) for s in said for sp in spellings):
                return "text", f"{where}={leaf!r} (ambiguous: the text does not say which call it is for)"
        elif not any(s in earlier for s in spellings):
            return "", f"{where}={leaf!r}"
    return ("text" if from_text else "earlier output"), None


def check_solvable(trace: GoldenTrace, text: TaskText) -> SolvabilityResult:
    """Determined: every argument of every call resolves, uniquely, from the text and earlier outputs — the way an
    agent must resolve it.

    Per argument (its provenance is recorded):
    - a stated argument's value appears in the query/dialogue, or in an output of an earlier stage; when the same
      argument takes different values in different calls, the sentence that states each value names its call;
    - a dependency argument's value is held by an earlier output (its source call ran before); when it is picked
      from a list of >= 2 differing elements, the text singles the element out (a unique attribute of it, or a
      stated first/last rule) and, when the task has two or more picks, ties each criterion to its call
      (tdg.textstats.unlinked_picks).

    Strings and numbers are checked (normalized: case-folded, whitespace collapsed, whole-word); booleans and
    nulls cannot be string-matched and are not checked. Values inside lists and objects are checked leaf by leaf.
    """
    from tdg.quality import undetermined_picks
    from tdg.textstats import sentences, shown_text, unlinked_picks

    corpus = _norm(" ".join([text.user_query, *(turn.get("content", "") for turn in text.dialogue_history)]))
    said = sentences(shown_text(text))
    conflicts = _stated_conflicts(trace)
    earlier: set[str] = set()
    produced: set[str] = set()
    missing: list[str] = []
    provenance: list[str] = []
    for index, stage in enumerate(trace.stages):
        for call in stage.calls:
            for arg, value in sorted(call.arguments.items()):
                where = f"{index}/{call.name}.{arg}"
                if arg in call.dependency_args:
                    source = call.dependency_args[arg]
                    held = all(any(s in earlier for s in _spellings(leaf)) for leaf in _leaves(value)
                               if _spellings(leaf))  # fmt: skip
                    if source.partition(".")[0] not in produced or not held:
                        missing.append(f"{where}={value!r} (no earlier output holds it)")
                    provenance.append(f"{where} <- {source}")
                    continue
                origin, problem = _resolve_stated(where, call.name, value, corpus, said, earlier, arg in conflicts)
                if problem:
                    missing.append(problem)
                provenance.append(f"{where} <- {origin or 'nowhere'}")
        earlier.update(s for call in stage.calls for leaf in _leaves(call.output) for s in _spellings(leaf))
        produced.update(call.name for call in stage.calls)
    missing += [f"undetermined pick {pick}" for pick in undetermined_picks(trace, text)]
    missing += [f"unlinked pick {pick}" for pick in unlinked_picks(trace, text)]
    return SolvabilityResult(ok=not missing, missing=tuple(missing), provenance=tuple(provenance))


# -------------------------------------------------------------------------------------------- scoring


def dict_subset(sub: Any, sup: Any) -> bool:
    """`sub ⊆dict sup`: every key of `sub` is in `sup` with a matching value (recursively); leaves are equal.

    Example:
        >>> dict_subset({"a": 1, "b": {"c": 2}}, {"a": 1.0, "b": {"c": 2, "d": 3}, "e": 0})
        True
        >>> dict_subset({"a": True}, {"a": 1})
        False
    """
    if isinstance(sub, Mapping):
        return isinstance(sup, Mapping) and all(k in sup and dict_subset(v, sup[k]) for k, v in sub.items())
    if isinstance(sub, list | tuple):
        return isinstance(sup, list | tuple) and len(sub) == len(sup) and all(map(dict_subset, sub, sup))
    if isinstance(sub, bool) or isinstance(sup, bool):
        return type(sub) is type(sup) and sub == sup
    return bool(sub == sup)


def _max_matching(golden: Sequence[ToolCall], agent: Sequence[ToolCall]) -> int:
    """Most golden calls matched to distinct agent calls (Kuhn's augmenting paths; stages are small)."""
    edges = [
        [j for j, a in enumerate(agent) if a.name == g.name and dict_subset(g.arguments, a.arguments)] for g in golden
    ]
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return sum(augment(i, set()) for i in range(len(golden)))


def score_attempt(
    trace: GoldenTrace,
    agent_turns: Sequence[Sequence[ToolCall]],
    final_db_hash: str,
    *,
    error: str | None = None,
    final_reply: str = "",
    expected_answer: Sequence[str] = (),
    same_state: bool | None = None,
) -> AttemptScore:
    """Score an attempt: turn t of the agent (its t-th tool-calling message) against golden stage t, the final DB,
    and the answer facts in the final reply.

    Args:
        trace: The golden trace.
        agent_turns: The agent's tool calls, one list per assistant message that called tools.
        final_db_hash: DB hash after the attempt.
        error: Environment fault that ended the attempt, if any.
        final_reply: The agent's last message (what the answer facts are looked for in).
        expected_answer: `TaskText.expected_answer` (empty: no answer check).
        same_state: The caller's verdict on the final DB modulo creation order (`data.state_canon`); None: the
            plain hash comparison.
    """
    rewards: list[float] = []
    matched = total = 0
    for index, stage in enumerate(trace.stages):
        golden = [ToolCall(name=c.name, arguments=c.arguments) for c in stage.calls]
        turn = agent_turns[index] if index < len(agent_turns) else []
        hits = _max_matching(golden, turn)
        rewards.append(1.0 if hits == len(golden) == len(turn) else 0.0)
        matched += hits
        total += len(golden)
    db_match = error is None and (final_db_hash == trace.final_db_hash if same_state is None else same_state)
    facts = normalize_facts(list(expected_answer))
    answered = error is None and answer_complete(facts, final_reply)
    return AttemptScore(
        turn_rewards=tuple(rewards),
        matched_calls=matched,
        total_calls=total,
        db_match=db_match,
        answer_match=answered,
        answer_checked=bool(facts),
        trace_score=(matched + int(db_match) + int(bool(facts) and answered)) / (total + 1 + int(bool(facts))),
        error=error,
    )


# ----------------------------------------------------------------------------------------- teacher agent


class _AttemptOpts(NamedTuple):
    model: str
    sessions: _SessionCache
    llm_slots: threading.Semaphore | None = None


class _AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


class _SessionCache:
    """Loaded sessions of the environments being verified, lent for one tool step (or one replay) at a time.

    A lent session is first reset (fresh tools module, initial DB, reseeded `random`/`uuid4`: the same state as a
    newly loaded one), so steps of many attempts share a few loaded sessions instead of loading — and statically
    checking — the tools module for every step. At most `limit` sessions are open (the sandbox pool's size); an
    idle session of another environment is closed to make room.
    """

    def __init__(self, pool: SandboxPool | None, seed: int, limit: int) -> None:
        self._pool, self._seed, self._limit = pool, seed, limit
        self._idle: dict[str, list[EnvSession]] = defaultdict(list)
        self._open = 0
        self._cond = threading.Condition()

    @contextmanager
    def lease(self, env: Environment) -> Iterator[EnvSession]:
        session, fresh = self._take(env)
        try:
            if not fresh:
                session.reset()
            yield session
        except BaseException:
            self._discard(session)
            raise
        with self._cond:
            self._idle[env.env_id].append(session)
            self._cond.notify()

    def _take(self, env: Environment) -> tuple[EnvSession, bool]:
        evicted: EnvSession | None = None
        with self._cond:
            while True:
                if mine := self._idle.get(env.env_id):
                    return mine.pop(), False
                if self._open < self._limit:
                    self._open += 1
                    break
                if other := next((idle for idle in self._idle.values() if idle), None):
                    evicted = other.pop(0)  # the open count stays: the new session takes its place
                    break
                self._cond.wait()
        if evicted is not None:
            evicted.close()
        try:
            return env.session(pool=self._pool, seed=self._seed), True
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def _discard(self, session: EnvSession) -> None:
        session.close()
        with self._cond:
            self._open -= 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            idle = [s for sessions in self._idle.values() for s in sessions]
            self._idle.clear()
            self._open -= len(idle)
            self._cond.notify_all()
        for session in idle:
            session.close()


class _AttemptEnv:
    """One attempt's environment, holding a sandbox session only while a tool step runs.

    Between steps the attempt is the list of calls it executed, in execution order. Each step leases a session
    in its initial state, replays those calls — the tools module, its seeded `random`/`uuid4` and the DB end
    exactly where the last step left them; a replayed output that differs is an environment fault — then runs the
    step's new calls. So an LLM turn never holds a sandbox worker.
    """

    def __init__(self, env: Environment, sessions: _SessionCache) -> None:
        self._env, self._sessions = env, sessions
        self._log: list[tuple[str, dict[str, Any], str]] = []
        self._session: EnvSession | None = None
        self._lock = threading.Lock()
        self._db_hash: str | None = None

    @contextmanager
    def step(self) -> Iterator[None]:
        """Lease a session for one tool step, restored to the attempt's state."""
        with self._sessions.lease(self._env) as session:
            for index, (name, args, output) in enumerate(self._log):
                if canonical_json(session.call(name, args)) != output:
                    raise SandboxError(f"env {self._env.env_id} is not deterministic: replaying call {index} "
                                       f"({name}) of the attempt gave a different output")  # fmt: skip
            self._session = session
            try:
                yield
            finally:
                self._session = None
            self._db_hash = session.db_hash()

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:  # ToolNode runs one message's calls on threads: the log keeps their execution order
            if self._session is None:
                raise SandboxError("tool called outside a tool step")
            output = self._session.call(name, args)
            self._log.append((name, args, canonical_json(output)))
            return output

    def db_hash(self) -> str:
        """The attempt's final DB hash (the initial DB's when no tool step ran)."""
        if self._db_hash is None:
            with self.step():
                pass
        return self._db_hash or ""


def _env_tools(env: Environment, attempt_env: _AttemptEnv) -> list[StructuredTool]:
    """The env's tools with their exact JSON schemas; calls go through the attempt's session (which validates)."""

    def make(name: str) -> StructuredTool:
        def call(**kwargs: Any) -> str:
            return json.dumps(attempt_env.call(name, kwargs), ensure_ascii=False, sort_keys=True)

        return call

    return [
        StructuredTool.from_function(
            func=make(s.name), name=s.name, description=s.description, args_schema=dict(s.parameters)
        )
        for s in env.schemas
    ]


def _invoke_with_retries(
    model: Any, messages: list[AnyMessage], cfg: TeacherConfig, rng: random.Random, slots: threading.Semaphore | None
) -> Any:
    """One model call (holding one of the stage's LLM slots); transient errors are retried with jittered backoff."""
    attempt = 0
    while True:
        try:
            with slots or nullcontext():
                return model.invoke(messages)
        except openai.APIError as exc:
            if not is_transient(exc) or attempt >= cfg.max_retries:
                raise LLMError(f"teacher endpoint failed after {attempt} retries: {type(exc).__name__}: {exc}") from exc
            delay = min(cfg.backoff_max_s, cfg.backoff_base_s * 2**attempt) * (0.5 + rng.random() / 2)
            attempt += 1
            logger.info(
                "teacher endpoint %s; retry %d/%d in %.2fs", type(exc).__name__, attempt, cfg.max_retries, delay
            )
            time.sleep(delay)


def _agent_graph(
    model: Any, tools: list[StructuredTool], attempt_env: _AttemptEnv, cfg: TeacherConfig, rng: random.Random,
    slots: threading.Semaphore | None,
) -> Any:  # fmt: skip
    """StateGraph: agent ⇄ tools (ToolNode in a leased session), ending on a reply without tool calls or after
    max_turns."""
    tool_node = ToolNode(tools, handle_tool_errors=(ToolError,))

    def agent(state: _AgentState) -> dict[str, Any]:
        reply = _invoke_with_retries(model, state["messages"], cfg, rng, slots)
        return {"messages": [reply], "turns": state["turns"] + 1}

    def run_tools(state: _AgentState) -> Any:
        with attempt_env.step():
            return tool_node.invoke(state)

    def route(state: _AgentState) -> str:
        last = state["messages"][-1]
        wants_tools = isinstance(last, AIMessage) and bool(last.tool_calls)
        return "tools" if wants_tools and state["turns"] < cfg.max_turns else END

    graph = StateGraph(_AgentState)
    graph.add_node("agent", agent)
    graph.add_node("tools", run_tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile()


def _task_messages(text: TaskText, cfg: TeacherConfig) -> list[BaseMessage]:
    history: list[BaseMessage] = [
        HumanMessage(t["content"]) if t.get("role") == "user" else AIMessage(t.get("content", ""))
        for t in text.dialogue_history
    ]
    return [SystemMessage(cfg.system_prompt), *history, HumanMessage(text.user_query)]


def _agent_turns(messages: Sequence[BaseMessage], skip: int) -> list[list[ToolCall]]:
    return [
        [ToolCall(name=c["name"], arguments=dict(c.get("args") or {})) for c in m.tool_calls]
        for m in messages[skip:]
        if isinstance(m, AIMessage) and m.tool_calls
    ]


def _same_state(env: Environment, sessions: _SessionCache, attempt: _AttemptEnv, trace: GoldenTrace) -> bool:
    """The attempt's final DB equals the gold one modulo creation order (replays both; only asked on a hash miss)."""
    with sessions.lease(env) as session:
        initial = session.db()
        for name, args, _ in attempt._log:
            session.call(name, args)
        agent_db = session.db()
    with sessions.lease(env) as session:
        for call in (c for stage in trace.stages for c in stage.calls):
            session.call(call.name, dict(call.arguments))
        return same_final_state(agent_db, session.db(), initial)


def _final_reply(messages: Sequence[BaseMessage], skip: int) -> str:
    """Text of the agent's last message (its answer to the user)."""
    last = next((m for m in reversed(messages[skip:]) if isinstance(m, AIMessage)), None)
    return "" if last is None or not isinstance(last.content, str) else last.content


def _api_key(cfg: TeacherConfig) -> str:
    return os.environ.get(cfg.api_key_env) or "EMPTY"  # local servers need none; never logged


def _chat_model(cfg: TeacherConfig, model: str, attempt: int) -> BaseChatModel:
    return ChatOpenAI(
        model=model,
        base_url=cfg.base_url,
        api_key=_api_key(cfg),
        max_retries=0,
        timeout=cfg.timeout_s,
        temperature=cfg.temperature,
        seed=cfg.seed + attempt,
    )


def _resolve_model(cfg: TeacherConfig) -> str:
    """The configured model, else the first one the endpoint lists."""
    if cfg.model:
        return cfg.model
    client = openai.OpenAI(base_url=cfg.base_url, api_key=_api_key(cfg), timeout=cfg.timeout_s, max_retries=2)
    try:
        models = client.models
        return models.list().data[0].id
    except (openai.APIError, IndexError) as exc:
        raise LLMError(f"teacher endpoint lists no model: {exc}") from exc


def _run_attempt(
    record: TaskRecord, env: Environment, cfg: TeacherConfig, attempt: int, opts: _AttemptOpts
) -> AttemptScore:
    rng = random.Random(f"{cfg.seed}:{record.task_id}:{attempt}")
    messages = _task_messages(record.text, cfg)
    attempt_env = _AttemptEnv(env, opts.sessions)
    tools = _env_tools(env, attempt_env)
    model = _chat_model(cfg, opts.model, attempt).bind_tools(tools)
    graph = _agent_graph(model, tools, attempt_env, cfg, rng, opts.llm_slots)
    try:
        state = graph.invoke(
            {"messages": messages, "turns": 0},
            {"recursion_limit": 2 * cfg.max_turns + 4, "max_concurrency": 1},
        )
        final_hash = attempt_env.db_hash()
        same = None if final_hash == record.trace.final_db_hash else _same_state(env, opts.sessions, attempt_env,
                                                                                  record.trace)  # fmt: skip
    except SandboxError as exc:
        logger.info("teacher attempt %d on %s hit an env fault: %s", attempt, record.task_id, exc)
        return score_attempt(record.trace, [], "", error=f"{type(exc).__name__}: {exc}")
    return score_attempt(
        record.trace,
        _agent_turns(state["messages"], len(messages)),
        final_hash,
        final_reply=_final_reply(state["messages"], len(messages)),
        expected_answer=record.text.expected_answer,
        same_state=same,
    )


def run_teacher(
    record: TaskRecord,
    env: Environment,
    cfg: TeacherConfig,
    *,
    session_seed: int = 0,
    pool: SandboxPool | None = None,
) -> TeacherResult:
    """Let the teacher agent try the task `cfg.k` times, each on a fresh session.

    Args:
        record: The task (text shown to the agent; trace used for scoring).
        env: Its environment.
        cfg: Teacher endpoint and agent settings.
        session_seed: Seed of the sandbox's random/uuid4 in each session.
        pool: Warm sandbox workers to borrow from; default a new worker per attempt.

    Returns:
        status "not_run" (no endpoint), "passed" (some attempt scored 1), "failed", or "teacher_error"
        (endpoint errors persisted through the retries; `error` says which).
    """
    if not cfg.enabled:
        return TeacherResult(status="not_run")
    outcomes: list[AttemptScore | LLMError] = []
    sessions = _SessionCache(pool, session_seed, limit=1)
    try:
        opts = _AttemptOpts(_resolve_model(cfg), sessions)
        for attempt in range(cfg.k):
            outcomes.append(_attempt_outcome(record, env, cfg, attempt, opts))
            if isinstance(outcomes[-1], LLMError):
                break
    except LLMError as exc:
        outcomes.append(exc)
    finally:
        sessions.close()
    return _teacher_result(record, cfg, outcomes)


def _attempt_outcome(
    record: TaskRecord, env: Environment, cfg: TeacherConfig, attempt: int, opts: _AttemptOpts
) -> AttemptScore | LLMError:
    try:
        return _run_attempt(record, env, cfg, attempt, opts)
    except LLMError as exc:
        return exc


def _teacher_result(
    record: TaskRecord, cfg: TeacherConfig, outcomes: Sequence[AttemptScore | LLMError]
) -> TeacherResult:
    """Pass@k over the attempts, or teacher_error when an attempt's endpoint failed for good."""
    scores = [o for o in outcomes if isinstance(o, AttemptScore)]
    errors = [o for o in outcomes if isinstance(o, LLMError)]
    if errors:
        logger.warning("teacher error on %s: %s", record.task_id, errors[0])
        return TeacherResult(status="teacher_error", attempts=tuple(scores), error=str(errors[0]))
    solved = sum(s.trace_score == 1.0 for s in scores)
    return TeacherResult(
        status="passed" if solved else "failed",
        pass_at_k=pass_at_k(len(scores), solved, min(cfg.pass_k, len(scores))),
        solve_rate=solved / len(scores),
        attempts=tuple(scores),
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts with c solved (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

    Example:
        >>> pass_at_k(8, 0, 4), pass_at_k(8, 8, 1), round(pass_at_k(8, 2, 4), 4)
        (0.0, 1.0, 0.7857)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# ------------------------------------------------------------------------------------------ orchestration


def _toolset(record: TaskRecord) -> frozenset[str]:
    return frozenset(call.name for stage in record.trace.stages for call in stage.calls)


def diversity_order(records: Sequence[TaskRecord], tier: Callable[[TaskRecord], int] | None = None) -> list[TaskRecord]:
    """Order one environment's tasks so a prefix is diverse: tasks that call tools no earlier task called first
    (most new tools first), then tasks that change state (the final-state check then says something, and write flows
    are the scarce kind: issue 20 wants half the tasks to), then unseen combinations of covered tools.

    With `tier`, lower tiers come first (e.g. tasks that pass the quality checks before those that will be
    dropped), diverse within each tier. Ties break on task_id, so the order is deterministic.
    """
    seen: set[frozenset[str]] = set()
    covered: set[str] = set()
    order: list[TaskRecord] = []
    tiers: dict[int, list[TaskRecord]] = defaultdict(list)
    for record in records:
        tiers[tier(record) if tier else 0].append(record)
    for level in sorted(tiers):
        remaining = sorted(tiers[level], key=lambda r: r.task_id)
        while remaining:
            best = max(
                remaining, key=lambda r: (len(_toolset(r) - covered), changes_state(r.trace), _toolset(r) not in seen,
                                          -remaining.index(r))
            )
            remaining.remove(best)
            order.append(best)
            seen.add(_toolset(best))
            covered |= _toolset(best)
    return order


def quality_tier(record: TaskRecord, schemas: Mapping[str, Any], cfg: QualityConfig) -> int:
    """0: passes the quality checks and chains calls; 1: passes but is single-stage; 2: will be dropped."""
    findings = analyze_task(record, schemas, cfg)
    if failure_reasons(findings, cfg):
        return 2
    return 1 if findings.single_stage else 0


def _drop(record: TaskRecord, reason: str, detail: str = "") -> QuarantineRecord:
    return QuarantineRecord(item_id=record.task_id, stage=STAGE, reason=reason, detail=detail[:2000])


def _cheap_checks(
    record: TaskRecord, envs: Mapping[str, Environment], cfg: VerifyConfig, sessions: _SessionCache
) -> TaskRecord | QuarantineRecord:
    """Replay and solvability; returns the updated record or its quarantine entry."""
    env = envs.get(record.env_id)
    if env is None:
        return _drop(record, "env_missing", record.env_id)
    try:
        with sessions.lease(env) as session:
            replay = _replay_in(record.trace, session)
    except SandboxError as exc:
        return _drop(record, "replay_error", f"{type(exc).__name__}: {exc}")
    if not replay.ok:
        return _drop(record, "replay_mismatch", "; ".join(replay.mismatches))
    solvable = check_solvable(record.trace, record.text)
    if cfg.require_solvable and not solvable.ok:
        return _drop(record, "unsolvable", "missing " + ", ".join(solvable.missing))
    provenance = {**record.provenance, "role:verification": verification_producer(cfg.teacher)}
    return record.model_copy(update={"replay_ok": True, "solvable": solvable.ok, "provenance": provenance})


def verification_producer(cfg: TeacherConfig) -> str:
    """Who verified: the deterministic replay/solvability checks, plus the teacher model when it ran."""
    if not cfg.enabled:
        return "offline (replay + solvability checks; teacher not run)"
    return f"replay + solvability checks + teacher openai:{cfg.model or 'endpoint default model'} (pass@{cfg.pass_k})"


def _apply_teacher(record: TaskRecord, result: TeacherResult) -> TaskRecord | QuarantineRecord:
    if result.status == "teacher_error":
        return _drop(record, "teacher_error", result.error or "")
    if result.status == "failed":
        detail = "trace scores " + ", ".join(f"{s.trace_score:.2f}" for s in result.attempts)
        return _drop(record, "teacher_failed", detail)
    return record.model_copy(
        update={"teacher_status": result.status, "pass_at_k": result.pass_at_k, "solve_rate": result.solve_rate}
    )


class _Selection:
    """One environment's walk down its diversity order in waves, running the teacher only on as many tasks as the
    cap still needs. Tasks the quality stage will keep (and multi-stage ones) come first, so the cap fills with them.
    """

    def __init__(self, env: Environment, candidates: Sequence[TaskRecord], cfg: VerifyConfig, quality: QualityConfig):
        schemas = {s.name: s for s in env.schemas}
        self.env, self.cap = env, cfg.max_tasks_per_env
        self.queue = diversity_order(candidates, lambda r: quality_tier(r, schemas, quality))
        self.kept: list[TaskRecord] = []
        self.dropped: list[QuarantineRecord] = []
        self.wave: list[TaskRecord] = []
        self._results: dict[str, TeacherResult] = {}

    def next_wave(self) -> list[TaskRecord]:
        """The next tasks to try ([] once the cap is full or the queue empty: the rest is dropped as env_cap)."""
        need = self.cap - len(self.kept)
        self.wave, self.queue = (self.queue[:need], self.queue[need:]) if need > 0 else ([], self.queue)
        self._results = {}
        if not self.wave:
            self.dropped += [_drop(r, "env_cap", f"over {self.cap} tasks for {r.env_id}") for r in self.queue]
            self.queue = []
        return self.wave

    def settle(self, record: TaskRecord, result: TeacherResult) -> bool:
        """Record one task's verdict; True when its wave is complete (and applied in wave order)."""
        self._results[record.task_id] = result
        if len(self._results) < len(self.wave):
            return False
        for task in self.wave:
            outcome = _apply_teacher(task, self._results[task.task_id])
            (self.kept if isinstance(outcome, TaskRecord) else self.dropped).append(outcome)  # type: ignore[arg-type]
        return True


class _TaskRun(NamedTuple):
    selection: _Selection
    record: TaskRecord
    outcomes: list[AttemptScore | LLMError | None]
    waiting: set[Future[AttemptScore | LLMError]]


class _TeacherScheduler:
    """Every attempt of every task of every environment is one job on a shared thread pool: LLM requests are in
    flight up to `max_concurrency` (a semaphore held only around each model call), while sandbox sessions are
    leased only for tool steps. An environment's next wave starts as soon as its previous wave is settled."""

    def __init__(self, cfg: VerifyConfig, threads: ThreadPoolExecutor, sessions: _SessionCache) -> None:
        self.cfg, self.threads = cfg, threads
        self.pending: dict[Future[AttemptScore | LLMError], tuple[_TaskRun, int]] = {}
        self.selections: list[_Selection] = []
        self._opts: _AttemptOpts | None = None
        self._model_error: LLMError | None = None
        if cfg.teacher.enabled:
            try:
                model = _resolve_model(cfg.teacher)
            except LLMError as exc:
                self._model_error = exc
            else:
                slots = threading.BoundedSemaphore(cfg.teacher.max_concurrency)
                self._opts = _AttemptOpts(model, sessions, slots)

    def start(self, selection: _Selection) -> None:
        self.selections.append(selection)
        self._next_wave(selection)

    def _next_wave(self, selection: _Selection) -> None:
        while wave := selection.next_wave():
            if self._opts is None:  # teacher not run (or its endpoint lists no model): every verdict is known now
                error = self._model_error
                result = TeacherResult(status="teacher_error", error=str(error)) if error else TeacherResult(
                    status="not_run")  # fmt: skip
                for record in wave:
                    selection.settle(record, result)
                continue
            for record in sorted(wave, key=lambda r: -len(r.trace.stages)):  # longest first: a shorter tail
                run = _TaskRun(selection, record, [None] * self.cfg.teacher.k, set())
                for attempt in range(self.cfg.teacher.k):
                    future = self.threads.submit(
                        _attempt_outcome, record, selection.env, self.cfg.teacher, attempt, self._opts
                    )
                    run.waiting.add(future)
                    self.pending[future] = (run, attempt)
            return

    def drain(self, *, block: bool) -> None:
        """Take in finished attempts (waiting for at least one when `block`)."""
        if not self.pending:
            return
        done, _ = wait(list(self.pending), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for future in done:
            if future in self.pending:
                self._finished(future)

    def _finished(self, future: Future[AttemptScore | LLMError]) -> None:
        run, attempt = self.pending.pop(future)
        run.waiting.discard(future)
        outcome = future.result()
        run.outcomes[attempt] = outcome
        if isinstance(outcome, LLMError):  # the task is given up: attempts not started yet are not sent
            for sibling in list(run.waiting):
                if sibling.cancel():
                    run.waiting.discard(sibling)
                    self.pending.pop(sibling, None)
        if run.waiting:
            return
        result = _teacher_result(run.record, self.cfg.teacher, [o for o in run.outcomes if o is not None])
        if run.selection.settle(run.record, result):
            self._next_wave(run.selection)


def verify_tasks(
    records: Sequence[TaskRecord],
    envs: Mapping[str, Environment],
    cfg: VerifyConfig | None = None,
    *,
    pool: SandboxPool | None = None,
    quality: QualityConfig | None = None,
) -> VerifyOutcome:
    """Verify task records: replay, solvability, teacher Pass@k (or not run), per-environment cap.

    Args:
        records: Unverified task records (from `tdg.taskgen.make_task_record`).
        envs: env_id -> loaded `Environment`.
        cfg: Verification config; default `VerifyConfig()` (teacher not run, cap 10).
        pool: Warm sandbox workers shared by every session; default a new worker per session.
        quality: Quality checks that rank each environment's tasks before the cap (default `QualityConfig()`).

    Returns:
        Kept records with `replay_ok`, `solvable`, `teacher_status`, `pass_at_k` set, the quarantined ones
        (reasons: duplicate, env_missing, replay_error, replay_mismatch, unsolvable, teacher_error,
        teacher_failed, env_cap) and a balanced `StageReport`.
    """
    cfg = cfg or VerifyConfig()
    quality = quality or QualityConfig()
    dropped: list[QuarantineRecord] = []
    by_env: dict[str, list[TaskRecord]] = defaultdict(list)
    seen: set[str] = set()
    for record in sorted(records, key=lambda r: (r.env_id, r.task_id)):
        if record.task_id in seen:
            dropped.append(_drop(record, "duplicate"))
            continue
        seen.add(record.task_id)
        by_env[record.env_id].append(record)
    slack = pool.size if pool is not None else cfg.teacher.max_concurrency  # attempts in a tool step hold no slot
    sessions = _SessionCache(pool, cfg.session_seed, limit=slack)
    with (
        contextlib.closing(sessions),
        ThreadPoolExecutor(max_workers=cfg.teacher.max_concurrency + slack, thread_name_prefix="teacher") as threads,
    ):
        scheduler = _TeacherScheduler(cfg, threads, sessions)
        for env_id in sorted(by_env):  # replay + solvability of one env, then its teacher runs behind the next env's
            candidates: list[TaskRecord] = []
            for record in by_env[env_id]:
                checked = _cheap_checks(record, envs, cfg, sessions)
                (dropped if isinstance(checked, QuarantineRecord) else candidates).append(checked)  # type: ignore[arg-type]
            if candidates:
                scheduler.start(_Selection(envs[env_id], candidates, cfg, quality))
            scheduler.drain(block=False)
        while scheduler.pending:
            scheduler.drain(block=True)
    kept = [r for s in scheduler.selections for r in s.kept]
    dropped += [q for s in scheduler.selections for q in s.dropped]
    counts = Counter(q.reason for q in dropped)
    report = StageReport(stage=STAGE, inputs=len(records), produced=len(kept), dropped=dict(sorted(counts.items())))
    logger.info("verify: %d in, %d kept, dropped %s", len(records), len(kept), dict(counts))
    return VerifyOutcome(
        kept=tuple(sorted(kept, key=lambda r: (r.env_id, r.task_id))), dropped=tuple(dropped), report=report
    )
