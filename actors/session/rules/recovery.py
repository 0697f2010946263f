"""What a new incarnation does with what the last one left open (pure): the effect
ledger's rule for calls in doubt, and which cut turn is closed and which runs on.

A call whose intent (``action.started``) is stored and whose outcome is not is *in
doubt*: it may or may not have taken effect. It is never run again silently. Recovery
stores ``action.in_doubt`` for it, with what happens next (``extra.resolution``):

- ``retry``: the tool is declared idempotent; the turn runs on and the call runs again,
  once, under the same idempotency key;
- ``ask`` (``governance.in_doubt``): an ``action.pending`` asks a human, as an approval
  does; approved, the call runs once more under its key; rejected, the model hears so;
- ``fail``: the model gets an error result saying the outcome is unknown.

A call admitted and not started never ran: one a human approved runs once when its turn
runs on; any other is closed as before (``action.completed`` with the fault). A turn with
nothing left to run is closed (``turn.cancelled``), as a crash always closed it.
"""

from __future__ import annotations

import orjson

from spine import Event, Kind, Phase

from ...agents.governance import Policy, PolicyError
from . import conversation
from .intents import ASK, FAIL, IN_DOUBT_OF, KEY, RESOLUTION, RETRY, Intent
from .questions import orphaned
from .state import PendingAction, SessionState

__all__ = ["in_doubt_result", "recovery_events", "resumable", "unfinished"]


def in_doubt_result(reason: str) -> str:
    """What the model is told about a call whose outcome is unknown."""
    return (
        f"outcome unknown: this call was running when the session stopped ({reason}); "
        "it was not run again, and whether it took effect is not known"
    )


def _completed(state: SessionState, fault: str) -> list[Event]:
    out = []
    for key, (call, status) in state.turn_actions.items():
        if status == "admitted":
            action, _, use_id = key.partition("\x00")
            out.append(
                Event(
                    kind=Kind.ACTION_COMPLETED,
                    call=call,
                    action=action,
                    tool=action if action != "model" else "",
                    tool_use_id=use_id,
                    fault=fault,
                )
            )
    return out


def _doubt(i: Intent, reason: str, resolution: str) -> Event:
    return Event(
        kind=Kind.ACTION_IN_DOUBT,
        turn=i.turn,
        call=i.call,
        action=i.tool,
        tool=i.tool,
        tool_use_id=i.tool_use_id,
        reason=reason,
        extra={KEY: i.key, RESOLUTION: resolution},
    )


def _open_intents(state: SessionState, turn: int, *statuses: str) -> list[Intent]:
    return sorted(
        (i for i in state.intents.values() if i.turn == turn and i.status in statuses),
        key=lambda i: i.call,
    )


def unfinished(state: SessionState, fault: str) -> list[Event]:
    """The ends of the open turn's actions that never reported one, as the turn is closed
    under them: ``action.completed`` with ``fault`` for those admitted and not started,
    ``action.in_doubt`` (resolution ``fail``) for those whose effect may have happened."""
    ot = state.open_turn
    doubts = [] if ot is None else _open_intents(state, ot.turn, "started", RETRY)
    why = fault or "unreported"
    return _completed(state, fault) + [_doubt(i, why, FAIL) for i in doubts]


def _input_of(state: SessionState, tool_use_id: str) -> str:
    """The arguments the open turn's call ``tool_use_id`` was made with (its ``tool.call``)."""
    for role, body, _ in reversed(state.history):
        if role != "tool.call":
            continue
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("id") == tool_use_id:
            return str(obj.get("input") or "")
    return ""


def _policy(state: SessionState) -> str:
    try:
        return Policy.from_metadata(state.metadata).in_doubt
    except PolicyError:
        return FAIL  # a policy that cannot be read asks no one and runs nothing


def _resolved(state: SessionState, i: Intent, reason: str, how: str, at: int) -> list[Event]:
    """``i`` in doubt, and what its resolution ``how`` stores with it (``at``: the seq
    its first event gets)."""
    ev = _doubt(i, reason, how)
    if how == FAIL:
        told = Event(
            kind=Kind.TOOL_RESULT,
            turn=i.turn,
            tool=i.tool,
            tool_use_id=i.tool_use_id,
            result=in_doubt_result(reason),
            is_error=True,
        )
        return [ev, told]
    if how == ASK:
        ask = Event(
            kind=Kind.ACTION_PENDING,
            turn=i.turn,
            call=at + 1,
            action=i.tool,
            tool=i.tool,
            tool_use_id=i.tool_use_id,
            input=_input_of(state, i.tool_use_id),
            reason="in_doubt",
            extra={IN_DOUBT_OF: i.call, KEY: i.key},
        )
        return [ev, ask]
    return [ev]


def recovery_events(state: SessionState, reason: str = "crash", first_seq: int = 0) -> list[Event]:
    """Events that settle what a stop left open (``first_seq``: the seq the first of them
    gets, by default the next one): the open turn's calls in doubt, then the turn's close
    unless something in it is to run on (after a crash only: an idempotent call to retry,
    a call a human approved, a human to ask)."""
    ot = state.open_turn
    if ot is None:
        return []
    at = first_seq or state.last_seq + 1
    waiting = any(_approval(p, ot.turn) for p in state.pending_actions.values())
    crashed = reason == "crash"
    policy = _policy(state) if crashed else FAIL
    # A server's question dies with the call that asked it; the call is in doubt below.
    events: list[Event] = orphaned(state, ot.turn, reason)
    for i in _open_intents(state, ot.turn, "started"):
        how = (RETRY if i.idempotent else policy) if crashed else FAIL
        events += _resolved(state, i, reason, how, at + len(events))
    if waiting or (crashed and (_runs_on(events) or resumable(state))):
        return events
    late = [_doubt(i, reason, FAIL) for i in _open_intents(state, ot.turn, RETRY)]
    return [
        *events,
        *late,
        *_completed(state, reason),
        Event(
            kind=Kind.TURN_CANCELLED,
            turn=ot.turn,
            text=ot.text,
            reason=reason,
            usage=ot.usage if not ot.usage.is_zero() else None,
        ),
        *conversation.dropped(state.steers, ot.turn, reason, state.metadata),
        Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, reason=reason),
    ]


def _approval(p: PendingAction, turn: int) -> bool:
    """Whether ``p`` is a question to a human of ``turn`` that outlives its worker (an
    approval; a server's question does not)."""
    return p.turn == turn and p.question is None


def _runs_on(events: list[Event]) -> bool:
    """A question to a human keeps the turn waiting; a retry runs it on."""
    return any(
        e.kind == Kind.ACTION_PENDING or (e.extra and e.extra.get(RESOLUTION) == RETRY)
        for e in events
    )


def resumable(state: SessionState) -> bool:
    """Whether the open turn, run by no worker and waiting for no human, has a call to run
    on: approved and not yet run, or in doubt and idempotent."""
    ot = state.open_turn
    if ot is None or any(_approval(p, ot.turn) for p in state.pending_actions.values()):
        return False
    return bool(_open_intents(state, ot.turn, "ready", RETRY))
