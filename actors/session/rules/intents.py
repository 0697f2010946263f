"""The effect ledger's vocabulary and fold (pure): what a tool call's intent records, the
idempotency key every call runs under, and how ``action.*`` events move a call through
the ledger.

A tool call's life on the stream: ``action.admitted`` (the gate's verdict, or a human's
approval), ``action.started`` (the intent: stored before the tool runs, with its
idempotency key), then its outcome, ``action.completed`` with the ``tool.result``, stored
as soon as that call ends. A call started and without an outcome when a session recovers
is *in doubt* (``action.in_doubt``): it is never run again silently (`recovery`).

The state keeps, per call not yet ended, an `Intent`: ``ready`` (admitted by a human's
approval, not yet run: it runs once when its turn asks), ``started`` (the intent is
stored: the effect may have happened) or ``retry`` (in doubt, and declared idempotent:
it runs again, once, under the same key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from spine import Event, Kind

if TYPE_CHECKING:
    from .state import SessionState

#: ``extra`` keys of the ledger's events.
KEY = "idempotencyKey"
IDEMPOTENT = "idempotent"
ARGS = "argsHash"
RESOLUTION = "resolution"
#: On an ``action.pending`` that asks a human about an in-doubt call: that call's id.
IN_DOUBT_OF = "inDoubt"
#: On an ``action.pending`` that is a server's question (MCP elicitation): the question;
#: on its ``action.approval``: the answer.
QUESTION = "elicitation"

#: What happens to an in-doubt call (``extra.resolution`` of ``action.in_doubt``).
RETRY = "retry"
FAIL = "fail"
ASK = "ask"


@attrs.frozen(kw_only=True)
class Intent:
    """A tool call admitted and not yet ended (see the module's docstring)."""

    call: int
    turn: int
    tool: str
    tool_use_id: str
    key: str
    status: str
    idempotent: bool = False
    #: Hash of the arguments an approval admitted (``ready``): it admits those only.
    args: str = ""


def effect_key(session_id: str, turn: int, call: int) -> str:
    """The idempotency key of one call: the session, the turn and the call (the seq of its
    admission), so it is unique in the world and the same after any restart."""
    return f"{session_id}/{turn}/{call}"


def args_hash(input_json: str) -> str:
    """A short hash of a call's arguments as the model wrote them (byte for byte)."""
    return hashlib.sha256((input_json or "{}").encode()).hexdigest()[:16]


def started_event(base: Mapping[str, Any], key: str, idempotent: bool) -> Event:
    """The intent: the call is about to run, under ``key`` (``base``: the call's fields,
    as on its admission)."""
    extra: dict[str, Any] = {KEY: key}
    if idempotent:
        extra[IDEMPOTENT] = True
    return Event(kind=Kind.ACTION_STARTED, extra=extra, **base)


def _extra(ev: Event, name: str) -> Any:
    return ev.extra.get(name) if ev.extra else None


def admitted(state: SessionState, ev: Event, status: str) -> Changes:
    """A tool admission that carries a key (written by this ledger; older ones carry none
    and fold as they always did): the call is ``ready`` until its intent is stored."""
    key = _extra(ev, KEY)
    if ev.action == "model" or not isinstance(key, str) or not key:
        return {}
    intent = Intent(
        call=ev.call,
        turn=ev.turn,
        tool=ev.tool or ev.action,
        tool_use_id=ev.tool_use_id,
        key=key,
        status="ready",
        args=str(_extra(ev, ARGS) or ""),
    )
    return {"intents": {**state.intents, ev.call: intent}}


def started(state: SessionState, ev: Event, seq: int) -> Changes:
    before = state.intents.get(ev.call)
    intent = Intent(
        call=ev.call,
        turn=ev.turn,
        tool=ev.tool or ev.action,
        tool_use_id=ev.tool_use_id,
        key=str(_extra(ev, KEY) or (before.key if before else "")),
        status="started",
        idempotent=bool(_extra(ev, IDEMPOTENT)),
    )
    return {"intents": {**state.intents, ev.call: intent}}


def in_doubt(state: SessionState, ev: Event, seq: int) -> Changes:
    intents = dict(state.intents)
    before = intents.pop(ev.call, None)
    if before is not None and _extra(ev, RESOLUTION) == RETRY:
        intents[ev.call] = attrs.evolve(before, status=RETRY)
    return {"intents": intents}


def ended(intents: Mapping[int, Intent], call: int) -> Changes:
    """The call's outcome is stored: it leaves the ledger's open calls."""
    if call not in intents:
        return {}
    return {"intents": {c: i for c, i in intents.items() if c != call}}


def turn_closed(intents: Mapping[int, Intent], turn: int) -> Changes:
    """A turn ended: nothing of it runs any more."""
    if not any(i.turn == turn for i in intents.values()):
        return {}
    return {"intents": {c: i for c, i in intents.items() if i.turn != turn}}


Changes = dict[str, Any]
