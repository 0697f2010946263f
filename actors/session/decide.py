"""The session decider: ``decide(state, command) -> Decision``. Pure: no Thespian, no I/O,
no clock (times arrive in commands).

Every rule a session follows lives here: which events an ingress stores, what it answers,
when a turn starts, what a busy session does with a new message, what a closed or failed
session refuses, how a turn ends, what a crash left open, seal and verify records. The
actor shell (`actors.session.actor`) loads the stream, calls `decide`, appends, replies and
carries out the effects; `actors.testing` runs the same decider without processes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs

from spine import Event, Kind, Phase, Usage, validate_session_id
from spine.seal import VerifyReport, seal_event

from .. import messages as m
from ..interceptors import NoticeItem
from ..policy import BUSY_POLICY_KEY, BusyPolicy
from ..spec import AgentSpec, SettingsError, TurnInput
from .commands import (
    ASSISTANT_DELTA,
    CancelTurn,
    Close,
    Command,
    ComputeSeal,
    ComputeVerification,
    Decision,
    Effect,
    EndSubscriptions,
    Finished,
    Intercepted,
    Live,
    Open,
    Poisoned,
    Progress,
    Receive,
    RunInterceptors,
    Running,
    Sealed,
    SealStream,
    Session,
    Settle,
    StartFailed,
    StartTurn,
    StopSelf,
    Verified,
    VerifyStream,
)
from .protocol import SessionReady
from .state import fold, metadata_diff, recovery_events


def decide(state: Session, command: Command) -> Decision:
    """What ``command`` does to a session in ``state``.

    A decision that stores events and leaves a turn due (a message to an idle session, the
    end of a turn with another message waiting) starts that turn in the same append: one
    commit fewer per turn.
    """
    handler = _HANDLERS.get(type(command))
    if handler is None:
        raise TypeError(f"the session decider takes no {type(command).__name__}")
    d = handler(state, command)
    if isinstance(command, Settle) or not d.events:
        return d
    return _then_settle(d)


def _then_settle(d: Decision) -> Decision:
    st = d.state.stored
    numbered = [attrs.evolve(e, seq=st.last_seq + i) for i, e in enumerate(d.events, 1)]
    after = attrs.evolve(d.state, stored=fold(st, numbered))
    nxt = _settle(after, Settle())
    if not nxt.events:
        return d
    reply = d.reply
    if isinstance(reply, m.Ack):
        reply = attrs.evolve(reply, seq=reply.seq + len(nxt.events))
    return attrs.evolve(
        d,
        state=attrs.evolve(nxt.state, stored=st),
        events=(*d.events, *nxt.events),
        reply=reply,
        effects=(*d.effects, *nxt.effects),
    )


# -- replies -----------------------------------------------------------------------------


def _failed(s: Session, request_id: str, error: str, message: str) -> m.RequestFailed:
    return m.RequestFailed(
        request_id=request_id, error=error, message=message, session_id=s.session_id
    )


def _refusal(s: Session, request_id: str) -> m.RequestFailed | None:
    """A closed or failed session refuses everything but reads."""
    if s.stored.closed:
        return _failed(s, request_id, "SessionClosed", f"session {s.session_id} is closed")
    if s.stored.failed:
        return _failed(s, request_id, "SessionFailed", f"session {s.session_id} has failed")
    return None


def _done(turn: int = 0) -> Event:
    return Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, turn=turn)


def _usage(u: Usage | None) -> Usage | None:
    return u if u is not None and not u.is_zero() else None


def _cancel(run: Running | None, reason: str) -> tuple[list[Event], tuple[Effect, ...]]:
    """Close the running turn now, keeping what it produced so far."""
    if run is None:
        return [], ()
    ev = Event(
        kind=Kind.TURN_CANCELLED,
        turn=run.turn,
        text=run.text,
        usage=_usage(run.usage),
        reason=reason,
    )
    return [ev, _done(run.turn)], (CancelTurn(turn=run.turn),)


# -- opening -----------------------------------------------------------------------------


def _open(s: Session, cmd: Open) -> Decision:
    st = s.stored
    events: list[Event] = []
    already = cmd.create and st.last_seq > 0
    if cmd.create and not already:
        events.append(Event(kind=Kind.SESSION_STARTED, text=cmd.metadata.get("objective", "")))
        if cmd.metadata:
            events.append(Event(kind=Kind.PROPERTIES, properties=dict(cmd.metadata)))
    events.extend(recovery_events(st))
    metadata = dict(st.metadata)
    if cmd.create and not already:
        metadata.update(cmd.metadata)
    reply = SessionReady(
        session_id=s.session_id,
        incarnation=cmd.incarnation,
        last_seq=st.last_seq + len(events),
        closed=st.closed,
        failed=st.failed,
        created=cmd.create and not already,
        already_exists=already,
        metadata=metadata,
    )
    return Decision(state=s, events=tuple(events), reply=reply)


# -- ingress -----------------------------------------------------------------------------


def _receive(s: Session, cmd: Receive) -> Decision:
    refusal = _refusal(s, cmd.request_id)
    if refusal is not None:
        return Decision(state=s, reply=refusal)
    return Decision(
        state=s, effects=(RunInterceptors(request_id=cmd.request_id, ingress=cmd.ingress),)
    )


def _placed(s: Session, cmd: Intercepted) -> tuple[list[Event], list[Live]]:
    """The chain's emitted events and notices, each notice placed after the events
    emitted before it."""
    events: list[Event] = []
    live: list[Live] = []
    for item in cmd.emitted:
        if isinstance(item, NoticeItem):
            after = s.stored.last_seq + len(events)
            live.append(
                Live(after_seq=after, kind="notice", severity=item.severity, text=item.text)
            )
        else:
            events.append(item)
    after = s.stored.last_seq + len(events)
    live.extend(
        Live(after_seq=after, kind="notice", severity=n.severity, text=n.text) for n in cmd.notices
    )
    return events, live


def _intercepted(s: Session, cmd: Intercepted) -> Decision:
    st = s.stored
    events, live = _placed(s, cmd)
    notices = tuple((x.severity, x.text) for x in live)
    ing = cmd.ingress
    changes = metadata_diff(st.metadata, cmd.changes)
    if ing is not None and ing.kind == Kind.PROPERTIES:
        changes.update(metadata_diff({**st.metadata, **changes}, ing.properties))  # type: ignore[dict-item]
    if changes:
        events.append(Event(kind=Kind.PROPERTIES, properties=changes))
    ack = m.Ack(
        request_id=cmd.request_id,
        session_id=s.session_id,
        key=cmd.key,
        consumed=ing is None,
        notices=notices,
    )
    if ing is None or ing.kind == Kind.PROPERTIES:
        return _store(s, events, live, ack, cmd.key)
    if ing.kind == Kind.SESSION_SWITCH:
        try:
            validate_session_id(ing.target)
        except ValueError as exc:
            return Decision(state=s, reply=_failed(s, cmd.request_id, "InvalidRequest", str(exc)))
        events.append(Event(kind=Kind.SESSION_SWITCH, session=ing.target))
        return _store(s, events, live, ack, cmd.key)
    if ing.kind == Kind.INTERRUPT:
        return _interrupt(s, cmd, events, live, ack)
    if ing.kind == Kind.USER_MESSAGE:
        return _user_message(s, cmd, events, live, ack)
    return Decision(
        state=s, reply=_failed(s, cmd.request_id, "InvalidRequest", f"unknown ingress {ing.kind}")
    )


def _store(s: Session, events: list[Event], live: list[Live], ack: m.Ack, key: str) -> Decision:
    """Ingress that runs no turn: store what it changed (ending with done), or nothing."""
    if not events:
        return Decision(state=s, reply=attrs.evolve(ack, consumed=True), live=tuple(live))
    events.append(_done())
    ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events))
    return Decision(state=s, events=tuple(events), key=key, reply=ack, live=tuple(live))


def _interrupt(
    s: Session, cmd: Intercepted, events: list[Event], live: list[Live], ack: m.Ack
) -> Decision:
    assert cmd.ingress is not None
    if s.running is None:
        nothing = ("info", "nothing to interrupt")
        ack = attrs.evolve(ack, notices=(*ack.notices, nothing))
        live.append(
            Live(after_seq=s.stored.last_seq, kind="notice", severity=nothing[0], text=nothing[1])
        )
        return _store(s, events, live, ack, cmd.key)
    reason = cmd.ingress.text or "interrupted"
    cancel, effects = _cancel(s.running, reason)
    events += [Event(kind=Kind.INTERRUPT, reason=reason), *cancel]
    ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events), consumed=False)
    state = attrs.evolve(s, running=None)
    return Decision(
        state=state, events=tuple(events), key=cmd.key, reply=ack, live=tuple(live), effects=effects
    )


def busy_policy(s: Session) -> BusyPolicy:
    """The session's own policy (metadata) if it names one, else the Runner's."""
    own = s.stored.metadata.get(BUSY_POLICY_KEY)
    try:
        return BusyPolicy(own) if own else s.busy_policy
    except ValueError:
        return s.busy_policy


def _user_message(
    s: Session, cmd: Intercepted, events: list[Event], live: list[Live], ack: m.Ack
) -> Decision:
    assert cmd.ingress is not None
    policy = busy_policy(s)
    effects: tuple[Effect, ...] = ()
    state = s
    if s.running is not None and policy == BusyPolicy.REJECT:
        text = f"session {s.session_id} is running a turn; message rejected"
        refused = _failed(s, cmd.request_id, "Rejected", text)
        stored = (*events, _done()) if events else ()
        return Decision(state=s, events=tuple(stored), reply=refused, live=tuple(live))
    if s.running is not None and policy == BusyPolicy.INTERRUPT:
        cancel, effects = _cancel(s.running, "superseded")
        events += cancel
        state = attrs.evolve(s, running=None)
    events.append(Event(kind=Kind.USER_MESSAGE, text=cmd.ingress.text))
    ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events))
    return Decision(
        state=state, events=tuple(events), key=cmd.key, reply=ack, live=tuple(live), effects=effects
    )


# -- turns -------------------------------------------------------------------------------


def _settle(s: Session, cmd: Settle) -> Decision:
    """Start the next turn when the session is idle and a stored message waits."""
    st = s.stored
    if s.running is not None or s.stopping or st.terminal or st.open_turn is not None:
        return Decision(state=s)
    if not st.pending:
        return Decision(state=s)
    _seq, text = st.pending[0]
    n = st.turns + 1
    started = Event(kind=Kind.TURN_STARTED, turn=n)
    try:
        spec = AgentSpec.from_metadata(st.metadata)
    except SettingsError as exc:
        # A setting no agent can use fails this turn, never the session.
        ended = Event(
            kind=Kind.TURN_COMPLETED,
            turn=n,
            stop_reason="error",
            error=f"cannot start the turn: {exc}",
        )
        return Decision(state=s, events=(started, ended, _done(n)))
    turn_input = TurnInput(
        session_id=st.session_id, turn=n, text=text, history=st.history[:-1], spec=spec
    )
    return Decision(
        state=attrs.evolve(s, running=Running(turn=n)),
        events=(started,),
        effects=(StartTurn(turn=n, spec=spec, input=turn_input),),
    )


def _current(s: Session, turn: int) -> Running | None:
    run = s.running
    return run if run is not None and run.turn == turn else None


def _progress(s: Session, cmd: Progress) -> Decision:
    run = _current(s, cmd.turn)
    if run is None:
        return Decision(state=s)  # output of a turn already cancelled
    run = attrs.evolve(
        run, text=run.text + cmd.text, usage=cmd.usage if cmd.usage is not None else run.usage
    )
    live: tuple[Live, ...] = ()
    if cmd.text:
        live = (
            Live(after_seq=s.stored.last_seq, kind=ASSISTANT_DELTA, severity="", text=cmd.text),
        )
    events = tuple(attrs.evolve(e, turn=run.turn) for e in cmd.events)
    return Decision(state=attrs.evolve(s, running=run), events=events, live=live)


def _finished(s: Session, cmd: Finished) -> Decision:
    run = _current(s, cmd.turn)
    if run is None:
        return Decision(state=s)
    usage = _usage(cmd.usage if cmd.usage is not None else run.usage)
    text = run.text + cmd.text
    live: tuple[Live, ...] = ()
    if cmd.text:
        live = (
            Live(after_seq=s.stored.last_seq, kind=ASSISTANT_DELTA, severity="", text=cmd.text),
        )
    events: list[Event] = []
    if cmd.stop_reason == "cancelled":
        events.append(
            Event(
                kind=Kind.TURN_CANCELLED, turn=run.turn, text=text, usage=usage, reason="cancelled"
            )
        )
    else:
        if text:
            events.append(Event(kind=Kind.ASSISTANT, turn=run.turn, text=text))
        events.append(
            Event(
                kind=Kind.TURN_COMPLETED,
                turn=run.turn,
                stop_reason=cmd.stop_reason,
                usage=usage,
                error=cmd.error,
            )
        )
    events.append(_done(run.turn))
    return Decision(state=attrs.evolve(s, running=None), events=tuple(events), live=live)


def _start_failed(s: Session, cmd: StartFailed) -> Decision:
    run = _current(s, cmd.turn)
    if run is None:
        return Decision(state=s)
    ended = Event(
        kind=Kind.TURN_COMPLETED,
        turn=run.turn,
        stop_reason="error",
        error=f"agent factory failed: {cmd.error}",
    )
    return Decision(state=attrs.evolve(s, running=None), events=(ended, _done(run.turn)))


# -- close, records, poison --------------------------------------------------------------


def _close(s: Session, cmd: Close) -> Decision:
    done = m.Done(request_id=cmd.request_id)
    if s.stored.closed:
        return Decision(state=s, reply=done)
    refusal = _refusal(s, cmd.request_id)
    if refusal is not None:
        return Decision(state=s, reply=refusal)
    events, effects = _cancel(s.running, "closed")
    events.append(Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED))
    return Decision(
        state=attrs.evolve(s, running=None, stopping=True),
        events=tuple(events),
        reply=done,
        effects=(*effects, EndSubscriptions(), StopSelf(reason="closed")),
    )


def _seal(s: Session, cmd: SealStream) -> Decision:
    refusal = _refusal(s, cmd.request_id)
    if refusal is not None:
        return Decision(state=s, reply=refusal)
    return Decision(state=s, effects=(ComputeSeal(request_id=cmd.request_id),))


def _sealed(s: Session, cmd: Sealed) -> Decision:
    sid = s.session_id
    seal = cmd.seal
    if seal is None:
        return Decision(
            state=s, reply=m.SealReply(request_id=cmd.request_id, session_id=sid, seq=0)
        )
    ev = seal_event(seal)
    reply = m.SealReply(
        request_id=cmd.request_id,
        session_id=sid,
        seq=s.stored.last_seq + 1,
        first=seal.first,
        last=seal.last,
        root=seal.root.hex(),
        key_id=seal.key_id,
    )
    return Decision(state=s, events=(ev,), reply=reply)


def _verify(s: Session, cmd: VerifyStream) -> Decision:
    refusal = _refusal(s, cmd.request_id)
    if refusal is not None:
        return Decision(state=s, reply=refusal)
    return Decision(state=s, effects=(ComputeVerification(request_id=cmd.request_id),))


def verified_event(report: VerifyReport, time: datetime) -> Event:
    """The ``record.verified`` event for a verification that ran, passing or failing, so a
    replay reproduces the record badge."""
    good = [c.seal for c in report.checks if c.seal is not None]
    record: dict[str, Any] = {"ok": report.ok, "summary": report.summary()}
    if good:
        record["first"] = min(x.first for x in good)
        record["last"] = max(x.last for x in good)
        record["seals"] = [x.seq for x in good]
        record["keyIds"] = sorted({x.key_id for x in good})
    problem = report.problem
    if problem is not None:
        record["problem"] = {
            "kind": str(problem.kind),
            "seq": problem.seq,
            "detail": problem.detail,
        }
    return Event(kind=Kind.RECORD_VERIFIED, time=time, record=record)


def _verified(s: Session, cmd: Verified) -> Decision:
    report = cmd.report
    reply = m.VerifyReply(
        request_id=cmd.request_id,
        session_id=s.session_id,
        ok=report.ok,
        summary=report.summary(),
        seq=s.stored.last_seq + 1,
    )
    return Decision(state=s, events=(verified_event(report, cmd.time),), reply=reply)


def _poisoned(s: Session, cmd: Poisoned) -> Decision:
    if s.stored.closed:
        return Decision(state=s)
    ev = Event(kind=Kind.LIFECYCLE, phase=Phase.POISONED, error=cmd.detail, reason=cmd.key)
    return Decision(state=s, events=(ev,))


_HANDLERS: dict[type, Callable[[Session, Any], Decision]] = {
    Open: _open,
    Receive: _receive,
    Intercepted: _intercepted,
    Settle: _settle,
    Progress: _progress,
    Finished: _finished,
    StartFailed: _start_failed,
    Close: _close,
    SealStream: _seal,
    Sealed: _sealed,
    VerifyStream: _verify,
    Verified: _verified,
    Poisoned: _poisoned,
}
