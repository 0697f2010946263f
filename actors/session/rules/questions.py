"""A server's question to a human during a running tool call (MCP elicitation), as pure
rules: asked, it is stored as ``action.pending`` (``extra.elicitation``: the server, its
message and the schema of the answer) and always waits for a human, whatever the policy;
answered through the approval surfaces, the answer is stored with the decision
(``action.approval``, ``extra.elicitation``: ``action`` accept or decline and the
``content``) and handed to the worker, which sends it back to the server.

A question is not an effect: it gets no key and no intent. It lives only as long as the
call that asked it: an interrupt or a close withdraws it with the call it cancels, and so
does the call's end (`unasked`); after a crash nobody waits for the answer any more, so
recovery withdraws it and the call itself is in doubt as any call cut off is
(`recovery`), never sent again silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from spine import Event, Kind

from ... import messages as m
from ...agents.governance import Fault, Verdict
from .commands import AnswerWorker, Decide, Decision, Govern, Session
from .intents import QUESTION
from .refusals import failed
from .state import PendingAction, SessionState

__all__ = ["ACTION", "answered", "asked", "content_error", "orphaned", "unasked"]

#: The ``action`` of a question's events.
ACTION = "elicitation"

_PRIMITIVE = (str, int, float, bool)


def asked(s: Session, cmd: Govern) -> Decision:
    """Store the question as pending; the worker's future stays open for the answer."""
    run = s.running
    if run is None or run.turn != cmd.turn or cmd.question is None:
        return Decision(state=s)
    st = s.stored
    question = dict(cmd.question)
    ev = Event(
        kind=Kind.ACTION_PENDING,
        turn=run.turn,
        action=ACTION,
        call=st.last_seq + 1,
        tool=str(question.get("tool") or ""),
        tool_use_id=cmd.tool_use_id,
        input=orjson.dumps(question).decode(),
        reason=ACTION,
        extra={QUESTION: question},
    )
    return Decision(state=s, events=(ev,))


def content_error(question: Mapping[str, Any], content: Mapping[str, Any] | None) -> str:
    """What is wrong with ``content`` as the answer to ``question`` ("" if nothing): an
    object of the schema's properties, each a string, number, boolean or list of strings
    (what MCP lets a form answer hold), every required one present; a URL question (the
    human goes to a page) is answered with none."""
    if question.get("mode") == "url":
        return "" if not content else "a question that sends the human to a URL takes no content"
    if content is None:
        return "an answer to a question needs its content (an object of the asked fields)"
    schema = question.get("requestedSchema")
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    props = props if isinstance(props, Mapping) else {}
    for name, value in content.items():
        if props and name not in props:
            return f"the answer names {name!r}, which the question does not ask for"
        ok = isinstance(value, _PRIMITIVE) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
        if not ok:
            return f"the answer's {name!r} must be a string, number, boolean or list of strings"
    required = schema.get("required") if isinstance(schema, Mapping) else None
    for name in required if isinstance(required, list) else ():
        if name not in content:
            return f"the answer lacks {name!r}, which the question requires"
    return ""


def answered(s: Session, cmd: Decide, pending: PendingAction) -> Decision:
    """A human's answer: approve accepts with ``content``, reject declines."""
    st = s.stored
    question = pending.question or {}
    why = content_error(question, cmd.content) if cmd.approve else ""
    if why:
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", why))
    answer: dict[str, Any] = (
        {"action": "accept", "content": dict(cmd.content or {})}
        if cmd.approve
        else {"action": "decline"}
    )
    base: dict[str, Any] = {
        "turn": pending.turn,
        "action": ACTION,
        "call": pending.call,
        "tool": str(question.get("tool") or ""),
        "tool_use_id": pending.tool_use_id,
    }
    decision = Event(
        kind=Kind.ACTION_APPROVAL,
        allowed=cmd.approve,
        reason=cmd.note,
        extra={QUESTION: answer},
        **base,
    )
    # Accepted, the question is settled by the decision alone: it ran nothing.
    refused = Event(kind=Kind.ACTION_REJECTED, fault=Fault.APPROVAL_REJECTED, **base)
    events = (decision,) if cmd.approve else (decision, refused)
    ack = m.Ack(
        request_id=cmd.request_id,
        session_id=s.session_id,
        key=cmd.key,
        seq=st.last_seq + len(events),
    )
    run = s.running
    if run is None or run.turn != pending.turn:
        return Decision(state=s, events=events, key=cmd.key, reply=ack)
    effect = AnswerWorker(
        turn=pending.turn,
        action=ACTION,
        tool_use_id=pending.tool_use_id,
        verdict=Verdict.ADMIT if cmd.approve else Verdict.REJECT,
        call=pending.call,
        answer=answer,
    )
    return Decision(state=s, events=events, key=cmd.key, reply=ack, effects=(effect,))


def _withdrawn(p: PendingAction, reason: str) -> Event:
    return Event(
        kind=Kind.ACTION_REJECTED,
        turn=p.turn,
        action=ACTION,
        call=p.call,
        tool=str((p.question or {}).get("tool") or ""),
        tool_use_id=p.tool_use_id,
        fault=Fault.CANCELLED,
        reason=reason,
    )


def orphaned(state: SessionState, turn: int, reason: str) -> list[Event]:
    """Withdrawals of ``turn``'s questions, whose call no longer waits for them (a crash
    ended the worker that asked)."""
    return [
        _withdrawn(p, reason)
        for p in state.pending_actions.values()
        if p.turn == turn and p.question is not None
    ]


def unasked(state: SessionState, events: Iterable[Event]) -> list[Event]:
    """Withdrawals of the questions whose call ends among ``events`` (its result is
    stored: the server no longer waits for the answer, timed out or gone)."""
    ended = {e.tool_use_id for e in events if e.kind == Kind.TOOL_RESULT}
    if not ended:
        return []
    return [
        _withdrawn(p, "call ended")
        for p in state.pending_actions.values()
        if p.question is not None and p.tool_use_id in ended
    ]
