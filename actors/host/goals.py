"""Waiting for a goal run's end by reading its stream (no actor involved): it answers for a
run that ended long ago, one still going, and one that outlived a daemon restart. A run in
flight that nothing drives is *interrupted*: it is said so at once instead of waited for."""

from __future__ import annotations

import time
from collections.abc import Callable

from spine import Event, Kind, Log, history, subscribe

from ..errors import GoalInterrupted, GoalStalled, HostTimeout, InvalidRequest, SessionNotFound
from ..session.rules.state import SessionState, fold

_ENDS = (Kind.CONVERGED, Kind.STALLED)
#: Seconds between two looks, while waiting, at whether anything still drives the run.
CHECK_EVERY = 1.0

#: Whether a process is on the session or about to be (the Runner's registry says so:
#: `SessionInfo.working`); a reader that reaches no Runner passes one answering False.
Working = Callable[[], bool]


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


def _stalled_run(state: SessionState, seq: int) -> GoalInterrupted | None:
    """Why the folded run (started at ``seq``) is interrupted, given that no process is on
    its session."""
    g, sid = state.running_goal, state.session_id
    # A question to a human (an approval, an in-doubt call) is answered by the human:
    # the answer brings the session up and the run goes on, no resume needed.
    if g is None or any(p.question is None for p in state.pending_actions.values()):
        return None
    how = f"`vertebra resume {sid}` (Host.resume) continues it where it stopped"
    if state.failed:
        how = f"`vertebra revive {sid}`, then {how}"
    return GoalInterrupted(
        f"the goal run of session {sid} (started at seq {seq}) is interrupted: nothing "
        f"drives it (no process is on the session); {how}",
        session_id=sid,
        goal=g.id,
        seq=seq,
    )


def interruption(log: Log, session_id: str, working: Working) -> GoalInterrupted | None:
    """Why the latest goal run of ``session_id`` is interrupted (in flight in the log, no
    process on its session, no human asked), None if it is not: ended, driven, waiting
    for a human, or no run at all. The Runner is asked before and after the stream is
    read, so a run that ends or is resumed meanwhile is not called interrupted."""
    if working():
        return None
    events = history(log, session_id)
    if not events:
        return None
    state = fold(SessionState(session_id=session_id), events)
    start = max((e.seq for e in events if e.kind == Kind.SESSION_STARTED and e.goal), default=0)
    why = _stalled_run(state, start)
    return None if why is None or working() else why


def _start(events: list[Event], session_id: str) -> int:
    if not events:
        raise SessionNotFound(f"no session {session_id}", session_id=session_id)
    start = max(
        (i for i, e in enumerate(events) if e.kind == Kind.SESSION_STARTED and e.goal),
        default=-1,
    )
    if start < 0:
        raise InvalidRequest(f"session {session_id} has run no goal", session_id=session_id)
    return start


def wait_goal(log: Log, session_id: str, timeout: float | None, working: Working) -> str:
    """The answer of the latest goal run of ``session_id`` (see `Host.wait`); raises
    `GoalInterrupted` as soon as the run is found interrupted (`interruption`)."""
    events = history(log, session_id)
    start = _start(events, session_id)
    goal = events[start].goal
    for ev in events[start + 1 :]:
        if ev.kind in _ENDS and ev.goal == goal:
            return _outcome(ev, session_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    with subscribe(log, session_id, events[-1].seq, _ENDS) as sub:
        # Subscribed first, asked second: an end stored meanwhile is in one or the other.
        while True:
            why = interruption(log, session_id, working)
            if why is not None:
                raise why
            left = CHECK_EVERY if deadline is None else deadline - time.monotonic()
            if left <= 0:
                break
            end = sub.get(min(left, CHECK_EVERY))
            if end is not None and end.goal == goal:
                return _outcome(end, session_id)
    raise HostTimeout(
        f"the goal run of session {session_id} has not ended within {timeout}s",
        session_id=session_id,
    )
