"""OpenAI-compatible chat client: bounded concurrency, transient-only jittered retries, disk cache.

All HTTP work runs on one private event loop per client (a daemon thread started on first use), so one
semaphore, one connection pool and one set of counters serve every caller: `await achat(...)` from any event
loop and `chat(...)` from any thread. `chat` called from inside a running event loop works but blocks that
loop until the answer arrives; async code should `await achat(...)` instead.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from gustforge.errors import ConfigError, LLMError, LLMOutputError, TransientLLMError
from gustforge.llm.cache import ResponseCache, cache_key
from gustforge.llm.settings import LLMSettings

if TYPE_CHECKING:  # openai costs ~1 s to import; offline runs never need it
    from openai import AsyncOpenAI

__all__ = ["ChatResult", "LLMStats", "LLMClient", "is_transient"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Message = Mapping[str, Any]


@dataclass(frozen=True)
class ChatResult:
    """One assistant turn.

    Attributes:
        content: Assistant text, or None when the model only called tools.
        tool_calls: OpenAI-shaped calls `{"id", "type": "function", "function": {"name", "arguments"}}`,
            `arguments` being the JSON string the model produced.
        cached: True when served from the response cache without an HTTP request.
        raw: The full chat.completions response as JSON.
    """

    content: str | None
    tool_calls: list[dict[str, Any]]
    cached: bool
    raw: dict[str, Any]

    @property
    def finish_reason(self) -> str | None:
        choices = self.raw.get("choices") or [{}]
        return choices[0].get("finish_reason")


@dataclass(frozen=True)
class LLMStats:
    """Client counters: `requests` = HTTP attempts (retries included); `failures` = calls that raised."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: 429, 5xx, timeouts and connection errors."""
    import openai

    if isinstance(exc, openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError):
        return True  # APITimeoutError is an APIConnectionError
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


def _result_from_raw(raw: dict[str, Any], *, cached: bool) -> ChatResult:
    choices = raw.get("choices") or []
    if not choices:
        raise LLMOutputError(f"response has no choices: {str(raw)[:200]}")
    message = choices[0].get("message") or {}
    calls = [
        {"id": c.get("id"), "type": "function", "function": dict(c.get("function") or {})}
        for c in message.get("tool_calls") or []
    ]
    return ChatResult(content=message.get("content"), tool_calls=calls, cached=cached, raw=raw)


class LLMClient:
    """Chat client for an OpenAI-compatible endpoint (vLLM, SGLang, hosted APIs).

    Args:
        settings: Backend settings; an offline client runs roles offline but cannot chat.

    Example:
        >>> with LLMClient(LLMSettings()) as client:
        ...     client.stats.requests
        0
    """

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self._cache = ResponseCache(settings.cache_path) if settings.cache_path is not None else None
        self._rng = random.Random(settings.retry_seed)
        self._stats = LLMStats()
        self._stats_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._openai: AsyncOpenAI | None = None
        # the semaphore binds to the private loop on first use
        self._semaphore = asyncio.Semaphore(settings.max_concurrency)
        self._model: str | None = settings.model
        self._closed = False

    # ------------------------------------------------------------------ public API
    @property
    def stats(self) -> LLMStats:
        """A snapshot of the counters."""
        with self._stats_lock:
            return self._stats

    async def achat(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **params: Any
    ) -> ChatResult:
        """Send one chat.completions request (or answer it from the cache).

        Args:
            messages: OpenAI chat messages.
            tools: OpenAI tool definitions (`{"type": "function", "function": {...}}`), if any.
            **params: Extra request fields (`max_tokens`, `seed`, `response_format`, `temperature`, ...); they
                are part of the cache key, so pass a distinct `seed` to draw several samples of one prompt.

        Returns:
            The assistant turn.

        Raises:
            ConfigError: The backend is offline, or the client is closed.
            TransientLLMError: Transient failures persisted through `max_retries` retries.
            LLMError: A non-transient API error (400, 401, 404, ...).
            LLMOutputError: The response had no choices.
        """
        loop = self._ensure_started()
        coro = self._achat(list(messages), None if tools is None else list(tools), params)
        if asyncio.get_running_loop() is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def chat(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None, **params: Any
    ) -> ChatResult:
        """Blocking `achat`; safe from any thread (see the module docstring about running loops)."""
        return self.run_sync(self.achat(messages, tools=tools, **params))

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the client's private loop and block until it finishes.

        Raises:
            ConfigError: Called from the client's own loop thread (it would deadlock).
        """
        try:
            loop = self._ensure_started()
            if threading.current_thread() is self._thread:
                raise ConfigError("LLMClient.run_sync called from the client's own event loop; await instead")
        except ConfigError:
            coro.close()
            raise
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result()

    def close(self) -> None:
        """Close the HTTP client, stop the private loop and close the cache. Idempotent."""
        with self._start_lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            if self._openai is not None:
                asyncio.run_coroutine_threadsafe(self._openai.close(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _bump(self, **deltas: int) -> None:
        with self._stats_lock:
            current = self._stats
            self._stats = replace(current, **{k: getattr(current, k) + v for k, v in deltas.items()})

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._closed:
                raise ConfigError("LLMClient is closed")
            if self.settings.backend != "openai":
                raise ConfigError(
                    f"backend {self.settings.backend!r} has no chat endpoint; use backend='openai'"
                )
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=f"gust-llm-{id(self):x}", daemon=True
                )
                self._thread.start()
            return self._loop

    def _http(self) -> AsyncOpenAI:
        if self._openai is None:  # only ever touched on the private loop thread
            from openai import AsyncOpenAI

            self._openai = AsyncOpenAI(
                base_url=self.settings.base_url,
                api_key=self.settings.resolve_api_key(),
                timeout=self.settings.timeout_s,
                max_retries=0,  # retries are ours: transient-only, jittered, counted
            )
        return self._openai

    async def _resolve_model(self) -> str:
        if self._model is None:
            page = await self._with_retries(lambda: self._http().models.list())
            ids = [m.id for m in page.data]
            if not ids:
                raise LLMError(f"endpoint {self.settings.base_url} lists no models; set LLMSettings.model")
            self._model = ids[0]
        return self._model

    async def _achat(
        self, messages: list[Message], tools: list[Mapping[str, Any]] | None, params: Mapping[str, Any]
    ) -> ChatResult:
        try:
            model = await self._resolve_model()
            full_params = {"temperature": self.settings.temperature, **params}
            key = cache_key(model=model, messages=messages, tools=tools, params=full_params)
            hit = self._cache.get(key) if self._cache is not None else None
            if hit is not None:
                self._bump(cache_hits=1)
                logger.debug("llm cache hit %s", key[:12])
                return _result_from_raw(hit, cached=True)
            request: dict[str, Any] = {"model": model, "messages": messages, **full_params}
            if tools:
                request["tools"] = tools
            response = await self._with_retries(lambda: self._http().chat.completions.create(**request))
            raw: dict[str, Any] = response.model_dump(mode="json", exclude_none=True)
            result = _result_from_raw(raw, cached=False)
            usage = raw.get("usage") or {}
            self._bump(
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
            )
            if self._cache is not None:
                self._cache.put(key, raw)
            return result
        except LLMError:
            self._bump(failures=1)
            raise

    async def _with_retries(self, send: Callable[[], Awaitable[T]]) -> T:
        import openai

        attempts = self.settings.max_retries + 1
        attempt = 0
        while True:
            try:
                async with self._semaphore:
                    self._bump(requests=1)
                    return await send()
            except openai.OpenAIError as exc:
                if not is_transient(exc):
                    raise LLMError(f"LLM request failed ({type(exc).__name__}): {exc}") from exc
                attempt += 1
                if attempt == attempts:
                    raise TransientLLMError(
                        f"LLM request failed after {attempts} attempts ({type(exc).__name__}): {exc}"
                    ) from exc
                delay = self._backoff(attempt - 1, exc)
                self._bump(retries=1)
                logger.warning(
                    "transient LLM error (%s); retry %d/%d in %.2fs", exc, attempt, attempts - 1, delay
                )
                await asyncio.sleep(delay)

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        """Equal-jitter exponential backoff, raised to the server's Retry-After when it sends one."""
        cap = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2**attempt)
        delay = cap / 2 + self._rng.uniform(0, cap / 2)
        response = getattr(exc, "response", None)
        retry_after = getattr(response, "headers", {}).get("retry-after") if response is not None else None
        try:
            return min(self.settings.backoff_max_s, max(delay, float(retry_after))) if retry_after else delay
        except ValueError:  # HTTP-date form; not worth parsing
            return delay
