"""`DueTimers`: the Runner waking sessions for their timers.

One `projections.DueIndex` (checkpointed beside the log) knows every session's next due
time; the Runner keeps one ``wakeupAfter`` for the earliest and, when it comes, routes
`FireTimers` to each session with a timer due, bringing a passivated one back as any
request does. The session decides what fires (exactly once, see
`actors.session.rules.timers`), so asking twice is harmless: a session asked that has not
fired within `RETRY` (it crashed between "due" and "delivered") is asked again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from datetime import timedelta
from typing import Any

from projections import DUE_KINDS, DueIndex
from spine import Kind, Log, SpineError

from ... import messages as m
from ..protocol import TimersDue

#: Seconds before a session asked to fire and not firing is asked again.
RETRY = 1.0
#: Seconds before a session that answered nothing was due (closed, failed, revived later)
#: is asked again while the index still says it is due.
REFUSED_RETRY = 60.0
#: Most seconds between two catch-ups of the index: news of a timer set by a session that
#: died before telling the Runner is found by then (one read of the log, not per session).
FLOOR = 30.0
#: The index's file in the data directory.
DUE_FILE = "timers.db"
_FIRE = "fire-"


def _log() -> logging.Logger:
    return logging.getLogger("vertebra.runner")


def _open(log: Log, path: str) -> DueIndex | None:
    try:
        return DueIndex(log, path)
    except sqlite3.DatabaseError as exc:
        # Only a checkpoint: start it over from the log rather than lose the timers.
        _log().warning("the index of due timers is rebuilt from the log: %s", exc)
    for leftover in (path, path + "-wal", path + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)
    try:
        return DueIndex(log, path)
    except sqlite3.Error as exc:
        _log().error("session timers are off: the index cannot be opened: %s", exc)
        return None


class DueTimers:
    """The index of due times, the wake-up for the earliest, and the asks to fire. The
    ``runner`` lends ``wakeupAfter``, ``route``, ``myAddress`` and ``exiting``."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.index: DueIndex | None = None
        #: The time the earliest pending `TimersDue` wake-up is for.
        self._armed: float | None = None
        #: Sessions asked to fire: when, and how long before asking again (`RETRY`; after
        #: an answer that nothing was due, or a refusal, `REFUSED_RETRY`, unless their
        #: timers change first).
        self._asked: dict[str, tuple[float, float]] = {}
        #: `FireTimers` sent so far (`GetRunnerStats`: ``timers_asked``).
        self.sent = 0

    def start(self, log: Log, data_dir: str) -> None:
        self.index = _open(log, os.path.join(data_dir, DUE_FILE))
        self.news()

    def stats(self) -> dict[str, int]:
        return {"timers_asked": self.sent, "timers_set": len(self.index) if self.index else 0}

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
            self.index = None

    def _catch_up(self) -> None:
        if self.index is None:
            return
        try:
            changed = self.index.catch_up()
        except (sqlite3.Error, SpineError) as exc:
            _log().warning("the index of due timers did not catch up: %s", exc)
            return
        for sid in changed:
            self._asked.pop(sid, None)

    def news(self) -> None:
        """A session started or exited: what it stored may not have reached the Runner."""
        if self.index is not None:
            self._catch_up()
            self._arm(time.time())

    def appended(self, sid: str, records: tuple[tuple[int, str, bytes], ...]) -> None:
        """A session stored records: fold its timer events into the index, re-arm."""
        if self.index is None or not any(r[1] in DUE_KINDS for r in records):
            return
        if any(r[1] == Kind.TIMER_FIRED for r in records):
            self._asked.pop(sid, None)
        self.news()

    def _wake_at(self, sid: str, head: float) -> float:
        """When to ask ``sid`` (its earliest timer due at ``head``) next. A wait after an
        ask holds back only the timers due when it was asked: one that comes due later is
        asked for then (an answer that nothing was due, to an ask its firing overtook,
        must not hold the session's next timer back for `REFUSED_RETRY`)."""
        asked = self._asked.get(sid)
        if asked is None or self.index is None:
            return head
        at, wait = asked
        later = self.index.next_after(sid, at)
        held = max(head, at + wait)
        return held if later is None else min(held, later)

    def _next_wake(self) -> float | None:
        """When to ask next: the earliest of each session's `_wake_at`."""
        assert self.index is not None
        best: float | None = None
        for due, sid in self.index.entries():
            if best is not None and due >= best:
                break
            at = self._wake_at(sid, due)
            best = at if best is None else min(best, at)
        return best

    def _arm(self, now: float) -> None:
        if self.index is None:
            return
        nxt = self._next_wake()
        nxt = now + FLOOR if nxt is None else min(nxt, now + FLOOR)
        if self._armed is not None and now <= self._armed <= nxt:
            return  # a wake-up comes sooner
        self._armed = nxt
        self.runner.wakeupAfter(timedelta(seconds=max(0.0, nxt - now)), TimersDue())

    def due(self) -> None:
        """The wake-up came: ask every session with a timer due to fire it."""
        self._armed = None
        if self.index is None or self.runner.exiting:
            return
        self._catch_up()
        now = time.time()
        for head, sid in self.index.entries():
            if head > now:
                break
            if self._wake_at(sid, head) > now:
                continue
            self._asked[sid] = (now, RETRY)
            self.sent += 1
            ask = m.FireTimers(request_id=_FIRE + sid, session_id=sid)
            self.runner.route(sid, ask, self.runner.myAddress)
        self._arm(now)

    def answered(self, request_id: str, ok: bool, consumed: bool) -> bool:
        """A session's answer to `FireTimers`; False for answers to anything else."""
        if not request_id.startswith(_FIRE):
            return False
        if not ok or consumed:
            # From the ask on, not the answer: a timer due in between was not due when
            # the session decided, and is not held back.
            sid = request_id[len(_FIRE) :]
            self._asked[sid] = (self._asked.get(sid, (time.time(), 0.0))[0], REFUSED_RETRY)
        return True
