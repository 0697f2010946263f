"""The Runner's asks to fire over a real log and index: an answer that nothing was due
(to an ask the firing overtook) holds back only what was due when asked, never the
session's next timer (`bench/timers.py` found firings a minute late that way)."""

from __future__ import annotations

import pathlib
import time
from datetime import timedelta
from typing import Any

from actors.messages import Ping, RunnerConfig
from actors.runner.rules.entry import EntryState
from actors.runner.shell.timers import BACKSTOP, REFUSED_RETRY, RETRY, DueTimers
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
        wake = timers._next_wake(time.time())
        assert wake is not None and abs(wake - (now + 5.0)) < 0.01
        timers.due()  # nothing due yet: neither is asked again
        assert sorted(lender.asked) == ["s", "stale"]
        assert timers._wake_at("stale", now - 1.0) >= now + REFUSED_RETRY - RETRY
    finally:
        timers.close()
        log.close()


class _Entry:
    def __init__(self, state: str) -> None:
        self.state = EntryState(state)


class _Registry:
    idle_timeout = 1.0

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}


class _LeadLender(_Lender):
    """A Runner with a lead of 2 s and a registry whose states the test sets."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = RunnerConfig(data_dir="", timer_lead=2.0)
        self.registry = _Registry()
        self.pings: list[str] = []

    def route(self, sid: str, msg: Any, sender: Any) -> None:
        (self.pings if isinstance(msg, Ping) else self.asked).append(sid)
        if sid not in self.registry.entries:  # the registry spawns a passivated one
            self.registry.entries[sid] = _Entry("starting")


def test_a_passivated_session_is_woken_ahead_and_a_live_one_fires_on_its_own(
    tmp_path: pathlib.Path,
) -> None:
    """Within the lead a passivated session is brought back (a ping), not asked to fire; a
    live one is asked only `BACKSTOP` after its due time (it fires on its own alarm); one
    starting is asked at due time (the ask waits for it); none is passivated meanwhile."""
    log = SqliteLog(tmp_path / "spine.db")
    lender = _LeadLender()
    timers = DueTimers(lender)
    try:
        now = time.time()
        log.append("asleep", [_set("a", now + 1.0)])
        log.append("later", [_set("b", now + 30.0)])
        log.append("live", [_set("c", now - 0.1)])
        log.append("starting", [_set("d", now - 0.1)])
        lender.registry.entries = {"live": _Entry("live"), "starting": _Entry("starting")}
        timers.start(log, str(tmp_path))
        timers.due()
        assert lender.pings == ["asleep"] and lender.asked == ["starting"]
        assert timers.stats()["timers_woken"] == 1
        # The live session's backstop is next (the woken one is asked at its due time).
        wake = timers._next_wake(now)
        assert wake is not None and abs(wake - (now - 0.1 + BACKSTOP)) < 0.01
        assert timers.soon() == {"asleep", "live", "starting"}
        assert timers._plan("later", now + 30.0, now, 2.0) == (now + 28.0, True)
    finally:
        timers.close()
        log.close()


def test_after_bulk_work_the_runner_gives_memory_back_once_quiet(
    tmp_path: pathlib.Path, monkeypatch: Any
) -> None:
    """Many timers set: once no change came for `QUIET` s, the next pass gives memory
    back (the heap, the page caches) and counts afresh; a quiet Runner does nothing."""
    from actors.runner.shell import timers as shell

    log = SqliteLog(tmp_path / "spine.db")
    lender = _Lender()
    timers = DueTimers(lender)
    given: list[int] = []
    monkeypatch.setattr(shell, "give_back", lambda: given.append(1))
    monkeypatch.setattr(shell, "BULK", 5)
    try:
        timers.start(log, str(tmp_path))
        now = time.time()
        for i in range(6):
            rec = log.append(f"s{i}", [_set("t", now + 3600)])
            timers.appended(f"s{i}", ((rec.last_seq, Kind.TIMER_SET, b""),))
        # A wake-up within the quiet time is armed although nothing is due for an hour.
        assert min(lender.wakes) < now + 60
        timers.due()
        assert given == []  # not quiet yet
        monkeypatch.setattr(shell, "QUIET", 0.0)
        timers.due()
        assert given == [1] and timers._bulk == 0
        timers.due()
        assert given == [1]
    finally:
        timers.close()
        log.close()
