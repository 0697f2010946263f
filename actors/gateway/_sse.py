"""Server-sent events: a session's stored events with their seq as id, live items without.

Each client has its own `Feed`: a cursor thread tails the spine (the same `subscribe`
code as every other reader) and a share of the gateway's one Host sink brings the live
items (text deltas, notices). Stored records wait for room in the client's buffer, so a
slow reader holds back only its own cursor; live items never wait (the sink serves every
client), and a client whose live backlog passes its bound is disconnected: it resumes
from its last id, losing nothing stored.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from sse_starlette.event import ServerSentEvent

from spine import Record, SubscriptionClosedError

log = logging.getLogger("vertebra.gateway")

#: Milliseconds a browser waits before reconnecting (the ``retry:`` field).
RETRY_MS = 1000
#: A live item: (after_seq, kind, severity, text).
Live = tuple[int, str, str, str]
_END = ("end", None)
#: Live items a client may hold while their stored event has not been read yet.
HELD_MAX = 4096


class Feed:
    """One SSE client's bounded buffer between threads and its response coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop, capacity: int, live_capacity: int) -> None:
        self._loop = loop
        self._items: deque[tuple[str, Any]] = deque()
        self._ready = asyncio.Event()
        self._room = threading.Semaphore(capacity)
        self._live_capacity = live_capacity
        self._live = 0
        self.stopped = threading.Event()
        self.overflowed = False
        self.on_stop: list[Callable[[], None]] = []

    # -- producer side (any thread) ------------------------------------------------------

    def put_record(self, r: Record) -> bool:
        """Queue a stored record, waiting for room; False once the feed stopped."""
        while not self._room.acquire(timeout=0.5):
            if self.stopped.is_set():
                return False
        if self.stopped.is_set():
            return False
        self._call(self._push, ("record", r))
        return True

    def put_live(self, item: Live) -> None:
        """Queue a live item; never waits."""
        self._call(self._push_live, item)

    def end(self) -> None:
        self._call(self._push, _END)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            # The loop is gone (the server stopped): nobody reads this feed any more.
            self.stop()

    # -- consumer side (the event loop) --------------------------------------------------

    def _push(self, item: tuple[str, Any]) -> None:
        self._items.append(item)
        self._ready.set()

    def _push_live(self, item: Live) -> None:
        if self._live >= self._live_capacity:
            # Too far behind: disconnect; the client resumes from its last id.
            self.overflowed = True
            self._items.append(_END)
        else:
            self._live += 1
            self._items.append(("live", item))
        self._ready.set()

    async def next(self) -> tuple[str, Any]:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        kind, value = self._items.popleft()
        if kind == "record":
            self._room.release()
        elif kind == "live":
            self._live -= 1
        return kind, value

    def stop(self) -> None:
        if not self.stopped.is_set():
            self.stopped.set()
            for fn in self.on_stop:
                try:
                    fn()
                except Exception:
                    log.exception("closing a feed")


def pump(sub: Any, feed: Feed) -> None:
    """The cursor thread: hand every record of ``sub`` to ``feed`` until either ends."""
    # A session subscription hands out records with get_record; the global one's get
    # already returns records.
    get = getattr(sub, "get_record", None) or sub.get
    try:
        while not feed.stopped.is_set():
            r = get(0.5)
            if r is None:
                if sub.closed:
                    break
                continue
            if not feed.put_record(r):
                break
    except SubscriptionClosedError:
        pass
    except Exception:
        log.exception("SSE cursor failed")
    finally:
        feed.end()


def start_pump(sub: Any, feed: Feed, name: str) -> None:
    feed.on_stop.append(sub.close)
    threading.Thread(target=pump, args=(sub, feed), name=name, daemon=True).start()


def stored_event(r: Record) -> bytes:
    """``id``, ``event`` and ``data`` lines of a stored event (data: its stored JSON)."""
    return b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (r.seq, r.kind.encode(), r.payload)


def global_event(r: Record) -> bytes:
    """A record of any session: the global position as id; data names the session."""
    data = b'{"session":%s,"seq":%d,"position":%d,"event":%s}' % (
        orjson.dumps(r.stream),
        r.seq,
        r.position,
        r.payload,
    )
    return b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (r.position, r.kind.encode(), data)


def live_event(item: Live) -> bytes:
    """A live item: no ``id`` line, so it never moves the client's resume point."""
    after, kind, severity, text = item
    data = {"kind": kind, "after": after, "text": text}
    if severity:
        data["severity"] = severity
    return b"event: %s\r\ndata: %s\r\n\r\n" % (kind.encode(), orjson.dumps(data))


def hello() -> ServerSentEvent:
    return ServerSentEvent(comment="vertebra", retry=RETRY_MS)


async def session_stream(feed: Feed, after: int, filtered: bool) -> AsyncIterator[Any]:
    """Stored events in seq order, each live item after the stored event it follows.

    A live item that belongs after a seq not sent yet waits for it; one that belongs
    before the last sent seq is stale (the stored event that follows already carries its
    content) and is dropped. With a kinds filter the stored seqs are not contiguous, so
    live items go out as they come.
    """
    last = after
    held: list[Live] = []
    try:
        yield hello()
        while True:
            kind, value = await feed.next()
            if kind == "end":
                return
            if kind == "record":
                last = value.seq
                yield stored_event(value)
                for item in held:
                    if item[0] == last:
                        yield live_event(item)
                held = [item for item in held if item[0] > last]
            elif filtered or value[0] == last:
                yield live_event(value)
            elif value[0] > last:
                held.append(value)
                if len(held) > HELD_MAX:
                    feed.overflowed = True
                    return
    finally:
        feed.stop()


async def global_stream(feed: Feed) -> AsyncIterator[Any]:
    try:
        yield hello()
        while True:
            kind, value = await feed.next()
            if kind == "end":
                return
            yield global_event(value)
    finally:
        feed.stop()
