"""A tenant's daily cap on real processes: what one session of the tenant spent pauses
another session's model call (the ledger beside the spine, folded by the session
processes), the pause survives a SIGKILL, a raise lets that same turn go on and counts for
the whole tenant's day, and a session of another tenant is not held."""

from __future__ import annotations

import os
import pathlib
import signal

import pytest
from conftest import wait_for

from actors.host import Host
from actors.session.rules.spend import period_keys
from spine import Kind

pytestmark = pytest.mark.timeout(120)

#: Every token costs one unit; acme may spend half a unit a day.
PRICES = {
    "version": "test-t",
    "currency": "EUR",
    "models": {"*": {"input": 1e6, "output": 1e6}},
    "tenants": {"acme": {"day": 0.5}},
}


def _paused(h: Host, sid: str) -> list:
    return [e for e in h.history(sid) if e.kind == Kind.PAUSED]


def test_a_tenants_daily_cap_holds_across_its_sessions(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0, prices=PRICES)
    try:
        acme = {"ore.model.name": "scripted", "tenant": "acme"}
        a = h.create(metadata=acme)
        first = h.send(a, "hello")  # nothing spent yet: it runs
        assert h.wait_turn(a, first.seq).kind == Kind.TURN_COMPLETED
        spent_a = h.spending(a)["cost"]
        assert spent_a >= 1
        b = h.create(metadata=acme)
        second = h.send(b, "and you")  # a's spending is the tenant's: b pauses
        wait_for(lambda: h.spending(b)["paused"], timeout=20)
        (paused,) = _paused(h, b)
        day = paused.extra["period"]
        assert day.startswith("day:") and "tenant acme day budget 0.5" in paused.error
        # The pause and the period it waits on survive a SIGKILL of the session.
        os.kill(h.session_pid(b), signal.SIGKILL)
        spent_b = h.spending(b)
        assert spent_b["pausedFor"] == {str(paused.call): day} and spent_b["caps"] == {"day": 0.5}
        assert h.pending(b)[0].call == paused.call
        h.approve(b, paused.call, raise_by=100.0)
        end = h.wait_turn(b, second.seq)
        assert end.kind == Kind.TURN_COMPLETED and end.turn == paused.turn
        # b's raise counts for a too: the tenant's day now has 100.5.
        third = h.send(a, "once more")
        assert h.wait_turn(a, third.seq).kind == Kind.TURN_COMPLETED
        assert _paused(h, a) == []
        beta = h.create(metadata={"ore.model.name": "scripted", "tenant": "beta"})
        assert h.wait_turn(beta, h.send(beta, "hi").seq).kind == Kind.TURN_COMPLETED
        assert (tmp_path / "spend.db").exists()  # the ledger, beside the spine
        rows = h.spending_by_tenant()
        acme_row = rows["acme"]
        assert acme_row["sessions"] == 2 and acme_row["caps"] == {"day": 0.5}
        assert acme_row["raised"] == {day: 100.0}
        total = h.spending(a)["cost"] + h.spending(b)["cost"]
        assert day == period_keys(end.time)["day"]  # type: ignore[arg-type]
        assert acme_row["periods"][day] == pytest.approx(total)
    finally:
        h.close()
