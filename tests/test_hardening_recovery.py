"""A session that used up its restart budget does not keep its cut-off turn open."""

from __future__ import annotations

import os
import pathlib
import signal

import pytest
from conftest import wait_for

from actors.errors import InvalidRequest, SessionFailed, SessionNotFound
from actors.host import Host
from spine import Kind, Phase


def test_a_session_failed_past_its_budget_has_its_cut_off_turn_closed(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Killed mid-turn with no restarts left: the Runner closes the open turn
    (`turn.cancelled`, reason failed) before the `failed` lifecycle event."""
    h = Host(tmp_path, base="multiprocTCPBase", max_restarts=0, timeout=20)
    try:
        sid = h.create()
        h.send(sid, "!slow 2 one two three four five six")
        wait_for(lambda: any(e.kind == Kind.TURN_STARTED for e in h.history(sid)), 20)
        os.kill(h.session_pid(sid), signal.SIGKILL)
        wait_for(lambda: h.history(sid)[-1].phase == Phase.FAILED, 20)
        tail = h.history(sid)[-3:]
        assert tail[0].kind == Kind.TURN_CANCELLED and tail[0].reason == "failed", tail
        assert tail[0].turn == next(e.turn for e in h.history(sid) if e.kind == Kind.TURN_STARTED)
    finally:
        h.close()


def test_an_operator_revives_a_failed_session_and_the_decision_is_an_event(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """`Host.revive` on a failed session stores a `recovered` lifecycle event naming the
    reason; the session then serves again. Reviving one that is not failed is refused."""
    h = Host(tmp_path, base="multiprocTCPBase", max_restarts=0, timeout=20)
    try:
        sid = h.create()
        with pytest.raises(InvalidRequest, match="not failed"):
            h.revive(sid)
        os.kill(h.session_pid(sid), signal.SIGKILL)
        wait_for(lambda: h.history(sid)[-1].phase == Phase.FAILED, 20)
        with pytest.raises(SessionFailed):
            h.send(sid, "anyone?")
        seq = h.revive(sid, "disk replaced")
        ev = h.history(sid)[seq - 1]
        assert ev.phase == Phase.RECOVERED and "disk replaced" in (ev.reason or "")
        ack = h.send(sid, "back again")
        assert h.wait_turn(sid, ack.seq, timeout=30).kind == Kind.TURN_COMPLETED
        with pytest.raises(SessionNotFound):
            h.revive("never-was")
    finally:
        h.close()


def test_check_reports_integrity_and_names_a_tampered_seq_in_every_session(
    tmp_path: pathlib.Path,
) -> None:
    """`vertebra check` on an intact spine exits 0; after a sealed row's bytes and another
    session's kind column are edited it exits 1 naming each seq."""
    import sqlite3

    from cli_support import run

    from spine import Event, SqliteLog
    from spine.seal import KeyStore, seal_stream

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    db = data / "spine.db"
    key = KeyStore(data / "keys").signing_key()
    with SqliteLog(db) as log:
        for sid in ("c-1", "c-2"):
            log.append(sid, [Event(kind=Kind.USER_MESSAGE, text=f"m{i}") for i in range(4)])
            seal_stream(log, sid, key)
    out = run(data, "check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "integrity: ok" in out.stdout and "c-2: 1 seal(s), ok" in out.stdout
    c = sqlite3.connect(db, isolation_level=None)
    try:
        c.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        # Only the message's row: the seal's signature is base64 and may hold "m2" too.
        c.execute(
            "UPDATE events SET payload=replace(payload, 'm2', 'mX') WHERE stream='c-1' AND seq=3"
        )
        c.execute("UPDATE events SET kind='turn.completed' WHERE stream='c-2' AND seq=2")
    finally:
        c.close()
    out = run(data, "check")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "c-1: 1 seal(s), TAMPERED at seq 3" in out.stdout, out.stdout
    assert "c-2: 1 seal(s), TAMPERED at seq 2" in out.stdout, out.stdout


def test_a_turn_cut_off_by_a_daemon_crash_is_closed_and_sealed_after_the_restart(
    tmp_path: pathlib.Path,
) -> None:
    """SIGKILL of the daemon mid-turn; the next daemon closes the turn at its start and
    the auto-seal policy (here every 0.3 s) seals that, with nobody writing to the session."""
    from cli_support import Daemon, run

    from spine import SqliteLog

    d = Daemon(tmp_path / "data")
    try:
        d.start()
        assert run(d.data, "new", "cut-1").returncode == 0
        assert run(d.data, "send", "cut-1", "!hang", "--no-wait").returncode == 0
        wait_for(lambda: "turn.started" in run(d.data, "history", "cut-1").stdout, 30)
        assert d.proc is not None
        d.proc.kill()
        d.wait_exited()
        # The dead daemon's file stays; the helper waits for the new one to appear.
        (d.data / "daemon.json").unlink()
        d.start("--seal-interval", "0.3", "--seal-every", "0")

        def sealed_after_recovery() -> bool:
            with SqliteLog(d.data / "spine.db", read_only=True) as log:
                events = log.read_events("cut-1", 0)
            done = [e.seq for e in events if e.kind == Kind.LIFECYCLE and e.phase == Phase.DONE]
            seals = [e.record["last"] for e in events if e.kind == Kind.RECORD_SEALED]
            return bool(done and seals and max(seals) >= done[-1])

        wait_for(sealed_after_recovery, 30)
        with SqliteLog(d.data / "spine.db", read_only=True) as log:
            kinds = [e.kind for e in log.read_events("cut-1", 0)]
        assert Kind.TURN_CANCELLED in kinds and Kind.USER_MESSAGE in kinds
        assert kinds.count(Kind.USER_MESSAGE) == 1  # nothing was sent after the restart
    finally:
        d.stop()
        d.check_no_leftovers()
