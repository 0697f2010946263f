"""When a goal run is interrupted, as a table over streams stored in a real SQLite spine:
in flight and nothing driving it; not when a process works on it, when a human was asked
(the answer brings the session up), when it ended, or when the session ran no goal."""

from __future__ import annotations

import pathlib

import attrs
import pytest

from actors.errors import GoalInterrupted
from actors.host.goals import interruption, wait_goal
from actors.session.rules import commands as c
from actors.testing import SessionKit
from spine import Event, Kind, Phase, open_log

SID = "s1"


def _cut_off_run() -> list[Event]:
    """A stream as a stop leaves it: a goal run open, its first turn started, no end."""
    kit = SessionKit(session_id=SID)
    kit.create()
    kit.run(c.Submit(request_id="rs", key="goal-x", objective="find x", budget={}, now=0.0))
    assert kit.events[-1].kind == Kind.TURN_STARTED
    return list(kit.events)


def _approval(events: list[Event], question: bool) -> Event:
    turn = next(e.turn for e in reversed(events) if e.kind == Kind.TURN_STARTED)
    extra = {"elicitation": {"message": "which?"}} if question else None
    return Event(
        kind=Kind.ACTION_PENDING, call=len(events) + 1, turn=turn, action="deploy", extra=extra
    )


CUT = _cut_off_run()
CASES = {
    "in flight, nothing drives it": (CUT, False, True),
    "in flight, a process works on it": (CUT, True, False),
    "waits for a human's approval": ([*CUT, _approval(CUT, False)], False, False),
    "a server's question died with its call": ([*CUT, _approval(CUT, True)], False, True),
    "converged": ([*CUT, Event(kind=Kind.CONVERGED, goal=SID, text="x")], False, False),
    "stalled": ([*CUT, Event(kind=Kind.STALLED, goal=SID, error="cancelled")], False, False),
    "failed mid-run": ([*CUT, Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED)], False, True),
    "no goal run": ([CUT[0]], False, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_interruption(name: str, tmp_path: pathlib.Path) -> None:
    events, working, interrupted = CASES[name]
    log = open_log(str(tmp_path / "spine.db"))
    try:
        log.append(SID, [attrs.evolve(e, seq=0) for e in events])
        why = interruption(log, SID, lambda: working)
        assert (why is not None) == interrupted, why
        if why is not None:
            stored = log.read_events(SID)
            started = next(e for e in stored if e.kind == Kind.SESSION_STARTED and e.goal)
            assert (why.goal, why.seq, why.session_id) == (SID, started.seq, SID)
            assert f"vertebra resume {SID}" in str(why)
            assert ("vertebra revive" in str(why)) == (name == "failed mid-run")
    finally:
        log.close()


def test_a_wait_without_a_timeout_says_interrupted_at_once(tmp_path: pathlib.Path) -> None:
    """No timeout and nothing driving the run: the wait raises instead of waiting."""
    log = open_log(str(tmp_path / "spine.db"))
    try:
        log.append(SID, [attrs.evolve(e, seq=0) for e in CUT])
        with pytest.raises(GoalInterrupted, match="is interrupted"):
            wait_goal(log, SID, None, lambda: False)
    finally:
        log.close()
