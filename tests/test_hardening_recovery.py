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
