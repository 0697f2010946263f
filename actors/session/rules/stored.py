"""What the Runner writes to a stream that has no process, decided by the session's rules
(pure): its close (close-all), its failure (a crash past the restart budget) and an
operator's revival. The Runner folds the stream and runs these through the session's
`Executor`, so a stream has one set of rules whoever writes it."""

from __future__ import annotations

import attrs

from spine import Event, Kind, Phase

from ... import messages as m
from . import goals, timers
from .commands import CloseStored, Decision, FailStored, ReviveStored, Session
from .recovery import recovery_events
from .refusals import failed


def close_stored(s: Session, cmd: CloseStored) -> Decision:
    """What a crash left open is closed, the goal run in flight stalls (a waiter answers,
    a parent hears of its child), the children are stopped, then ``closed``."""
    st = s.stored
    if st.terminal:
        return Decision(state=s)
    gone, stop = goals.cancel_children(st)
    events = [*gone, *recovery_events(st, "closed"), *goals.cancelled(st), *timers.ended(st)]
    events.append(Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED))
    return Decision(state=attrs.evolve(s, stopping=True), events=tuple(events), effects=stop)


def fail_stored(s: Session, cmd: FailStored) -> Decision:
    """The crash that used up the budget cut a turn off: it is closed (or it would stay
    open for ever: no process will write this stream again), then ``failed``."""
    st = s.stored
    if st.failed and not st.open_turn:
        return Decision(state=s)
    ev = Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error=cmd.reason)
    events = (*recovery_events(st, "failed"), ev)
    return Decision(state=attrs.evolve(s, stopping=True), events=events)


def revive_stored(s: Session, cmd: ReviveStored) -> Decision:
    """An operator brings a failed session back: ``recovered``, naming why. The next
    incarnation loads it as any stopped session, and resumes the run it would resume."""
    st = s.stored
    sid = s.session_id
    if st.last_seq == 0:
        return Decision(
            state=s, reply=failed(s, cmd.request_id, "SessionNotFound", f"session {sid} not found")
        )
    if not st.failed:
        text = f"session {sid} is not failed"
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", text))
    why = "revived by an operator" + (f": {cmd.reason}" if cmd.reason else "")
    ev = Event(kind=Kind.LIFECYCLE, phase=Phase.RECOVERED, reason=why)
    ack = m.Ack(request_id=cmd.request_id, session_id=sid, key="", seq=st.last_seq + 1)
    return Decision(state=s, events=(ev,), reply=ack)
