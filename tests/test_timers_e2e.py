"""Session timers on real processes: a passivated session woken for its timer, a crash
between "due" and "delivered" that still fires once, and a daemon down across a due time
whose firing comes late, once, saying how late."""

from __future__ import annotations

import os
import pathlib
import signal
import time

import pytest
from conftest import wait_for

from actors.host import Host
from spine import Event, Kind, SqliteLog

pytestmark = pytest.mark.timeout(120)


def _fired(h: Host, sid: str) -> list[Event]:
    return [e for e in h.history(sid) if e.kind == Kind.TIMER_FIRED]


def _delivered(h: Host, sid: str) -> list[Event]:
    return [e for e in h.history(sid) if e.kind == Kind.USER_MESSAGE and e.extra.get("timer")]


def _answered(h: Host, sid: str, text: str) -> bool:
    return any(e.kind == Kind.ASSISTANT and text in e.text for e in h.history(sid))


def _gone(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone between the open and the read
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_passivated_session_wakes_for_its_timer_and_runs_a_turn_on_it(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    h = Host(tmp_path, base="multiprocTCPBase", idle_timeout=0.3, timeout=20, spare_sessions=0)
    try:
        sid = h.create()
        pid = h.session_pid(sid)
        # Due after the lead (1 s) and the passivation check: passivated first.
        h.set_timer(sid, "remind me", after=3.0, timer_id="r1")
        assert [t["id"] for t in h.timers(sid)] == ["r1"]
        # Passivated before the timer is due: no process waits for it.
        wait_for(lambda: h.stats()["passivated"] >= 1, timeout=20)
        wait_for(lambda: _gone(pid), timeout=20)
        assert h.stats()["timers_set"] == 1
        wait_for(lambda: _answered(h, sid, "remind me"), timeout=20)
        fired = _fired(h, sid)
        assert len(fired) == 1 and fired[0].extra["timer"] == "r1"
        assert fired[0].extra["next"] is None
        assert [e.text for e in _delivered(h, sid)] == ["remind me"]
        assert h.timers(sid) == []
    finally:
        h.close()


def test_a_passivated_session_is_back_before_its_timer_and_fires_on_its_own_alarm(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Woken the lead ahead of its timer, the session is live when the timer comes due, is
    not passivated again meanwhile (one rehydration), and fires it on time."""
    h = Host(
        tmp_path,
        base="multiprocTCPBase",
        idle_timeout=0.3,
        timer_lead=3.0,
        timeout=20,
        spare_sessions=0,
    )
    try:
        sid = h.create()
        pid = h.session_pid(sid)
        due = time.time() + 8.0
        h.set_timer(sid, "on time", at=due, timer_id="w1")
        wait_for(lambda: _gone(pid), timeout=20)
        back = h.stats()["rehydrated"]
        assert time.time() < due - 3.0, "passivated too late for the test to mean anything"
        # Live (a process serving the session again) before the timer is due.
        wait_for(lambda: h.stats()["live"] == 1, timeout=max(0.1, due - time.time() - 0.1))
        assert h.stats()["timers_woken"] == 1
        wait_for(lambda: _fired(h, sid), timeout=20)
        fired = _fired(h, sid)
        assert len(fired) == 1 and fired[0].extra["late"] < 0.5
        assert h.stats()["rehydrated"] == back + 1
    finally:
        h.close()


def test_a_session_killed_between_due_and_delivered_fires_its_timer_once(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """The session is frozen before its timer is due (its own alarm cannot ring), the
    Runner asks it to fire after the backstop (the ask sits unread), then the process is
    killed: the restarted session fires once, on its own alarm or the Runner's ask."""
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0)
    try:
        sid = h.create()
        pid = h.session_pid(sid)
        asked = h.stats()["timers_asked"]
        h.set_timer(sid, "after the crash", after=1.0, timer_id="c1")
        wait_for(lambda: h.stats()["timers_set"] == 1, timeout=20)
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: h.stats()["timers_asked"] > asked, timeout=20)
        finally:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _gone(pid), timeout=20)
        wait_for(lambda: _answered(h, sid, "after the crash"), timeout=20)
        assert h.session_pid(sid) != pid
        # The index then holds nothing, and there was one firing, one delivery.
        wait_for(lambda: h.stats()["timers_set"] == 0, timeout=20)
        assert len(_fired(h, sid)) == 1
        assert [e.text for e in _delivered(h, sid)] == ["after the crash"]
    finally:
        h.close()


def test_a_daemon_down_across_a_due_time_fires_once_late_or_skips(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0)
    try:
        sid = h.create()
        h.set_timer(sid, "late but once", after=1.0, timer_id="late")
        h.set_timer(sid, "dropped", after=1.0, timer_id="skip", policy="skip", grace=0.2)
        due = max(t["due"] for t in h.timers(sid))
        # Every second (six fields, seconds first): several firings pass while down.
        h.schedule(sid, "* * * * * *", "tick", timer_id="tick")
    finally:
        h.close()
    # Down until both are well past due: the skip one beyond its grace. The index of due
    # times is only a checkpoint: a damaged one is rebuilt from the log.
    wait_for(lambda: time.time() > due + 1.0, timeout=10, interval=0.05)
    # The schedule may have fired once on time while that Host was closing: what counts is
    # what the next one fires.
    with SqliteLog(tmp_path / "spine.db", read_only=True) as log:
        before = log.last_seq(sid)
    for name in ("timers.db-wal", "timers.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    (tmp_path / "timers.db").write_bytes(b"not a database " * 100)
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0)
    try:
        wait_for(lambda: {"late", "skip"} <= {e.extra["timer"] for e in _fired(h, sid)}, 20)
        h.cancel_timer(sid, "tick")
        wait_for(lambda: _answered(h, sid, "late but once"), timeout=20)
        fired = _fired(h, sid)
        by_id = {e.extra["timer"]: e for e in fired}
        assert by_id["late"].extra["late"] >= 1.0 and "skipped" not in by_id["late"].extra
        assert by_id["skip"].extra["skipped"] is True
        # The schedule's missed firings came as one, saying how many and how late.
        first_tick = next(e for e in fired if e.extra["timer"] == "tick" and e.seq > before)
        assert first_tick.extra["missed"] >= 1 and first_tick.extra["late"] >= 0.5
        delivered = [e.text for e in _delivered(h, sid)]
        assert delivered.count("late but once") == 1 and "dropped" not in delivered
        assert h.timers(sid) == []
    finally:
        h.close()


def test_the_model_sets_a_reminder_with_the_governed_schedule_tool(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0)
    try:
        sid = h.create(metadata={"ore.model.name": "scripted"})
        ask = h.send(sid, '!tool schedule {"text": "wake up", "after_seconds": 0.5}')
        assert h.wait_turn(sid, ask.seq).kind == Kind.TURN_COMPLETED
        (result,) = [e for e in h.history(sid) if e.kind == Kind.TOOL_RESULT]
        assert not result.is_error and "first firing at" in result.result
        wait_for(lambda: _answered(h, sid, "wake up"), timeout=20)
        assert [e.text for e in _delivered(h, sid)] == ["wake up"]
        # Governed like any tool: a session that does not grant the capability refuses it.
        denied = h.create(
            metadata={"ore.model.name": "scripted", "governance.capabilities": "clock"}
        )
        ask = h.send(denied, '!tool schedule {"text": "no", "after_seconds": 0.5}')
        assert h.wait_turn(denied, ask.seq).kind == Kind.TURN_COMPLETED
        refused = [e for e in h.history(denied) if e.kind == Kind.ACTION_REJECTED]
        assert [e.fault for e in refused] == ["capability_denied"] and h.timers(denied) == []
    finally:
        h.close()
