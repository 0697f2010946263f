"""Connections between actor processes close after a short quiet spell, and a session
quiet past it is reached again over a new one (`actors._runtime.system.short_idle_sockets`)."""

from __future__ import annotations

import os
import pathlib
import time
from datetime import timedelta

import pytest
from thespian.system.transport import TCPTransport as tt

from actors._runtime import system
from actors.host.host import Host
from spine import Kind

WAIT = 20.0


def _sockets(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue  # closed while listed
    return n


def test_thespians_idle_periods_are_short_once_installed() -> None:
    system.short_idle_sockets()
    system.short_idle_sockets()
    period = timedelta(seconds=system.IDLE_SOCKET)
    assert period >= tt.MAX_IDLE_SOCKET_PERIOD
    assert period >= tt.MAX_INCOMING_SOCKET_PERIOD


def test_a_session_quiet_past_the_idle_period_is_reached_over_a_new_connection(
    tmp_path: pathlib.Path, no_leftover_processes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Forked actor processes inherit these (a fraction of a second instead of 15 s).
    monkeypatch.setattr(tt, "MAX_IDLE_SOCKET_PERIOD", timedelta(seconds=0.3))
    monkeypatch.setattr(tt, "MAX_INCOMING_SOCKET_PERIOD", timedelta(seconds=0.3))
    h = Host(tmp_path / "data", base="multiprocTCPBase", timeout=WAIT)
    try:
        sid = h.create()
        ack = h.send(sid, "before the quiet spell")
        assert h.wait_turn(sid, ack.seq, timeout=WAIT).kind == Kind.TURN_COMPLETED
        pid = h.session_pid(sid)
        talking = _sockets(pid)
        deadline = time.monotonic() + WAIT
        while _sockets(pid) >= talking and time.monotonic() < deadline:
            time.sleep(0.05)  # polling a condition, bounded
        assert _sockets(pid) < talking, "the quiet session's connections stayed open"
        ack = h.send(sid, "after it")
        assert h.wait_turn(sid, ack.seq, timeout=WAIT).kind == Kind.TURN_COMPLETED
        assert h.session_pid(sid) == pid  # the same process: reached, not restarted
        texts = [e.text for e in h.history(sid) if e.kind == Kind.USER_MESSAGE]
        assert texts == ["before the quiet spell", "after it"]
    finally:
        h.close()
