"""Regressions found at the seam between decisions and effects, checked on real actor
systems (both bases): each test pins a bug that once shipped."""

from __future__ import annotations

import os
import pathlib
import signal
import threading

import pytest
from conftest import wait_for

from actors.host import Host
from spine import Kind


@pytest.fixture(params=["simpleSystemBase", "multiprocTCPBase"])
def host(request, tmp_path: pathlib.Path, no_leftover_processes):  # type: ignore[no-untyped-def]
    h = Host(tmp_path, base=request.param, timeout=20)
    try:
        yield h
    finally:
        h.close()


def _turn_errors(h: Host, sid: str) -> list[str]:
    return [e.error for e in h.history(sid) if e.kind == Kind.TURN_COMPLETED]


def test_a_bad_model_setting_fails_the_turn_not_the_session(host: Host) -> None:
    """A temperature of "hot" is stored; the next message's turn closes with an error event
    naming it, the session still serves, and fixing the setting brings turns back."""
    sid = host.create()
    host.set_metadata(sid, {"ore.model.temperature": "hot"})
    ack = host.send(sid, "hello")
    done = host.wait_turn(sid, ack.seq - 1, timeout=10)
    assert done.kind == Kind.TURN_COMPLETED and "ore.model.temperature" in done.error
    assert host.get(sid).state == "live"
    host.set_metadata(sid, {"ore.model.temperature": "0.5"})
    ack = host.send(sid, "again")
    done = host.wait_turn(sid, ack.seq - 1, timeout=10)
    assert done.error == "" and done.stop_reason == "end_turn"


def test_a_bad_model_setting_does_not_wedge_a_restarted_session(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """After a SIGKILL the new incarnation reads the same bad setting and still serves."""
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20)
    try:
        sid = h.create(metadata={"model.temperature": "hot"})  # the old spelling, too
        os.kill(h.session_pid(sid), signal.SIGKILL)
        ack = h.send(sid, "after the crash")
        done = h.wait_turn(sid, ack.seq - 1, timeout=15)
        assert "model.temperature" in done.error
        assert h.get(sid).state == "live"
    finally:
        h.close()


def test_a_notice_reaches_sinks_before_the_events_its_command_stored(host: Host) -> None:
    """/model stores a properties event; its success notice is delivered ahead of it."""
    seen: list[str] = []
    stored = threading.Event()

    def sink(sid: str, ev, live) -> None:  # type: ignore[no-untyped-def]
        if live is not None:
            seen.append(f"notice:{live[2]}")
        elif ev is not None:
            seen.append(str(ev.kind))
            if ev.kind == Kind.PROPERTIES:
                stored.set()

    host.add_sink(sink, kinds=["notice", Kind.PROPERTIES])
    sid = host.create()
    host.send(sid, "/model big")
    assert stored.wait(10)
    wait_for(lambda: any(s.startswith("notice:") for s in seen), timeout=10)
    notice = next(i for i, s in enumerate(seen) if s.startswith("notice:model set"))
    props = len(seen) - 1 - seen[::-1].index(str(Kind.PROPERTIES))
    assert notice < props, seen


def test_a_snapshot_on_the_single_process_base_does_not_stop_the_session(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Snapshots are written from whichever thread drives the system there; the session
    used to stop serving at its first snapshot (seq 1000)."""
    from actors.policy import SnapshotPolicy

    h = Host(tmp_path, base="simpleSystemBase", timeout=20, snapshots=SnapshotPolicy(events=10))
    try:
        sid = h.create()
        for i in range(8):
            ack = h.send(sid, f"m{i}")
            h.wait_turn(sid, ack.seq, timeout=10)
        assert h.get(sid).last_seq >= 30
    finally:
        h.close()


def test_a_session_that_cannot_load_its_stream_fails_instead_of_hanging(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """A damaged row makes every start fail: the Runner restarts within its budget, then
    marks the session failed, and the waiting request is answered (it used to wait for
    ever on an incarnation that never became ready)."""
    import sqlite3

    from actors.errors import SessionFailed

    h = Host(tmp_path, base="multiprocTCPBase", timeout=20)
    try:
        sid = h.create()
        h.wait_turn(sid, h.send(sid, "hello").seq, timeout=10)
    finally:
        h.close()
    db = sqlite3.connect(tmp_path / "spine.db")
    db.execute("DROP TRIGGER events_append_only_update")
    db.execute("UPDATE events SET payload = x'7b' WHERE stream = ? AND seq = 2", (sid,))
    db.commit()
    db.close()
    h = Host(tmp_path, base="multiprocTCPBase", max_restarts=1, timeout=20)
    try:
        with pytest.raises(SessionFailed):
            h.send(sid, "anyone?")
        assert h.get(sid).state == "failed"
    finally:
        h.close()
