"""Decisions about the conversation's shape (pure): a message stored as a steer for the
running turn, an edit or a regeneration that starts a branch of the turn tree, and a
switch of the active path. What they store is folded by `conversation`."""

from __future__ import annotations

from spine import Event, Kind

from ... import messages as m
from ...interceptors import Ingress
from ...policy import BUSY_POLICY_KEY, BusyPolicy
from .commands import Session
from .conversation import ACTIVATES, EDITS, REGENERATES, STEER, said_by
from .refusals import failed


def busy_policy(s: Session, ingress: Ingress | None = None) -> BusyPolicy:
    """The message's own policy if it names one, else the session's (metadata), else the
    Runner's. A name that is no policy is the caller's problem (`mode_problem`)."""
    if ingress is not None and ingress.mode:
        return BusyPolicy(ingress.mode)
    own = s.stored.metadata.get(BUSY_POLICY_KEY)
    try:
        return BusyPolicy(own) if own else s.busy_policy
    except ValueError:
        return s.busy_policy


def mode_problem(ingress: Ingress) -> str | None:
    if ingress.mode and ingress.mode not in tuple(BusyPolicy):
        choices = ", ".join(p.value for p in BusyPolicy)
        return f"a message's mode must be one of {choices}, not {ingress.mode!r}"
    if ingress.mode and (ingress.edits or ingress.regenerates):
        return "an edit or a regeneration takes no mode: it waits for no turn"
    return None


def steer(ingress: Ingress) -> Event:
    return Event(kind=Kind.USER_MESSAGE, text=ingress.text, extra={STEER: True})


def _busy(s: Session, what: str, request_id: str) -> m.RequestFailed | None:
    st = s.stored
    if s.running is None and st.open_turn is None and not st.pending and not st.steers:
        return None
    text = (
        f"session {s.session_id} is running a turn; {what} once it ends (or interrupt it): "
        "nothing was stored"
    )
    return failed(s, request_id, "Rejected", text)


def _no_turn(s: Session, request_id: str, seq: int) -> m.RequestFailed:
    text = (
        f"no user message at seq {seq} opens a turn of session {s.session_id} "
        "(`branches` lists them)"
    )
    return failed(s, request_id, "TurnNotFound", text)


def branched(s: Session, request_id: str, ing: Ingress) -> Event | m.RequestFailed:
    """The ``user.message`` an edit or a regeneration stores, or why it stores none."""
    busy = _busy(s, "edit or regenerate", request_id)
    if busy is not None:
        return busy
    st = s.stored
    if ing.edits and ing.regenerates:
        text = "a message either edits a turn or regenerates one, not both"
        return failed(s, request_id, "InvalidRequest", text)
    if ing.edits:
        if ing.edits not in st.nodes:
            return _no_turn(s, request_id, ing.edits)
        if not ing.text.strip():
            return failed(s, request_id, "InvalidRequest", "an edit needs the message's new text")
        return Event(kind=Kind.USER_MESSAGE, text=ing.text, extra={EDITS: ing.edits})
    base = ing.regenerates if ing.regenerates > 0 else st.leaf
    if not base:
        text = f"session {s.session_id} has no user message to regenerate an answer for"
        return failed(s, request_id, "InvalidRequest", text)
    if base not in st.nodes:
        return _no_turn(s, request_id, base)
    said = ing.text or said_by(st.history, st.stash, base)
    if said is None:
        text = f"the text of seq {base} is no longer kept in memory: edit it with its text instead"
        return failed(s, request_id, "InvalidRequest", text)
    return Event(kind=Kind.USER_MESSAGE, text=said, extra={REGENERATES: base})


def switched(s: Session, request_id: str, ing: Ingress) -> Event | m.RequestFailed:
    """The ``branch.switched`` a switch stores, or why it stores none."""
    busy = _busy(s, "switch branches", request_id)
    if busy is not None:
        return busy
    if ing.turn not in s.stored.nodes:
        return _no_turn(s, request_id, ing.turn)
    return Event(kind=Kind.BRANCH_SWITCHED, extra={ACTIVATES: ing.turn})
