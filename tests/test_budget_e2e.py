"""A spending budget on real processes: the operator's prices given at start, a turn that
would pass the budget pauses and asks, the pause survives SIGKILL of the session, and a
raise continues the same turn."""

from __future__ import annotations

import os
import pathlib
import signal

import pytest
from conftest import wait_for

from actors.host import Host
from spine import Kind

pytestmark = pytest.mark.timeout(120)

#: Every token costs one unit.
PRICES = {"version": "test-1", "currency": "EUR", "models": {"*": {"input": 1e6, "output": 1e6}}}


def test_a_budget_pause_survives_a_kill_and_a_raise_continues_the_same_turn(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0, prices=PRICES)
    try:
        meta = {"ore.model.name": "scripted", "governance.max_cost": "1", "tenant": "acme"}
        sid = h.create(metadata=meta)
        first = h.send(sid, "hello")
        assert h.wait_turn(sid, first.seq).kind == Kind.TURN_COMPLETED
        spent = h.spending(sid)
        assert spent["version"] == "test-1" and spent["cost"] >= 1 and spent["paused"] == []
        second = h.send(sid, "and again")
        wait_for(lambda: h.spending(sid)["paused"], timeout=20)
        (call,) = h.spending(sid)["paused"]
        paused = [e for e in h.history(sid) if e.kind == Kind.PAUSED]
        assert [(e.reason, e.call) for e in paused] == [("budget", call)]
        turn = paused[0].turn
        os.kill(h.session_pid(sid), signal.SIGKILL)
        # Brought back by the next request: still paused, the turn still open.
        assert h.pending(sid)[0].call == call and h.spending(sid)["paused"] == [call]
        h.approve(sid, call, raise_by=100.0)
        end = h.wait_turn(sid, second.seq)
        assert end.kind == Kind.TURN_COMPLETED and end.turn == turn
        assert any(e.kind == Kind.BUDGET_RAISED for e in h.history(sid))
        assert h.spending(sid)["budget"] == 101.0 and h.spending(sid)["paused"] == []
        # Folded per tenant too, from every stream.
        other = h.create(metadata={"ore.model.name": "scripted"})
        h.wait_turn(other, h.send(other, "hi").seq)
        by_tenant = h.spending_by_tenant()
        assert by_tenant["acme"]["sessions"] == 1 and by_tenant[""]["sessions"] == 1
        assert by_tenant["acme"]["cost"] == pytest.approx(h.spending(sid)["cost"])
    finally:
        h.close()
