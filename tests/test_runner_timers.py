"""The Runner's asks to fire over a real log and index: an answer that nothing was due
(to an ask the firing overtook) holds back only what was due when asked, never the
session's next timer (`bench/timers.py` found firings a minute late that way)."""

from __future__ import annotations

import pathlib
import time
from datetime import timedelta
from typing import Any

from actors.runner.shell.timers import REFUSED_RETRY, RETRY, DueTimers
from spine import Event, Kind, SqliteLog


class _Lender:
    """What the Runner lends `DueTimers`: the wake-ups and the asks it routes, kept."""

    exiting = False
    myAddress = "runner"

    def __init__(self) -> None:
        self.wakes: list[float] = []
        self.asked: list[str] = []

    def wakeupAfter(self, delay: timedelta, msg: Any) -> None:
        self.wakes.append(time.time() + delay.total_seconds())

    def route(self, sid: str, msg: Any, sender: Any) -> None:
        self.asked.append(sid)


def _set(tid: str, due: float) -> Event:
    return Event(kind=Kind.TIMER_SET, text="x", extra={"timer": tid, "due": due})


def test_a_nothing_due_answer_does_not_hold_back_the_next_timer(tmp_path: pathlib.Path) -> None:
    log = SqliteLog(tmp_path / "spine.db")
    lender = _Lender()
    timers = DueTimers(lender)
    try:
        now = time.time()
        log.append("s", [_set("t1", now - 1.0), _set("t2", now + 5.0)])
        log.append("stale", [_set("old", now - 1.0)])
        timers.start(log, str(tmp_path))
        timers.due()
        assert sorted(lender.asked) == ["s", "stale"]
        # s fires t1; the answer to a second ask its firing overtook says nothing was due.
        fired = Event(kind=Kind.TIMER_FIRED, extra={"timer": "t1", "due": now - 1.0, "next": None})
        rec = log.append("s", [fired])
        timers.appended("s", ((rec.last_seq, Kind.TIMER_FIRED, b""),))
        timers.answered("fire-s", ok=True, consumed=True)
        # The session that answers nothing is due for what the index holds is held back.
        timers.answered("fire-stale", ok=True, consumed=True)
        wake = timers._next_wake()
        assert wake is not None and abs(wake - (now + 5.0)) < 0.01
        timers.due()  # nothing due yet: neither is asked again
        assert sorted(lender.asked) == ["s", "stale"]
        assert timers._wake_at("stale", now - 1.0) >= now + REFUSED_RETRY - RETRY
    finally:
        timers.close()
        log.close()
