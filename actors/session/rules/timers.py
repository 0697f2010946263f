"""Timer decisions (pure): set, cancel, and fire what is due.

A firing is decided by the session on its folded stream, so it happens once: the
``timer.fired`` event advances the timer (or ends it) in the same append as the message it
delivers, and that append carries an idempotency key naming each (timer, due time) it
fires. Whoever asks again (the Runner after a crash between "due" and "delivered", a
second Runner) finds nothing due, or the key already stored.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import attrs

from spine import Event, Kind

from ... import messages as m
from ...policy import BusyPolicy
from .commands import CancelTimer, Decision, Effect, FireDue, Session, SetTimer
from .gate import paused
from .goals import budget_problem, finish_problem
from .refusals import failed, refusal
from .state import SessionState
from .timerbook import Timer, TimerError, iso, missed_after, plan, set_event
from .turns import cancel

#: Longest idempotency key a firing uses as it is (longer: hashed).
_KEY_MAX = 200


def set_timer(s: Session, cmd: SetTimer) -> Decision:
    if cmd.stored:
        ack = m.Ack(
            request_id=cmd.request_id,
            session_id=s.session_id,
            key=cmd.key,
            seq=cmd.stored[0][0],
            duplicate=True,
        )
        return Decision(state=s, reply=ack)
    refused = refusal(s, cmd.request_id)
    if refused is not None:
        return Decision(state=s, reply=refused)
    problem = _goal_problem(s, cmd)
    if problem:
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", problem))
    try:
        t = plan(
            timer_id=cmd.timer_id,
            text=cmd.text,
            now=cmd.now,
            at=cmd.at,
            after=cmd.after,
            cron=cmd.cron,
            tz=cmd.tz,
            policy=cmd.policy,
            grace=cmd.grace,
            goal=cmd.goal,
            budget=cmd.budget,
        )
    except TimerError as exc:
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", str(exc)))
    ack = m.Ack(
        request_id=cmd.request_id, session_id=s.session_id, key=cmd.key, seq=s.stored.last_seq + 1
    )
    return Decision(state=s, events=(set_event(t),), key=cmd.key, reply=ack)


def _goal_problem(s: Session, cmd: SetTimer) -> str:
    """What keeps a goal timer from being set ("" if nothing)."""
    if not cmd.goal:
        return "a budget is a goal run's: set goal too" if cmd.budget else ""
    return budget_problem(cmd.budget) or finish_problem(s.stored.metadata)


def cancel_timer(s: Session, cmd: CancelTimer) -> Decision:
    """Cancel a set timer; one not set (never, or already ended) is acknowledged as
    consumed, so a retried cancel is answered the same way."""
    ack = m.Ack(request_id=cmd.request_id, session_id=s.session_id, key=cmd.key)
    if cmd.timer_id not in s.stored.timers:
        return Decision(state=s, reply=attrs.evolve(ack, consumed=True))
    refused = refusal(s, cmd.request_id)
    if refused is not None:
        return Decision(state=s, reply=refused)
    ev = Event(kind=Kind.TIMER_CANCELLED, extra={"timer": cmd.timer_id})
    ack = attrs.evolve(ack, seq=s.stored.last_seq + 1)
    return Decision(state=s, events=(ev,), key=cmd.key, reply=ack)


def ended(st: SessionState) -> list[Event]:
    """A closing session's timers, cancelled (the index of due times drops them)."""
    return [
        Event(kind=Kind.TIMER_CANCELLED, reason="closed", extra={"timer": t}) for t in st.timers
    ]


def due(s: Session, now: float) -> list[Timer]:
    """The timers due at ``now``, earliest first."""
    return sorted(
        (t for t in s.stored.timers.values() if t.due <= now), key=lambda t: (t.due, t.id)
    )


def firing_key(timers: list[Timer]) -> str:
    key = "timer:" + ",".join(f"{t.id}@{t.due!r}" for t in timers)
    if len(key) <= _KEY_MAX:
        return key
    return "timer:" + hashlib.sha256(key.encode()).hexdigest()


def fired_event(t: Timer, now: float) -> tuple[Event, bool]:
    """The ``timer.fired`` record of ``t`` at ``now``, and whether it delivers (a ``skip``
    timer later than its grace stores the firing as skipped and delivers nothing)."""
    late = max(0.0, now - t.due)
    extra: dict[str, Any] = {
        "timer": t.id,
        "due": t.due,
        "dueAt": iso(t.due),
        "late": round(late, 3),
    }
    error = ""
    try:
        missed, nxt = missed_after(t, now)
    except TimerError as exc:  # a cron the library no longer takes ends the timer
        missed, nxt, error = 0, None, str(exc)
    extra.update(missed=missed, next=nxt)
    if nxt is not None:
        extra["nextAt"] = iso(nxt)
    skipped = t.policy == "skip" and late > t.grace
    if skipped:
        extra["skipped"] = True
    return Event(kind=Kind.TIMER_FIRED, text=t.text, error=error, extra=extra), not skipped


def _rejected(t: Timer, delivers: bool, s: Session, policy: BusyPolicy, goal_open: bool) -> str:
    """Why a due firing delivers nothing ("" if it delivers): the reject busy policy with a
    turn running, or a goal timer while a goal run is in flight (one run at a time)."""
    if not delivers:
        return ""
    if s.running is not None and policy == BusyPolicy.REJECT:
        return "busy"
    return "goal_running" if t.goal and goal_open else ""


def _delivered(s: Session, t: Timer, now: float) -> list[Event]:
    """What a firing delivers: its text as a user message, or a goal run opened on it."""
    if not t.goal:
        return [Event(kind=Kind.USER_MESSAGE, text=t.text, extra={"timer": t.id})]
    started = Event(
        kind=Kind.SESSION_STARTED,
        time=datetime.fromtimestamp(now, UTC) if now else None,
        goal=s.session_id,
        text=t.text,
        extra={"timer": t.id, **({"budget": dict(t.budget)} if t.budget else {})},
    )
    message = Event(kind=Kind.USER_MESSAGE, goal=s.session_id, text=t.text, extra={"timer": t.id})
    return [started, message]


def fire(s: Session, cmd: FireDue, policy: BusyPolicy) -> Decision:
    """Deliver every timer due at ``cmd.now`` as a user message (or a goal run it opens),
    under the busy policy."""
    st = s.stored
    nothing = m.Ack(request_id=cmd.request_id, session_id=s.session_id, key="", consumed=True)
    ready = [] if st.terminal or s.stopping else due(s, cmd.now)
    if not ready:
        return Decision(state=s, reply=nothing)
    events: list[Event] = []
    effects: tuple[Effect, ...] = ()
    state = s
    goal_open = st.running_goal is not None
    for t in ready:
        fired, delivers = fired_event(t, cmd.now)
        rejected = _rejected(t, delivers, state, policy, goal_open)
        if rejected:
            fired = attrs.evolve(fired, extra={**fired.extra, "rejected": rejected})
            delivers = False
        events.append(fired)
        if not delivers:
            continue
        run = paused(state)
        if run is not None and policy == BusyPolicy.INTERRUPT:
            cancelled, more = cancel(run, "superseded", st)
            events += cancelled
            effects = (*effects, *more)
            state = attrs.evolve(state, running=None)
        events += _delivered(s, t, cmd.now)
        goal_open = goal_open or t.goal
    key = firing_key(ready)
    ack = attrs.evolve(nothing, key=key, consumed=False, seq=st.last_seq + len(events))
    return Decision(state=state, events=tuple(events), key=key, reply=ack, effects=effects)
