"""The SSE response: headers through ASGI, then the body written straight to the socket.

A session's event goes to every one of its clients from one place (the hub's dispatch on
the event loop), so the cost per client per event is what bounds delivery to many
clients. Through the ASGI path each write costs a coroutine resumption, the framework's
send wrappers, the server's HTTP framing and a timeout scope; here, once the response has
started, the body goes to the connection's transport as ready HTTP/1.1 chunks (a batch of
events is framed once and the same bytes go to every client that takes all of it), and
only the end of the response goes through ASGI again, so the server's own state stays
right for the next request on the connection.

The transport is reached through uvicorn's h11 request cycle (`expose_transport`, the
outermost layer of the application, passes it down in the scope). Served any other way
(another server, another HTTP implementation) a response falls back to `Pipe`, which
sends through ASGI from one task per client; both are `Out`s with the same meaning.

A slow client is seen by the bytes its connection has not taken yet
(`Out.buffered`), not by a timeout per write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("vertebra.gateway")

#: The scope key under which `expose_transport` passes the request cycle down.
CYCLE_KEY = "vertebra.cycle"
#: Bytes a response may hold unsent before a catch-up waits for its client to read.
LOW_WATER = 64 * 1024
#: The opening comment and the reconnect delay a browser uses (milliseconds).
RETRY_MS = 1000
HELLO = b": vertebra\r\nretry: %d\r\n\r\n" % RETRY_MS
PING = b": ping\r\n\r\n"


def chunk(body: bytes) -> bytes:
    """``body`` as one HTTP/1.1 chunk (never empty: an empty chunk ends the body)."""
    return b"%x\r\n%b\r\n" % (len(body), body)


class Out(Protocol):
    """Where one response's body goes: written on the loop, never waiting."""

    @property
    def closed(self) -> bool: ...

    def write(self, body: bytes, framed: bytes | None = None) -> None:
        """Queue ``body`` (``framed``: the same body as a chunk, made once for many)."""

    def buffered(self) -> int:
        """Bytes written here that the client has not taken yet."""

    async def room(self, timeout: float) -> bool:
        """Wait until little is left unsent; False if that took longer than ``timeout``."""


class Wire:
    """Writes straight to the connection's transport (uvicorn's h11 request cycle)."""

    def __init__(self, cycle: Any, chunked: bool) -> None:
        self._transport: asyncio.Transport = cycle.transport
        self._flow = cycle.flow
        self._chunked = chunked

    @property
    def closed(self) -> bool:
        return self._transport.is_closing()

    def write(self, body: bytes, framed: bytes | None = None) -> None:
        if not body or self._transport.is_closing():
            return
        if self._chunked:
            self._transport.write(framed if framed is not None else chunk(body))
        else:
            # HTTP/1.0: the body runs until the connection closes.
            self._transport.write(body)

    def buffered(self) -> int:
        return self._transport.get_write_buffer_size()

    async def room(self, timeout: float) -> bool:
        # The server's flow control: paused above the transport's high-water mark,
        # resumed below its low one or when the connection is lost.
        if not self._flow.write_paused or self._transport.is_closing():
            return True
        try:
            await asyncio.wait_for(self._flow.drain(), timeout)
        except TimeoutError:
            return False
        return True

    def abort(self) -> None:
        self._transport.abort()


class Pipe:
    """Sends through ASGI from a task of its own (when the transport is not reachable)."""

    def __init__(self, send: Send, timeout: float) -> None:
        self._send = send
        self._timeout = timeout
        self._queue: deque[bytes] = deque()
        self._size = 0
        self._ready = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._closing = False
        self.failed = False

    @property
    def closed(self) -> bool:
        return self.failed

    def write(self, body: bytes, framed: bytes | None = None) -> None:
        if body and not self.failed:
            self._queue.append(body)
            self._size += len(body)
            self._ready.set()
            if self._size > LOW_WATER:
                self._drained.clear()

    def buffered(self) -> int:
        return self._size

    async def room(self, timeout: float) -> bool:
        if self._size <= LOW_WATER or self.failed:
            return True
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """`run` returns once everything queued is sent."""
        self._closing = True
        self._ready.set()

    async def run(self) -> None:
        """Send what is queued (each send bounded by the timeout) until closed."""
        while not self.failed:
            await self._ready.wait()
            self._ready.clear()
            if self._queue:
                # Taken off the queue only once sent: a cancelled send loses nothing.
                n, body = len(self._queue), b"".join(self._queue)
                message = {"type": "http.response.body", "body": body, "more_body": True}
                try:
                    await asyncio.wait_for(self._send(message), self._timeout)
                except (TimeoutError, OSError):
                    self.failed = True
                for _ in range(n):
                    self._queue.popleft()
                self._size -= len(body)
                if self._queue:
                    self._ready.set()
            if self._size <= LOW_WATER or self.failed:
                self._drained.set()
            if self._closing and not self._queue:
                return


#: The body of a response: writes to its `Out` until the stream ends; True when the
#: client fell too far behind and its connection should be dropped.
Body = Callable[[Out], Coroutine[Any, Any, bool]]


class SseResponse(Response):
    """A ``text/event-stream`` response whose body ``body`` writes; heartbeats every
    ``ping`` seconds; ends when the body returns, the client goes or the server stops."""

    media_type = "text/event-stream"

    def __init__(
        self,
        body: Body,
        *,
        ping: float,
        send_timeout: float,
        direct: bool = True,
        headers: Mapping[str, str] | None = None,
        valid: Callable[[], bool] | None = None,
    ) -> None:
        self.status_code = 200
        #: Asked at every heartbeat: False (the token was revoked or expired) drops the
        #: stream.
        self._valid = valid
        self.background = None
        self._body = body
        self._ping = ping
        self._timeout = send_timeout
        self._direct = direct
        self.init_headers(
            {"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
            | dict(headers or {})
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        if scope["method"] == "HEAD":
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        out = self._out(scope, send)
        body = asyncio.create_task(self._body(out))
        gone = asyncio.create_task(_disconnect(receive))
        writer = asyncio.create_task(out.run()) if isinstance(out, Pipe) else None
        tasks = [t for t in (body, gone, writer) if t is not None]
        try:
            await self._beat(out, tasks)
            if gone.done():
                return  # the client went: nothing more to send
            await self._end(out, send, body, writer)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _out(self, scope: Scope, send: Send) -> Wire | Pipe:
        """The socket itself when uvicorn's request cycle is at hand, else ASGI."""
        cycle = scope.get("extensions", {}).get(CYCLE_KEY) if self._direct else None
        if cycle is not None:
            return Wire(cycle, chunked=scope.get("http_version") == "1.1")
        return Pipe(send, self._timeout)

    async def _beat(self, out: Wire | Pipe, tasks: list[asyncio.Task[Any]]) -> None:
        """Heartbeats until the body returns, the client goes or the ASGI writer stops."""
        while not any(t.done() for t in tasks):
            # A ping of 0 turns heartbeats off.
            await asyncio.wait(
                tasks, timeout=self._ping or None, return_when=asyncio.FIRST_COMPLETED
            )
            if not any(t.done() for t in tasks):
                if self._valid is not None and not self._valid():
                    return
                out.write(PING)

    async def _end(
        self,
        out: Wire | Pipe,
        send: Send,
        body: asyncio.Task[bool],
        writer: asyncio.Task[None] | None,
    ) -> None:
        """End the response after what is queued, or drop the connection of a client
        that fell too far behind."""
        drop = _dropped(body)
        if isinstance(out, Pipe) and writer is not None:
            # Through ASGI the response can only end, after what is queued; unless
            # a send timed out: then returning unfinished makes the server close.
            out.close()
            await writer
            if out.failed:
                return
            drop = False
        if not drop:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": b"", "more_body": False}),
                    self._timeout,
                )
                return
        # Too far behind (or not taking the end): drop what it has not read; the
        # client resumes from its last id.
        if isinstance(out, Wire):
            out.abort()


def _dropped(body: asyncio.Task[bool]) -> bool:
    """Whether the body asked for its client's connection to be dropped (also when it
    did not finish); a body that failed is logged and its response ended normally."""
    drop = True
    if body.done() and not body.cancelled():
        exc = body.exception()
        if exc is None:
            drop = body.result()
        else:
            log.error("an SSE stream failed", exc_info=exc)
            drop = False
    return drop


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def expose_transport(app: ASGIApp) -> ASGIApp:
    """The outermost layer: pass uvicorn's h11 request cycle (its transport and flow
    control) down in the scope, so that an `SseResponse` can write to the socket."""
    from uvicorn.protocols.http.h11_impl import RequestResponseCycle

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            cycle = getattr(send, "__self__", None)
            if isinstance(cycle, RequestResponseCycle):
                scope.setdefault("extensions", {})[CYCLE_KEY] = cycle
        await app(scope, receive, send)

    return asgi


__all__ = [
    "CYCLE_KEY",
    "HELLO",
    "LOW_WATER",
    "PING",
    "RETRY_MS",
    "Body",
    "Out",
    "Pipe",
    "SseResponse",
    "Wire",
    "chunk",
    "expose_transport",
]
