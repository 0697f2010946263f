"""The Runner's shell against a real log: what it reads from the log and what it writes."""

from __future__ import annotations

import os
import pathlib

import pytest

from actors.errors import SessionClosed
from actors.host import Host
from actors.runner import spine_path
from spine import Event, Kind, Phase, SqliteLog


def _stored(data: pathlib.Path, sid: str, events: list[Event]) -> None:
    """Write a stream straight into the spine, as an earlier daemon would have."""
    os.makedirs(data, exist_ok=True)
    with SqliteLog(spine_path(str(data))) as log:
        log.append(sid, events)


def test_close_all_closes_stored_sessions_the_runner_never_loaded(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """close_all closes an unloaded stream in the log (its open turn first), leaves a closed
    one alone, and a new Runner finds it closed."""
    data = tmp_path / "data"
    _stored(
        data,
        "open-turn",
        [
            Event(kind=Kind.LIFECYCLE, phase=Phase.OPENED),
            Event(kind=Kind.USER_MESSAGE, text="hi"),
            Event(kind=Kind.TURN_STARTED, turn=1),
        ],
    )
    _stored(data, "was-closed", [Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED)])
    h = Host(data, base="simpleSystemBase", timeout=20)
    try:
        h.close_all()
        tail = [(e.kind, e.phase, e.reason) for e in h.history("open-turn")[3:]]
        assert tail[0][0] == Kind.TURN_CANCELLED and tail[0][2] == "closed"
        assert tail[-1][:2] == (Kind.LIFECYCLE, Phase.CLOSED)
        assert len(h.history("was-closed")) == 1
    finally:
        h.close()
    h = Host(data, base="simpleSystemBase", timeout=20)
    try:
        assert h.get("open-turn").state == "closed"
        with pytest.raises(SessionClosed):
            h.send("open-turn", "again")
    finally:
        h.close()


def test_register_reports_the_last_seq_in_the_log(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """register answers the stream's last seq as the log has it, not a remembered one."""
    data = tmp_path / "data"
    h = Host(data, base="simpleSystemBase", timeout=20)
    try:
        assert h.register("ext").last_seq == 0
        _stored(data, "ext", [Event(kind=Kind.LIFECYCLE, phase=Phase.OPENED)] * 3)
        assert h.register("ext").last_seq == 3
    finally:
        h.close()
