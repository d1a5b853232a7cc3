"""OpenAI-compatible chat client: bounded concurrency, transient-only jittered retries, circuit breaker, disk cache.

All HTTP work runs on one private event loop per client (a daemon thread started on first use), so one
semaphore, one connection pool and one set of counters serve every caller: `await achat(...)` from any event
loop and `chat(...)` from any thread. `chat` called from inside a running event loop works but blocks that
loop until the answer arrives; async code should `await achat(...)` instead.

`client.view()` returns a client sharing that machinery (loop, semaphore, cache, breaker, token budget) with
counters of its own, so one build-wide client can account each stage shard separately.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, fields
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from gustforge.errors import ConfigError, LLMBudgetExceeded, LLMError, LLMOutputError, TransientLLMError
from gustforge.llm.cache import ResponseCache, cache_key
from gustforge.llm.settings import LLMSettings

if TYPE_CHECKING:  # openai costs ~1 s to import; offline runs never need it
    from openai import AsyncOpenAI

__all__ = ["ChatResult", "LLMStats", "LLMClient", "LLMUsage", "is_transient"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Message = Mapping[str, Any]
DEFAULT_ROLE = "chat"


@dataclass(frozen=True)
class ChatResult:
    """One assistant turn.

    Attributes:
        content: Assistant text, or None when the model only called tools.
        tool_calls: OpenAI-shaped calls `{"id", "type": "function", "function": {"name", "arguments"}}`,
            `arguments` being the JSON string the model produced.
        cached: True when served from the response cache without an HTTP request.
        raw: The full chat.completions response as JSON.
        key: The request's cache key (what `LLMClient.remember` stores the reply under).
    """

    content: str | None
    tool_calls: list[dict[str, Any]]
    cached: bool
    raw: dict[str, Any]
    key: str = ""

    @property
    def finish_reason(self) -> str | None:
        choices = self.raw.get("choices") or [{}]
        return choices[0].get("finish_reason")

    @property
    def reasoning_content(self) -> str | None:
        """The separate reasoning text some servers return (vLLM/SGLang `--reasoning-parser`); never parsed."""
        choices = self.raw.get("choices") or [{}]
        return (choices[0].get("message") or {}).get("reasoning_content")


@dataclass(frozen=True)
class LLMStats:
    """Counters: `requests` = HTTP attempts (retries included); `failures` = calls that raised."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: LLMStats) -> LLMStats:
        return LLMStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total_tokens": self.total_tokens}


@dataclass
class LLMUsage:
    """Thread-safe counters per role."""

    _by_role: dict[str, LLMStats] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bump(self, role: str, **deltas: int) -> None:
        with self._lock:
            current = self._by_role.get(role, LLMStats())
            self._by_role[role] = LLMStats(**{f.name: getattr(current, f.name) + deltas.get(f.name, 0)
                                              for f in fields(current)})  # fmt: skip

    def by_role(self) -> dict[str, LLMStats]:
        with self._lock:
            return dict(sorted(self._by_role.items()))

    def total(self) -> LLMStats:
        return sum(self.by_role().values(), LLMStats())


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: 429, 5xx, timeouts and connection errors."""
    import openai

    if isinstance(exc, openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError):
        return True  # APITimeoutError is an APIConnectionError
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


def _result_from_raw(raw: dict[str, Any], *, cached: bool, key: str = "") -> ChatResult:
    choices = raw.get("choices") or []
    if not choices:
        raise LLMOutputError(f"response has no choices: {str(raw)[:200]}")
    message = choices[0].get("message") or {}
    calls = [
        {"id": c.get("id"), "type": "function", "function": dict(c.get("function") or {})}
        for c in message.get("tool_calls") or []
    ]
    return ChatResult(content=message.get("content"), tool_calls=calls, cached=cached, raw=raw, key=key)


class _PrioritySlots:
    """`max_concurrency` request slots handed out lowest priority value first (FIFO within a priority).

    Lives on the client's private loop (single thread, no locks). Roles set their priority (`llm.roles.<role>`);
    envgen's default is the item with the most requests still ahead first (refactor, then database, then codegen).
    """

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def acquire(self, priority: int) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # the slot arrived as this waiter was cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1


class _Shared:
    """What every view of one client shares: loop, HTTP client, semaphore, cache, breaker, token budget."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.cache = ResponseCache(settings.cache_path) if settings.cache_path is not None else None
        self.rng = random.Random(settings.retry_seed)
        self.usage = LLMUsage()
        self.start_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.openai: AsyncOpenAI | None = None
        self.slots = _PrioritySlots(settings.max_concurrency)
        self.model: str | None = settings.model
        self.closed = False
        self.consecutive_failures = 0
        self.open_until = 0.0


class LLMClient:
    """Chat client for an OpenAI-compatible endpoint (vLLM, SGLang, hosted APIs).

    Args:
        settings: Backend settings; an offline client runs roles offline but cannot chat.

    Example:
        >>> with LLMClient(LLMSettings()) as client:
        ...     client.stats.requests
        0
    """

    def __init__(self, settings: LLMSettings, *, _shared: _Shared | None = None) -> None:
        self.settings = settings
        self._owner = _shared is None
        self._shared = _shared if _shared is not None else _Shared(settings)
        self._usage = self._shared.usage if self._owner else LLMUsage()

    # ------------------------------------------------------------------ public API
    def view(self) -> LLMClient:
        """A client sharing this one's loop, semaphore, cache, breaker and budget, with counters of its own.

        Closing a view does nothing; the owner closes the shared machinery.
        """
        return LLMClient(self.settings, _shared=self._shared)

    @property
    def stats(self) -> LLMStats:
        """A snapshot of this client's (or view's) counters over every role."""
        return self._usage.total()

    def role_stats(self) -> dict[str, LLMStats]:
        """This client's (or view's) counters per role."""
        return self._usage.by_role()

    @property
    def _cache(self) -> ResponseCache | None:
        return self._shared.cache

    async def achat(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        role: str = DEFAULT_ROLE,
        store: bool = True,
        refresh: bool = False,
        timeout_s: float | None = None,
        priority: int = 0,
        **params: Any,
    ) -> ChatResult:
        """Send one chat.completions request (or answer it from the cache).

        Args:
            messages: OpenAI chat messages.
            tools: OpenAI tool definitions (`{"type": "function", "function": {...}}`), if any.
            role: Name the call is accounted under.
            store: Cache the reply at once; roles pass False and `remember` it only once it validated.
            refresh: Skip the cache lookup (the reply is still stored when `store`).
            timeout_s: This request's timeout (default `settings.timeout_s`); not part of the cache key.
            priority: Lower values get a free request slot first; not part of the cache key.
            **params: Extra request fields (`max_tokens`, `seed`, `response_format`, `temperature`,
                `chat_template_kwargs`, ...); they are part of the cache key, so pass a distinct `seed` to draw
                several samples of one prompt.

        Returns:
            The assistant turn.

        Raises:
            ConfigError: The backend is offline, or the client is closed.
            TransientLLMError: Transient failures persisted through `max_retries` retries, the circuit
                breaker is open, or `max_total_tokens` is spent (`LLMBudgetExceeded`).
            LLMError: A non-transient API error (400, 401, 404, ...).
            LLMOutputError: The response had no choices.
        """
        loop = self._ensure_started()
        coro = self._achat(list(messages), None if tools is None else list(tools), params,
                           role=role, store=store, refresh=refresh, timeout_s=timeout_s, priority=priority)  # fmt: skip
        if asyncio.get_running_loop() is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def chat(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **params: Any
    ) -> ChatResult:
        """Blocking `achat`; safe from any thread (see the module docstring about running loops)."""
        return self.run_sync(self.achat(messages, tools=tools, **params))

    def remember(self, result: ChatResult, key: str | None = None) -> None:
        """Cache `result` under `key` (default its own request's key): used for replies that validated."""
        target = key or result.key
        if self._cache is None or not target or (result.cached and target == result.key):
            return
        self._cache.put(target, result.raw)

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the client's private loop and block until it finishes.

        Raises:
            ConfigError: Called from the client's own loop thread (it would deadlock).
        """
        try:
            loop = self._ensure_started()
            if threading.current_thread() is self._shared.thread:
                raise ConfigError("LLMClient.run_sync called from the client's own event loop; await instead")
        except ConfigError:
            coro.close()
            raise
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result()

    def close(self) -> None:
        """Close the HTTP client, stop the private loop and close the cache. Idempotent; a no-op on views."""
        if not self._owner:
            return
        shared = self._shared
        with shared.start_lock:
            if shared.closed:
                return
            shared.closed = True
            loop, thread = shared.loop, shared.thread
        if loop is not None and thread is not None:
            if shared.openai is not None:
                asyncio.run_coroutine_threadsafe(shared.openai.close(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()
        if shared.cache is not None:
            shared.cache.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _bump(self, role: str, **deltas: int) -> None:
        self._usage.bump(role, **deltas)
        if not self._owner:
            self._shared.usage.bump(role, **deltas)

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        shared = self._shared
        with shared.start_lock:
            if shared.closed:
                raise ConfigError("LLMClient is closed")
            if self.settings.backend != "openai":
                raise ConfigError(f"backend {self.settings.backend!r} has no chat endpoint; use backend='openai'")
            if shared.loop is None:
                shared.loop = asyncio.new_event_loop()
                shared.thread = threading.Thread(
                    target=shared.loop.run_forever, name=f"gust-llm-{id(shared):x}", daemon=True
                )
                shared.thread.start()
            return shared.loop

    def _http(self) -> AsyncOpenAI:
        shared = self._shared
        if shared.openai is None:  # only ever touched on the private loop thread
            from openai import AsyncOpenAI

            shared.openai = AsyncOpenAI(
                base_url=self.settings.base_url,
                api_key=self.settings.resolve_api_key(),
                timeout=self.settings.timeout_s,
                max_retries=0,  # retries are ours: transient-only, jittered, counted
            )
        return shared.openai

    async def _resolve_model(self, role: str) -> str:
        shared = self._shared
        if shared.model is None:
            page = await self._with_retries(lambda: self._http().models.list(), role)
            ids = [m.id for m in page.data]
            if not ids:
                raise LLMError(f"endpoint {self.settings.base_url} lists no models; set LLMSettings.model")
            shared.model = ids[0]
        return shared.model

    async def _achat(
        self, messages: list[Message], tools: list[Mapping[str, Any]] | None, params: Mapping[str, Any], *,
        role: str, store: bool, refresh: bool, timeout_s: float | None, priority: int = 0,
    ) -> ChatResult:  # fmt: skip
        try:
            model = await self._resolve_model(role)
            full_params = {"temperature": self.settings.temperature, **params}
            key = cache_key(model=model, messages=messages, tools=tools, params=full_params)
            hit = self._cache.get(key) if self._cache is not None and not refresh else None
            if hit is not None:
                self._bump(role, cache_hits=1)
                logger.debug("llm cache hit %s", key[:12])
                return _result_from_raw(hit, cached=True, key=key)
            request: dict[str, Any] = {"model": model, "messages": messages, **full_params}
            template_kwargs = request.pop("chat_template_kwargs", None)
            if template_kwargs:
                request["extra_body"] = {**request.get("extra_body", {}), "chat_template_kwargs": template_kwargs}
            if tools:
                request["tools"] = tools
            if timeout_s is not None:
                request["timeout"] = timeout_s
            response = await self._with_retries(lambda: self._http().chat.completions.create(**request), role,
                                                priority)  # fmt: skip
            raw: dict[str, Any] = response.model_dump(mode="json", exclude_none=True)
            usage = raw.get("usage") or {}
            self._bump(role, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                       completion_tokens=int(usage.get("completion_tokens") or 0))  # fmt: skip
            result = _result_from_raw(raw, cached=False, key=key)
            if store and self._cache is not None:
                self._cache.put(key, raw)
            return result
        except LLMError:
            self._bump(role, failures=1)
            raise

    def _check_gates(self) -> None:
        """Fail fast (no request) while the breaker is open or the token budget is spent."""
        shared, limit = self._shared, self.settings.max_total_tokens
        if limit is not None:
            used = shared.usage.total().total_tokens
            if used >= limit:
                raise LLMBudgetExceeded(f"llm.max_total_tokens={limit} reached ({used} tokens used); "
                                        "raise it and rerun to resume")  # fmt: skip
        with shared.state_lock:
            wait = shared.open_until - time.monotonic()
        if wait > 0:
            raise TransientLLMError(
                f"circuit breaker open: {shared.consecutive_failures} calls in a row failed after retries; "
                f"endpoint {self.settings.base_url} not contacted for another {wait:.0f}s"
            )

    def _record_outcome(self, ok: bool) -> None:
        shared = self._shared
        with shared.state_lock:
            if ok:
                shared.consecutive_failures = 0
                return
            shared.consecutive_failures += 1
            if shared.consecutive_failures >= self.settings.breaker_threshold:
                if shared.open_until <= time.monotonic():
                    logger.warning("LLM endpoint %s looks down (%d calls failed in a row); pausing %.0fs",
                                   self.settings.base_url, shared.consecutive_failures,
                                   self.settings.breaker_cooldown_s)  # fmt: skip
                shared.open_until = time.monotonic() + self.settings.breaker_cooldown_s

    async def _with_retries(self, send: Callable[[], Awaitable[T]], role: str, priority: int = 0) -> T:
        import openai

        attempts = self.settings.max_retries + 1
        attempt = 0
        while True:
            self._check_gates()
            try:
                await self._shared.slots.acquire(priority)
                try:
                    self._check_gates()  # the breaker may have opened while this call waited
                    self._bump(role, requests=1)
                    value = await send()
                finally:
                    self._shared.slots.release()
                self._record_outcome(True)
                return value
            except openai.OpenAIError as exc:
                if not is_transient(exc):
                    raise LLMError(f"LLM request failed ({type(exc).__name__}): {exc}") from exc
                attempt += 1
                if attempt == attempts:
                    self._record_outcome(False)
                    raise TransientLLMError(
                        f"LLM request failed after {attempts} attempts ({type(exc).__name__}): {exc}"
                    ) from exc
                delay = self._backoff(attempt - 1, exc)
                self._bump(role, retries=1)
                logger.warning("transient LLM error (%s); retry %d/%d in %.2fs", exc, attempt, attempts - 1, delay)
                await asyncio.sleep(delay)

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        """Equal-jitter exponential backoff, raised to the server's Retry-After when it sends one."""
        cap = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2**attempt)
        delay = cap / 2 + self._shared.rng.uniform(0, cap / 2)
        response = getattr(exc, "response", None)
        retry_after = getattr(response, "headers", {}).get("retry-after") if response is not None else None
        try:
            return min(self.settings.backoff_max_s, max(delay, float(retry_after))) if retry_after else delay
        except ValueError:  # HTTP-date form; not worth parsing
            return delay
