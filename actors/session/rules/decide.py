"""The session decider: ``decide(state, command) -> Decision``. Pure: no Thespian, no I/O,
no clock (times arrive in commands).

Every rule a session follows lives here: which events an ingress stores, what it answers,
when a turn starts, what a busy session does with a new message, what a closed or failed
session refuses, how a turn ends, what a crash left open, seal and verify records. The
actor shell (`actors.session.shell.actor`) loads the stream, calls `decide`, appends, replies and
carries out the effects; `actors.testing` runs the same decider without processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from spine import Event, Kind, Phase, validate_session_id

from ... import messages as m
from ...interceptors import Ingress, NoticeItem
from ...policy import BusyPolicy
from ..protocol import SessionReady
from . import branching, goals, timers
from .changes import changes_of
from .commands import (
    CancelTimer,
    Close,
    CloseStored,
    Command,
    Decide,
    Decision,
    Effect,
    EndSubscriptions,
    FailStored,
    Finished,
    FireDue,
    Govern,
    Intercepted,
    Live,
    Open,
    Poisoned,
    Progress,
    Receive,
    Resume,
    ReviveStored,
    RunInterceptors,
    Sealed,
    SealStream,
    Session,
    SetTimer,
    Settle,
    Spawn,
    StartFailed,
    StopSelf,
    Submit,
    Verified,
    VerifyStream,
)
from .gate import decide_action, governed, paused
from .records import seal, sealed, verified, verify
from .recovery import recovery_events
from .refusals import failed, refusal
from .replace import replace
from .resolve import resolve
from .spend import needs_prices, prices_event
from .state import QUEUEING_KINDS, fold
from .stored import close_stored, fail_stored, revive_stored
from .turns import cancel, done_event, finished, progress, settle, start_failed
from .views import ingress_seq


def decide(state: Session, command: Command) -> Decision:
    """What ``command`` does to a session in ``state``.

    A decision that stores events and leaves a turn due (a message to an idle session, the
    end of a turn with another message waiting) starts that turn in the same append: one
    commit fewer per turn. An `Ack` still names the ingress's own last event, so
    ``wait_turn(after_seq=ack.seq)`` sees the turn's end even when it is in that append.
    """
    handler = _HANDLERS.get(type(command))
    if handler is None:
        raise TypeError(f"the session decider takes no {type(command).__name__}")
    d = handler(state, command)
    if isinstance(command, Settle) or not d.events:
        return d
    return _then_settle(d)


def _then_settle(d: Decision) -> Decision:
    s = d.state
    if s.running is not None or s.stopping or s.stored.terminal:
        return d
    st = s.stored
    if (
        not st.pending
        and st.running_goal is None
        and QUEUEING_KINDS.isdisjoint(e.kind for e in d.events)
    ):
        return d  # nothing can be due after these events: spare folding them
    folded = fold(st, d.events, st.last_seq + 1)
    if not folded.pending and folded.running_goal is None:
        return d
    after = replace(s, stored=folded)
    nxt = settle(after, Settle())
    if not nxt.events:
        return d
    return replace(
        d,
        state=replace(nxt.state, stored=st),
        events=(*d.events, *nxt.events),
        effects=(*d.effects, *nxt.effects),
    )


# -- opening -----------------------------------------------------------------------------


def _open(s: Session, cmd: Open) -> Decision:
    st = s.stored
    events: list[Event] = []
    already = cmd.create and st.last_seq > 0
    if cmd.create and not already:
        first, then = goals.opening(s.session_id, cmd.metadata)
        events.extend(first)
        if cmd.metadata:
            events.append(Event(kind=Kind.PROPERTIES, properties=dict(cmd.metadata)))
        events.extend(then)
    events.extend(recovery_events(st, first_seq=st.last_seq + len(events) + 1))
    if needs_prices(st.spend, s.prices) and (st.last_seq or events):
        assert s.prices is not None
        events.append(prices_event(s.prices))  # priced from here on as the operator says
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


#: The stored kinds that record an ingress itself (a properties change is stored as the
#: difference it made, so it is not compared).
_INGRESS_KINDS = frozenset(
    {Kind.USER_MESSAGE, Kind.INTERRUPT, Kind.SESSION_SWITCH, Kind.BRANCH_SWITCHED}
)


def reused_key(ingress: Ingress, prior: Sequence[Event]) -> bool:
    """Whether ``ingress`` is another request than the one its key first stored: that
    append recorded an ingress of another kind, or of the same kind with another body.
    (An append that recorded none, a consumed slash command or a metadata change, has
    nothing to compare and is a retry.)"""
    first = next((e for e in prior if e.kind in _INGRESS_KINDS), None)
    if first is None:
        return False
    if first.kind != ingress.kind:
        return True
    if first.kind == Kind.USER_MESSAGE and ingress.regenerates:
        # A regeneration stores the text it answers again, whatever it was sent with.
        return "regenerates" not in first.extra
    if first.kind == Kind.USER_MESSAGE:
        return first.text != ingress.text
    if first.kind == Kind.BRANCH_SWITCHED:
        return first.extra.get("activates") != ingress.turn
    if first.kind == Kind.INTERRUPT:
        return first.reason != (ingress.text or "interrupted")
    return first.session != ingress.target


def _receive(s: Session, cmd: Receive) -> Decision:
    if cmd.prior and reused_key(cmd.ingress, cmd.prior):
        text = (
            f"idempotency key {cmd.ingress.key!r} was already used for a different request "
            "in this session: nothing was stored (use a new key for a new request)"
        )
        return Decision(state=s, reply=failed(s, cmd.request_id, "IdempotencyConflict", text))
    if cmd.stored:
        # A redelivery of stored ingress is answered as the first delivery was, whatever
        # the session's state now: no interceptor runs, no policy applies again.
        ack = m.Ack(
            request_id=cmd.request_id,
            session_id=s.session_id,
            key=cmd.ingress.key,
            seq=ingress_seq(cmd.stored),
            duplicate=True,
        )
        return Decision(state=s, reply=ack)
    refused = refusal(s, cmd.request_id)
    if refused is not None:
        return Decision(state=s, reply=refused)
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
    events, live = _placed(s, cmd)
    notices = tuple((x.severity, x.text) for x in live)
    ing = cmd.ingress
    changes, refused = changes_of(s, cmd)
    if refused is not None:
        return refused
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
            return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", str(exc)))
        events.append(Event(kind=Kind.SESSION_SWITCH, session=ing.target))
        return _store(s, events, live, ack, cmd.key)
    if ing.kind == Kind.INTERRUPT:
        return _interrupt(s, cmd, events, live, ack)
    if ing.kind == Kind.BRANCH_SWITCHED:
        switch = branching.switched(s, cmd.request_id, ing)
        if isinstance(switch, m.RequestFailed):
            return Decision(state=s, reply=switch, live=tuple(live))
        events.append(switch)
        return _store(s, events, live, attrs.evolve(ack, consumed=False), cmd.key)
    if ing.kind == Kind.USER_MESSAGE:
        return _user_message(s, cmd, events, live, ack)
    return Decision(
        state=s, reply=failed(s, cmd.request_id, "InvalidRequest", f"unknown ingress {ing.kind}")
    )


def _store(s: Session, events: list[Event], live: list[Live], ack: m.Ack, key: str) -> Decision:
    """Ingress that runs no turn: store what it changed (ending with done), or nothing."""
    if not events:
        return Decision(state=s, reply=attrs.evolve(ack, consumed=True), live=tuple(live))
    events.append(done_event())
    ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events))
    return Decision(state=s, events=tuple(events), key=key, reply=ack, live=tuple(live))


def _interrupt(
    s: Session, cmd: Intercepted, events: list[Event], live: list[Live], ack: m.Ack
) -> Decision:
    assert cmd.ingress is not None
    run = paused(s)
    if run is None and s.stored.running_goal is not None:
        reason = cmd.ingress.text or "interrupted"
        gone, stop = goals.cancel_children(s.stored)
        events += [Event(kind=Kind.INTERRUPT, reason=reason), *gone, *goals.cancelled(s.stored)]
        ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events), consumed=False)
        return Decision(
            state=s,
            events=tuple(events),
            key=cmd.key,
            reply=ack,
            live=tuple(live),
            effects=stop,
        )
    if run is None:
        nothing = ("info", "nothing to interrupt")
        ack = attrs.evolve(ack, notices=(*ack.notices, nothing))
        live.append(
            Live(after_seq=s.stored.last_seq, kind="notice", severity=nothing[0], text=nothing[1])
        )
        return _store(s, events, live, ack, cmd.key)
    reason = cmd.ingress.text or "interrupted"
    cancelled, effects = cancel(run, reason, s.stored)
    gone, stop = goals.cancel_children(s.stored)
    events += [Event(kind=Kind.INTERRUPT, reason=reason), *gone, *cancelled]
    events += goals.cancelled(s.stored)
    effects = (*effects, *stop)
    ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events), consumed=False)
    state = attrs.evolve(s, running=None)
    return Decision(
        state=state, events=tuple(events), key=cmd.key, reply=ack, live=tuple(live), effects=effects
    )


def _user_message(
    s: Session, cmd: Intercepted, events: list[Event], live: list[Live], ack: m.Ack
) -> Decision:
    ing = cmd.ingress
    assert ing is not None
    problem = branching.mode_problem(ing)
    if problem is not None:
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", problem))
    if ing.edits or ing.regenerates:
        return _branched(s, cmd, events, live, ack)
    policy = branching.busy_policy(s, ing)
    effects: tuple[Effect, ...] = ()
    state = s
    if s.running is not None and policy == BusyPolicy.STEER:
        # Stored now (durable once acknowledged), delivered at the turn's next safe point.
        events.append(branching.steer(ing))
        ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events))
        return Decision(state=s, events=tuple(events), key=cmd.key, reply=ack, live=tuple(live))
    if s.running is not None and policy == BusyPolicy.REJECT:
        text = f"session {s.session_id} is running a turn; message rejected"
        refused = failed(s, cmd.request_id, "Rejected", text)
        stored = (*events, done_event()) if events else ()
        return Decision(state=s, events=tuple(stored), reply=refused, live=tuple(live))
    run = paused(s)
    if run is not None and policy == BusyPolicy.INTERRUPT:
        cancelled, effects = cancel(run, "superseded", s.stored)
        events += cancelled
        state = attrs.evolve(s, running=None)
    events.append(Event(kind=Kind.USER_MESSAGE, text=ing.text))
    ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events))
    return Decision(
        state=state, events=tuple(events), key=cmd.key, reply=ack, live=tuple(live), effects=effects
    )


def _branched(
    s: Session, cmd: Intercepted, events: list[Event], live: list[Live], ack: m.Ack
) -> Decision:
    """An edit or a regeneration: a new branch whose turn starts in the same append."""
    assert cmd.ingress is not None
    ev = branching.branched(s, cmd.request_id, cmd.ingress)
    if isinstance(ev, m.RequestFailed):
        return Decision(state=s, reply=ev, live=tuple(live))
    events.append(ev)
    ack = attrs.evolve(ack, seq=s.stored.last_seq + len(events))
    return Decision(state=s, events=tuple(events), key=cmd.key, reply=ack, live=tuple(live))


# -- turns -------------------------------------------------------------------------------


# -- close, records, poison --------------------------------------------------------------


def _close(s: Session, cmd: Close) -> Decision:
    done = m.Done(request_id=cmd.request_id)
    if s.stored.closed:
        return Decision(state=s, reply=done)
    refused = refusal(s, cmd.request_id)
    if refused is not None:
        return Decision(state=s, reply=refused)
    events, effects = cancel(paused(s), "closed", s.stored)
    gone, stop = goals.cancel_children(s.stored)
    events = [*gone, *events, *goals.cancelled(s.stored), *timers.ended(s.stored)]
    effects = (*effects, *stop)
    events.append(Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED))
    return Decision(
        state=attrs.evolve(s, running=None, stopping=True),
        events=tuple(events),
        reply=done,
        effects=(*effects, EndSubscriptions(), StopSelf(reason="closed")),
    )


def _poisoned(s: Session, cmd: Poisoned) -> Decision:
    if s.stored.closed:
        return Decision(state=s)
    ev = Event(kind=Kind.LIFECYCLE, phase=Phase.POISONED, error=cmd.detail, reason=cmd.key)
    return Decision(state=s, events=(ev,))


_HANDLERS: dict[type, Callable[[Session, Any], Decision]] = {
    Open: _open,
    Receive: _receive,
    Intercepted: _intercepted,
    Settle: settle,
    Progress: progress,
    Finished: finished,
    Govern: governed,
    Decide: lambda s, cmd: resolve(s, cmd) if cmd.result else decide_action(s, cmd),
    Submit: goals.submit,
    SetTimer: timers.set_timer,
    CancelTimer: timers.cancel_timer,
    FireDue: lambda s, c: timers.fire(s, c, branching.busy_policy(s)),
    Resume: goals.resume,
    Spawn: goals.spawn,
    StartFailed: start_failed,
    Close: _close,
    CloseStored: close_stored,
    FailStored: fail_stored,
    ReviveStored: revive_stored,
    SealStream: seal,
    Sealed: sealed,
    VerifyStream: verify,
    Verified: verified,
    Poisoned: _poisoned,
}
