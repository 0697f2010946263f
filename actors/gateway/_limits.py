"""Bounded connections: how long a client may take to send a request's head and body,
how many connections the gateway holds, and what it does when they run out.

uvicorn times out only idle keep-alive connections: a socket that sends nothing, or its
headers a byte at a time, or a ``Content-Length`` larger than its body, would stay open
for ever, and a few thousand of them use up the process's file descriptors. So every
connection gets a deadline for its request head (`Limits.header`) and then one for its
body (`Limits.body`); one that misses it is answered 408 where nothing was started, and
closed. At `Limits.connections` the newest connection makes room by closing the oldest
one that has not sent a whole request head yet (slow or idle sockets, so they can never
starve clients that send requests); only when every connection is busy with a request is
the newcomer answered an early 503 and closed. A process out of descriptors anyway
(``EMFILE`` on accept) gets one log line per `Limits.report` seconds, not a traceback per
attempt.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import time
from typing import Any

import attrs
import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("vertebra.gateway")

_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def _raw(status: str, code: str, message: str, extra: str = "") -> bytes:
    body = orjson.dumps({"error": code, "message": message})
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        f"{extra}content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


_TIMEOUT = _raw("408 Request Timeout", "timeout", "the request took too long to arrive")
_FULL = _raw(
    "503 Service Unavailable",
    "unavailable",
    "too many connections; retry later",
    "retry-after: 1\r\n",
)


def _default_connections() -> int:
    # Half the descriptors the process may open: the rest stay for the log, the actor
    # transport and the connections being refused.
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft // 2))


@attrs.frozen(kw_only=True)
class Limits:
    """The gateway's connection limits (seconds, and a count)."""

    #: From a connection's first byte (or its opening) to its request head's end.
    header: float = 10.0
    #: From the request head to the body's end.
    body: float = 30.0
    #: Between two requests on a kept-alive connection.
    idle: float = 5.0
    #: Connections held at once (default: half the process's file-descriptor limit).
    connections: int = attrs.field(factory=_default_connections)
    #: Connections the kernel queues before they are accepted, and so also how many
    #: one wake-up accepts at once (asyncio takes up to that many before any of them
    #: runs): kept well below the descriptors left, or a burst exhausts them.
    backlog: int = 128
    #: At most one line about exhausted descriptors per this many seconds.
    report: float = 10.0


class _Pool:
    """What the connections of one server share: the limits, and the connections that
    have not sent a whole request head yet, oldest first (the ones to close for room)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.waiting: dict[GuardedH11, None] = {}
        self.evicted = 0
        self.refused = 0


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with deadlines for the request head and body and a bound
    on connections (the request cycle is uvicorn's own, which SSE bodies write to)."""

    pool: _Pool

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False
        if len(self.connections) >= self.pool.limits.connections and not self._make_room():
            self._refused = True
            self.pool.refused += 1
            transport.write(_FULL)
            transport.close()
            return
        super().connection_made(transport)
        self._await_head()

    def _make_room(self) -> bool:
        for old in self.pool.waiting:
            self.pool.evicted += 1
            old._expire(answer=False)
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._cancel()
        self.pool.waiting.pop(self, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE and self.conn.trailing_data[0]:
            if self._deadline is None:  # the next request's head has begun
                self._await_head()
        elif state is h11.SEND_BODY:
            if self in self.pool.waiting:
                self._arm(self.pool.limits.body)
                self.pool.waiting.pop(self, None)
        elif state is not h11.IDLE:
            self._cancel()
            self.pool.waiting.pop(self, None)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Idle until the next request: uvicorn's keep-alive timer closes it.
        self._cancel()

    def _await_head(self) -> None:
        self.pool.waiting[self] = None
        self._arm(self.pool.limits.header)

    def _arm(self, seconds: float) -> None:
        self._cancel()
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, answer: bool = True) -> None:
        """Close a connection that missed its deadline (or makes room): 408 first when
        no response has started on it."""
        self._deadline = None
        self.pool.waiting.pop(self, None)
        if self.transport.is_closing():
            return
        if answer and (self.cycle is None or not self.cycle.response_started):
            self.transport.write(_TIMEOUT)
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.close()


def protocol(limits: Limits) -> type[GuardedH11]:
    """A protocol class for one server, sharing one pool of connections."""
    return type("GuardedH11", (GuardedH11,), {"pool": _Pool(limits)})


class ResourceReport:
    """The event loop's exception handler: an accept that failed for lack of descriptors
    is counted and reported at most once per ``every`` seconds; anything else goes to
    the loop's default handler."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.count = 0
        self._last = -float("inf")
        self._since = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if "_start_serving" in repr(context.get("handle")) and isinstance(exc, ValueError):
            # asyncio's retry of an accept that ran out of descriptors, due after the
            # server closed: nothing is lost, and one such retry is queued per refusal.
            return
        if not (isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS):
            loop.default_exception_handler(context)
            return
        self.count += 1
        self._since += 1
        now = time.monotonic()
        if now - self._last >= self.every:
            log.error(
                "the gateway cannot accept connections: %s (%d times since the last report; "
                "raise the file limit or lower the connection limit)",
                exc.strerror or exc,
                self._since,
            )
            self._last, self._since = now, 0
