"""`SessionSubscription`: a session's events, backlog then live, ending when it closes.

The seed's ``Session.Subscribe``: "if the session is closed, the returned channel is
immediately closed". A spine subscription tails a stream for ever; this one also follows
the session's lifecycle (with `spine.terminal_after`, where the lifecycle rules live) and
ends once the session is closed and everything stored up to then was handed out:
``get`` returns None at once, iteration stops, ``closed`` is true. The kinds filter
applies to what is handed out; lifecycle events are read regardless, so the closing event
is observed even when filtered out. A session reopened after its subscription ended is
not followed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Self

from spine import (
    Event,
    Kind,
    Log,
    Record,
    StreamSubscription,
    SubscriptionClosedError,
    subscribe,
    terminal_after,
)

#: `terminal_after` state meaning "no lifecycle event that decides it seen yet".
_UNDECIDED = "?"
#: Lifecycle records read per page when folding the state before the starting seq.
_PAGE = 1000


class SessionSubscription:
    """Events of one session after ``after_seq``, in order, exactly once, until it closes."""

    def __init__(
        self, log: Log, session_id: str, after_seq: int = 0, kinds: Iterable[str] | None = None
    ) -> None:
        want = frozenset(kinds or ())
        # Lifecycle events are read even when not wanted: they say when to end.
        read = sorted(want | {Kind.LIFECYCLE}) if want else None
        self._inner: StreamSubscription = subscribe(log, session_id, after_seq, read)
        self._log = log
        self._want = want
        self._start = after_seq
        self._last = after_seq
        # The terminal state decided by lifecycle events read so far, and before the start
        # (folded once, at the first read, from the lifecycle events up to the start).
        self._after_start = _UNDECIDED
        self._before_start: str | None = None if after_seq > 0 else ""
        self._ended = False

    @property
    def stream(self) -> str:
        return self._inner.stream

    @property
    def last_seq(self) -> int:
        """Seq of the last event handed out (or the starting seq)."""
        return self._last

    @property
    def closed(self) -> bool:
        """True once closed by the caller, or ended because the session closed."""
        return self._ended or self._inner.closed

    def get_record(self, timeout: float | None = None) -> Record | None:
        """The next stored record, or None after ``timeout`` seconds or once ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ended:
            if self._session_closed():
                # Closed: hand out what is stored, then end instead of waiting.
                r = self._inner.get_record(0)
                if r is None:
                    self._end()
                    return None
            else:
                # A close while waiting arrives as a lifecycle record and is folded below.
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                r = self._inner.get_record(left)
                if r is None:
                    return None
            if r.kind == Kind.LIFECYCLE:
                self._after_start = terminal_after(self._after_start, r.event().phase)
            if not self._want or r.kind in self._want:
                self._last = r.seq
                return r
        return None

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None after ``timeout`` seconds or once ended."""
        r = self.get_record(timeout)
        return None if r is None else r.event()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        try:
            ev = self.get(None)
        except SubscriptionClosedError:
            raise StopIteration from None
        if ev is None:
            raise StopIteration
        return ev

    def drain(self) -> list[Event]:
        """Everything available right now, without waiting."""
        out: list[Event] = []
        while (ev := self.get(0)) is not None:
            out.append(ev)
        return out

    def close(self) -> None:
        """Stop the subscription; a blocked reader wakes and its iteration ends."""
        self._inner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _session_closed(self) -> bool:
        state = self._after_start
        if state == _UNDECIDED:
            state = self._state_before_start()
        return state == "closed"

    def _state_before_start(self) -> str:
        """The terminal state after the lifecycle events up to the starting seq."""
        if self._before_start is None:
            state, after = "", 0
            while True:
                page = self._log.read(self.stream, after, _PAGE, (Kind.LIFECYCLE,))
                for r in page:
                    if r.seq > self._start:
                        break
                    state = terminal_after(state, r.event().phase)
                if len(page) < _PAGE or page[-1].seq >= self._start:
                    break
                after = page[-1].seq
            self._before_start = state
        return self._before_start

    def _end(self) -> None:
        self._ended = True
        self._inner.close()
