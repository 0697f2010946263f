"""A human giving an in-doubt call's result by hand (pure).

Recovery asks a human about a call that may have run (``action.pending``, reason
``in_doubt``). Besides running it again (approve) or leaving it (reject), the human may
know what happened and say so: the result they give is stored as the call's
``tool.result``, the question is closed, and the turn goes on with it as if the tool had
answered. The call is never run again: a resumed turn finds its result in the log.

Events, with the question's call id: ``action.approval`` (not allowed: nothing runs;
``extra.resolution`` ``result``), ``action.completed`` (the question answered, with the
in-doubt call's idempotency key) and the ``tool.result``.
"""

from __future__ import annotations

from typing import Any

import attrs

from spine import Event, Kind

from ... import messages as m
from ...agents.governance import Fault, Policy, PolicyError, Verdict
from .commands import AnswerWorker, Decide, Decision, Running, Session
from .gate import resumed
from .intents import KEY, RESOLUTION
from .refusals import failed
from .state import PendingAction, SessionState, fold

__all__ = ["BY_HAND", "resolve"]

#: ``extra.resolution`` of what a human's result records.
BY_HAND = "result"


def _refused(s: Session, cmd: Decide) -> str:
    """Why ``cmd`` cannot give this call a result ("" if it can)."""
    st = s.stored
    before = st.decided.get(cmd.call)
    if before is not None:
        return f"action {cmd.call} was already {'approved' if before else 'decided'}"
    pending = st.pending_actions.get(cmd.call)
    if pending is None:
        return f"no action {cmd.call} waits for a human in session {s.session_id}"
    if not pending.key:
        # An approval's call never ran: there is no outcome to tell, only a verdict.
        return f"action {cmd.call} is not in doubt: approve or reject it"
    if cmd.approve or cmd.raise_by:
        return "a result given by hand neither approves nor raises a budget"
    return ""


def _events(st: SessionState, p: PendingAction, cmd: Decide) -> tuple[Event, ...]:
    try:
        trust = Policy.from_metadata(st.metadata).trust
    except PolicyError:
        trust = ""
    base: dict[str, Any] = {
        "turn": p.turn,
        "action": p.action,
        "call": cmd.call,
        "trust": trust,
        "tool": p.action,
        "tool_use_id": p.tool_use_id,
    }
    how = {RESOLUTION: BY_HAND}
    return (
        Event(kind=Kind.ACTION_APPROVAL, allowed=False, reason=cmd.note, extra=how, **base),
        Event(kind=Kind.ACTION_COMPLETED, extra={**how, KEY: p.key}, **base),
        Event(
            kind=Kind.TOOL_RESULT,
            turn=p.turn,
            tool=p.action,
            tool_use_id=p.tool_use_id,
            result=cmd.result,
            is_error=cmd.is_error,
            extra=how,
        ),
    )


def resolve(s: Session, cmd: Decide) -> Decision:
    """Store the human's result for the in-doubt call ``cmd.call`` asks about, and go on
    with its turn: a worker waiting for that call takes the result as stored; a turn
    left open by a restart runs on from where it paused."""
    why = _refused(s, cmd)
    if why:
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", why))
    st = s.stored
    p = st.pending_actions[cmd.call]
    events = _events(st, p, cmd)
    seq = st.last_seq + len(events)
    ack = m.Ack(request_id=cmd.request_id, session_id=s.session_id, key=cmd.key, seq=seq)
    run = s.running
    if run is not None and run.turn == p.turn:
        answer = AnswerWorker(
            turn=p.turn,
            action=p.action,
            tool_use_id=p.tool_use_id,
            verdict=Verdict.REJECT,
            call=cmd.call,
            fault=Fault.RESOLVED,
            result=cmd.result,
            is_error=cmd.is_error,
        )
        return Decision(state=s, events=events, key=cmd.key, reply=ack, effects=(answer,))
    ot = st.open_turn
    if ot is None or ot.turn != p.turn or s.stopping or st.terminal:
        return Decision(state=s, events=events, key=cmd.key, reply=ack)
    # The turn runs on from the log as these events leave it: the call has its result.
    after = fold(st, events, st.last_seq + 1)
    return Decision(
        state=attrs.evolve(s, running=Running(turn=ot.turn)),
        events=events,
        key=cmd.key,
        reply=ack,
        effects=(resumed(after, ot.turn),),
    )
