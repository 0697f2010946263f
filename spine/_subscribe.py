"""Catch-up subscriptions: the backlog first, then live events, in order, exactly once.

A subscription is a cursor over the log. It reads a page past its cursor, hands the page
out, and advances the cursor past each item it hands out, so nothing is delivered twice and
a burst of wakes collapses into one read. When it has caught up it waits for a wake, or at
most the poll floor, and reads again: a lost wake costs latency, never an event. A
non-positive poll floor disables the floor, leaving wakes the sole liveness signal (for a
host that trusts them to arrive). Buffering is one page, so a slow consumer holds back only
its own cursor.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, Self, TypeVar

from ._errors import InvalidArgumentError, SubscriptionClosedError
from ._event import Event
from ._ids import validate_session_id
from ._log import Log, Record, check_kinds

#: How often a subscriber re-reads the log when no wake arrives (the seed's floor).
DEFAULT_POLL_FLOOR = 0.25


def _floor(poll_floor: float) -> float | None:
    """The wait between re-reads, or ``None`` when the floor is off (wakes only)."""
    if isinstance(poll_floor, bool) or not isinstance(poll_floor, int | float):
        raise InvalidArgumentError(f"poll_floor must be a number of seconds, not {poll_floor!r}")
    if math.isnan(poll_floor):
        raise InvalidArgumentError("poll_floor must be a number of seconds, not NaN")
    # The seed's rule: a non-positive value disables the floor; so does an endless one.
    if poll_floor <= 0 or math.isinf(poll_floor):
        return None
    return float(poll_floor)


T = TypeVar("T")


class _Cursor(Generic[T]):
    def __init__(
        self,
        log: Log,
        after: int,
        kinds: Iterable[str] | None,
        poll_floor: float,
        page: int,
    ) -> None:
        if not isinstance(after, int) or after < 0:
            raise InvalidArgumentError(
                f"a subscription starts after a non-negative int, not {after!r}"
            )
        poll = _floor(poll_floor)
        if page <= 0:
            raise InvalidArgumentError("page must be positive")
        self._log = log
        self._cursor = after
        self._kinds = check_kinds(kinds)
        self._poll = poll
        self._page = page
        self._buf: deque[Record] = deque()
        self._closed = False
        self._lock = threading.Lock()
        self._read_at = 0.0
        #: The stream whose bumps wake this cursor (None: every bump does).
        self._wait_stream: str | None = None
        log.watch()

    def _fetch(self) -> list[Record]:
        raise NotImplementedError

    def _advance(self, r: Record) -> None:
        raise NotImplementedError

    def _convert(self, r: Record) -> T:
        raise NotImplementedError

    def _nothing_new(self) -> bool:
        """After a wake: whether the wake's marks show nothing new for this cursor."""
        return False

    def _next_record(self, timeout: float | None) -> Record | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        wake = self._log.wakeup
        # Every commit is reported by a bump (the watcher's, for other processes'
        # commits), and a bump that concerns this cursor wakes it; so where the marks show
        # nothing new for it, a read would find nothing, and is skipped: before a wait,
        # and after one, whether a wake or the deadline ended it. The floor still reads on
        # its interval. A call that does not wait reads on its first pass: it answers with
        # what is committed now, reported yet or not.
        trust = timeout is None or timeout > 0
        while True:
            if self._closed:
                raise SubscriptionClosedError("the subscription is closed")
            if self._buf:
                r = self._buf.popleft()
                self._advance(r)
                return r
            # Take the generation before reading so an append after the read is noticed.
            gen = wake.generation
            due = self._poll is not None and time.monotonic() - self._read_at >= self._poll
            if due or not (trust and self._nothing_new()):
                self._read_at = time.monotonic()
                page = self._fetch()
                if page:
                    self._buf.extend(page)
                    continue
            wait = self._poll
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                wait = left if wait is None else min(wait, left)
            # With the floor off and no deadline, only a wake (or a close) ends the wait.
            wake.wait(gen, wait, self._wait_stream)
            trust = True

    def get(self, timeout: float | None = None) -> T | None:
        """The next item, or ``None`` if none arrives within ``timeout`` seconds."""
        r = self._next_record(timeout)
        return None if r is None else self._convert(r)

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        try:
            r = self._next_record(None)
        except SubscriptionClosedError:
            raise StopIteration from None
        assert r is not None
        return self._convert(r)

    def drain(self) -> list[T]:
        """Everything available right now, without waiting."""
        out: list[T] = []
        while True:
            r = self._next_record(0)
            if r is None:
                return out
            out.append(self._convert(r))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop the subscription; a blocked reader wakes and its iteration ends."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._log.unwatch()
        # Wake the reader blocked in this subscription; the marks stay good for the others.
        if self._wait_stream is None:
            self._log.wakeup.bump([])
        else:
            self._log.wakeup.poke(self._wait_stream)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StreamSubscription(_Cursor[Event]):
    """Events of one stream after a seq; ``records()``-style raw access via ``get_record``."""

    def __init__(
        self,
        log: Log,
        stream: str,
        after_seq: int = 0,
        kinds: Iterable[str] | None = None,
        *,
        poll_floor: float = DEFAULT_POLL_FLOOR,
        page: int = 500,
    ) -> None:
        self.stream = validate_session_id(stream)
        # Seq up to which a read found nothing for this cursor, and the marks' epoch of
        # the last read (see `_nothing_new`).
        self._checked = 0
        self._epoch = -1
        super().__init__(log, after_seq, kinds, poll_floor, page)
        self._wait_stream = self.stream

    @property
    def last_seq(self) -> int:
        """Seq of the last event handed out (or the starting seq)."""
        return self._cursor

    def _fetch(self) -> list[Record]:
        wake = self._log.wakeup
        epoch, mark = wake.epoch, wake.mark(self.stream)
        page = self._log.read(self.stream, self._cursor, self._page, self._kinds)
        self._epoch = epoch
        if not page and mark is not None:
            # Nothing this cursor wants up to the mark (rows of other kinds, if filtered).
            self._checked = max(self._checked, mark)
        return page

    def _advance(self, r: Record) -> None:
        self._cursor = r.seq

    def _nothing_new(self) -> bool:
        wake = self._log.wakeup
        if wake.epoch != self._epoch:
            return False
        # Only the kinds this cursor wants; no mark in the epoch of the last read: no bump
        # since named them.
        mark = wake.mark(self.stream, self._kinds)
        return mark is None or mark <= max(self._cursor, self._checked)

    def _convert(self, r: Record) -> Event:
        return r.event()

    def get_record(self, timeout: float | None = None) -> Record | None:
        """Like `get`, but the stored record (bytes), for passing on without decoding."""
        return self._next_record(timeout)


class AllSubscription(_Cursor[Record]):
    """Records of every stream after a global position, in commit order."""

    def __init__(
        self,
        log: Log,
        after_position: int = 0,
        kinds: Iterable[str] | None = None,
        *,
        poll_floor: float = DEFAULT_POLL_FLOOR,
        page: int = 1000,
    ) -> None:
        super().__init__(log, after_position, kinds, poll_floor, page)

    @property
    def position(self) -> int:
        """Global position of the last record handed out (or the starting position)."""
        return self._cursor

    def _fetch(self) -> list[Record]:
        return self._log.read_all(self._cursor, self._page, self._kinds)

    def _advance(self, r: Record) -> None:
        self._cursor = r.position

    def _convert(self, r: Record) -> Record:
        return r


def subscribe(
    log: Log,
    stream: str,
    after_seq: int = 0,
    kinds: Iterable[str] | None = None,
    *,
    poll_floor: float = DEFAULT_POLL_FLOOR,
) -> StreamSubscription:
    """Every event of ``stream`` after ``after_seq`` (0 replays from the start), then live.

    ``kinds`` filters (empty or ``None`` means all). Close it, or use it as a context
    manager; iteration blocks until the next event and ends when it is closed.

    ``poll_floor`` is the longest a caught-up subscriber waits for a wake before it reads
    the log again, so a lost wake costs at most that much latency. A non-positive value
    disables the floor: the subscriber then reads again only when woken (an append through
    this log, or one another process makes while the log watches), which a host should
    choose only when it trusts wakes to arrive.
    """
    return StreamSubscription(log, stream, after_seq, kinds, poll_floor=poll_floor)


def subscribe_all(
    log: Log,
    after_position: int = 0,
    kinds: Iterable[str] | None = None,
    *,
    poll_floor: float = DEFAULT_POLL_FLOOR,
) -> AllSubscription:
    """Every record of every stream after ``after_position``, then live, in commit order.

    ``poll_floor`` is as for `subscribe`: a non-positive value disables it (wakes only).
    """
    return AllSubscription(log, after_position, kinds, poll_floor=poll_floor)


def history(log: Log, stream: str) -> list[Event]:
    """Every event of ``stream`` in order; an unknown stream gives an empty list."""
    fast = getattr(log, "read_events", None)
    if fast is not None:
        return fast(stream, 0)  # type: ignore[no-any-return]
    out: list[Event] = []
    after = 0
    while True:
        page = log.read(stream, after, 5000)
        if not page:
            return out
        out.extend(r.event() for r in page)
        after = page[-1].seq
