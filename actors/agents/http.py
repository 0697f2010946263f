"""Providers that talk to real model servers over HTTP, streaming (the ``models`` extra).

The transport is an asynchronous client driven on the provider loop (`actors.agents.loop`):
a blocking client cannot be cancelled from another thread while the server is silent (a
long prefill, a model thinking), an asyncio task can, in milliseconds. So an interrupt
cuts off even a request that has received nothing yet.

Retries, with exponential backoff and jitter, cover only what cannot have produced output:
connection failures (refused, or closed before a byte of an answer came), 429 (honouring
``Retry-After``) and 5xx answers before the first byte of the body. Once output has
started, a failure ends the turn with its cause.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import orjson

from .accumulate import ProviderStreamError, SseDecoder
from .providers import PROVIDERS
from .window import ask_server
from .wire import ModelRequest, StreamEvent

try:
    import httpx2 as httpx
except ImportError:  # pragma: no cover - the models extra is not installed
    httpx = None  # type: ignore[assignment]

__all__ = ["HttpProvider", "ProviderError", "available"]

_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_MAX_RETRY_AFTER = 60.0
#: The largest whole (non-streamed) answer read.
_MAX_WHOLE = 16 * 1024 * 1024


#: The failures of a call that `HttpProvider._failure` sorts into retried and final.
_FAILURES = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.InvalidURL,
)


class ProviderError(Exception):
    """A model call failed for good; the message names the cause (status, body excerpt)."""


def available() -> bool:
    """Whether the HTTP client of the ``models`` extra is installed."""
    return httpx is not None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, min(float(value), _MAX_RETRY_AFTER))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import time

    return max(0.0, min(when.timestamp() - time.time(), _MAX_RETRY_AFTER))


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:300] + ("..." if len(text) > 300 else "")


def _cause(exc: BaseException) -> str:
    """What went wrong, named even when the client's error has no message of its own
    (a reset connection raises a bare ``ReadError``)."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        text = str(seen).strip()
        parts.append(f"{type(seen).__name__}: {text}" if text else type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


# One client per provider loop: its connection pool outlives a turn, so a conversation
# reuses its connection instead of paying a handshake per model call.
_clients: dict[int, Any] = {}
os.register_at_fork(after_in_child=_clients.clear)


def _client() -> Any:
    loop = asyncio.get_running_loop()
    c = _clients.get(id(loop))
    if c is None:
        # Proxies from the environment are ignored: a session's traffic goes where its
        # metadata says, and nowhere else.
        c = _clients[id(loop)] = httpx.AsyncClient(trust_env=False)
    return c


class _Read:
    """A body already read, for the stream reader."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self._raw


class HttpProvider:
    """A `Provider` for one wire format, by its name in `actors.agents.providers.PROVIDERS`."""

    def __init__(
        self,
        fmt: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
    ) -> None:
        wire = PROVIDERS.get(fmt)
        if wire is None:
            raise ValueError(f"unknown wire format {fmt!r}, known: {', '.join(PROVIDERS)}")
        if httpx is None:
            raise ProviderError(
                f"the {fmt} provider needs the models extra: pip install 'vertebra[models]'"
            )
        self.fmt = fmt
        self.wire = wire
        self.base_url = base_url
        self.url = wire.url(base_url)
        self._headers = wire.headers(api_key)
        self._timeout = httpx.Timeout(connect=connect_timeout, read=timeout, write=30.0, pool=30.0)
        self.read_timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.last_thinking: tuple[tuple[str, str], ...] = ()

    async def context_window(self, model: str) -> tuple[int, str] | None:
        """What the server says ``model``'s window is (None: it does not say, or no
        server of one's own is named)."""
        if not self.base_url:
            return None
        return await ask_server(_client(), self.base_url, self._headers, model)

    def _delay(self, attempt: int, hint: float | None) -> float:
        if hint is not None:
            return hint
        base: float = min(self.max_backoff, self.backoff * (2**attempt))
        return base / 2 + random.random() * base / 2

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        body = orjson.dumps(self.wire.body(request))
        client = _client()
        attempt = 0
        while True:
            answered = False
            try:
                async with client.stream(
                    "POST", self.url, content=body, headers=self._headers, timeout=self._timeout
                ) as resp:
                    answered = True
                    if resp.status_code >= 400:
                        excerpt = _excerpt(await resp.aread())
                        if resp.status_code in _RETRY_STATUS and attempt < self.retries:
                            hint = _retry_after(resp.headers.get("retry-after"))
                            await asyncio.sleep(self._delay(attempt, hint))
                            attempt += 1
                            continue
                        raise ProviderError(
                            f"{self.url} answered {resp.status_code}: {excerpt or 'no body'}"
                        )
                    async for ev in self._answer(resp):
                        yield ev
                    return
            except _FAILURES as exc:
                error, delay = self._failure(exc, answered, attempt)
                if error is not None:
                    raise error from None
                if delay:
                    await asyncio.sleep(delay)
                attempt += 1

    def _answer(self, resp: Any) -> AsyncIterator[StreamEvent]:
        """A 200's events: its event stream, or the whole response it stands for."""
        ctype = resp.headers.get("content-type", "")
        if "text/event-stream" in ctype.lower():
            return self._events(resp)
        return self._whole(resp, ctype)

    def _failure(
        self, exc: Exception, answered: bool, attempt: int
    ) -> tuple[ProviderError | None, float]:
        """What a failed call comes to: the error that ends it, or (None, the delay) when
        it is tried again."""
        retry = attempt < self.retries
        if isinstance(exc, httpx.ConnectError):
            if retry:
                return None, self._delay(attempt, None)
            return ProviderError(f"cannot connect to {self.url}: {exc}"), 0.0
        if isinstance(exc, httpx.ConnectTimeout):
            if retry:
                return None, 0.0
            return ProviderError(f"connecting to {self.url} timed out"), 0.0
        if isinstance(exc, httpx.ReadTimeout):
            return ProviderError(
                f"{self.url} sent nothing for {self.read_timeout:g} s (ore.model.timeout)"
            ), 0.0
        if isinstance(exc, httpx.InvalidURL):
            return ProviderError(f"invalid model server URL {self.url}: {exc}"), 0.0
        if answered:
            return ProviderError(f"the stream from {self.url} broke off: {_cause(exc)}"), 0.0
        # Closed before a byte of an answer came (a proxy whose server is down, a kept
        # connection the server had already closed): nothing can have been produced, so
        # it is retried like a refused connection.
        if retry:
            return None, self._delay(attempt, None)
        return ProviderError(
            f"{self.url} closed the connection before answering, {attempt + 1} times: {_cause(exc)}"
        ), 0.0

    async def _whole(self, resp: Any, ctype: str) -> AsyncIterator[StreamEvent]:
        """A 200 that is not an event stream: that format's whole response, read as the
        stream it stands for, or an error naming what came back."""
        raw = bytearray()
        async for chunk in resp.aiter_raw():
            raw += chunk
            if len(raw) > _MAX_WHOLE:
                break
        try:
            body = orjson.loads(raw) if len(raw) <= _MAX_WHOLE else None
        except orjson.JSONDecodeError:
            body = None
        if body is None and bytes(raw[:64]).lstrip().startswith((b"data:", b"event:", b":")):
            # An event stream under another content type (text/plain, none at all).
            async for ev in self._events(_Read(bytes(raw))):
                yield ev
            return
        stream = self.wire.whole(body) if isinstance(body, Mapping) else None
        if not stream:
            raise ProviderError(
                f"{self.url} answered 200 with {ctype or 'no content type'}, not an event "
                f"stream nor a {self.fmt} response: {_excerpt(bytes(raw[:400])) or 'no body'}"
            )
        acc = self.wire.accumulator()
        try:
            for obj in stream:
                for ev in acc.feed(obj):
                    yield ev
        except ProviderStreamError as exc:
            raise ProviderError(str(exc)) from None
        for ev in acc.finish():
            yield ev
        self.last_thinking = tuple(getattr(acc, "thinking", ()))

    async def _events(self, resp: Any) -> AsyncIterator[StreamEvent]:
        acc = self.wire.accumulator()
        dec = SseDecoder()
        done = False
        async for chunk in resp.aiter_raw():
            if done:
                # Read to the end of the body, so the pool can keep the connection for the
                # next call: stopping at the end marker closed it every time.
                continue
            for _event, data in dec.feed(chunk):
                if data.strip() == "[DONE]":
                    done = True
                    break
                try:
                    obj = orjson.loads(data)
                except orjson.JSONDecodeError:
                    raise ProviderError(
                        f"{self.url} sent a chunk that is not JSON: {data[:200]!r}"
                    ) from None
                try:
                    for ev in acc.feed(obj):
                        yield ev
                except ProviderStreamError as exc:
                    raise ProviderError(str(exc)) from None
        if not done:
            for _event, data in dec.close():
                if data.strip() != "[DONE]":
                    try:
                        obj = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        continue
                    try:
                        for ev in acc.feed(obj):
                            yield ev
                    except ProviderStreamError as exc:
                        raise ProviderError(str(exc)) from None
        for ev in acc.finish():
            yield ev
        # Anthropic's signed reasoning must go back with the tool results of this turn.
        self.last_thinking = tuple(getattr(acc, "thinking", ()))
