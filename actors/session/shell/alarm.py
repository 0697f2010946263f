"""`Alarm`: a live session's own wake-up for its next timer.

A session that is live fires its timers itself, on a Thespian ``wakeupAfter`` armed for
the earliest due time its folded state holds, rather than waiting for the Runner's ask: a
firing then costs one wake-up of this process, not a pass of the Runner and a message
between processes (on a loaded machine each is a wait for a CPU). The firing is decided as
any `FireDue` is (exactly once, keyed by each (timer, due)), so the Runner's ask after
`actors.runner.shell.timers.BACKSTOP`, for a wake-up lost with a crash, finds nothing due.

Thespian's wake-ups cannot be cancelled: the alarm remembers the ones pending and arms a
new one only when none comes before the earliest due time.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from ..rules import commands as c

#: The payload of the wake-up.
TIMER_WAKE = "timer-wake"
#: Seconds before ringing again for a due time that a ring did not move on (its firing's
#: append failed): a spine that refuses must not turn the alarm into a busy loop.
BACKOFF = 1.0


def next_due(state: c.Session) -> float | None:
    """The earliest due time of the session's timers, None if it fires none (no timer,
    or it is ending)."""
    st = state.stored
    if state.stopping or st.terminal or not st.timers:
        return None
    return min(t.due for t in st.timers.values())


class Alarm:
    """The pending wake-ups of one incarnation, by the time each is for."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.pending: list[float] = []
        #: The earliest due time when the alarm last rang.
        self.rang_for: float | None = None

    def arm(self, state: c.Session) -> None:
        """Have a wake-up come at the session's next due time (if none comes sooner)."""
        nxt = next_due(state)
        if nxt is None:
            return
        now = time.time()
        at = max(nxt, now + BACKOFF) if nxt == self.rang_for else nxt
        if self.pending and min(self.pending) <= at:
            return
        self.pending.append(at)
        self.actor.wakeupAfter(timedelta(seconds=max(0.0, at - now)), TIMER_WAKE)

    def rang(self, state: c.Session) -> float:
        """A wake-up came (the earliest pending); returns the time to fire at."""
        if self.pending:
            self.pending.remove(min(self.pending))
        self.rang_for = next_due(state)
        return time.time()
