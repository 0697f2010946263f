"""`DueTimers`: the Runner waking sessions for their timers.

One `projections.DueIndex` (checkpointed beside the log) knows every session's next due
time; the Runner keeps one ``wakeupAfter`` for the earliest thing to do. A live session
fires its timers on its own wake-up (`actors.session.shell.alarm`), so the Runner is not
on the path of a firing: it brings a passivated session back ``RunnerConfig.timer_lead``
seconds before its next timer is due (a `Ping` routed as any request, which starts a
process), keeps it from being passivated while a timer is due that soon (`soon`), and asks
a session with a timer due to fire it (`FireTimers`) only where the session cannot have
done so itself: at due time for one without a live process (starting, restarting, or
passivated with the lead at 0), `BACKSTOP` after it for a live one (its wake-up was lost,
or it is stuck behind a long handler). The session decides what fires (exactly once, see
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
from ..._runtime.heap import give_back
from ...messages import Ping
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
#: Seconds after a timer's due time that a live session, which fires on its own wake-up,
#: is asked to fire what its log does not show fired.
BACKSTOP = RETRY
#: Sessions' timer changes folded after which the Runner gives memory back (the heap the
#: messages grew, the page caches of the index and of the log's reads), `QUIET` s after
#: the last of them: setting thousands of timers is bulk work, waiting for them is not.
BULK = 500
QUIET = 2.0
_FIRE = "fire-"
_WAKE = "wake-"
#: The registry's states of a session without a process to hold a wake-up ("": not
#: loaded yet, as after a daemon restart).
_ASLEEP = ("", "passivated")


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
        #: `FireTimers` sent so far (`GetRunnerStats`: ``timers_asked``), and passivated
        #: sessions brought back ahead of a timer (``timers_woken``).
        self.sent = 0
        self.woken = 0
        #: Timer changes folded since memory was last given back, and when the last was.
        self._bulk = 0
        self._last_change = 0.0

    def start(self, log: Log, data_dir: str) -> None:
        self.index = _open(log, os.path.join(data_dir, DUE_FILE))
        self.news()

    def stats(self) -> dict[str, int]:
        return {
            "timers_asked": self.sent,
            "timers_woken": self.woken,
            "timers_set": len(self.index) if self.index else 0,
        }

    def _lead(self) -> float:
        cfg = getattr(self.runner, "cfg", None)
        return max(0.0, float(getattr(cfg, "timer_lead", 0.0) or 0.0))

    def _phase(self, sid: str) -> str:
        """The registry's state of ``sid`` ("" when it holds none)."""
        registry = getattr(self.runner, "registry", None)
        e = registry.entries.get(sid) if registry is not None else None
        return "" if e is None else str(e.state.value)

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
        if changed:
            self._bulk += len(changed)
            self._last_change = time.monotonic()

    def _give_back(self) -> None:
        """After bulk work, once quiet: memory back to the system."""
        if self._bulk < BULK or time.monotonic() - self._last_change < QUIET:
            return
        self._bulk = 0
        if self.index is not None:
            self.index.release_memory()
        give_back()

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

    def _wake_at(self, sid: str, head: float, after: float = 0.0) -> float:
        """When to ask ``sid`` (its earliest timer due at ``head``) next, ``after`` s past
        a due time. A wait after an ask holds back only the timers due when it was asked:
        one that comes due later is asked for then (an answer that nothing was due, to an
        ask its firing overtook, must not hold the session's next timer back for
        `REFUSED_RETRY`)."""
        asked = self._asked.get(sid)
        if asked is None or self.index is None:
            return head + after
        at, wait = asked
        later = self.index.next_after(sid, at)
        held = max(head + after, at + wait)
        return held if later is None else min(held, later + after)

    def _plan(self, sid: str, head: float, now: float, lead: float) -> tuple[float, bool]:
        """When to act for ``sid`` and whether that is a wake (True) or an ask to fire."""
        phase = self._phase(sid)
        if phase in _ASLEEP and lead and head > now:
            return head - lead, True
        return self._wake_at(sid, head, BACKSTOP if phase == "live" else 0.0), False

    def _next_wake(self, now: float) -> float | None:
        """When to act next: the earliest of each session's `_plan`."""
        assert self.index is not None
        best: float | None = None
        lead = self._lead()
        for due, sid in self.index.entries():
            if best is not None and due - lead >= best:
                break
            at = self._plan(sid, due, now, lead)[0]
            best = at if best is None else min(best, at)
        return best

    def soon(self) -> set[str]:
        """The sessions not to passivate: a timer due within the lead, or before the
        check after next (else it would be woken again right after), and not held back
        after a refusal."""
        lead = self._lead()
        if self.index is None or not lead:
            return set()
        registry = getattr(self.runner, "registry", None)
        horizon = time.time() + lead + float(getattr(registry, "idle_timeout", 0.0) or 0.0) / 2
        out: set[str] = set()
        for head, sid in self.index.entries():
            if head > horizon:
                break
            if self._asked.get(sid, (0.0, 0.0))[1] != REFUSED_RETRY:
                out.add(sid)
        return out

    def _arm(self, now: float) -> None:
        if self.index is None:
            return
        nxt = self._next_wake(now)
        nxt = now + FLOOR if nxt is None else min(nxt, now + FLOOR)
        if self._bulk >= BULK:
            nxt = min(nxt, now + QUIET)
        if self._armed is not None and now <= self._armed <= nxt:
            return  # a wake-up comes sooner
        self._armed = nxt
        self.runner.wakeupAfter(timedelta(seconds=max(0.0, nxt - now)), TimersDue())

    def due(self) -> None:
        """The wake-up came: bring back the passivated sessions with a timer due within
        the lead, ask those that cannot fire on their own to fire."""
        self._armed = None
        if self.index is None or self.runner.exiting:
            return
        self._catch_up()
        self._give_back()
        now, lead = time.time(), self._lead()
        for head, sid in self.index.entries():
            if head - lead > now:
                break
            at, wake = self._plan(sid, head, now, lead)
            if at > now:
                continue
            if wake:
                self.woken += 1
                self.runner.route(sid, Ping(request_id=_WAKE + sid), self.runner.myAddress)
                continue
            self._asked[sid] = (now, RETRY)
            self.sent += 1
            ask = m.FireTimers(request_id=_FIRE + sid, session_id=sid)
            self.runner.route(sid, ask, self.runner.myAddress)
        self._arm(now)

    def answered(self, request_id: str, ok: bool, consumed: bool) -> bool:
        """A session's answer to `FireTimers` (or a wake's refusal: the ask at due time
        follows); False for answers to anything else."""
        if request_id.startswith(_WAKE):
            return True
        if not request_id.startswith(_FIRE):
            return False
        if not ok or consumed:
            # From the ask on, not the answer: a timer due in between was not due when
            # the session decided, and is not held back.
            sid = request_id[len(_FIRE) :]
            self._asked[sid] = (self._asked.get(sid, (time.time(), 0.0))[0], REFUSED_RETRY)
        return True
