"""What a replay's turn is answered from: the tool calls the replayed turn stored, each with
its stored result, and the human decisions its calls waited for (pure: events in, calls
and decisions out)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projections import thread_from
from spine import Event, Kind

from ...agents.governance import Fault, Verdict
from ...spec import replay_of
from .commands import AnswerWorker, Decision, Govern, Session
from .intents import ARGS, KEY, args_hash, started_event

#: One stored call: (tool, input JSON, result, is_error).
Recorded = tuple[str, str, str, bool]
#: One stored human decision on a call: (tool, input JSON, approved, note).
Approval = tuple[str, str, bool, str]


def _turn_events(events: Sequence[Event], turn_id: int) -> list[Event]:
    turn = thread_from(list(events)).turn(turn_id)
    if turn is None:
        return []
    answers = set(turn.answers)
    return [e for e in events if e.seq in answers]


def recorded_calls(events: Sequence[Event], turn_id: int) -> tuple[Recorded, ...]:
    """The calls of the turn answering the user message at seq ``turn_id`` in ``events``
    (a session's stream), in the order they were made, each with its stored result; a
    call without a result (its turn was cut) is left out: it has nothing to serve."""
    mine = _turn_events(events, turn_id)
    results = {e.tool_use_id: e for e in mine if e.kind == Kind.TOOL_RESULT}
    out: list[Recorded] = []
    for e in mine:
        if e.kind != Kind.TOOL_CALL:
            continue
        r = results.get(e.tool_use_id)
        if r is not None:
            out.append((e.tool, e.input, r.result, r.is_error))
    return tuple(out)


def recorded_approvals(events: Sequence[Event], turn_id: int) -> tuple[Approval, ...]:
    """The human decisions on the calls of the turn answering the user message at seq
    ``turn_id``, in the order the calls waited: a call still waiting, a budget pause and
    a server's question are left out (no human decided a call there)."""
    turns = {e.turn for e in _turn_events(events, turn_id) if e.turn}
    if not turns:
        return ()
    waited = {
        e.seq: e
        for e in events
        if e.kind == Kind.ACTION_PENDING and e.turn in turns and not e.fault and e.tool
    }
    out: list[Approval] = []
    for e in events:
        p = waited.get(e.call) if e.kind == Kind.ACTION_APPROVAL else None
        if p is not None:
            out.append((p.tool, p.input, bool(e.allowed), e.reason))
    return tuple(out)


def served_decision(s: Session, cmd: Govern, base: dict[str, Any], key: str) -> Decision | None:
    """A replay's call that would wait for a human, decided as the replayed turn's equal
    call was (``cmd.recorded``): the events a live approval stores (pending, the decision
    marked as served from the record, its verdict, and the intent when approved) in one
    append, and the worker's answer. None outside a replay or without a recorded decision:
    the call waits for a human as any other."""
    if cmd.recorded is None or replay_of(s.stored.metadata) is None:
        return None
    approved, note = cmd.recorded
    pending = Event(kind=Kind.ACTION_PENDING, input=cmd.input, **base)
    said = Event(
        kind=Kind.ACTION_APPROVAL, allowed=approved, reason=note, extra={"replayed": True}, **base
    )
    verdict = Verdict.ADMIT if approved else Verdict.REJECT
    fault = "" if approved else Fault.APPROVAL_REJECTED
    answer = AnswerWorker.to(cmd, verdict, base["call"], fault, key if approved else "")
    if not approved:
        refused = Event(kind=Kind.ACTION_REJECTED, fault=Fault.APPROVAL_REJECTED, **base)
        return Decision(state=s, events=(pending, said, refused), effects=(answer,))
    admitted = Event(
        kind=Kind.ACTION_ADMITTED, extra={KEY: key, ARGS: args_hash(cmd.input)}, **base
    )
    started = started_event(base, key, cmd.need.idempotent)
    return Decision(state=s, events=(pending, said, admitted, started), effects=(answer,))
