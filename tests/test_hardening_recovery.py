"""A session that used up its restart budget does not keep its cut-off turn open."""

from __future__ import annotations

import os
import pathlib
import signal

from conftest import wait_for

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
