"""Server-sent events: the encodings, and the every-session stream for dashboards.

Stored events go out with their seq (or global position) as ``id``; live items without
one, so they never move a client's resume point. A session's clients are served by
`_hub`; a client of the every-session stream has its own `Feed`, filled by a cursor
thread (the spine's `subscribe_all`) that waits for room in it, so a slow reader holds
back only its own cursor.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from spine import Record, SubscriptionClosedError

from ._wire import HELLO, Out

log = logging.getLogger("vertebra.gateway")

#: A live item: (after_seq, kind, severity, text).
Live = tuple[int, str, str, str]
_END = ("end", None)


class Feed:
    """One client's bounded buffer between its cursor thread and its response."""

    def __init__(self, loop: asyncio.AbstractEventLoop, capacity: int) -> None:
        self._loop = loop
        self._items: deque[tuple[str, Any]] = deque()
        self._ready = asyncio.Event()
        self._room = threading.Semaphore(capacity)
        self.stopped = threading.Event()
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

    async def next(self) -> tuple[str, Any]:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        kind, value = self._items.popleft()
        if kind == "record":
            self._room.release()
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


async def global_body(feed: Feed, out: Out, timeout: float) -> bool:
    """The every-session stream's body; True if the client stopped taking data."""
    try:
        out.write(HELLO)
        while True:
            kind, value = await feed.next()
            if kind == "end":
                return False
            out.write(global_event(value))
            # Its cursor thread waits while the feed is full: a slow reader holds back
            # only itself, and one that takes nothing for ``timeout`` is dropped.
            if not await out.room(timeout):
                return True
    finally:
        feed.stop()
