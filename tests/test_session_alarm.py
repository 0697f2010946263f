"""A live session's own wake-up for its timers (`Alarm`), with a recording actor: one
wake-up pending for the earliest due time, none more while it comes first, and a due time
a ring did not move on (its firing's append failed) rung again only after a back-off."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import attrs

from actors.session.rules import commands as c
from actors.session.rules.state import SessionState
from actors.session.rules.timerbook import Timer
from actors.session.shell.alarm import BACKOFF, TIMER_WAKE, Alarm


class _Actor:
    def __init__(self) -> None:
        self.wakes: list[float] = []

    def wakeupAfter(self, delay: timedelta, payload: Any) -> None:
        assert payload == TIMER_WAKE
        self.wakes.append(delay.total_seconds())


def _session(**dues: float) -> c.Session:
    timers = {t: Timer(id=t, text=t, due=d) for t, d in dues.items()}
    return c.Session(stored=SessionState(session_id="s", timers=timers))


def test_one_wake_up_for_the_earliest_and_a_back_off_when_a_ring_did_not_fire() -> None:
    actor = _Actor()
    alarm = Alarm(actor)
    now = time.time()
    alarm.arm(_session())
    assert actor.wakes == []  # no timer, no wake-up
    alarm.arm(_session(a=now + 5, b=now + 9))
    alarm.arm(_session(a=now + 5, b=now + 9))  # the same earliest: already pending
    assert len(actor.wakes) == 1 and 4.0 < actor.wakes[0] <= 5.0
    alarm.arm(_session(c=now + 2, a=now + 5))  # an earlier one: a wake-up for it too
    assert len(actor.wakes) == 2 and actor.wakes[1] <= 2.0
    overdue = _session(c=now - 1)
    alarm.rang(overdue)  # the ring for c; say its firing's append failed
    alarm.arm(overdue)
    assert len(actor.wakes) == 3 and actor.wakes[2] > BACKOFF - 0.1
    ended = attrs.evolve(overdue, stopping=True)
    alarm.rang(ended)
    alarm.rang(ended)
    alarm.arm(ended)  # an ending session fires nothing
    assert len(actor.wakes) == 3
