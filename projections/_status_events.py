"""The status fold over `Event`s: `reduce` and `project`, the seed's rules point by point.

Everything here is pure: no I/O, no clock, no actor. `reduce` is the single place a stream
becomes status, shared by a live fold (event by event as they arrive) and a replay (folding
`history`), so both compute the same value. Each kind has one small handler; a kind with no
handler leaves the projection unchanged, so the status is stable as the vocabulary grows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from spine import REVIVING_PHASES, DecodeError, Event, Kind, Log, Phase

from ._metadata import apply_properties
from ._status import (
    MAX_ACTIONS,
    MAX_EGRESS,
    ActionEntry,
    ActionState,
    EgressEntry,
    FanoutChild,
    FanoutState,
    Outcome,
    PendingEntry,
    Projection,
    RecordState,
    advance_record,
    new_projection,
    verification_passed,
)
from ._status_context import answered, compacted, measured, rewindowed, uncompacted

# -- helpers ------------------------------------------------------------------------------


def _child_index(p: Projection, goal: str) -> int:
    # An event belongs to a child exactly when its goal names a spawned child; the root's
    # own events carry no goal or the run id.
    if not goal:
        return -1
    for i, c in enumerate(p.fanout):
        if c.id == goal:
            return i
    return -1


def _replace_child(p: Projection, i: int, child: FanoutChild) -> tuple[FanoutChild, ...]:
    return (*p.fanout[:i], child, *p.fanout[i + 1 :])


def _bounded(entries: tuple[Any, ...], bound: int) -> tuple[Any, ...]:
    return entries[-bound:] if len(entries) > bound else entries


def _outcome_update(p: Projection, outcome: str, error: str) -> Projection:
    return attrs.evolve(p, terminal=bool(outcome), outcome=outcome, error=error)


# -- handlers: one per kind ---------------------------------------------------------------

Handler = Callable[[Projection, Event], Projection]


def _session_started(p: Projection, ev: Event) -> Projection:
    # Opening (or re-opening) the run makes it live again.
    return attrs.evolve(p, objective=ev.text or p.objective, terminal=False, outcome="", error="")


def _user_message(p: Projection, ev: Event) -> Projection:
    # A chat session's first message is its objective; new input resumes a terminal run
    # (the last result stays until the next convergence replaces it).
    return attrs.evolve(
        p,
        objective=p.objective or ev.text,
        messages=p.messages + 1,
        terminal=False,
        outcome="",
        error="",
    )


def _turn_completed(p: Projection, ev: Event) -> Projection:
    usage = p.usage + ev.usage if ev.usage is not None else p.usage
    i = _child_index(p, ev.goal)
    fanout = p.fanout
    if i >= 0:
        c = p.fanout[i]
        fanout = _replace_child(p, i, attrs.evolve(c, turns=c.turns + 1))
    return attrs.evolve(p, turns=p.turns + 1, usage=usage, fanout=fanout)


def _turn_cancelled(p: Projection, ev: Event) -> Projection:
    # A cut-off turn did not complete, but the tokens it spent were spent.
    usage = p.usage + ev.usage if ev.usage is not None else p.usage
    return attrs.evolve(p, cancelled=p.cancelled + 1, usage=usage)


def _child_spawned(p: Projection, ev: Event) -> Projection:
    if not ev.child or _child_index(p, ev.child) >= 0:
        return p
    child = FanoutChild(id=ev.child, parent=ev.goal, objective=ev.text)
    return attrs.evolve(p, fanout=(*p.fanout, child))


def _child_completed(p: Projection, ev: Event) -> Projection:
    i = _child_index(p, ev.child)
    if i < 0 or p.fanout[i].state != FanoutState.RUNNING:
        return p
    state = FanoutState.FAILED if ev.is_error else FanoutState.DONE
    c = p.fanout[i]
    # A child that folded back has nothing in flight: what it left without an outcome on
    # this stream (a log from before outcomes were mirrored) is settled here.
    actions = p.actions
    if c.in_flight or any(a.goal == c.id and a.state == ActionState.RUNNING for a in actions):
        actions = tuple(
            attrs.evolve(a, state=ActionState.DONE)
            if a.goal == c.id and a.state == ActionState.RUNNING
            else a
            for a in actions
        )
    c = attrs.evolve(c, state=state, result=ev.result, in_flight=0)
    return attrs.evolve(
        p,
        completed=p.completed + p.fanout[i].in_flight,
        actions=actions,
        fanout=_replace_child(p, i, c),
    )


def _converged(p: Projection, ev: Event) -> Projection:
    # A child's own convergence folds back through child.completed, not here.
    if _child_index(p, ev.goal) >= 0:
        return p
    return attrs.evolve(_outcome_update(p, Outcome.CONVERGED, ""), result=ev.text)


def _stalled(p: Projection, ev: Event) -> Projection:
    if _child_index(p, ev.goal) >= 0:
        return p
    return _outcome_update(p, Outcome.STALLED, ev.error)


def _owner(p: Projection, goal: str) -> str:
    # The goal an action belongs to, as its ledger entry keeps it: a spawned child's id,
    # or empty for the run's own.
    return goal if _child_index(p, goal) >= 0 else ""


def _settle(
    p: Projection, ev: Event, owner: str, state: ActionState
) -> tuple[tuple[ActionEntry, ...], bool]:
    # An outcome updates the entry its admission created (the same call of the same goal:
    # call ids are numbered per stream); without one in the window it is still a recent
    # decision, so it gets its own row. Also says whether it settled a running entry.
    if ev.call:
        for i in range(len(p.actions) - 1, -1, -1):
            e = p.actions[i]
            if e.call == ev.call and e.goal == owner:
                updated = attrs.evolve(
                    e,
                    action=ev.action or e.action,
                    trust=ev.trust or e.trust,
                    state=state,
                    fault=ev.fault,
                )
                was_running = e.state == ActionState.RUNNING
                return (*p.actions[:i], updated, *p.actions[i + 1 :]), was_running
    entry = ActionEntry(
        call=ev.call, action=ev.action, trust=ev.trust, state=state, fault=ev.fault, goal=owner
    )
    return _bounded((*p.actions, entry), MAX_ACTIONS), False


def _unpend(p: Projection, call: int, owner: str) -> tuple[PendingEntry, ...]:
    # Only the run's own actions wait for approval here (a child's wait on its stream).
    if not p.pending or owner:
        return p.pending
    return tuple(x for x in p.pending if x.call != call)


def _action_approval(p: Projection, ev: Event) -> Projection:
    # A decision settles what waited (an answered question has nothing else).
    return attrs.evolve(p, pending=_unpend(p, ev.call, _owner(p, ev.goal)))


def _action_pending(p: Projection, ev: Event) -> Projection:
    entry = PendingEntry(call=ev.call, action=ev.action, input=ev.input, turn=ev.turn)
    return attrs.evolve(p, pending=(*p.pending, entry))


def _action_admitted(p: Projection, ev: Event) -> Projection:
    fanout = p.fanout
    i = _child_index(p, ev.goal)
    owner = ev.goal if i >= 0 else ""
    if i >= 0:
        c = p.fanout[i]
        fanout = _replace_child(
            p, i, attrs.evolve(c, trust=ev.trust or c.trust, in_flight=c.in_flight + 1)
        )
    entry = ActionEntry(call=ev.call, action=ev.action, trust=ev.trust, goal=owner)
    return attrs.evolve(
        p,
        admitted=p.admitted + 1,
        containment=ev.trust or p.containment,
        actions=_bounded((*p.actions, entry), MAX_ACTIONS),
        fanout=fanout,
        pending=_unpend(p, ev.call, owner),
    )


def _action_completed(p: Projection, ev: Event) -> Projection:
    owner = _owner(p, ev.goal)
    actions, _ = _settle(p, ev, owner, ActionState.DONE)
    fanout = p.fanout
    context = p.context
    if owner:
        i = _child_index(p, owner)
        c = p.fanout[i]
        if c.in_flight:
            fanout = _replace_child(p, i, attrs.evolve(c, in_flight=c.in_flight - 1))
    elif ev.extra:
        # A model call of the session's own measured its request (a child's are its own).
        context = measured(context, ev.extra.get("context"))
    return attrs.evolve(
        p, completed=p.completed + 1, actions=actions, fanout=fanout, context=context
    )


def _action_in_doubt(p: Projection, ev: Event) -> Projection:
    owner = _owner(p, ev.goal)
    actions, _ = _settle(p, ev, owner, ActionState.IN_DOUBT)
    fanout = p.fanout
    if owner:
        i = _child_index(p, owner)
        c = p.fanout[i]
        if c.in_flight:
            fanout = _replace_child(p, i, attrs.evolve(c, in_flight=c.in_flight - 1))
    return attrs.evolve(p, actions=actions, fanout=fanout)


def _action_rejected(p: Projection, ev: Event) -> Projection:
    owner = _owner(p, ev.goal)
    actions, was_running = _settle(p, ev, owner, ActionState.BLOCKED)
    fanout = p.fanout
    if owner:
        i = _child_index(p, owner)
        c = p.fanout[i]
        in_flight = c.in_flight - 1 if was_running and c.in_flight else c.in_flight
        fanout = _replace_child(
            p,
            i,
            attrs.evolve(c, blocked=c.blocked + 1, trust=ev.trust or c.trust, in_flight=in_flight),
        )
    return attrs.evolve(
        p,
        rejected=p.rejected + 1,
        containment=ev.trust or p.containment,
        actions=actions,
        fanout=fanout,
        pending=_unpend(p, ev.call, owner),
    )


def _egress(p: Projection, ev: Event) -> Projection:
    # A decision names a destination; one without a host decided nothing.
    if not ev.host:
        return p
    entry = EgressEntry(host=ev.host, allowed=ev.allowed, reason=ev.reason)
    return attrs.evolve(
        p,
        egress_allowed=p.egress_allowed + (1 if ev.allowed else 0),
        egress_blocked=p.egress_blocked + (0 if ev.allowed else 1),
        egress=_bounded((*p.egress, entry), MAX_EGRESS),
    )


def _record_sealed(p: Projection, ev: Event) -> Projection:
    fanout = tuple(
        c
        if c.state == FanoutState.RUNNING
        else attrs.evolve(c, seal=advance_record(c.seal, RecordState.SEALED))
        for c in p.fanout
    )
    return attrs.evolve(p, record=advance_record(p.record, RecordState.SEALED), fanout=fanout)


def _record_verified(p: Projection, ev: Event) -> Projection:
    # Only a record that was sealed can be verified, and a failed check changes nothing.
    if not verification_passed(ev) or p.record == RecordState.RECORDING:
        return p
    fanout = tuple(
        attrs.evolve(c, seal=RecordState.VERIFIED) if c.seal == RecordState.SEALED else c
        for c in p.fanout
    )
    return attrs.evolve(p, record=RecordState.VERIFIED, fanout=fanout)


def _properties(p: Projection, ev: Event) -> Projection:
    if not ev.properties:
        return p
    metadata = apply_properties(p.metadata, ev.properties)
    return attrs.evolve(p, metadata=metadata, context=rewindowed(p.context, metadata))


def _context_window(p: Projection, ev: Event) -> Projection:
    x = ev.extra
    ctx = answered(p.context, p.metadata, x.get("tokens"), x.get("source"), x.get("key"))
    return p if ctx is p.context else attrs.evolve(p, context=ctx)


def _context_compacted(p: Projection, ev: Event) -> Projection:
    ctx = compacted(p.context, ev.seq, ev.extra.get("fromSeq"), ev.extra.get("toSeq"))
    return p if ctx is p.context else attrs.evolve(p, context=ctx)


def _context_uncompacted(p: Projection, ev: Event) -> Projection:
    ctx = uncompacted(p.context, ev.call)
    return p if ctx is p.context else attrs.evolve(p, context=ctx)


def _lifecycle(p: Projection, ev: Event) -> Projection:
    if not ev.phase:
        return p
    if ev.phase == Phase.FAILED:
        p = _outcome_update(p, Outcome.FAILED, ev.error or ev.reason)
    elif p.outcome == Outcome.FAILED and ev.phase in REVIVING_PHASES:
        p = _outcome_update(p, "", "")
    return attrs.evolve(p, phase=ev.phase)


#: The status handler for each kind; kinds absent here leave the projection unchanged.
HANDLERS: Mapping[str, Handler] = {
    Kind.SESSION_STARTED: _session_started,
    Kind.USER_MESSAGE: _user_message,
    Kind.TURN_COMPLETED: _turn_completed,
    Kind.TURN_CANCELLED: _turn_cancelled,
    Kind.CHILD_SPAWNED: _child_spawned,
    Kind.CHILD_COMPLETED: _child_completed,
    Kind.CONVERGED: _converged,
    Kind.STALLED: _stalled,
    Kind.ACTION_ADMITTED: _action_admitted,
    Kind.ACTION_COMPLETED: _action_completed,
    Kind.ACTION_IN_DOUBT: _action_in_doubt,
    Kind.ACTION_REJECTED: _action_rejected,
    Kind.ACTION_PENDING: _action_pending,
    Kind.ACTION_APPROVAL: _action_approval,
    Kind.EGRESS: _egress,
    Kind.RECORD_SEALED: _record_sealed,
    Kind.RECORD_VERIFIED: _record_verified,
    Kind.PROPERTIES: _properties,
    Kind.LIFECYCLE: _lifecycle,
    Kind.CONTEXT_WINDOW: _context_window,
    Kind.CONTEXT_COMPACTED: _context_compacted,
    Kind.CONTEXT_UNCOMPACTED: _context_uncompacted,
}

# Plain-string keys so that a lookup by ``ev.kind`` (a str) hashes the same way.
_BY_KIND: dict[str, Handler] = {str(k): v for k, v in HANDLERS.items()}


def reduce(p: Projection, ev: Event) -> Projection:
    """Fold one event into ``p``; an unknown kind returns ``p`` itself."""
    handler = _BY_KIND.get(ev.kind)
    return p if handler is None else handler(p, ev)


def project_stored(log: Log, session: str) -> Projection:
    """The status of ``session`` folded from ``log``. A stored row that does not decode
    ends the fold there: the session is terminal and failed, its ``error`` naming the seq
    (the rows before it are folded as usual)."""
    events: list[Event] = []
    after = 0
    while True:
        page = log.read(session, after, 1000)
        if not page:
            return project(events)
        for r in page:
            try:
                events.append(r.event())
            except DecodeError as exc:
                p = project(events)
                why = f"its stream does not decode at seq {r.seq}: {exc.problem}"
                return attrs.evolve(
                    p, terminal=True, error=why, outcome="failed", phase=str(Phase.FAILED)
                )
        after = page[-1].seq


def project(events: Iterable[Event], start: Projection | None = None) -> Projection:
    """Fold ``events`` into ``start`` (default `new_projection()`): replay's `reduce`."""
    p = start if start is not None else new_projection()
    for ev in events:
        handler = _BY_KIND.get(ev.kind)
        if handler is not None:
            p = handler(p, ev)
    return p
