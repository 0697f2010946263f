"""A spending budget on real processes: the operator's prices given at start, a turn that
would pass the budget pauses and asks, the pause survives SIGKILL of the session, and a
raise continues the same turn; a goal run's own budget stops a tool loop within one model
call of it."""

from __future__ import annotations

import os
import pathlib
import re
import signal

import pytest
from conftest import wait_for

from actors.errors import GoalStalled
from actors.host import Host
from spine import Event, Kind

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


#: Each model call of the loop reads its 4 words and asks for the tool with 1 token: 5.
LOOP = '!loop calculator {"expression": "1+1"}'
PER_CALL = 5.0
#: A call may put out 10 tokens: the gate reserves 10 before each.
RESERVE = 10.0


def _since(h: Host, sid: str, seq: int) -> list[Event]:
    return [e for e in h.history(sid) if e.seq > seq]


def _gate_figures(error: str) -> tuple[float, float, float]:
    """The budget, the spending and the reserve the gate's pause names."""
    found = re.search(r"goal cost budget (\S+): spent (\S+), the call may cost (\S+)", error)
    assert found is not None, error
    return float(found[1]), float(found[2]), float(found[3])


def test_a_tool_loop_is_stopped_within_one_call_of_its_goal_budget_and_a_raise_goes_on(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """A scripted model that asks for a tool after every result, priced by the operator's
    table, under a goal run's ``max_cost`` counted from the run's start: the gate pauses it
    before the call that could pass the budget, a raise goes on in the same turn, and a
    refusal at the next pause stalls the run naming its budget."""
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0, prices=PRICES)
    try:
        meta = {
            "ore.model.name": "scripted",
            "ore.model.max_output_tokens": "10",
            "ore.model.max_tool_rounds": "100",
        }
        sid = h.create(metadata=meta)
        before = h.send(sid, "hello")  # spent before the run: not the run's
        assert h.wait_turn(sid, before.seq).kind == Kind.TURN_COMPLETED
        assert h.spending(sid)["cost"] > 0 and h.spending(sid)["goal"] is None
        opened = h.submit(sid, LOOP, budget={"max_cost": 30})
        wait_for(lambda: h.spending(sid)["paused"], timeout=20)
        (call,) = h.spending(sid)["paused"]
        evs = _since(h, sid, opened.seq)
        (pending,) = [e for e in evs if e.kind == Kind.ACTION_PENDING]
        budget, spent, reserve = _gate_figures(pending.error)
        calls = [e for e in evs if e.kind == Kind.ACTION_ADMITTED and e.action == "model"]
        # Stopped before the call that could pass it, within one call's reserve of it.
        assert (budget, reserve) == (30.0, RESERVE) and spent == len(calls) * PER_CALL
        assert spent <= budget < spent + reserve
        paused = [e for e in evs if e.kind == Kind.PAUSED]
        assert [(e.reason, e.call, e.goal) for e in paused] == [("budget", call, sid)]
        assert h.spending(sid)["pausedFor"] == {str(call): "goal"}
        turn = paused[0].turn
        h.approve(sid, call, raise_by=10.0)  # 40 now: two more calls, then a pause again
        wait_for(lambda: h.spending(sid)["paused"] not in ([], [call]), timeout=20)
        (again,) = h.spending(sid)["paused"]
        evs = _since(h, sid, opened.seq)
        second = [e for e in evs if e.kind == Kind.ACTION_PENDING and e.call == again]
        budget, spent, _ = _gate_figures(second[0].error)
        assert budget == 40.0 and spent <= budget < spent + RESERVE
        # The same turn went on: no other turn started in the run.
        assert [e.turn for e in evs if e.kind == Kind.TURN_STARTED] == [turn]
        assert h.spending(sid)["goal"]["budget"] == 40.0 and h.spending(sid)["raised"] == 0.0
        h.reject(sid, again, "enough")
        with pytest.raises(GoalStalled, match="goal cost budget: not raised"):
            h.wait(sid, timeout=20)
        end = [e for e in _since(h, sid, opened.seq) if e.kind == Kind.TURN_COMPLETED]
        assert [e.turn for e in end] == [turn]
    finally:
        h.close()


def test_a_kill_during_a_budget_pause_mid_turn_keeps_the_calls_spent_before_it(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """A tool loop pauses at its second model call, the session is SIGKILLed in the pause,
    a raise resumes the same turn on a new process: the spend counts every model call
    once, the first (whose worker died) from the usage its ``action.completed`` stored."""
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0, prices=PRICES)
    try:
        meta = {"ore.model.name": "scripted", "governance.max_cost": str(PER_CALL + RESERVE - 3)}
        sid = h.create(metadata=meta)
        sent = h.send(sid, LOOP)
        wait_for(lambda: h.spending(sid)["paused"], timeout=20)
        (call,) = h.spending(sid)["paused"]
        os.kill(h.session_pid(sid), signal.SIGKILL)
        assert h.spending(sid)["paused"] == [call]
        h.approve(sid, call, raise_by=1000.0)
        end = h.wait_turn(sid, sent.seq)
        assert end.kind == Kind.TURN_COMPLETED
        calls = [
            e.usage
            for e in h.history(sid)
            if e.kind == Kind.ACTION_COMPLETED and e.action == "model" and e.usage is not None
        ]
        assert len(calls) >= 2
        each = sum(u.input_tokens + u.output_tokens for u in calls)
        assert end.usage is not None and end.usage.output_tokens < sum(
            u.output_tokens for u in calls
        )
        assert h.spending(sid)["cost"] == pytest.approx(each)
    finally:
        h.close()
