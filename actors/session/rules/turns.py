"""Decisions about turns: when one starts, what its worker's output stores, how it ends,
and how a running one is cancelled (pure)."""

from __future__ import annotations

import attrs

from spine import Event, Kind, Phase, Usage

from ...agents.governance import Fault, Policy, PolicyError, Requirement, Spent, Verdict, gate
from ...spec import AgentSpec, SettingsError, TurnInput, replay_of
from . import goals
from .commands import (
    ASSISTANT_DELTA,
    CancelTurn,
    Decision,
    Effect,
    Finished,
    Live,
    Progress,
    Running,
    Session,
    Settle,
    StartFailed,
    StartTurn,
)
from .conversation import dropped
from .gate import resumed, withdrawn
from .questions import unasked
from .recovery import resumable, unfinished
from .replace import replace
from .state import SessionState, fold
from .tenantcaps import capped
from .views import context_of, history_before


def done_event(turn: int = 0) -> Event:
    return Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, turn=turn)


def nonzero(u: Usage | None) -> Usage | None:
    return u if u is not None and not u.is_zero() else None


def cancel(
    run: Running | None, reason: str, st: SessionState | None = None
) -> tuple[list[Event], tuple[Effect, ...]]:
    """Close the running turn now, keeping what it produced so far; actions it left
    waiting for approval are refused (fault ``cancelled``)."""
    if run is None:
        return [], ()
    waiting = withdrawn(st, run.turn) if st is not None else []
    ev = Event(
        kind=Kind.TURN_CANCELLED,
        turn=run.turn,
        text=run.text[run.said :],
        usage=nonzero(run.usage),
        reason=reason,
    )
    lost = dropped(st.steers, run.turn, reason, st.metadata) if st is not None else []
    return [*waiting, ev, *lost, done_event(run.turn)], (CancelTurn(turn=run.turn),)


def _admits_first_call(st: SessionState, policy: Policy) -> bool:
    """Whether the turn's first model call passes the gate in the turn's own append: no
    round trip from the worker and no commit of its own (later calls ask the session). A
    goal run's turns ask, since its budget counts wall time, and so do turns under a priced
    cost budget or a tenant's cap, which may pause to ask."""
    priced_budget = policy.max_cost is not None and st.spend.priced
    return st.running_goal is None and not priced_budget and not capped(st)


def settle(s: Session, cmd: Settle) -> Decision:
    """Start the next turn when the session is idle and a stored message waits."""
    st = s.stored
    if s.running is not None or s.stopping or st.terminal:
        return Decision(state=s)
    if st.open_turn is not None:
        return _run_on(s)
    if not st.pending and st.running_goal is None:
        return Decision(state=s)
    # A goal run drives its own turns: with no message waiting, the next one continues
    # the conversation (the objective is in it) without new input.
    text = st.pending[0][1] if st.pending else ""
    n = st.turns + 1
    started = Event(kind=Kind.TURN_STARTED, turn=n)
    try:
        spec = AgentSpec.from_metadata(st.metadata)
        policy = Policy.from_metadata(st.metadata)
        context = context_of(st, spec)
    except (SettingsError, PolicyError) as exc:
        # A setting no agent can use fails this turn, never the session.
        return Decision(state=s, events=_cannot_start(st, n, started, exc))
    call = 0
    admitted: tuple[Event, ...] = ()
    if _admits_first_call(st, policy):
        admitted = _first_model_call(st, n, policy)
        if admitted[0].kind != Kind.ACTION_ADMITTED:
            return Decision(state=s, events=(started, *admitted))
        call = admitted[0].call
    turn_input = TurnInput(
        session_id=st.session_id,
        turn=n,
        text=text,
        history=history_before(st),
        spec=spec,
        resume=not st.pending,
        egress_allow=policy.egress_allow,
        model_call=call,
        finish=st.running_goal is not None and goals.finish_mode(st.metadata) == "tool",
        context=context,
        replay=replay_of(st.metadata),
    )
    return Decision(
        state=replace(s, running=Running(turn=n)),
        events=(started, *admitted),
        effects=(StartTurn(turn=n, spec=spec, input=turn_input),),
    )


def _run_on(s: Session) -> Decision:
    """A turn cut by a restart with a call still to run (approved and not yet run, or in
    doubt and idempotent) runs on where it stopped: the same turn, not a new one."""
    st = s.stored
    ot = st.open_turn
    if ot is None or not resumable(st):
        return Decision(state=s)
    run = Running(turn=ot.turn)
    return Decision(state=replace(s, running=run), effects=(resumed(st, ot.turn),))


def _cannot_start(st: SessionState, n: int, started: Event, exc: Exception) -> tuple[Event, ...]:
    """Turn ``n`` started and ended at once: its settings cannot be read."""
    ended = Event(
        kind=Kind.TURN_COMPLETED,
        turn=n,
        stop_reason="error",
        error=f"cannot start the turn: {exc}",
    )
    events = [started, ended, done_event(n)]
    if st.running_goal is not None:
        events.extend(goals.ended(fold(st, events, st.last_seq + 1), "error", ""))
    return tuple(events)


def _first_model_call(st: SessionState, n: int, policy: Policy) -> tuple[Event, ...]:
    """The gate's verdict on turn ``n``'s first model call, as the events recording it:
    its admission, or its refusal followed by the turn's end."""
    used = st.usage
    spent = Spent(
        tokens=used.input_tokens + used.output_tokens,
        tool_calls=st.tool_calls,
        turns=n,
        input_tokens=used.input_tokens,
        output_tokens=used.output_tokens,
    )
    verdict, fault = gate(policy, "model", Requirement(), spent)
    call = st.last_seq + 2
    if verdict == Verdict.ADMIT:
        return (
            Event(kind=Kind.ACTION_ADMITTED, turn=n, action="model", call=call, trust=policy.trust),
        )
    why = str(fault or "rejected")
    refused = Event(
        kind=Kind.ACTION_REJECTED,
        turn=n,
        action="model",
        call=call,
        trust=policy.trust,
        fault=why,
    )
    ended = Event(
        kind=Kind.TURN_COMPLETED,
        turn=n,
        stop_reason=why,
        error=f"governance refused the model call: {why}",
    )
    return (refused, ended, done_event(n))


def current(s: Session, turn: int) -> Running | None:
    run = s.running
    return run if run is not None and run.turn == turn else None


def _in_turn(e: Event, turn: int, session_id: str) -> Event:
    # The worker's events are the running turn's; a child's mirrored onto this stream
    # (attributed by goal) keep the child's own turn number.
    if e.goal and e.goal != session_id:
        return e
    return attrs.evolve(e, turn=turn)


def unreported(st: SessionState, events: list[Event], fault: str) -> list[Event]:
    """``action.completed`` with ``fault`` for the turn's admitted actions that neither
    the stream nor ``events`` (the turn's last output) gives an outcome: the turn's end is
    theirs (an agent of the caller's own does not report the model call the session
    admitted for it at the turn's start)."""
    if not any(status in ("admitted", "started") for _, status in st.turn_actions.values()):
        return []
    own = st.session_id
    ended = {
        e.call
        for e in events
        if e.kind in (Kind.ACTION_COMPLETED, Kind.ACTION_REJECTED, Kind.ACTION_IN_DOUBT)
        and e.goal in ("", own)
    }
    return [e for e in unfinished(st, fault) if e.call not in ended]


def _ends_a_reply(e: Event) -> bool:
    # A model's text is complete once it asks for tools or its call is over.
    return e.kind == Kind.TOOL_CALL or (e.kind == Kind.ACTION_COMPLETED and e.action == "model")


def progress(s: Session, cmd: Progress) -> Decision:
    run = current(s, cmd.turn)
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
    events: list[Event] = []
    if cmd.events and len(run.text) > run.said and any(map(_ends_a_reply, cmd.events)):
        # What the model said before asking for tools is its own message, stored ahead of
        # the calls, so the conversation rebuilt from the stream has them in order.
        events.append(Event(kind=Kind.ASSISTANT, turn=run.turn, text=run.text[run.said :]))
        run = attrs.evolve(run, said=len(run.text))
    sid = s.stored.session_id
    events.extend(_in_turn(e, run.turn, sid) for e in cmd.events)
    events.extend(unasked(s.stored, events))  # a question dies with its call
    return Decision(state=replace(s, running=run), events=tuple(events), live=live)


def finished(s: Session, cmd: Finished) -> Decision:
    run = current(s, cmd.turn)
    if run is None:
        return Decision(state=s)
    usage = nonzero(cmd.usage if cmd.usage is not None else run.usage)
    text = (run.text + cmd.text)[run.said :]
    live: tuple[Live, ...] = ()
    if cmd.text:
        live = (
            Live(after_seq=s.stored.last_seq, kind=ASSISTANT_DELTA, severity="", text=cmd.text),
        )
    events: list[Event] = []
    st = s.stored
    if cmd.stop_reason == "cancelled":
        events.extend(attrs.evolve(e, turn=run.turn) for e in unreported(st, [], Fault.CANCELLED))
        events.append(
            Event(
                kind=Kind.TURN_CANCELLED, turn=run.turn, text=text, usage=usage, reason="cancelled"
            )
        )
    else:
        # The one rule for cut-off output: text of a model call that did not end is
        # partial, and rides on the event that closes the turn (here a failed turn's
        # turn.completed, as turn.cancelled keeps an interrupted one's); assistant.message
        # holds only what a model call said to its end.
        failed = cmd.stop_reason == "error"
        if text and not failed:
            events.append(Event(kind=Kind.ASSISTANT, turn=run.turn, text=text))
        events.extend(_in_turn(e, run.turn, st.session_id) for e in cmd.events)
        fault = "error" if cmd.stop_reason == "error" else ""
        events.extend(attrs.evolve(e, turn=run.turn) for e in unreported(st, events, fault))
        events.append(
            Event(
                kind=Kind.TURN_COMPLETED,
                turn=run.turn,
                text=text if failed else "",
                stop_reason=cmd.stop_reason,
                usage=usage,
                error=cmd.error,
                extra={"providerUsage": list(cmd.provider_usage)} if cmd.provider_usage else None,
            )
        )
    # A steer still waiting found no safe point: the turn ended first.
    why = "cancelled" if cmd.stop_reason == "cancelled" else "turn ended"
    events.extend(dropped(st.steers, run.turn, why, st.metadata))
    events.append(done_event(run.turn))
    if s.stored.running_goal is not None:
        after = fold(s.stored, events, s.stored.last_seq + 1)
        events.extend(goals.ended(after, cmd.stop_reason, text))
    return Decision(state=replace(s, running=None), events=tuple(events), live=live)


def start_failed(s: Session, cmd: StartFailed) -> Decision:
    run = current(s, cmd.turn)
    if run is None:
        return Decision(state=s)
    ended = Event(
        kind=Kind.TURN_COMPLETED,
        turn=run.turn,
        stop_reason="error",
        error=f"agent factory failed: {cmd.error}",
    )
    st = s.stored
    # The model call admitted at the turn's start never ran.
    never = [attrs.evolve(e, turn=run.turn) for e in unreported(st, [], "error")]
    lost = dropped(st.steers, run.turn, "turn ended", st.metadata)
    events = [*never, ended, *lost, done_event(run.turn)]
    if st.running_goal is not None:
        events.extend(goals.ended(fold(st, events, st.last_seq + 1), "error", ""))
    return Decision(state=attrs.evolve(s, running=None), events=tuple(events))
