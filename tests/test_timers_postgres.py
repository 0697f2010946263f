"""A timer on two hosts sharing one PostgreSQL spine fires exactly once: each host's
Runner keeps its own index of due times over the shared log and brings the session up for
the firing (ahead of it, or asking for it); the
incarnation on the other host takes the session's lease and fires; the stale one (frozen
while it was due, then let go on) decides the same firing, which its key makes a duplicate,
and its next write is refused by the lease fence."""

from __future__ import annotations

import os
import pathlib
import signal
import time

import pytest
from conftest import wait_for

from actors.host import Host
from spine import Kind, open_log

pytestmark = pytest.mark.timeout(180)


def test_a_timer_fires_once_with_two_hosts_on_one_postgres_spine(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes: list[int]
) -> None:
    a = Host(tmp_path / "a", spine=pg_url, timeout=30, spare_sessions=0)
    b: Host | None = None
    frozen: int | None = None
    try:
        sid = a.create(metadata={"ore.model.name": "scripted"})
        a.wait_turn(sid, a.send(sid, "hello").seq)
        with open_log(pg_url) as log:
            epoch_a = log.lease(sid)[0]  # type: ignore[attr-defined]
        a.set_timer(sid, "the shared reminder", after=8.0, timer_id="once")
        (due,) = [t["due"] for t in a.timers(sid)]
        # The second host's Runner folds the shared log's timer events at its start.
        b = Host(tmp_path / "b", spine=pg_url, timeout=30, spare_sessions=0)
        assert b.stats()["timers_set"] == 1 and a.stats()["timers_set"] == 1
        # A's incarnation holds the lease; frozen, it cannot fire when the timer comes due.
        frozen = a.session_pid(sid)
        os.kill(frozen, signal.SIGSTOP)
        assert time.time() < due, "the second host started after the timer was due"
        bb = b

        def delivered() -> bool:
            return any(
                e.kind == Kind.ASSISTANT and "shared reminder" in e.text for e in bb.history(sid)
            )

        wait_for(delivered, timeout=60)
        # B brought the session up: ahead of the timer (its incarnation then fires on its
        # own alarm), or by asking it to fire.
        assert b.stats()["timers_woken"] + b.stats()["timers_asked"] >= 1
        # Let the stale incarnation go on. A's Runner asked it too when its index had not
        # seen B's firing yet: it decides the firing on its old state, and the firing's key
        # (timer, due time) is stored already, so the append is a duplicate storing nothing.
        os.kill(frozen, signal.SIGCONT)
        stale, frozen = frozen, None
        # Its next append of something new is refused by the lease B took: A's Runner
        # serves the message with a fresh incarnation rebuilt from the log.
        ack = a.send(sid, "after the takeover")
        a.wait_turn(sid, ack.seq)
        assert a.session_pid(sid) != stale
        wait_for(lambda: a.stats()["timers_set"] == 0 and bb.stats()["timers_set"] == 0, 60)
        with open_log(pg_url) as log:
            assert log.lease(sid)[0] > epoch_a  # type: ignore[attr-defined]
            evs = log.read_events(sid)
    finally:
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
        if b is not None:
            b.close()
        a.close()
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    fired = [e for e in evs if e.kind == Kind.TIMER_FIRED]
    assert len(fired) == 1 and fired[0].extra["timer"] == "once"
    assert [e.text for e in evs if e.kind == Kind.USER_MESSAGE and e.extra.get("timer")] == [
        "the shared reminder"
    ]
