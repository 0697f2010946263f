"""Waiting for a goal run's end by reading its stream (no actor involved): it answers for a
run that ended long ago, one still going, and one that outlived a daemon restart."""

from __future__ import annotations

import time

from spine import Event, Kind, Log, history, subscribe

from ..errors import GoalStalled, HostTimeout, InvalidRequest, SessionNotFound
from ..session.rules.state import SessionState, fold

_ENDS = (Kind.CONVERGED, Kind.STALLED)


def _outcome(ev: Event, session_id: str) -> str:
    if ev.kind == Kind.CONVERGED:
        return ev.text
    raise GoalStalled(ev.error or "stalled", session_id=session_id)


def in_flight(session_id: str, events: list[Event]) -> bool:
    """Whether the latest goal run on this stream has not ended, as the session's own
    fold reads it (one rule: the session would continue exactly this run)."""
    state = fold(SessionState(session_id=session_id), events)
    return state.running_goal is not None and not state.terminal


def runs_in_flight(log: Log) -> list[str]:
    """Every session whose latest goal run was cut off (reads every stream: a daemon
    start pays it once, and only when asked to resume runs)."""
    return [s.stream for s in log.streams() if in_flight(s.stream, log.read_events(s.stream))]


def wait_goal(log: Log, session_id: str, timeout: float | None) -> str:
    """The answer of the latest goal run of ``session_id`` (see `Host.wait`)."""
    events = history(log, session_id)
    if not events:
        raise SessionNotFound(f"no session {session_id}", session_id=session_id)
    start = max(
        (i for i, e in enumerate(events) if e.kind == Kind.SESSION_STARTED and e.goal),
        default=-1,
    )
    if start < 0:
        raise InvalidRequest(f"session {session_id} has run no goal", session_id=session_id)
    goal = events[start].goal
    for ev in events[start + 1 :]:
        if ev.kind in _ENDS and ev.goal == goal:
            return _outcome(ev, session_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    with subscribe(log, session_id, events[-1].seq, _ENDS) as sub:
        while True:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                break
            end = sub.get(min(left, 1.0))
            if end is not None and end.goal == goal:
                return _outcome(end, session_id)
    raise HostTimeout(
        f"the goal run of session {session_id} has not ended within {timeout}s",
        session_id=session_id,
    )
