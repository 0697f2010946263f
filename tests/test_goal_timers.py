"""Timers that open goal runs: as tables (`actors.testing.SessionKit`), a goal timer's
firing opens a run with its text as the objective and its budget, once per firing; one due
while a run is in flight is stored rejected; a bad budget is refused when set. On real
processes, a passivated session is woken by its goal timer and the run converges."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime

import attrs
import pytest
from conftest import wait_for

from actors.host import Host
from actors.session.rules import commands as c
from actors.testing import Outcome, SessionKit
from spine import Kind

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC).timestamp()


def _kit() -> SessionKit:
    kit = SessionKit()
    kit.create()
    return kit


def _set(kit: SessionKit, tid: str = "g1", **spec: object) -> Outcome:
    spec.setdefault("text", "write the weekly summary")
    spec.setdefault("now", T0)
    spec.setdefault("goal", True)
    return kit.run(c.SetTimer(request_id="r", key=f"k-{tid}", timer_id=tid, **spec))  # type: ignore[arg-type]


def _fire(kit: SessionKit, now: float) -> Outcome:
    return kit.run(c.FireDue(request_id="f", now=now))


def test_a_goal_timer_opens_a_run_with_its_objective_and_budget() -> None:
    kit = _kit()
    out = _set(kit, after=10.0, budget={"max_turns": 3})
    assert out.events[0].extra["run"] == "goal" and out.events[0].extra["budget"] == {
        "max_turns": 3
    }
    timer = kit.state.stored.timers["g1"]
    assert timer.goal and timer.budget == {"max_turns": 3}
    out = _fire(kit, T0 + 10.5)
    assert out.kinds[:4] == ["timer.fired", "session.started", "user.message", "turn.started"]
    started, msg = out.events[1:3]
    assert started.goal == "s1" and started.text == "write the weekly summary"
    assert started.extra == {"timer": "g1", "budget": {"max_turns": 3}}
    assert started.time is not None and started.time.timestamp() == T0 + 10.5
    assert msg.goal == "s1" and msg.extra["timer"] == "g1"
    run = kit.state.stored.running_goal
    assert run is not None and run.objective == "write the weekly summary"
    assert dict(run.budget) == {"max_turns": 3}
    assert _fire(kit, T0 + 11).events == ()  # fired once


def test_a_goal_timer_due_while_a_run_is_in_flight_is_stored_rejected() -> None:
    kit = _kit()
    _set(kit, "g1", after=10.0)
    _set(kit, "g2", after=10.0)
    out = _fire(kit, T0 + 10.0)  # both due: the first opens the run, the second waits out
    fired = [e for e in out.events if e.kind == Kind.TIMER_FIRED]
    assert [e.extra.get("rejected") for e in fired] == [None, "goal_running"]
    assert [e.kind for e in out.events].count(Kind.SESSION_STARTED) == 1
    # A recurring one keeps its schedule and fires again once the run is over.
    _set(kit, "daily", cron="0 9 * * *")
    out = _fire(kit, T0 + 3600)
    assert out.events[0].extra["rejected"] == "goal_running"
    assert kit.state.stored.timers["daily"].due == T0 + 3600 + 86400


def test_a_message_timer_still_delivers_a_message_during_a_run() -> None:
    kit = _kit()
    _set(kit, "g1", after=1.0)
    _set(kit, "m1", after=2.0, goal=False)
    _fire(kit, T0 + 1.0)
    out = _fire(kit, T0 + 2.0)
    assert out.kinds[:2] == ["timer.fired", "user.message"]
    assert not out.events[1].goal and out.events[1].text == "write the weekly summary"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"after": 1.0, "budget": {"max_turns": 0}}, "budget max_turns must be a positive"),
        ({"after": 1.0, "budget": {"max_hours": 1}}, "unknown budget 'max_hours'"),
        ({"after": 1.0, "goal": False, "budget": {"max_turns": 1}}, "set goal too"),
    ],
)
def test_a_goal_timer_that_cannot_be_set_names_the_problem(
    spec: dict[str, object], problem: str
) -> None:
    kit = _kit()
    out = _set(kit, **spec)
    assert out.events == () and problem in str(out.reply.message)
    assert kit.state.stored.timers == {}


pytestmark_e2e = pytest.mark.timeout(120)


@pytestmark_e2e
def test_a_passivated_session_wakes_for_its_goal_timer_and_the_run_converges(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    h = Host(tmp_path, base="multiprocTCPBase", idle_timeout=0.3, timeout=20, spare_sessions=0)
    try:
        sid = h.create(metadata={"ore.model.name": "scripted"})
        h.set_timer(sid, "say hello", after=1.0, timer_id="g", goal=True, budget={"max_turns": 2})
        wait_for(lambda: h.stats()["passivated"] >= 1, timeout=20)
        wait_for(lambda: any(e.kind == Kind.CONVERGED for e in h.history(sid)), timeout=20)
        events = h.history(sid)
        (started,) = [e for e in events if e.kind == Kind.SESSION_STARTED and e.goal]
        assert started.text == "say hello" and started.extra["timer"] == "g"
        assert [e.kind for e in events].count(Kind.TIMER_FIRED) == 1
        assert h.timers(sid) == []
    finally:
        h.close()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"text": "t", "after_seconds": 5, "goal": "yes"}, "goal must be true or false"),
        ({"text": "t", "after_seconds": 5, "budget": {"max_turns": 2}}, "set goal to true"),
        ({"text": "t", "after_seconds": 5, "goal": True, "budget": 3}, "budget must be an object"),
        (
            {"text": "t", "after_seconds": 5, "goal": True, "budget": {"max_money": 1}},
            "unknown budget 'max_money'",
        ),
        (
            {"text": "t", "after_seconds": 5, "goal": True, "budget": {"max_turns": 0}},
            "max_turns must be a positive integer",
        ),
    ],
)
def test_the_schedule_tool_refuses_a_goal_it_cannot_set_and_says_why(
    args: dict[str, object], error: str
) -> None:
    from actors.agents.tools import ToolError
    from actors.session.shell.schedule_tool import timer_of

    with pytest.raises(ToolError, match=error):
        timer_of(3, "u1", args, T0)


def test_the_schedule_tool_sets_a_goal_timer_the_decider_stores_as_one() -> None:
    """The model's goal timer is the same `SetTimer` a Host's is: stored with its budget,
    and its firing opens a run on the text as the objective."""
    from actors.session.shell.schedule_tool import timer_of

    args = {
        "text": "check the build",
        "after_seconds": 60,
        "goal": True,
        "budget": {"max_turns": 2},
    }
    cmd, said = timer_of(3, "u1", args, T0)
    assert (cmd.goal, dict(cmd.budget), cmd.timer_id) == (True, {"max_turns": 2}, "m-3-u1")
    assert said.startswith("goal run m-3-u1 set: first firing at 2026-03-02T08:01:00")
    kit = _kit()
    out = kit.run(attrs.evolve(cmd, now=T0))
    (ev,) = out.events
    assert ev.kind == Kind.TIMER_SET and ev.extra["run"] == "goal"
    assert ev.extra["budget"] == {"max_turns": 2}


@pytestmark_e2e
def test_the_model_schedules_a_goal_run_with_the_schedule_tool(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """A model's call of ``schedule`` with goal true: the turn ends, and at its time a goal
    run opens on the text under the budget the model gave, and converges."""
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, spare_sessions=0)
    try:
        sid = h.create(metadata={"ore.model.name": "scripted"})
        args = (
            '{"text": "say hello", "after_seconds": 0.3, "goal": true, "budget": {"max_turns": 2}}'
        )
        ask = h.send(sid, "!tool schedule " + args)
        assert h.wait_turn(sid, ask.seq).kind == Kind.TURN_COMPLETED
        (result,) = [e for e in h.history(sid) if e.kind == Kind.TOOL_RESULT]
        assert not result.is_error and result.result.startswith("goal run m-")
        wait_for(lambda: any(e.kind == Kind.CONVERGED for e in h.history(sid)), timeout=20)
        events = h.history(sid)
        (started,) = [e for e in events if e.kind == Kind.SESSION_STARTED and e.goal]
        assert started.text == "say hello" and started.extra["timer"].startswith("m-")
        (set_,) = [e for e in events if e.kind == Kind.TIMER_SET]
        assert set_.extra["budget"] == {"max_turns": 2}
        assert [e.kind for e in events].count(Kind.TIMER_FIRED) == 1 and h.timers(sid) == []
    finally:
        h.close()
